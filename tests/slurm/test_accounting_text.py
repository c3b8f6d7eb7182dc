"""What the spec lets into Slurm's database is what comes back out, proven with the node
image's MariaDB, slurmdbd and sacctmgr in a judge container (no slurmctld: the accounting
rollout's first pass runs without one), and slurmforge/accounting.py run by the image's
python3 as the rollout runs it.

- Text Slurm prints (account descriptions and organizations, QoS descriptions): a sample of
  every kind of character a description may hold is applied by a first rollout pass; a
  second pass finds every text the spec accepts unchanged, and would set again every text
  that sacctmgr gives back otherwise (line feed, vertical tab, form feed, CR, the file,
  group and record separators, NEL, Unicode's line and paragraph separators: sacctmgr's
  output then spans two lines; quotes: sacctmgr stores backticks). The spec refuses those,
  and the other control characters too (terminals act on them when Slurm's tools print).
- Database names: slurmdbd creates its database with `create database <name>`, unquoted:
  the spec refuses every keyword the image's MariaDB refuses there (its reserved words, from
  information_schema.KEYWORDS, and its own database mysql) and accepts every other; a name
  the spec accepts is one MariaDB takes.
"""

from __future__ import annotations

import json
import re
import shutil
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slurmforge.accounting import desired_state
from slurmforge.errors import SpecError
from slurmforge.render import render_all
from slurmforge.spec import validate_data
from tests.accounting_specs import base
from tests.judge import Judge, node_image
from tests.slurm.daemons import RunDir, start_accounting

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "slurmforge" / "accounting.py"

pytestmark = [pytest.mark.slurm]

# One text per kind of character a description may hold (a plain word around it).
SAMPLES = {
    "plain": "GPU research, 2025 (team A) - 100% on #ml",
    "punctuation": "a|b=c;d:e/f\\g~h^i$j&k*l+m<n>o?p!q@r[s]t{u}v`w",
    "letters": "Équipe de Recherche · Ärzte · straße · İstanbul · 東京 · Ελλάδα",
    "symbols": "budget € 500 ✓ 🚀",
    "spaces": " two  spaces and a trailing one ",
    "tab": "a\tb",
    **{f"C0 {ord(c):#04x}": f"a{c}b" for c in "\x01\x07\x08\n\x0b\x0c\r\x1b\x1c\x1d\x1e\x1f"},
    "DEL": "a\x7fb",
    **{f"C1 {ord(c):#04x}": f"a{c}b" for c in "\x80\x85\x9b\x9f"},
    "line separator": "a\u2028b",
    "paragraph separator": "a\u2029b",
    "double quote": 'say "hi"',
    "single quote": "it's",
}


def spec_accepts(text: str) -> bool:
    data = base()
    data["accounting"]["accounts"] = [{"name": "x", "description": text, "organization": text}]
    data["scheduling"]["qos"] = [{"name": "q", "description": text}]
    try:
        validate_data(data, "text")
    except SpecError as exc:
        paths = {p.path for p in exc.problems}
        assert paths == {"accounting.accounts[0].description", "accounting.accounts[0].organization",
                         "scheduling.qos[0].description"}, [p.line() for p in exc.problems]
        return False
    return True


@dataclass
class Database:
    judge: Judge
    run: RunDir

    def converge(self, desired: dict[str, Any]) -> dict[str, Any]:
        path = self.run.root / "accounting.json"
        path.write_text(json.dumps(desired))
        done = self.judge.run(["python3", str(self.run.root / "accounting.py"), "--desired", str(path),
                               "--phase", "before"], env={"SLURM_CONF": str(self.run.conf)}, timeout=120)
        assert done.returncode == 0, f"{done.stdout}{done.stderr}"
        report: dict[str, Any] = json.loads(done.stdout)
        return report

    def sql(self, script: str) -> str:
        return self.judge.run(["sh", "-c", script], timeout=300, check=True).stdout


@pytest.fixture(scope="module")
def database() -> Iterator[Database]:
    spec = validate_data(base(), "text")
    run = RunDir.create()
    judge = Judge(node_image())
    try:
        shutil.copy2(MODULE, run.root / "accounting.py")
        start_accounting(judge, run, spec, render_all(spec, source="text.yaml"))
        yield Database(judge, run)
    finally:
        judge.remove()
        run.remove()


def _desired(texts: dict[str, str]) -> dict[str, Any]:
    """The desired state of a spec with an account and a QoS per text (built around the
    spec's own desired state: the spec refuses some of these texts)."""
    data = base()
    names = {key: f"t{i:02d}" for i, key in enumerate(texts)}
    data["accounting"]["accounts"] = [{"name": names[key]} for key in texts]
    data["scheduling"]["qos"] = [{"name": names[key]} for key in texts]
    desired = desired_state(validate_data(data, "text"))
    for item in [*desired["accounts"], *desired["qos"]]:
        key = next(k for k, n in names.items() if n == item["name"])
        item["description"] = texts[key].lower()
        if "organization" in item:
            item["organization"] = texts[key].lower()
    return desired


def test_the_spec_takes_the_text_sacctmgr_gives_back(database: Database) -> None:
    """A second rollout pass changes nothing for every text the spec accepts; it would set
    every text the spec refuses again, except control characters that do come back (a tab,
    ESC, DEL, C1 controls): the spec refuses those too, terminals act on them when sacctmgr,
    sshare or sacct print the text."""
    desired = _desired(SAMPLES)
    assert database.converge(desired)["changed"]
    again = database.converge(desired)
    names = {f"t{i:02d}": key for i, key in enumerate(SAMPLES)}
    set_again = {names[word] for line in again["changes"] for word in line.replace(":", " ").split() if word in names}
    accepted = {key for key, text in SAMPLES.items() if spec_accepts(text)}
    controls = {key for key, text in SAMPLES.items() if any(unicodedata.category(c) == "Cc" for c in text)}
    assert not accepted & set_again, again
    assert set(SAMPLES) - accepted == set_again | controls
    assert set_again == {"C0 0x0a", "C0 0x0b", "C0 0x0c", "C0 0x0d", "C0 0x1c", "C0 0x1d", "C0 0x1e", "C1 0x85",
                         "line separator", "paragraph separator", "double quote", "single quote"}


def _database_name_accepted(name: str) -> bool:
    data = base()
    data["accounting"]["database"] = {"name": name}
    try:
        validate_data(data, "name")
    except SpecError:
        return False
    return True


def test_database_names_are_what_mariadb_takes_unquoted(database: Database) -> None:
    """Every keyword of the image's MariaDB: the spec refuses it as the database name
    exactly when `create database <word>` (slurmdbd's statement) fails (a reserved word, or
    MariaDB's own database: mysql); and a name the spec accepts is one MariaDB takes."""
    words = [w.lower() for w in database.sql("mariadb -N -e 'SELECT WORD FROM information_schema.KEYWORDS'").split()
             if re.fullmatch(r"[A-Za-z]\w*", w)]
    others = ["slurm_accounting", "slurm-acct", "db1", "1db", "d" * 64, "d" * 65, "acct$db", "information_schema",
              "performance_schema", "sys"]
    script = ('for w in "$@"; do if mariadb -e "CREATE DATABASE $w" 2>/dev/null; then mariadb -e "DROP DATABASE $w"; '
              'else echo "$w"; fi; done')
    done = database.judge.run(["sh", "-c", script, "sh", *words, *others], timeout=600, check=True)
    refused = set(done.stdout.split())
    assert len(words) > 600 and 200 < len(refused & set(words)) < 300
    assert {w for w in words if not _database_name_accepted(w)} == refused & set(words)
    assert all(name not in refused for name in others if _database_name_accepted(name))
    assert {name for name in others if _database_name_accepted(name)} == {"slurm_accounting", "db1", "d" * 64}
    assert {"information_schema", "performance_schema", "sys"} <= refused

