"""A cluster that ran a Slurm the node image cannot take over is refused before anything
changes, with one line naming the choices: by `up --local` (Python, slurmforge/takeover.py)
and by the first play of cluster.yml on every target (playbooks/slurm_takeover.yml, run
here for real by ansible-runner with the inventory's own `slurmforge_slurm` vars)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from slurmforge.distro import DEBIAN_13, is_upgradable
from slurmforge.errors import RolloutError, UpgradeRefused
from slurmforge.inventory import cluster_vars
from slurmforge.package_data import playbooks
from slurmforge.rollout import run_playbook
from slurmforge.spec import load_spec
from slurmforge.takeover import STATE_MARKER, check_takeover, refusal, state_release

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("old", "ok"), [("22.05", False), ("22.05.8-4", False), ("23.02", True), ("23.11.10", True),
                                         ("24.05", True), ("24.11", True), ("24.11.5-4+deb13u1", True),
                                         ("25.05", False)])
def test_debian_13_takes_over_from_23_02_to_24_11(old: str, ok: bool) -> None:
    assert is_upgradable(old, DEBIAN_13) is ok


def state_dir(tmp_path: Path, marker: str | None, state: bool) -> Path:
    path = tmp_path / "slurm_state" / "slurmctld"
    path.mkdir(parents=True)
    if state:
        (path / "job_state").write_bytes(b"\x00state")
    if marker is not None:
        (path / STATE_MARKER).write_text(marker + "\n")
    return path


@pytest.mark.parametrize(("marker", "state", "release"), [(None, False, None), (None, True, "22.05"),
                                                          ("24.11", True, "24.11"), ("23.11", False, "23.11")])
def test_the_state_says_which_release_ran_the_cluster(tmp_path: Path, marker: str | None, state: bool,
                                                      release: str | None) -> None:
    assert state_release(state_dir(tmp_path, marker, state)) == release


def test_a_22_05_cluster_is_refused_with_the_choices() -> None:
    with pytest.raises(UpgradeRefused) as refused:
        check_takeover("dev", "22.05", DEBIAN_13)
    assert str(refused.value) == (
        "cluster dev holds Slurm 22.05 state and accounting; the debian-13 image runs Slurm 24.11, which takes them "
        "over only from Slurm 23.02 on: rebuild the cluster (its jobs and accounting are lost), or export accounting "
        "first - see docs/upgrade.md")
    assert refused.value.exit_code == 3
    check_takeover("dev", None, DEBIAN_13)
    check_takeover("dev", "24.11", DEBIAN_13)


def run_takeover(tmp_path: Path, state: Path) -> None:
    spec = load_spec(ROOT / "examples" / "local.yaml")
    facts = cluster_vars(spec, tmp_path / "inventory", [])
    facts["slurmforge_slurm"] |= {"state_dir": str(state)}
    hosts = {"ctl": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **facts}}
    inventory = {"all": {"children": {"slurm_controller": {"hosts": hosts}}}}
    run_playbook(str(playbooks() / "slurm_takeover.yml"), inventory, tmp_path / "run.log")


@pytest.mark.parametrize(("marker", "state"), [(None, True), ("25.05", True)])
def test_the_rollout_refuses_before_anything_changes(tmp_path: Path, marker: str | None, state: bool) -> None:
    old = marker or "22.05"
    with pytest.raises(RolloutError) as refused:
        run_takeover(tmp_path, state_dir(tmp_path, marker, state))
    assert " ".join(refusal("dev", old, DEBIAN_13).replace("the debian-13 image", "the node image").split()) in \
        " ".join(str(refused.value).split())


@pytest.mark.parametrize(("marker", "state"), [(None, False), ("23.02", True)])
def test_the_rollout_goes_on_when_the_state_can_be_taken_over(tmp_path: Path, marker: str | None,
                                                              state: bool) -> None:
    run_takeover(tmp_path, state_dir(tmp_path, marker, state))


def test_cluster_yml_checks_before_its_first_change() -> None:
    plays = yaml.safe_load((playbooks() / "cluster.yml").read_text())
    imports = [p.get("ansible.builtin.import_playbook") for p in plays]
    # the mark goes first (it changes nothing a job sees), then the check, then the roles
    assert imports[:2] == ["rollout_mark.yml", "slurm_takeover.yml"] and "roles" in plays[2]


def test_the_marker_follows_the_distribution() -> None:
    later = replace(DEBIAN_13, slurm_release="25.11", upgrades_from="24.11")
    assert is_upgradable("24.11", later) and not is_upgradable("24.05", later)
