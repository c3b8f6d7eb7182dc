"""playbooks/library/slurmforge_files.py: several files in one module run, only what
differs, atomically, reporting exactly the paths it changed."""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path
from types import ModuleType

import pytest

MODULE = Path(__file__).resolve().parents[2] / "playbooks" / "library" / "slurmforge_files.py"


@pytest.fixture(scope="module")
def files() -> ModuleType:
    spec = importlib.util.spec_from_file_location("slurmforge_files", MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_files_and_directories_then_nothing_the_second_time(files: ModuleType, tmp_path: Path) -> None:
    entries = [
        {"path": str(tmp_path / "spool"), "state": "directory", "mode": "0750"},
        {"path": str(tmp_path / "etc" / "deep" / "a.conf"), "content": "A=1\n"},
        {"path": str(tmp_path / "b.key"), "content": "secret\n", "mode": "0600"},
    ]
    assert files.apply(entries) == [e["path"] for e in entries]
    assert (tmp_path / "etc" / "deep" / "a.conf").read_text() == "A=1\n"
    assert mode(tmp_path / "etc" / "deep" / "a.conf") == 0o644  # the default
    assert mode(tmp_path / "b.key") == 0o600
    assert mode(tmp_path / "spool") == 0o750
    assert files.apply(entries) == []
    assert not [p for p in tmp_path.rglob(".slurmforge-*")], "no temp file left behind"


def test_changes_only_what_differs(files: ModuleType, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    files.apply([{"path": str(a), "content": "one\n"}, {"path": str(b), "content": "two\n"}])
    before = b.stat().st_ino
    os.chmod(a, 0o600)
    changed = files.apply([{"path": str(a), "content": "one\n", "mode": "0644"},
                           {"path": str(b), "content": "two\n"}])
    assert changed == [str(a)]
    assert mode(a) == 0o644 and b.stat().st_ino == before  # b untouched, not rewritten
    assert files.apply([{"path": str(b), "content": "three\n"}]) == [str(b)]
    assert b.read_text() == "three\n"


def test_absent_removes_and_is_quiet_when_already_gone(files: ModuleType, tmp_path: Path) -> None:
    target = tmp_path / "slurm.conf"
    target.write_text("x")
    assert files.apply([{"path": str(target), "state": "absent"}]) == [str(target)]
    assert not target.exists()
    assert files.apply([{"path": str(target), "state": "absent"}]) == []


def test_check_mode_reports_without_touching(files: ModuleType, tmp_path: Path) -> None:
    entries = [{"path": str(tmp_path / "d"), "state": "directory"}, {"path": str(tmp_path / "f"), "content": "x"}]
    assert files.apply(entries, check=True) == [e["path"] for e in entries]
    assert list(tmp_path.iterdir()) == []


def test_owner_and_group_are_set(files: ModuleType, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    target = tmp_path / "owned"
    files.apply([{"path": str(target), "content": "x", "owner": "nobody", "group": "nogroup"}])
    assert (target.owner(), target.group()) == ("nobody", "nogroup")
    assert files.apply([{"path": str(target), "content": "x", "owner": "nobody", "group": "nogroup"}]) == []


def test_a_bad_state_is_an_error(files: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="state must be"):
        files.apply([{"path": str(tmp_path / "x"), "state": "link"}])


def test_binary_content_comes_base64(files: ModuleType, tmp_path: Path) -> None:
    import base64

    key = bytes(range(256)) * 4
    entry = {"path": str(tmp_path / "munge.key"), "content_b64": base64.b64encode(key).decode(), "mode": "0400"}
    assert files.apply([entry]) == [entry["path"]]
    assert (tmp_path / "munge.key").read_bytes() == key and mode(tmp_path / "munge.key") == 0o400
    assert files.apply([entry]) == []
