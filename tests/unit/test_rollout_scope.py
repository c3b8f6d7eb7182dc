"""A rollout costs what it changes: each part of each host's rollout has a digest over what that
part reads, so a change only one of the controllers' parts reads (a QoS, a partition's limits)
rolls out that part on the controllers alone, and a change every host reads (a user) rolls out
every part of every host. The playbooks and roles are held to the table that decides it
(inventory.CONTROLLER_PARTS): every play is one part, and a role that reads a part's files runs
in that part on the controllers only, or a host would miss a change its mark says it has."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurmforge.hosts import HostRole
from slurmforge.inventory import (
    CONTROLLER_PARTS,
    NODE_PART,
    is_controller_input,
    read_inventory,
    write_inventory,
)
from slurmforge.local.provider import LocalProvider
from slurmforge.package_data import playbooks, roles
from slurmforge.rollout import rollout_digests
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "examples" / "local.yaml"


def digests_after(tmp_path: Path, edit: str = "", new: str = "") -> dict[str, dict[str, dict[str, str]]]:
    """Each host's parts and their digests, by role then host name, for the local example with
    `edit` replaced by `new` (one inventory directory, rewritten in place as `up` does)."""
    text = LOCAL.read_text()
    assert edit in text
    spec_path = tmp_path / "local.yaml"
    spec_path.write_text(text.replace(edit, new, 1))
    spec = load_spec(spec_path)
    inventory = write_inventory(spec, spec_path, LocalProvider(spec, "img", state_root=tmp_path / "state").hosts(),
                                tmp_path / "inventory", tmp_path / "secrets")
    hosts = read_inventory(inventory)[1]
    digests = rollout_digests(inventory, hosts)
    by_role: dict[str, dict[str, dict[str, str]]] = {}
    for h in hosts:
        by_role.setdefault(h.role.value, {})[h.name] = digests[h.name]
    return by_role


def changed(tmp_path: Path, edit: str, new: str) -> dict[str, set[str]]:
    """The parts whose digest the edit changed, by host role."""
    before = digests_after(tmp_path)
    after = digests_after(tmp_path, edit, new)
    assert before.keys() == after.keys() == {r.value for r in HostRole}
    parts: dict[str, set[str]] = {}
    for role, hosts in before.items():
        for name, digests in hosts.items():
            assert digests.keys() == after[role][name].keys()
            diff = {part for part, digest in digests.items() if after[role][name][part] != digest}
            if diff:
                parts.setdefault(role, set()).update(diff)
    return parts


@pytest.mark.parametrize(("edit", "new", "parts"), [
    # a partition's limit, the preemption policy: slurm.conf
    ('max_time: 1-00:00:00\n    default_time: "00:30:00"\n    allow_groups: [ml-users]\n  # jobs',
     'max_time: 2-00:00:00\n    default_time: "00:30:00"\n    allow_groups: [ml-users]\n  # jobs',
     {"slurmctld", "accounting", "spec"}),
    ('exempt_time: "00:00:10"', 'exempt_time: "00:00:20"', {"slurmctld", "accounting", "spec"}),
    # an account: slurmdbd's accounting alone
    ("    - {name: research, description: default project}\n",
     "    - {name: research, description: default project}\n    - {name: vision, description: another}\n",
     {"accounting", "spec"}),
    # an alert's delay: Prometheus's rules
    ("node_drained_for: 30s", "node_drained_for: 45s", {"monitoring", "spec"}),
], ids=["partition-limit", "preemption", "account", "alert"])
def test_a_change_only_controllers_read_rolls_out_only_their_parts_that_read_it(
        tmp_path: Path, edit: str, new: str, parts: set[str]) -> None:
    assert changed(tmp_path, edit, new) == {"controller": parts}


def test_a_users_slurm_accounts_roll_out_only_the_controllers_accounting(tmp_path: Path) -> None:
    """Which accounts a user may charge is slurmdbd's (accounting.json): no host reads it."""
    data = yaml.safe_load(LOCAL.read_text())
    data["accounting"]["accounts"].append({"name": "vision", "description": "another"})
    alice = next(u for u in data["users"] if u["name"] == "alice")
    alice["accounts"], alice["default_account"] = ["research", "vision"], "vision"
    text = LOCAL.read_text()
    assert changed(tmp_path, text, yaml.safe_dump(data, sort_keys=False)) == {"controller": {"accounting", "spec"}}


@pytest.mark.parametrize(("edit", "new"), [
    ("  - {name: eve, uid: 3003,", "  - {name: carol, uid: 3004, groups: [ml-users]}\n  - {name: eve, uid: 3003,"),
    ("  - {name: guests, gid: 2100}", "  - {name: guests, gid: 2101}"),
], ids=["user", "group"])
def test_a_change_every_host_reads_rolls_out_every_part_of_every_host(tmp_path: Path, edit: str, new: str) -> None:
    every = {NODE_PART, *CONTROLLER_PARTS}
    assert changed(tmp_path, edit, new) == {r.value: every if r is HostRole.CONTROLLER else {NODE_PART}
                                            for r in HostRole}


def test_the_controllers_have_every_part_and_the_others_the_node_part(tmp_path: Path) -> None:
    digests = digests_after(tmp_path)
    assert all(parts.keys() == {NODE_PART, *CONTROLLER_PARTS} for parts in digests["controller"].values())
    others = [parts for role, hosts in digests.items() if role != "controller" for parts in hosts.values()]
    assert all(parts.keys() == {NODE_PART} for parts in others)
    node = {parts[NODE_PART] for hosts in digests.values() for parts in hosts.values()}
    assert len(node) == 1  # one node part, the same inputs on every host


# --------------------------------------------------------------------------- the roles hold to it

READS: dict[str, set[str]] = {
    "slurm_controller": {"rendered/slurm.conf", "rendered/gres.conf", "rendered/cgroup.conf",
                         "rendered/job_submit.lua", "rendered/dma.conf"},
    "slurmdbd": {"rendered/slurmdbd.conf", "rendered/accounting.json", "rendered/slurm.conf"},
    "scheduler_service": {"cluster.yaml"},
    "monitoring": {"rendered/monitoring/prometheus.yml", "rendered/monitoring/alerts.yml",
                   "rendered/monitoring/alertmanager.yml"},
    "storage_client": {"rendered/kit/accounts", "rendered/kit/hosts", "rendered/ceph.conf"},
    "slurm_node": {"rendered/join.sh"},
    "ceph": {"rendered/ceph.conf"},
}
"""What each role reads from the inventory's files (besides hosts.yml and the group vars,
which every part's digest covers)."""
PART_OF = {"slurm_controller": "slurmctld", "slurmdbd": "slurmdbd", "scheduler_service": "service",
           "monitoring": "monitoring"}
"""The part each role that reads a controller part's files runs in (storage_client's node kit: a
task file of its own, the kit part)."""


def plays() -> list[dict[str, object]]:
    return yaml.safe_load((playbooks() / "cluster.yml").read_text())


def test_every_role_that_reads_the_inventorys_files_is_in_the_table() -> None:
    readers = {p.relative_to(roles()).parts[0] for p in roles().rglob("*.yml") if "rendered_dir" in p.read_text()}
    assert readers == set(READS)


def test_the_table_matches_what_the_roles_read() -> None:
    for role, names in READS.items():
        text = "\n".join(p.read_text() for p in (roles() / role).rglob("*.yml"))
        for name in names:
            assert Path(name).name in text, f"{role} no longer reads {name}: update READS"


def test_every_play_is_one_part() -> None:
    tags = [tuple(play.get("tags") or ()) for play in plays()]  # type: ignore[call-overload]
    assert all(len(t) == 1 for t in tags), tags
    assert {t[0] for t in tags} == {"always", NODE_PART, *CONTROLLER_PARTS}


def test_a_role_that_reads_a_part_s_files_runs_in_that_part_on_controllers_only() -> None:
    for play in plays():
        if "import_playbook" in str(play.keys()):
            continue
        used = set(play.get("roles") or []) | {  # type: ignore[call-overload]
            t["ansible.builtin.include_role"]["name"] for t in play.get("tasks") or []  # type: ignore[attr-defined]
            if "ansible.builtin.include_role" in t}
        [part] = play["tags"]  # type: ignore[misc]
        for role in used & set(PART_OF):
            if (role, part) in (("scheduler_service", "spec"), ("slurmdbd", "accounting")):
                continue  # the service's settings alone (the spec); slurmdbd's accounts and uids tasks
            assert part == PART_OF[role], (play["name"], role, part)
        if part != NODE_PART and part != "monitoring":  # monitoring's readers are gated: below
            assert play["hosts"] in ("slurm_controller", "slurm_dbd"), (play["name"], play["hosts"])
        tasks_from = {t["ansible.builtin.include_role"].get("tasks_from")  # type: ignore[attr-defined]
                      for t in play.get("tasks") or [] if "ansible.builtin.include_role" in t}  # type: ignore[attr-defined]
        if "kit" in tasks_from:
            assert (part, play["hosts"]) == ("kit", "slurm_controller")


def test_prometheus_files_are_read_on_the_controller_only() -> None:
    monitoring = (roles() / "monitoring" / "tasks" / "configure.yml").read_text()
    block, _, rest = monitoring.partition("- name: Alertmanager listens")
    assert "when: inventory_hostname == slurmforge_controller" in block.split("block:")[0]
    assert "monitoring_rendered_dir" in block and "monitoring_rendered_dir" not in rest
    assert "/kit/" not in "".join(p.read_text() for p in (roles() / "storage_client" / "tasks").glob("*.yml")
                                  if p.name != "kit.yml")


def test_the_table_names_only_files_the_inventory_has(tmp_path: Path) -> None:
    digests_after(tmp_path)
    written = {str(p.relative_to(tmp_path / "inventory")) for p in (tmp_path / "inventory").rglob("*") if p.is_file()}
    for names in READS.values():
        assert names <= written, names - written
    scoped = [s for files in CONTROLLER_PARTS.values() for s in files]
    assert all(any(n == c or n.startswith(c) for n in written) for c in scoped)
    assert {n for n in written if is_controller_input(n)} == {n for names in READS.values() for n in names
                                                              if n != "rendered/ceph.conf" and n != "rendered/join.sh"}
