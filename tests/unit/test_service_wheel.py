"""The scheduler service's wheel is built once per source digest on the rollout machine:
the directory `slurmforge rollout`/`up` pass changes exactly when what goes into the
wheel changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slurmforge.rollout import service_wheel_dir

pytestmark = pytest.mark.unit


def tree(root: Path) -> Path:
    (root / "slurmforge" / "service").mkdir(parents=True)
    (root / "templates").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'slurmforge'\n")
    (root / "slurmforge" / "service" / "main.py").write_text("print('hi')\n")
    (root / "templates" / "slurm.conf.j2").write_text("ClusterName={{ name }}\n")
    (root / "README.md").write_text("docs\n")
    return root


def test_same_sources_same_directory_under_the_cache(tmp_path: Path) -> None:
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    cache = tmp_path / "cache"
    assert service_wheel_dir(a, cache) == service_wheel_dir(b, cache)
    assert service_wheel_dir(a, cache).parent == cache


@pytest.mark.parametrize("edit", ["pyproject.toml", "slurmforge/service/main.py", "templates/slurm.conf.j2"])
def test_a_source_change_is_a_new_directory(tmp_path: Path, edit: str) -> None:
    repo, cache = tree(tmp_path / "r"), tmp_path / "cache"
    before = service_wheel_dir(repo, cache)
    with (repo / edit).open("a") as f:
        f.write("# changed\n")
    assert service_wheel_dir(repo, cache) != before


def test_what_is_not_in_the_wheel_does_not_count(tmp_path: Path) -> None:
    repo, cache = tree(tmp_path / "r"), tmp_path / "cache"
    before = service_wheel_dir(repo, cache)
    (repo / "README.md").write_text("other docs\n")
    cached = repo / "slurmforge" / "service" / "__pycache__"
    cached.mkdir()
    (cached / "main.cpython-311.pyc").write_bytes(b"\0")
    assert service_wheel_dir(repo, cache) == before
    shutil.rmtree(cached)
