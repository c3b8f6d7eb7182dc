"""The upgrade's plan (slurmforge.upgrade.plan): Slurm's order, slurmdbd's step on the primary
controller, static batches from maintenance.max_unavailable, idle and busy dynamic nodes; the
spec field's validation; and the record that lets an interrupted upgrade go on."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmforge.drain import JobPolicy
from slurmforge.errors import SpecError
from slurmforge.hosts import Host, HostRole
from slurmforge.package_data import examples
from slurmforge.slurm.client import NodeState
from slurmforge.spec import Cluster
from slurmforge.spec.loader import parse_spec
from slurmforge.upgrade import progress
from slurmforge.upgrade.plan import Kind, batches, make_plan, plan_table, unavailable_count
from slurmforge.upgrade.versions import CTLD, DBD, SACKD, SLURMD

pytestmark = pytest.mark.unit

LOCAL = (examples() / "local.yaml").read_text()


def spec(maintenance: str = "", text: str = LOCAL) -> Cluster:
    return parse_spec(text + (f"\nmaintenance:\n  max_unavailable: {maintenance}\n" if maintenance else ""),
                      checks=False)


def hosts(static: int = 4, backup: bool = True) -> list[Host]:
    out = [Host("dev-controller", "10.0.0.10", HostRole.CONTROLLER)]
    out += [Host("dev-controller-backup", "10.0.0.11", HostRole.CONTROLLER)] if backup else []
    out += [Host("dev-login", "10.0.0.12", HostRole.LOGIN), Host("dev-ceph-01", "10.0.0.13", HostRole.CEPH)]
    out += [Host(f"dev-cpu-{i:02d}", f"10.0.1.{i}", HostRole.COMPUTE, "cpu") for i in range(1, static + 1)]
    out += [Host("dev-gpu-01", "10.0.2.1", HostRole.COMPUTE, "gpu"),
            Host("dev-cpu-05", "10.0.1.5", HostRole.COMPUTE, "cpu", dynamic=True),
            Host("dev-cpu-06", "10.0.1.6", HostRole.COMPUTE, "cpu", dynamic=True),
            Host("dev-cpu-07", "10.0.1.7", HostRole.COMPUTE, "cpu", dynamic=True)]
    return out


def node(name: str, state: str = "idle", *flags: str) -> NodeState:
    return NodeState(name, state, frozenset(flags))


def test_the_steps_follow_slurms_order() -> None:
    plan = make_plan(spec(), hosts(), [], "abc", "24.11.6", JobPolicy(), local=True)
    assert [s.kind for s in plan.steps] == [Kind.IMAGE, Kind.BACKUPS, Kind.DBD, Kind.BACKUP, Kind.PRIMARY, Kind.LOGIN,
                                            Kind.CEPH, Kind.STATIC, Kind.STATIC, Kind.STATIC, Kind.STATIC, Kind.STATIC]
    ceph = next(s for s in plan.steps if s.kind is Kind.CEPH)  # every host ends on the image; no Slurm daemon moves
    assert ceph.hosts == ("dev-ceph-01",) and ceph.moves == () and "CephFS keeps serving" in ceph.jobs
    moved = [(d, h) for s in plan.steps for d, h in s.moves]
    assert moved[:4] == [(DBD, ("dev-controller",)), (CTLD, ("dev-controller-backup",)), (CTLD, ("dev-controller",)),
                         (SACKD, ("dev-login",))]
    assert all(d == SLURMD for d, _ in moved[4:])


def test_slurmdbd_on_the_primary_controller_is_said_in_the_plan() -> None:
    plan = make_plan(spec(), hosts(), [], "abc", "24.11.6", JobPolicy(), local=True)
    dbd = next(s for s in plan.steps if s.kind is Kind.DBD)
    assert dbd.hosts == ("dev-controller",) and "until step 5" in dbd.does
    assert any("slurmdbd runs on the primary controller dev-controller" in n for n in plan.notes)


def test_without_accounting_the_backups_are_slurms_state_alone_and_there_is_no_slurmdbd_step() -> None:
    text = LOCAL.replace("accounting:\n", "accounting:\n  enabled: false\n", 1) if "accounting:\n" in LOCAL else \
        LOCAL + "\naccounting:\n  enabled: false\n"
    plan = make_plan(spec(text=text), hosts(backup=False), [], "abc", "24.11.6", JobPolicy(), local=True)
    backups = [s for s in plan.steps if s.kind is Kind.BACKUPS]
    assert len(backups) == 1 and "state directory" in backups[0].does and "mysqldump" not in backups[0].does
    assert Kind.DBD not in [s.kind for s in plan.steps]


@pytest.mark.parametrize("setting,static,size", [(1, 4, 1), (2, 4, 2), (10, 4, 10), ("50%", 4, 2), ("25%", 4, 1),
                                                 ("10%", 4, 1), ("100%", 4, 4), ("34%", 3, 1)])
def test_max_unavailable_is_a_count_or_a_share_and_never_zero(setting: int | str, static: int, size: int) -> None:
    assert unavailable_count(setting, static) == size


def test_static_batches_come_from_max_unavailable_per_pool() -> None:
    plan = make_plan(spec("50%"), hosts(), [], "abc", "24.11.6", JobPolicy(), local=True)
    static = [s.hosts for s in plan.steps if s.kind is Kind.STATIC]
    assert static == [("dev-cpu-01", "dev-cpu-02"), ("dev-cpu-03", "dev-cpu-04"), ("dev-gpu-01",)]
    assert "drain 2 node(s), wait for their jobs (or requeue with --requeue)" in \
        next(s.jobs for s in plan.steps if s.kind is Kind.STATIC)
    requeue = make_plan(spec("2"), hosts(), [], "abc", "24.11.6", JobPolicy(requeue=True), local=True)
    assert "requeue them (--requeue)" in next(s.jobs for s in requeue.steps if s.kind is Kind.STATIC)
    assert batches(["a", "b", "c"], 2) == [("a", "b"), ("c",)]


def test_dynamic_nodes_idle_are_powered_down_busy_ones_when_free() -> None:
    nodes = [node("dev-cpu-05", "idle"), node("dev-cpu-06", "allocated"),
             node("dev-cpu-07", "idle", "CLOUD", "POWERED_DOWN")]
    plan = make_plan(spec(), hosts(), nodes, "abc", "24.11.6", JobPolicy(), local=True)
    dynamic = plan.steps[-1]
    assert dynamic.kind is Kind.DYNAMIC and dynamic.hosts == ("dev-cpu-05", "dev-cpu-06")
    assert dynamic.idle == ("dev-cpu-05",)
    assert dynamic.jobs == "power down 1 idle node(s), drain 1 busy node(s) and power them down when their jobs end"
    none_up = make_plan(spec(), hosts(), [nodes[2]], "abc", "24.11.6", JobPolicy(), local=True)
    assert none_up.steps[-1].kind is Kind.STATIC


def test_the_table_has_a_row_per_step_and_marks_what_is_done() -> None:
    plan = make_plan(spec(), hosts(), [], "abc", "24.11.6", JobPolicy(), local=False)
    table = plan_table(plan, done=[plan.steps[2].key])
    assert [c.key for c in table.columns] == ["step", "kind", "hosts", "jobs", "does"]
    assert table.rows[2][1] == "slurmdbd (done)" and table.rows[4][3] == \
        "restart slurmctld: running jobs continue, submissions retried by the client"
    assert "AMI" in str(table.rows[0][4])


@pytest.mark.parametrize("value", ["0", "-1", "0%", "101%", "x%", "true", "'2'"])
def test_max_unavailable_is_validated_with_its_path_and_fix(value: str) -> None:
    with pytest.raises(SpecError) as exc:
        spec(value)
    line = exc.value.problems[0].line()
    assert line.startswith("maintenance.max_unavailable") and "fix:" in line


def test_the_record_is_atomic_and_starts_over_for_another_image(tmp_path: Path) -> None:
    path = progress.progress_path("dev", tmp_path)
    record = progress.load(path, "aaa")
    record.before = {"slurmd": {"n1": "24.11.5"}}
    progress.mark_done(path, record, "slurmdbd:dev-controller", 12.5, now=100.0)
    again = progress.load(path, "aaa")
    assert again.done == {"slurmdbd:dev-controller": 100.0} and again.seconds["slurmdbd:dev-controller"] == 12.5
    assert again.before == {"slurmd": {"n1": "24.11.5"}}
    assert progress.load(path, "bbb").done == {}
    assert [p.name for p in path.parent.iterdir()] == ["upgrade.json"]  # no temporary file left
    path.write_text("{half")
    assert progress.load(path, "aaa").done == {}


def test_an_aws_inventory_without_pool_nodes_still_plans_them_from_the_spec() -> None:
    """An AWS inventory lists the stack's hosts only - the scheduler service launches every pool
    machine - so the pool nodes come from the spec: the static ones replaced in batches, the
    dynamic ones Slurm has powered up released (the AWS rehearsal found an upgrade that left
    every compute node on the old image)."""
    static = "    max_nodes: 4\n    min_nodes: 1\n"
    aws = (examples() / "pools-aws.yaml").read_text().replace("    max_nodes: 4\n", static, 1)
    cluster = spec(text=aws)
    head = [Host(f"{cluster.name}-controller", "10.0.0.10", HostRole.CONTROLLER),
            Host(f"{cluster.name}-login", "10.0.0.12", HostRole.LOGIN)]
    first = cluster.pools[0]
    names = [f"{cluster.node_prefix(first)}-{i:02d}" for i in (1, 2)]
    plan = make_plan(cluster, head, [node(names[1], "allocated")], "abc", "24.11.6", JobPolicy(), local=False)
    static = [s.hosts for s in plan.steps if s.kind is Kind.STATIC]
    assert static and static[0] == (names[0],)
    assert plan.steps[-1].kind is Kind.DYNAMIC and plan.steps[-1].hosts == (names[1],)
