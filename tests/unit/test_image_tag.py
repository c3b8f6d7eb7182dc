"""The node image's tag changes exactly when what the image playbook installs changes."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from slurmforge.local.image import REPO, base_tag, ensure_images, node_tag


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


class FakePodman:
    """Just enough of slurmforge.local.podman.Podman to count builds."""

    def __init__(self, images: set[str], in_use: frozenset[str] = frozenset()) -> None:
        self.images = images
        self.in_use = in_use
        self.commits: list[str] = []
        self.removed: list[str] = []

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

    def run(self, argv: list[str], **_: object) -> None:
        if argv[0] == "commit":
            time.sleep(0.2)  # a build takes a while; the other `up` arrives meanwhile
            self.commits.append(argv[-1])
            self.images.add(argv[-1])


def test_two_ups_at_once_build_the_image_once(tmp_path: Path) -> None:
    podman = FakePodman({base_tag()})
    tags: list[str] = []

    def up() -> None:
        tags.append(ensure_images(podman, lambda builder: None, lock=tmp_path / "image.lock"))  # type: ignore[arg-type]

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
    node = ensure_images(podman, lambda builder: None, lock=tmp_path / "image.lock")  # type: ignore[arg-type]
    assert podman.removed == [f"{repo}:old1"]
    assert podman.images == {base, node, f"{repo}:old2", other}
    again = ensure_images(podman, lambda builder: None, lock=tmp_path / "image.lock")  # type: ignore[arg-type]
    assert again == node and podman.removed == [f"{repo}:old1"]  # no build, no pruning
