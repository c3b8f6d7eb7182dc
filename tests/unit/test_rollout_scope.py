"""A rollout costs what it changes: each host's digest covers what its own rollout reads, so a
change only the controllers read (a QoS, a partition's limits) rolls out the controllers alone,
and a change every host reads (a user) rolls out every host. The roles are held to the table
that decides it (inventory.CONTROLLER_INPUTS): a role that reads a controller-only file must
run on controllers only, or a compute node would miss a change its mark says it has."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurmforge.hosts import HostRole
from slurmforge.inventory import CONTROLLER_INPUTS, is_controller_input, read_inventory, write_inventory
from slurmforge.local.provider import LocalProvider
from slurmforge.package_data import playbooks, roles
from slurmforge.rollout import rollout_digests
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "examples" / "local.yaml"


def digests_after(tmp_path: Path, edit: str = "", new: str = "") -> dict[str, dict[str, str]]:
    """Each host's digest, by role then host name, for the local example with `edit` replaced by
    `new` (one inventory directory, rewritten in place as `up` does)."""
    text = LOCAL.read_text()
    assert edit in text
    spec_path = tmp_path / "cluster.yaml"
    spec_path.write_text(text.replace(edit, new, 1))
    spec = load_spec(spec_path)
    inventory = write_inventory(spec, spec_path, LocalProvider(spec, "img", state_root=tmp_path / "state").hosts(),
                                tmp_path / "inventory", tmp_path / "secrets")
    hosts = read_inventory(inventory)[1]
    digests = rollout_digests(inventory, hosts)
    by_role: dict[str, dict[str, str]] = {}
    for h in hosts:
        by_role.setdefault(h.role.value, {})[h.name] = digests[h.name]
    return by_role


def changed_roles(tmp_path: Path, edit: str, new: str) -> set[str]:
    before = digests_after(tmp_path)
    after = digests_after(tmp_path, edit, new)
    assert before.keys() == after.keys() == {r.value for r in HostRole}
    return {role for role in before if before[role] != after[role]}


@pytest.mark.parametrize(("edit", "new"), [
    # a partition's limit: slurm.conf only
    ('max_time: 1-00:00:00\n    default_time: "00:30:00"\n    allow_groups: [ml-users]\n  # jobs',
     'max_time: 2-00:00:00\n    default_time: "00:30:00"\n    allow_groups: [ml-users]\n  # jobs'),
    # the preemption policy (slurm.conf) and an account (slurmdbd's accounting)
    ('exempt_time: "00:00:10"', 'exempt_time: "00:00:20"'),
    ("    - {name: research, description: default project}\n",
     "    - {name: research, description: default project}\n    - {name: vision, description: another}\n"),
    # an alert's delay: Prometheus's rules on the controller
    ("node_drained_for: 30s", "node_drained_for: 45s"),
], ids=["partition-limit", "preemption", "account", "alert"])
def test_a_change_only_controllers_read_rolls_out_only_the_controllers(tmp_path: Path, edit: str, new: str) -> None:
    assert changed_roles(tmp_path, edit, new) == {"controller"}


@pytest.mark.parametrize(("edit", "new"), [
    ("  - {name: eve, uid: 3003,", "  - {name: carol, uid: 3004, groups: [ml-users]}\n  - {name: eve, uid: 3003,"),
    ("  - {name: guests, gid: 2100}", "  - {name: guests, gid: 2101}"),
], ids=["user", "group"])
def test_a_change_every_host_reads_rolls_out_every_host(tmp_path: Path, edit: str, new: str) -> None:
    assert changed_roles(tmp_path, edit, new) == {r.value for r in HostRole}


def test_the_controllers_digest_covers_what_every_other_host_reads(tmp_path: Path) -> None:
    """No host is left out of a change: the controllers' digest is over everything."""
    digests = digests_after(tmp_path)
    assert len(set(digests["controller"].values())) == 1
    assert len({d for role, names in digests.items() if role != "controller" for d in names.values()}) == 1


# --------------------------------------------------------------------------- the roles hold to it

READS: dict[str, set[str]] = {
    "slurm_controller": {"rendered/slurm.conf", "rendered/gres.conf", "rendered/cgroup.conf",
                         "rendered/job_submit.lua", "rendered/dma.conf"},
    "slurmdbd": {"rendered/slurmdbd.conf", "rendered/accounting.json", "rendered/slurm.conf"},
    "scheduler_service": {"cluster.yaml"},
    "monitoring": {"rendered/monitoring/prometheus.yml"},
    "storage_client": {"rendered/kit/accounts", "rendered/ceph.conf"},
    "slurm_node": {"rendered/join.sh"},
    "ceph": {"rendered/ceph.conf"},
}
"""What each role reads from the inventory's files (besides hosts.yml and the group vars,
which every host's digest covers)."""
ON_CONTROLLERS = {"slurm_controller", "slurmdbd", "scheduler_service"}
"""Roles the playbooks apply to controllers only (slurm_controller, slurm_dbd)."""
GATED = {"monitoring": "inventory_hostname == slurmforge_controller",
         "storage_client": "tasks_from: kit"}
"""Roles that run on other hosts too but read controller-only files in a part that runs on the
controller alone: Prometheus's block, the node kit's task file (played on slurm_controller)."""


def test_every_role_that_reads_the_inventorys_files_is_in_the_table() -> None:
    readers = {p.relative_to(roles()).parts[0] for p in roles().rglob("*.yml") if "rendered_dir" in p.read_text()}
    assert readers == set(READS)


def test_a_role_that_reads_a_controller_only_file_reaches_controllers_only() -> None:
    plays = yaml.safe_load((playbooks() / "cluster.yml").read_text())
    for role, names in READS.items():
        if not any(is_controller_input(n) for n in names):
            continue
        applied = [p["hosts"] for p in plays if role in (p.get("roles") or [])
                   or role in yaml.safe_dump(p.get("tasks") or [])]
        if role in ON_CONTROLLERS:
            assert applied and set(applied) <= {"slurm_controller", "slurm_dbd"}, (role, applied)
        else:
            assert role in GATED, f"{role} reads {names} on hosts other than the controllers"


def test_the_gated_parts_run_on_the_controller_only() -> None:
    monitoring = (roles() / "monitoring" / "tasks" / "configure.yml").read_text()
    block, _, _ = monitoring.partition("Alertmanager's routes")
    assert GATED["monitoring"] in block and "monitoring_rendered_dir" in block
    kit = [p for p in yaml.safe_load((playbooks() / "cluster.yml").read_text())
           if "tasks_from: kit" in yaml.safe_dump(p.get("tasks") or [], default_flow_style=False).replace("'", "")]
    assert [p["hosts"] for p in kit] == ["slurm_controller"]
    assert "/kit/" in (roles() / "storage_client" / "tasks" / "kit.yml").read_text()
    assert all("kit" not in p.name for p in (roles() / "storage_client" / "tasks").glob("*.yml")
               if p.name != "kit.yml" and "/kit/" in p.read_text())


def test_the_table_names_only_files_the_inventory_has(tmp_path: Path) -> None:
    digests_after(tmp_path)
    written = {str(p.relative_to(tmp_path / "inventory")) for p in (tmp_path / "inventory").rglob("*") if p.is_file()}
    for names in READS.values():
        assert names <= written, names - written
    assert all(any(n == c or n.startswith(c) for n in written) for c in CONTROLLER_INPUTS)
