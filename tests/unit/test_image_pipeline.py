"""The one image pipeline (slurmforge/image.py): a build receives one directory of inputs and
nothing else, runs the same script on every target, and is read back the same way.

The build itself runs in every `up` that needs a new node image (slurmforge/local/image_cache.py)
and in bench/image_bench.py (from a clean copy, compared package for package with the
local image); the AWS side of it in tests/pulumi/test_golden_image.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from slurmforge import image as pipeline
from slurmforge.contract import SERVICE_VENV
from slurmforge.distro import DEBIAN_13
from slurmforge.errors import ProvisionError
from slurmforge.image import (
    BUILD_SCRIPT,
    DIGEST_FILE,
    IMAGE_PLAYBOOK,
    WORKDIR,
    aws_user_data,
    build_script,
    image_key,
    package_differences,
    prepare_inputs,
    read_record,
    tarball,
)
from slurmforge.image_variant import ImageVariant
from slurmforge.local.image_cache import node_tag
from slurmforge.package_data import root as package_root

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("image") / "inputs"
    prepare_inputs(path, DEBIAN_13)
    return path


def test_the_inputs_are_the_playbook_the_roles_the_wheels_and_the_vars(inputs: Path) -> None:
    assert sorted(p.name for p in inputs.iterdir()) == sorted(
        ["playbooks", "roles", "wheels", "vars.json", BUILD_SCRIPT, DIGEST_FILE])
    assert (inputs / IMAGE_PLAYBOOK).read_text() == (package_root() / IMAGE_PLAYBOOK).read_text()
    assert (inputs / "playbooks" / "ansible.cfg").exists()  # build.sh points Ansible at it: roles_path
    wheels = {p.name.split("-")[0].lower() for p in (inputs / "wheels").iterdir()}
    assert {"boto3", "pydantic"} <= wheels  # the service's venv installs offline from these
    variables = json.loads((inputs / "vars.json").read_text())
    assert variables == {**DEBIAN_13.image_vars(), "slurmforge_image_variant": "base"}
    assert variables["slurmforge_paths"]["service_venv"] == SERVICE_VENV  # the contract, as the inventory has it


def test_the_digest_follows_what_the_build_receives(inputs: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    for name in ("playbooks", "roles"):
        shutil.copytree(package_root() / name, repo / name)
    same = prepare_inputs(tmp_path / "same", DEBIAN_13, root=repo)
    assert same == (inputs / DIGEST_FILE).read_text().strip()
    task = repo / "roles/storage_client/tasks/install.yml"
    task.write_text(task.read_text().replace("ceph-fuse", "ceph-fuse, sshfs"))
    assert prepare_inputs(tmp_path / "changed", DEBIAN_13, root=repo) != same


def test_one_change_key_for_the_ami_and_the_local_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The AMI's inputs digest and the local node image's tag are one key (image_key): a role's
    configuration changes neither, a file an install task copies or the service lock both."""
    repo = tmp_path / "repo"
    for name in ("playbooks", "roles"):
        shutil.copytree(package_root() / name, repo / name)

    def keys() -> tuple[str, str]:
        return image_key(DEBIAN_13, root=repo), node_tag("localhost/slurmforge-base:x", root=repo)

    before = keys()
    assert image_key(DEBIAN_13, ImageVariant.GPU, root=repo) != before[0]
    template = repo / "roles/slurm_controller/files/slurmforge-nodes-ready"  # copied by a rollout task
    template.write_text(template.read_text() + "\n# a comment\n")
    handlers = next((repo / "roles").glob("*/handlers/main.yml"))
    handlers.write_text(handlers.read_text() + "\n")
    assert keys() == before
    copied = repo / "roles/gpu/files/slurmforge-nvidia-devices"  # copied by the gpu install task
    copied.write_text(copied.read_text() + "\n# a comment\n")
    changed = keys()
    assert changed[0] != before[0] and changed[1] != before[1]
    lock = tmp_path / "service.lock"
    lock.write_text(pipeline.service_lock().read_text() + "# another pin\n")
    monkeypatch.setattr(pipeline, "service_lock", lambda: lock)
    assert all(new != old for new, old in zip(keys(), changed, strict=True))


def test_a_refresh_label_is_a_new_image_on_every_target(tmp_path: Path) -> None:
    """images.refresh (patch day): a new label is a new change key - the local tag, the AMI's
    inputs digest - and the build gets it (vars.json) and records it; the same label, the same
    key; no label, the key of a spec without images.refresh."""
    from dataclasses import replace

    from slurmforge.spec.models import Images

    fresh = Images(refresh="2026-11-29").distro()
    assert Images().distro() == DEBIAN_13 and fresh == replace(DEBIAN_13, refresh="2026-11-29")
    assert image_key(fresh) != image_key(DEBIAN_13)
    assert image_key(fresh) == image_key(Images(refresh="2026-11-29").distro())
    assert node_tag("localhost/slurmforge-base:x", os=fresh) != node_tag("localhost/slurmforge-base:x")
    assert prepare_inputs(tmp_path / "fresh", fresh) != prepare_inputs(tmp_path / "plain", DEBIAN_13)
    assert json.loads((tmp_path / "fresh" / "vars.json").read_text())["slurmforge_image_refresh"] == "2026-11-29"
    assert "slurmforge_image_refresh" not in json.loads((tmp_path / "plain" / "vars.json").read_text())
    script = (tmp_path / "fresh" / BUILD_SCRIPT).read_text()
    assert '"refresh": "%s"' in script and "2026-11-29" in script


def test_every_image_takes_the_releases_current_packages_with_its_security_suite() -> None:
    """The image playbook's first tasks (every build, every in-place upgrade: upgrade.yml is
    image.yml) name Debian's release, its updates and its security suite, then dist-upgrade -
    before any role installs a package."""
    import yaml

    tasks = yaml.safe_load((package_root() / "roles/common/tasks/install.yml").read_text())
    sources = tasks[0]["ansible.builtin.copy"]
    assert sources["dest"] == "/etc/apt/sources.list.d/debian.sources"
    assert "{{ slurmforge_debian_suite }}-security" in sources["content"]
    assert "{{ slurmforge_debian_suite }}-updates" in sources["content"]
    assert DEBIAN_13.image_vars()["slurmforge_debian_suite"] == "trixie"
    upgrade = next(i for i, t in enumerate(tasks) if t.get("ansible.builtin.apt", {}).get("upgrade") == "dist")
    installs = [i for i, t in enumerate(tasks) if t.get("ansible.builtin.apt", {}).get("name")]
    assert upgrade < min(installs)
    # upgrade.yml is image.yml, between a play that notes what the host has enabled and one that
    # enables again what image.yml disabled (a host keeps starting its daemons at boot)
    playbook = yaml.safe_load((package_root() / "playbooks/upgrade.yml").read_text())
    assert [play.get("ansible.builtin.import_playbook") for play in playbook] == [None, "image.yml", None]
    assert all("import_playbook" not in str(play) for play in (playbook[0], playbook[2]))


def test_install_tasks_read_only_what_the_change_key_covers() -> None:
    """image_key follows each role's tasks/install.yml, the files of files/ it copies by a
    literal name and the defaults it names: an install task that includes other tasks,
    renders a template, notifies a handler or copies a computed name would escape it."""
    for install in sorted((package_root() / "roles").glob("*/tasks/install.yml")):
        text = install.read_text()
        for word in ("include_tasks", "import_tasks", "include_role", "import_role", "template:", "notify:"):
            assert word not in text, f"{install}: {word}"
        for line in text.splitlines():
            if not line.strip().startswith("src:"):
                continue
            if "{{" in line:  # the one computed source: the wheels, which the service lock pins
                assert "slurmforge_image_wheels" in line, f"{install}: {line.strip()}"
                continue
            name = line.split(":", 1)[1].strip().strip("'\"")
            assert (install.parents[1] / "files" / name).is_file(), f"{install}: src {name}"


def test_the_tarball_is_reproducible_and_holds_the_inputs(inputs: Path) -> None:
    one, two = tarball(inputs), tarball(inputs)
    assert one == two
    with tarfile.open(fileobj=BytesIO(one)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert {BUILD_SCRIPT, "vars.json", IMAGE_PLAYBOOK.as_posix()} <= set(members)
    assert members[BUILD_SCRIPT].mode & 0o100 and {m.uid for m in members.values()} == {0}


@pytest.mark.parametrize("name", ["build.sh", "user-data"])
def test_the_programs_are_bash_that_shellcheck_passes(name: str, tmp_path: Path) -> None:
    text = build_script(DEBIAN_13) if name == "build.sh" else aws_user_data("https://b/in?x=1", "https://b/out?y=2")
    path = tmp_path / name
    path.write_text(text)
    subprocess.run(["bash", "-n", str(path)], check=True, capture_output=True)
    lint = subprocess.run(["shellcheck", "-S", "warning", str(path)], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout


def test_build_runs_only_from_its_own_directory(inputs: Path) -> None:
    """Same working directory on every target: a copy elsewhere refuses before touching apt."""
    res = subprocess.run(["bash", str(inputs / BUILD_SCRIPT)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 1 and f"unpack the inputs in {WORKDIR}" in res.stderr


def test_the_user_data_runs_the_same_build_and_reports_through_the_urls() -> None:
    data = aws_user_data("https://bucket/inputs?sig=1", "https://bucket/result?sig=2")
    assert f"bash {WORKDIR}/{BUILD_SCRIPT}" in data
    assert "'https://bucket/inputs?sig=1'" in data and "'https://bucket/result?sig=2'" in data
    assert data.rstrip().endswith("poweroff")


def test_a_record_is_checked_the_same_way_everywhere() -> None:
    record = json.dumps({"slurm": "24.11.5-4+deb13u1", "packages": 2})
    assert read_record(record, "a 1\nb 2\n", DEBIAN_13)["slurm"] == "24.11.5-4+deb13u1"
    with pytest.raises(ProvisionError, match=r"installed Slurm 25\.05\.1-1, but slurmforge renders for Slurm 24\.11"):
        read_record(json.dumps({"slurm": "25.05.1-1"}), "", DEBIAN_13)
    with pytest.raises(ProvisionError, match="recorded nothing"):
        read_record("", "", DEBIAN_13)


def test_package_differences_name_each_side() -> None:
    assert package_differences(["a 1", "b 2"], ["a 1", "b 3", "c 1"]) == ["-b 2", "+b 3", "+c 1"]
    assert package_differences(["a 1"], ["a 1"]) == []
