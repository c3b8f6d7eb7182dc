"""`modules` commands on a small tree (no venv: these stay at a second or two): messages,
one-line errors and exit codes, never a traceback. `--tree` runs its commands in the
judge (tests/judge.py) instead of on this machine, so the node image's Lmod checks each
modulefile and its python3.13 is the interpreter; the tree sits under /tmp, the same
path inside and out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from lmod_node import PYTHON, node_executor
from typer.testing import CliRunner, Result

from slurmforge.errors import ModuleError, SpecError
from slurmforge.lmod.cli import modules_app
from slurmforge.remote import executor
from tests.judge import Judge

pytestmark = pytest.mark.unit

DEFINITIONS = {
    "apps/python/3.13": {"kind": "python", "interpreter": PYTHON, "default": True},
    "apps/tool/1.0": {"kind": "tree", "source": {"path": "/usr/share/doc/lmod"}},
    "apps/tool/2.0": {"kind": "tree", "source": {"path": "/usr/share/doc/lmod"}, "default": True},
    "apps/base/1.0": {"kind": "meta", "depends_on": ["apps/python/3.13", "apps/tool/2.0"]},
}


def write(modules: Path, definitions: dict[str, dict[str, object]]) -> Path:
    for full, data in definitions.items():
        path = modules / f"{full}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data))
    return modules


@pytest.fixture(autouse=True)
def on_the_node_image(judge: Judge, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--tree` runs its commands in the judge, through the NodeExecutor a local node gets."""
    monkeypatch.setattr(executor, "LocalExecutor", lambda: node_executor(judge))


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return write(tmp_path / "modules", DEFINITIONS), tmp_path / "tree"


def run(*args: str | Path) -> Result:
    return CliRunner(env={"SUDO_USER": "carol"}).invoke(modules_app, [str(a) for a in args])


def test_plan_then_publish_then_nothing_to_do(dirs: tuple[Path, Path]) -> None:
    modules, tree = dirs
    plan = run("plan", "--modules", modules, "--tree", tree)
    assert plan.exit_code == 0, plan.stderr
    assert plan.stdout.split("\n")[0].split() == ["build", "apps/python/3.13", "python,", "becomes", "the",
                                                  "default", "(now", "none)"]
    assert plan.stdout.splitlines()[-1] == "4 to change, 0 unchanged"
    planned = json.loads(run("plan", "--modules", modules, "--tree", tree, "--format", "json").stdout)
    assert {k: planned[k] for k in ("cluster", "tree", "to_change", "unchanged", "refused")} == {
        "cluster": None, "tree": str(tree.resolve()), "to_change": 4, "unchanged": 0, "refused": 0}
    assert planned["rows"][0] == {"action": "build", "module": "apps/python/3.13",
                                  "detail": "python, becomes the default (now none)"}
    first = run("publish", "--all", "--modules", modules, "--tree", tree)
    assert first.exit_code == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "4 published, 0 unchanged"
    again = run("publish", "apps/base/1.0", "--modules", modules, "--tree", tree)
    assert again.stdout.splitlines()[-1] == "0 published, 3 unchanged"  # base and what it loads
    listing = listed(tree)
    assert list(listing) == ["apps/base/1.0", "apps/python/3.13", "apps/tool/1.0", "apps/tool/2.0"]
    python = listing["apps/python/3.13"]
    assert (python["kind"], python["default"], python["deprecated"]) == ("python", "true", "false")
    assert python["published_at"].endswith("Z") and python["published_by"] == "carol"
    assert python["checksum"].startswith("sha256:") and len(python["checksum"]) == 71  # in full when piped
    table = run("list", "--tree", tree, "--format", "table").stdout.splitlines()
    assert table[0].split()[:3] == ["Module", "Kind", "Flags"]
    assert "4 published in " in " ".join(table)
    assert table[2].split()[:3] == ["apps/python/3.13", "python", "default"]


def listed(tree: Path) -> dict[str, dict[str, str]]:
    """`modules list` piped: a header of keys, then one row per version."""
    header, *rows = [line.split() for line in run("list", "--tree", tree).stdout.splitlines()]
    assert header == ["module", "kind", "default", "deprecated", "published_at", "published_by", "checksum"]
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


def test_default_rollback_deprecate(dirs: tuple[Path, Path]) -> None:
    modules, tree = dirs
    assert run("publish", "--all", "--modules", modules, "--tree", tree).exit_code == 0
    changed = run("default", "apps/tool/1.0", "--tree", tree)
    assert changed.exit_code == 0 and changed.stdout.split()[:2] == ["default", "apps/tool/1.0"]
    back = run("rollback", "apps/tool", "--tree", tree)
    assert back.exit_code == 0 and back.stdout.split()[:2] == ["default", "apps/tool/2.0"]
    hidden = run("deprecate", "apps/tool/1.0", "--tree", tree)
    assert hidden.exit_code == 0 and hidden.stdout.split()[:2] == ["deprecate", "apps/tool/1.0"]
    assert listed(tree)["apps/tool/1.0"]["deprecated"] == "true"
    assert (tree / "modulefiles/apps/tool/.modulerc.lua").read_text().splitlines()[1:] == [
        'module_version("apps/tool/2.0", "default")', 'hide_version("apps/tool/1.0")']


@pytest.mark.parametrize(("args", "message"), [
    (["default", "apps/python/9.9"], "error apps/python/9.9 is not published in this tree (see `modules list`)"),
    (["rollback", "apps/python"], "error apps/python: no earlier default recorded in the manifest (defaults so "
                                  "far: 3.13); fix: use `modules default`"),
    (["deprecate", "apps/python/3.13"], "error apps/python/3.13 is the default of apps/python; fix: make another "
                                        "version the default first (`modules default`), then deprecate it"),
])
def test_refusals_are_one_line_with_exit_code(dirs: tuple[Path, Path], args: list[str], message: str) -> None:
    modules, tree = dirs
    assert run("publish", "apps/python/3.13", "--modules", modules, "--tree", tree).exit_code == 0
    result = run(*args, "--tree", tree)
    assert (result.exit_code, result.stderr) == (ModuleError.exit_code, message + "\n")


def test_changed_definition_is_refused_and_nothing_published(dirs: tuple[Path, Path]) -> None:
    modules, tree = dirs
    assert run("publish", "apps/tool/1.0", "--modules", modules, "--tree", tree).exit_code == 0
    write(modules, {"apps/tool/1.0": {"kind": "tree", "source": {"path": "/usr/share/doc/lmod"}, "help": "new"}})
    result = run("publish", "--all", "--modules", modules, "--tree", tree)
    assert result.exit_code == ModuleError.exit_code
    [line] = result.stderr.splitlines()
    assert line.startswith("error apps/tool/1.0: already published with different content (sha256:")
    assert line.endswith("publish the change as a new version; nothing was published")
    assert not (tree / "modulefiles/apps/python").exists()
    plan = run("plan", "--modules", modules, "--tree", tree)
    assert plan.exit_code == ModuleError.exit_code and "refused" in plan.stdout


def test_invalid_definitions_list_every_problem(tmp_path: Path) -> None:
    modules = write(tmp_path / "modules", {
        "apps/a/1.0": {"kind": "meta", "depends_on": ["apps/b/1.0"]},
        "apps/b/1.0": {"kind": "meta", "depends_on": ["apps/a/1.0"]},
        "apps/c/1.0": {"kind": "meta", "depends_on": ["apps/nowhere/1.0"]},
        "python/3.13": {"kind": "python", "interpreter": PYTHON},
    })
    result = run("publish", "--all", "--modules", modules, "--tree", tmp_path / "tree")
    assert result.exit_code == SpecError.exit_code
    lines = result.stderr.splitlines()
    assert lines[-1] == f"3 problem(s) in {modules}"
    assert all(line.startswith(f"error {modules}: ") for line in lines[:-1])
    assert not (tmp_path / "tree").exists()


def test_failing_build_prints_the_command_when_verbose(judge: Judge, tmp_path: Path) -> None:
    modules = write(tmp_path / "modules", {"apps/gone/1.0": {"kind": "tree", "source": {"path": "/nonexistent"}}})
    quiet = run("publish", "apps/gone/1.0", "--modules", modules, "--tree", tmp_path / "tree")
    assert quiet.exit_code == ModuleError.exit_code
    assert quiet.stderr.startswith(f"error apps/gone/1.0: copying /nonexistent failed on {judge.name}: cp: cannot "
                                   "stat")
    assert len(quiet.stderr.splitlines()) == 1
    loud = run("publish", "apps/gone/1.0", "-v", "--modules", modules, "--tree", tmp_path / "tree")
    assert "$ cp -a -- /nonexistent/." in loud.stderr
    assert not (tmp_path / "tree/modulefiles/apps/gone").exists()


def test_publish_needs_names_or_all(dirs: tuple[Path, Path]) -> None:
    modules, tree = dirs
    result = run("publish", "--modules", modules, "--tree", tree)
    assert result.exit_code == 2 and "nothing to publish" in result.stderr
    unknown = run("publish", "apps/python/3.1", "--modules", modules, "--tree", tree)
    assert unknown.exit_code == SpecError.exit_code and "did you mean apps/python/3.13?" in unknown.stderr


def test_deprecated_true_in_a_published_definition_deprecates_it(dirs: tuple[Path, Path]) -> None:
    modules, tree = dirs
    assert run("publish", "apps/tool/1.0", "--modules", modules, "--tree", tree).exit_code == 0
    write(modules, {"apps/tool/1.0": {**DEFINITIONS["apps/tool/1.0"], "deprecated": True}})
    plan = run("plan", "apps/tool/1.0", "--modules", modules, "--tree", tree)
    assert plan.stdout.split()[:2] == ["deprecate", "apps/tool/1.0"]
    assert run("publish", "apps/tool/1.0", "--modules", modules, "--tree", tree).exit_code == 0
    assert 'hide_version("apps/tool/1.0")' in (tree / "modulefiles/apps/tool/.modulerc.lua").read_text()
    assert "LmodMessage" in (tree / "modulefiles/apps/tool/1.0.lua").read_text()
    again = run("plan", "apps/tool/1.0", "--modules", modules, "--tree", tree)
    assert again.stdout.split()[:2] == ["unchanged", "apps/tool/1.0"]
