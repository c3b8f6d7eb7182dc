"""The node image's tag changes exactly when what the image playbook installs changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from slurmforge.local.image import REPO, node_tag


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "roles", tmp_path / "roles")
    shutil.copytree(REPO / "playbooks", tmp_path / "playbooks")
    return tmp_path


def tag(repo: Path) -> str:
    return node_tag("localhost/slurmforge-base:x", repo=repo)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def test_same_tree_same_tag(repo: Path) -> None:
    assert tag(repo) == tag(repo) == node_tag("localhost/slurmforge-base:x")


def test_install_tasks_change_the_tag(repo: Path) -> None:
    before = tag(repo)
    edit(repo / "roles/storage_client/tasks/install.yml", "ceph-fuse", "ceph-fuse, sshfs")
    assert tag(repo) != before


def test_a_default_the_install_tasks_use_changes_the_tag(repo: Path) -> None:
    before = tag(repo)
    edit(repo / "roles/common/defaults/main.yml", "common_packages:", "common_packages_unused: []\ncommon_packages:")
    assert tag(repo) == before  # an unused default: no rebuild
    path = repo / "roles/common/defaults/main.yml"
    path.write_text(path.read_text() + "\ncommon_nofile_limit: 4242\n")
    assert tag(repo) != before


def test_configuration_defaults_do_not_rebuild(repo: Path) -> None:
    before = tag(repo)
    path = repo / "roles/storage_client/defaults/main.yml"
    path.write_text(path.read_text() + "\nstorage_client_new_knob: 7\n")
    edit(repo / "roles/storage_client/defaults/main.yml", "vers=4.1", "vers=4.2")
    assert tag(repo) == before


def test_a_base_image_change_changes_the_tag(repo: Path) -> None:
    assert node_tag("localhost/slurmforge-base:y", repo=repo) != tag(repo)
