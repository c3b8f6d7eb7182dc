"""The scheduler service's wheel is the running slurmforge's (slurmforge.wheel), made once
per digest on the rollout machine: the directory `slurmforge rollout`/`up` pass changes
exactly when what goes into the wheel changes, and the wheel is the same bytes every time."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest

from slurmforge import package_data, wheel
from slurmforge.rollout import service_wheel_dir

pytestmark = pytest.mark.unit


def tree(root: Path) -> tuple[Path, Path]:
    """A clone's layout: the package, and beside it what package_data ships from the tree."""
    (root / "slurmforge" / "service").mkdir(parents=True)
    for name in package_data.SHIPPED:
        (root / name).mkdir()
    (root / "slurmforge" / "service" / "main.py").write_text("print('hi')\n")
    (root / "templates" / "slurm.conf.j2").write_text("ClusterName={{ name }}\n")
    (root / "roles" / "common.yml").write_text("- name: x\n")
    (root / "README.md").write_text("docs\n")
    return root / "slurmforge", root


def digest(package: Path, root: Path) -> str:
    return wheel.digest(wheel.wheel_files(package, root))


def test_same_sources_same_digest(tmp_path: Path) -> None:
    assert digest(*tree(tmp_path / "a")) == digest(*tree(tmp_path / "b"))


def test_the_directory_is_named_after_the_running_packages_digest(tmp_path: Path) -> None:
    assert service_wheel_dir(tmp_path) == tmp_path / wheel.digest()[:16]


@pytest.mark.parametrize("edit", ["slurmforge/service/main.py", "templates/slurm.conf.j2", "roles/common.yml"])
def test_a_source_change_is_a_new_digest(tmp_path: Path, edit: str) -> None:
    package, root = tree(tmp_path / "r")
    before = digest(package, root)
    with (root / edit).open("a") as f:
        f.write("# changed\n")
    assert digest(package, root) != before


def test_what_is_not_in_the_wheel_does_not_count(tmp_path: Path) -> None:
    package, root = tree(tmp_path / "r")
    before = digest(package, root)
    (root / "README.md").write_text("other docs\n")
    cached = package / "service" / "__pycache__"
    cached.mkdir()
    (cached / "main.cpython-311.pyc").write_bytes(b"\0")
    assert digest(package, root) == before
    shutil.rmtree(cached)


def test_the_clone_and_the_installed_layout_give_the_same_names(tmp_path: Path) -> None:
    """Installed, the shipped directories are inside the package: same names in the wheel."""
    package, root = tree(tmp_path / "clone")
    installed = tmp_path / "site" / "slurmforge"
    shutil.copytree(package, installed)
    for name in package_data.SHIPPED:
        shutil.copytree(root / name, installed / name)
    assert [n for n, _ in wheel.wheel_files(installed, installed)] == [n for n, _ in wheel.wheel_files(package, root)]
    assert digest(installed, installed) == digest(package, root)


def test_the_wheel_is_the_same_bytes_every_time_and_says_what_it_holds(tmp_path: Path) -> None:
    files = wheel.wheel_files()
    one = wheel.build(tmp_path / "one", files)
    two = wheel.build(tmp_path / "two", files)
    assert one.read_bytes() == two.read_bytes() and one.name == two.name == "slurmforge-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(one) as z:
        names = z.namelist()
        record = z.read("slurmforge-0.1.0.dist-info/RECORD").decode().splitlines()
        entry_points = z.read("slurmforge-0.1.0.dist-info/entry_points.txt").decode()
    assert {"slurmforge/cli.py", "slurmforge/roles/scheduler_service/tasks/configure.yml",
            "slurmforge/playbooks/site.yml", "slurmforge/templates/node/join.sh.j2",
            "slurmforge/validation/conftest.py", "slurmforge/stacks/program.py"} <= set(names)
    assert sorted(line.split(",")[0] for line in record) == sorted(names)
    assert "slurmforge-service = slurmforge.service.main:main" in entry_points
