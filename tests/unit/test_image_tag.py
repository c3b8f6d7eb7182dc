"""The node image's tag changes exactly when what the image pipeline builds changes; a build
commits only an image whose record names the Slurm release the renderer writes for."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurmforge import contract
from slurmforge import image as pipeline
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


class FakePodman:
    """Just enough of slurmforge.local.podman.Podman to count builds."""

    def __init__(self, images: set[str], in_use: frozenset[str] = frozenset()) -> None:
        self.images = images
        self.in_use = in_use
        self.commits: list[str] = []
        self.removed: list[str] = []
        self.slurm_version = "24.11.5-4+deb13u1"

    def json(self, argv: list[str]) -> list[dict[str, object]]:
        assert argv[:2] == ["images", "--format"]
        repository = argv[-1].removeprefix("reference=")
        return [{"Names": [t]} for t in sorted(self.images) if t.startswith(f"{repository}:")]

    def remove_image(self, tag: str) -> bool:
        if tag in self.in_use:
            return False
        self.images.discard(tag)
        self.removed.append(tag)
        return True

    def image_exists(self, tag: str) -> bool:
        return tag in self.images

    def remove_container(self, name: str) -> None:
        pass

    def run(self, argv: list[str], **_: object) -> str:
        if argv[0] == "commit":
            time.sleep(0.2)  # a build takes a while; the other `up` arrives meanwhile
            self.commits.append(argv[-1])
            self.images.add(argv[-1])
        return ""

    def exec(self, name: str, argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        """The builder: build.sh succeeds and records the Slurm it installed."""
        out = ""
        if argv == ["cat", pipeline.RECORD]:
            out = json.dumps({"slurm": self.slurm_version, "packages": 1})
        elif argv == ["cat", pipeline.PACKAGES]:
            out = f"slurm-client {self.slurm_version}\n"
        return subprocess.CompletedProcess(argv, 0, out, "")


@pytest.fixture(autouse=True)
def no_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builds here are podman's commits only: no wheels downloaded."""
    monkeypatch.setattr(local_image, "prepare_inputs", lambda dest, os: dest.mkdir(parents=True) or "digest")


def test_two_ups_at_once_build_the_image_once(tmp_path: Path) -> None:
    podman = FakePodman({base_tag()})
    tags: list[str] = []

    def up() -> None:
        tags.append(ensure_images(podman, tmp_path / "image.log", lock=tmp_path / "image.lock"))  # type: ignore[arg-type]

    threads = [threading.Thread(target=up) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(podman.commits) == 1
    assert tags == [podman.commits[0]] * 2


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
