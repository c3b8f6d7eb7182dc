"""The udev rule that keeps an AWS Ceph host's OSD volumes the ceph user's (roles/ceph,
osd_rules.yml): udev makes a disk root's whenever it appears — every boot — so without it
an OSD could not open its volume after a reboot. The role's own task writes the rule on a
container from the node image (the rollout's runner, podman connection), and the node
image's udevadm judges it; where the rule sits among the image's rules is read there too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmforge.rollout import run_playbook
from tests.judge import Judge

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "roles" / "ceph" / "tasks"
DEFAULTS = yaml.safe_load((ROOT / "roles" / "ceph" / "defaults" / "main.yml").read_text())
RULES_NAME = Path(DEFAULTS["ceph_osd_udev_rules"]).name
VOLUMES = ["vol-0123456789abcdef0", "vol-0fedcba9876543210"]
SERIALS = ["vol0123456789abcdef0", "vol0fedcba9876543210"]
PERSISTENT_STORAGE = "/usr/lib/udev/rules.d/60-persistent-storage.rules"


def write_rules(judge: Judge, out: Path, host_vars: dict[str, Any]) -> Path:
    """Run the role's osd_rules.yml on the judge, the rules going to `out` (under /tmp, which
    the judge shares); the path it writes."""
    rules = out / RULES_NAME
    playbook = out / "osd_rules.yml"
    playbook.write_text(yaml.safe_dump([{"name": "OSD udev rule", "hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "ceph", "tasks_from": "osd_rules"}}]}], sort_keys=False))
    inventory = {"all": {"hosts": {judge.name: {
        "ansible_connection": "containers.podman.podman", "ansible_python_interpreter": "/usr/bin/python3",
        "ceph_osd_udev_rules": str(rules), **host_vars}}}}
    result = run_playbook(str(playbook), inventory, out / "rollout.log")
    assert result.ok, (out / "rollout.log").read_text()[-3000:]
    return rules


def test_the_rule_gives_each_osd_volume_to_ceph_and_the_node_images_udevadm_accepts_it(
        judge: Judge, tmp_path: Path) -> None:
    rules = write_rules(judge, tmp_path, {"slurmforge_ceph_osd_volumes": VOLUMES})
    lines = [line for line in rules.read_text().splitlines() if line and not line.startswith("#")]
    assert lines == [f'ACTION!="remove", SUBSYSTEM=="block", ENV{{DEVTYPE}}=="disk", '
                     f'ENV{{ID_SERIAL_SHORT}}=="{serial}", OWNER:="ceph", GROUP:="ceph", MODE:="0660"'
                     for serial in SERIALS]
    # style included, names resolved now: the ceph user and group exist on the node image
    verdict = judge.run(["udevadm", "verify", "--resolve-names=early", str(rules)])
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    assert "Success: 1" in verdict.stdout and "Fail:    0" in verdict.stdout, verdict.stdout
    broken = tmp_path / "broken.rules"
    broken.write_text(rules.read_text().replace('OWNER:="ceph"', 'OWNER:="no-such-user"'))
    assert judge.run(["udevadm", "verify", "--resolve-names=early", str(broken)]).returncode != 0


def test_the_rule_runs_after_udev_sets_the_serial_it_matches(judge: Judge) -> None:
    """ID_SERIAL_SHORT comes from the image's 60-persistent-storage.rules (an NVMe disk's
    serial: an EBS volume's id without its '-'), which udev reads before the rule."""
    persistent = judge.run(["cat", PERSISTENT_STORAGE], check=True).stdout
    nvme = persistent.split('GOTO="nvme_end"', 1)[1].split('LABEL="nvme_end"', 1)[0]
    assert 'ENV{ID_SERIAL_SHORT}="$attr{serial}"' in nvme
    assert 'SYMLINK+="disk/by-id/nvme-$env{ID_SERIAL}' in nvme  # ID_MODEL_ID_SERIAL_SHORT: the by-id link
    assert sorted([Path(PERSISTENT_STORAGE).name, RULES_NAME])[-1] == RULES_NAME


def test_no_rule_without_volumes(judge: Judge, tmp_path: Path) -> None:
    """The local target's OSDs keep `block` as a file mkfs made the ceph user's: no rule."""
    assert not write_rules(judge, tmp_path, {}).exists()


def test_the_osds_use_the_volumes_the_rule_names() -> None:
    """One place says how a volume id becomes its disk: the role's defaults, which the rule
    (serials), the OSD's block link and the ownership check (devices) all read."""
    main = yaml.safe_load((TASKS / "main.yml").read_text())
    devices = next(t for t in main if t.get("ansible.builtin.include_tasks") == "osd_devices.yml")
    assert devices["when"] == "slurmforge_ceph_osd_volumes is defined"
    assert [t["name"] for t in main].index(devices["name"]) < [t["name"] for t in main].index("OSDs")
    osd = yaml.safe_load((TASKS / "osd.yml").read_text())
    make = next(t for t in osd if "block" in t)
    assert "ceph_osd_devices[ceph_osd.slot]" in make["vars"]["ceph_osd_device"]
    assert "ceph_osd_serials" in DEFAULTS["ceph_osd_devices"]
    assert "nvme-Amazon_Elastic_Block_Store_" in DEFAULTS["ceph_osd_devices"]
    checked = yaml.safe_load((TASKS / "osd_devices.yml").read_text())
    owner = next(t for t in checked if "failed_when" in t)
    assert owner["loop"] == "{{ ceph_osd_devices }}" and "pw_name != 'ceph'" in owner["failed_when"]
