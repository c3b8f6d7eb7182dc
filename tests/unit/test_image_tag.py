"""The node image's tag changes exactly when what the image pipeline builds changes; a build
commits only an image whose record names the Slurm release the renderer writes for."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from slow_parts import BUILD_OUTPUT, FakePodman

from slurmforge import contract
from slurmforge.distro import DEBIAN_13
from slurmforge.errors import ProvisionError
from slurmforge.local import image_cache as local_image
from slurmforge.local.image_cache import SLURM_VERSION_LABEL, base_tag, ensure_images, node_tag, purge_images
from slurmforge.package_data import root as package_root


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    shutil.copytree(package_root() / "roles", tmp_path / "roles")
    shutil.copytree(package_root() / "playbooks", tmp_path / "playbooks")
    return tmp_path


def tag(repo: Path) -> str:
    return node_tag("localhost/slurmforge-base:x", root=repo)


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
    edit(repo / "roles/storage_client/defaults/main.yml", "wait_seconds: 600", "wait_seconds: 601")
    assert tag(repo) == before


def test_a_base_image_change_changes_the_tag(repo: Path) -> None:
    assert node_tag("localhost/slurmforge-base:y", root=repo) != tag(repo)


def test_the_image_playbooks_variables_change_the_tag(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The venv's Python, the contract's paths and the service's requirements come from
    Python (Distro.image_vars), not from the role defaults the tag already covers."""
    before = tag(repo)
    assert node_tag("localhost/slurmforge-base:x", root=repo, os=replace(DEBIAN_13, python="3.14")) != before
    monkeypatch.setattr(contract, "service_requirements", lambda: ("pydantic>=2.7,<3",))
    assert tag(repo) != before


@pytest.fixture(autouse=True)
def no_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builds here are podman's commits only: no wheels downloaded."""
    monkeypatch.setattr(local_image, "prepare_inputs", lambda dest, os: dest.mkdir(parents=True) or "digest")




def test_two_ups_at_once_build_the_image_once_and_the_second_says_whose_build_it_waits_for(tmp_path: Path) -> None:
    podman = FakePodman({base_tag()})
    tags: list[str] = []
    waits: list[str] = []
    lock = tmp_path / "image.lock"

    def up(on_wait: Callable[[str], None] | None = None) -> None:
        tags.append(ensure_images(podman, tmp_path / "image.log", lock=lock, on_wait=on_wait))  # type: ignore[arg-type]

    first = threading.Thread(target=up)
    first.start()
    assert podman.building.wait(10)  # the first holds the lock and builds (its commit takes 0.2 s)
    second = threading.Thread(target=up, args=(waits.append,))
    second.start()
    for t in (first, second):
        t.join()
    assert len(podman.commits) == 1
    assert tags == [podman.commits[0]] * 2
    (said,) = waits
    assert said.startswith(f"waiting for the node image build of slurmforge pid {os.getpid()}, since ")
    assert f"for {podman.commits[0]} on this machine (lock {lock})" in said
    assert lock.read_text() == ""  # nobody builds now


def test_the_build_reports_each_step_from_its_output(tmp_path: Path) -> None:
    """apt's packages, the image playbook's play (of how many) and tasks (counted), the
    script's own lines: what a terminal shows while the image builds; every line in the log."""
    steps: list[str] = []
    podman = FakePodman({base_tag()})
    ensure_images(podman, tmp_path / "image.log", lock=tmp_path / "image.lock",  # type: ignore[arg-type]
                  on_step=lambda progress: steps.append(progress.text()))
    play = "play 1/1 Install every package a slurmforge node may need ›"
    assert steps == ["apt-get update", "apt: unpacking ansible-core", "apt: setting up ansible-core", play,
                     f"{play} task 1: Gathering Facts", f"{play} task 2: slurm_common : Slurm packages",
                     "built in 212 s: Slurm 24.11.5-4+deb13u1, 612 packages"]
    assert (tmp_path / "image.log").read_text() == "".join(f"{line}\n" for line in BUILD_OUTPUT)


def test_a_new_image_replaces_the_older_ones_no_container_uses(tmp_path: Path) -> None:
    """After a build the repository's other tags go (1.4 GB each) — except one a container
    still uses (podman refuses to remove it) and other repositories' (another namespace)."""
    base, repo = base_tag(), node_tag(base_tag()).rsplit(":", 1)[0]
    other = "localhost/slurmforge-bench-1-node:aaaa"
    podman = FakePodman({base, f"{repo}:old1", f"{repo}:old2", other}, in_use=frozenset({f"{repo}:old2"}))
    node = ensure_images(podman, tmp_path / "image.log", lock=tmp_path / "image.lock")  # type: ignore[arg-type]
    assert podman.removed == [f"{repo}:old1"]
    assert podman.images == {base, node, f"{repo}:old2", other}
    again = ensure_images(podman, tmp_path / "image.log", lock=tmp_path / "image.lock")  # type: ignore[arg-type]
    assert again == node and podman.removed == [f"{repo}:old1"]  # no build, no pruning


def test_purge_removes_only_the_local_targets_own_images_no_container_uses() -> None:
    """`down --purge`: the base and node tags go, but not one another cluster's containers
    use, nor anybody else's images (the user's own, the GPU variant's and the AWS
    rehearsal's caches) - it once ran `podman image prune -a`."""
    base, repo = base_tag(), node_tag(base_tag()).rsplit(":", 1)[0]
    others = {"localhost/slurmforge-gpu-variant:aaaa", "localhost/sf-rehearsal-node:bbbb", "docker.io/library/x:1",
              "localhost/slurmforge-bench-1-node:cccc"}
    podman = FakePodman({base, f"{repo}:old", f"{repo}:used", *others}, in_use=frozenset({f"{repo}:used"}))
    assert purge_images(podman) == [base, f"{repo}:old"]  # type: ignore[arg-type]
    assert podman.images == {f"{repo}:used", *others}


def test_the_node_image_is_labelled_with_its_slurm_version(tmp_path: Path) -> None:
    podman = FakePodman({base_tag()})
    commands: list[list[str]] = []
    run = podman.run

    def recording(argv: list[str], **kw: object) -> str:
        commands.append(argv)
        return run(argv, **kw)

    podman.run = recording  # type: ignore[method-assign]
    ensure_images(podman, tmp_path / "image.log", lock=tmp_path / "image.lock")  # type: ignore[arg-type]
    (commit,) = [c for c in commands if c[0] == "commit"]
    assert f"LABEL {SLURM_VERSION_LABEL}=24.11.5-4+deb13u1" in commit


def test_an_image_whose_slurm_moved_is_refused(tmp_path: Path) -> None:
    """A Debian point release that moved Slurm to another series fails the build with one
    line instead of nodes that run configs written for another release."""
    podman = FakePodman({base_tag()})
    podman.slurm_version = "25.05.1-1"
    with pytest.raises(ProvisionError, match=r"installed Slurm 25\.05\.1-1, but slurmforge renders for Slurm 24\.11"):
        ensure_images(podman, tmp_path / "image.log", lock=tmp_path / "image.lock")  # type: ignore[arg-type]
    assert podman.commits == []


def test_the_base_image_is_debootstrapped_from_the_distributions_suite() -> None:
    assert base_tag() != base_tag(os=replace(DEBIAN_13, suite="forky"))
