"""`slurmforge validate --inventory DIR`: the live-cluster checks - the testinfra suite in
this package (conftest.py, test_*.py) - against any inventory (local or AWS).

The suite runs in its own pytest process, from a scratch directory with this directory as
pytest's root and no configuration of the user's (or of a clone) read, writing nothing
beside the installed package (no cache, no bytecode)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from slurmforge.errors import ValidationFailed
from slurmforge.package_data import require, validation_suite

EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?:AssertionError|Unreachable): ")
"""How pytest's report begins a failed assertion's message (the checks' own lines follow)."""
MAX_LINES = 40
"""Problems named in the error, at most; the rest are counted."""


def validate_inventory(inventory: Path, extra: list[str] | None = None,
                       on_check: Callable[[int, int, str], None] | None = None) -> None:
    """Run the suite; raise ValidationFailed naming every problem the failed checks found,
    one line each (a check's assertion message holds one problem per line). on_check(done,
    total, check) hears of each check as it ends (pytest -v's lines, read as they come)."""
    if not (inventory / "hosts.yml").exists():
        raise ValidationFailed(f"{inventory} is not a slurmforge inventory (no hosts.yml)")
    require("testinfra", "deploy", "the live-cluster validation")
    with tempfile.TemporaryDirectory(prefix="slurmforge-validate-") as tmp:
        problems = Path(tmp) / "problems.jsonl"
        suite = validation_suite()
        config = Path(tmp) / "pytest.ini"
        config.write_text("[pytest]\n")
        cmd = [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider", "--no-header",
               "-p", "slurmforge.validation.problems", f"--problems={problems}",
               "-c", str(config), f"--rootdir={suite}", f"--inventory={inventory.resolve()}", *(extra or [])]
        returncode, stdout = _run_suite([*cmd, "-v"], Path(tmp), on_check or (lambda done, total, check: None))
        if returncode == 0:
            return
        summary = (stdout.strip().splitlines() or ["?"])[-1].strip("= ")
        lines = failure_lines(problems.read_text()) if problems.exists() else []
    shown = lines[:MAX_LINES] + ([f"... and {len(lines) - MAX_LINES} more"] if len(lines) > MAX_LINES else [])
    raise ValidationFailed("\n  ".join([f"live-cluster validation failed: {summary}", *shown]))


COLLECTED = re.compile(r"^collected (\d+) items?")
RESULT = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")


def _run_suite(cmd: list[str], cwd: Path, on_check: Callable[[int, int, str], None]) -> tuple[int, str]:
    """pytest's exit code and its whole stdout, each check's result line passed on as it comes."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                            env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.stdout is not None
    lines, total, done = [], 0, 0
    for line in proc.stdout:
        lines.append(line)
        if found := COLLECTED.match(line):
            total = int(found.group(1))
        elif result := RESULT.match(line):
            done += 1
            on_check(done, total, result.group(1).rsplit("/", 1)[-1])
    return proc.wait(), "".join(lines)


def failure_lines(records: str) -> list[str]:
    """Every problem the failed or erroring checks found (problems.py's JSON lines), once
    each, in their order: a check's own lines (`<host>: <what> found <x>, wanted <y>`, one
    problem a line) as they are; an assertion without a message, or an error in a check's
    set-up, as `<check>: <pytest's first line>`."""
    out: list[str] = []
    for record in map(json.loads, records.splitlines()):
        message = EXCEPTION.sub("", record["message"] or "?", count=1)
        problems = []
        for line in message.splitlines():
            if line.startswith("assert "):
                break
            if line.strip():
                problems.append(line.strip())
        if not problems or not EXCEPTION.match(record["message"] or ""):
            problems = [f"{record['check']}: {(problems or message.splitlines() or ['?'])[0]}"]
        out += [p for p in problems if p not in out]
    return out
