"""The service acts only on a view it can trust (service.guard), loop by loop with a fake
clock: a controller outage terminates nothing, a partial or failed answer holds every
action, repairs wait for their verdict to hold, many at once are held, releases are
rate-limited, and a node whose machine is gone under jobs is marked DOWN in bounded time."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from test_service_daemon import FakeCloud, FakeSlurm, all_nodes, make, resume
from test_service_world import NOW, POWERING_UP, Clock, instance

from slurmforge.errors import ProvisionError
from slurmforge.provider import Instance, InstanceState
from slurmforge.service.actions import MarkDown
from slurmforge.service.applier import Applier
from slurmforge.service.daemon import Daemon
from slurmforge.service.state import Store
from slurmforge.service.topology import topology
from slurmforge.service.web import metrics_text, render_page
from slurmforge.slurm.client import Job, SlurmClient, parse_jobs, parse_nodes
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

OD1, S1, S2 = "t-od-01", "t-spot-01", "t-spot-02"
UNREACHABLE = json.dumps({"meta": {}, "warnings": [], "nodes": [], "jobs": [], "errors": [
    {"description": "Unable to query nodes", "source": "slurm_load_node", "error_number": 1007,
     "error": "Unable to contact slurm controller (connect failure)"}]})


def running_cluster(clock: Clock) -> tuple[FakeSlurm, FakeCloud]:
    """The issue's cluster: a static node and a 2-node job on spot nodes, all with machines."""
    slurm = FakeSlurm(all_nodes(t_od_01=("idle", "CLOUD"), t_spot_01=("allocated", "CLOUD"),
                                t_spot_02=("allocated", "CLOUD")), [Job(5, "RUNNING", "t-spot-[01-02]", "alice")])
    cloud = FakeCloud(clock)
    for iid, name, pool in (("i-od", OD1, "od"), ("i-s1", S1, "spot"), ("i-s2", S2, "spot")):
        cloud.instances[iid] = instance(iid, name, pool=pool)
    return slurm, cloud


def loops(daemon: Daemon, clock: Clock, count: int, step: float = 10.0) -> None:
    for _ in range(count):
        daemon.loop_once()
        clock.advance(step)


def holding(daemon: Daemon) -> dict[str, str]:
    assert daemon.snapshot is not None
    return {h.reason.value: h.detail for h in daemon.snapshot.holds}


def test_a_five_minute_controller_outage_terminates_nothing(env: dict[str, Path],
                                                            caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    slurm, cloud = running_cluster(clock)
    daemon = make(env, slurm, cloud, clock)
    loops(daemon, clock, 2)
    healthy_nodes, healthy_jobs = slurm.nodes, slurm.jobs
    slurm.nodes = lambda: parse_nodes(UNREACHABLE)  # type: ignore[method-assign]
    slurm.jobs = lambda: parse_jobs(UNREACHABLE)  # type: ignore[method-assign]
    started = clock()
    loops(daemon, clock, 30)
    assert cloud.terminated == [] and slurm.calls == [] and cloud.requests == []
    assert "Unable to contact slurm controller" in holding(daemon)["slurm-view"]
    snap = daemon.snapshot
    assert snap is not None and snap.holds[0].since == started and snap.holds[0].held == 3  # the 3 "orphans"
    assert 'slurmforge_service_holding{reason="slurm-view"} 1' in metrics_text(snap)
    assert 'slurmforge_service_held_actions_total{reason="slurm-view"} 90' in metrics_text(snap)  # 30 loops x 3
    assert 'slurmforge_service_untrusted_loops_total{reason="slurm-view"} 30' in metrics_text(snap)
    assert 'data-reason="slurm-view"' in render_page(snap) and "Holding back 3 action(s)" in render_page(snap)
    assert "holding back 3 action(s)" in caplog.text and "WARNING" in caplog.text
    assert sum(p.total for p in snap.pools) == 11  # the page keeps the last nodes Slurm gave
    slurm.nodes, slurm.jobs = healthy_nodes, healthy_jobs  # type: ignore[method-assign]
    loops(daemon, clock, 5)
    assert cloud.terminated == [] and holding(daemon) == {}
    assert 'slurmforge_service_holding{reason="slurm-view"} 0' in metrics_text(daemon.snapshot)  # type: ignore[arg-type]


def test_slurm_answer_missing_nodes_of_the_spec_holds_everything(env: dict[str, Path]) -> None:
    clock = Clock()
    slurm, cloud = running_cluster(clock)
    del slurm.state[S1], slurm.state[S2]
    slurm._set(S1.replace("01", "03"), "idle", "POWERING_UP", "NOT_RESPONDING")  # would launch t-spot-03
    daemon = make(env, slurm, cloud, clock)
    loops(daemon, clock, 5)
    assert cloud.terminated == [] and cloud.requests == [] and slurm.calls == []
    assert holding(daemon)["slurm-partial"] == "2 node(s) of the spec are not in Slurm's answer: t-spot-[01-02]"


@pytest.mark.parametrize("failure", [ProvisionError("podman API: listing containers gave HTTP 500"),
                                     TimeoutError("DescribeInstances")], ids=["api-error", "timeout"])
def test_a_failing_cloud_list_holds_launches_and_terminations(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                              failure: Exception) -> None:
    clock = Clock()
    slurm, cloud = running_cluster(clock)
    slurm._set("t-spot-03", "idle", "POWERING_UP", "NOT_RESPONDING")
    healthy = cloud.list_instances

    def broken() -> list[Instance]:
        raise failure
    cloud.list_instances = broken  # type: ignore[method-assign]
    daemon = make(env, slurm, cloud, clock)
    loops(daemon, clock, 3)
    assert cloud.requests == [] and cloud.terminated == [] and "cloud-view" in holding(daemon)
    cloud.list_instances = healthy  # type: ignore[method-assign]
    loops(daemon, clock, 1)
    assert [r.nodes for r in cloud.requests] == [("t-spot-03",)] and holding(daemon) == {}


def test_machines_vanishing_from_the_list_at_once_hold_the_loop(env: dict[str, Path]) -> None:
    clock = Clock()
    slurm = FakeSlurm(all_nodes(**{f"t_cpu_0{i}": ("allocated", "CLOUD") for i in (1, 2, 3)},
                                **{f"t_od_0{i}": ("allocated", "CLOUD") for i in (1, 2, 3, 4)}))
    cloud = FakeCloud(clock)
    for name in [f"t-cpu-0{i}" for i in (1, 2, 3)] + [f"t-od-0{i}" for i in (1, 2, 3, 4)]:
        cloud.instances[f"i-{name}"] = instance(f"i-{name}", name, pool=name.split("-")[1])
    daemon = make(env, slurm, cloud, clock)
    loops(daemon, clock, 1)
    listed = dict(cloud.instances)
    cloud.instances.clear()  # 7 > max(5, 5% of 11)
    loops(daemon, clock, 1)
    assert "7 machine(s) live in the last list are not listed at all" in holding(daemon)["cloud-vanished"]
    assert daemon.store.marks() == {}  # not even the "missing since" marks
    cloud.instances.update(listed)
    loops(daemon, clock, 3)
    assert slurm.calls == [] and cloud.terminated == [] and holding(daemon) == {}


def test_many_repairs_at_once_are_held_a_few_run(env: dict[str, Path]) -> None:
    clock = Clock()
    slurm, cloud = running_cluster(clock)
    for i in range(6):  # machines of nodes the spec no longer has, older than a rollout: orphans
        cloud.instances[f"i-gone-{i}"] = instance(f"i-gone-{i}", f"t-old-0{i}", pool="spot", launched=NOW - 3600)
    daemon = make(env, slurm, cloud, clock)
    loops(daemon, clock, 5)
    assert cloud.terminated == []
    assert holding(daemon)["mass-action"].startswith("6 machine(s) would be stopped, replaced or marked down at "
                                                      "once, at most 5 a loop")
    assert daemon.snapshot.holds[0].held == 6  # type: ignore[union-attr]
    del cloud.instances["i-gone-5"]
    loops(daemon, clock, 1)
    assert sorted(cloud.terminated) == [f"i-gone-{i}" for i in range(5)] and holding(daemon) == {}


def test_releases_run_at_once_at_most_the_budget_a_loop(env: dict[str, Path]) -> None:
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_od_01=("idle", "CLOUD")))  # every other node: powered down by Slurm
    cloud = FakeCloud(clock)
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    released = ["t-spot-01", "t-spot-02", "t-spot-03", "t-spot-04", "t-cpu-01", "t-cpu-02", "t-cpu-03"]
    for name in released:
        cloud.instances[f"i-{name}"] = instance(f"i-{name}", name, pool=name.split("-")[1])
    daemon = make(env, slurm, cloud, clock)
    loops(daemon, clock, 1)
    assert len(cloud.terminated) == 5 and "2 released machine(s) wait" in holding(daemon)["release-rate"]
    loops(daemon, clock, 1)
    assert sorted(cloud.terminated) == sorted(f"i-{n}" for n in released) and holding(daemon) == {}


def test_a_dead_machine_under_a_running_job_is_marked_down_within_the_bound(env: dict[str, Path]) -> None:
    """The bound: the loop that first sees the machine gone, then stable_seconds (20 s)
    over stable_loops (3) loops; then slurmctld requeues the job (or fails it)."""
    clock = Clock()
    slurm, cloud = running_cluster(clock)
    daemon = make(env, slurm, cloud, clock)
    loops(daemon, clock, 1)
    cloud.instances["i-s1"] = cloud.instances["i-s1"].__class__(**{**cloud.instances["i-s1"].__dict__,
                                                                  "state": InstanceState.TERMINATED})
    died = clock()
    for _ in range(2):
        loops(daemon, clock, 1)
        assert slurm.called("mark_down") == []
    daemon.loop_once()
    assert clock() - died == 20.0
    assert slurm.called("mark_down") == [((S1,), "slurmforge: instance i-s1 of t-spot-01 is terminated")]
    assert slurm.jobs() == [] and slurm.state[S1].is_down()  # slurmctld ended job 5
    loops(daemon, clock, 4)  # then the DOWN node goes back to power save, after its own confirmation
    assert slurm.called("power_down") == [((S1,), "slurmforge: instance i-s1 of t-spot-01 is terminated")]
    assert S2 not in {n for args in slurm.called("power_down") for n in args[0]}  # type: ignore[attr-defined]


def test_the_verdict_must_hold_in_consecutive_trusted_loops(env: dict[str, Path]) -> None:
    """A machine that shows up terminated for two loops and running again on the third
    (EC2 eventual consistency) is never acted on; an untrusted loop restarts the count."""
    clock = Clock()
    slurm, cloud = running_cluster(clock)
    daemon = make(env, slurm, cloud, clock)
    live = cloud.instances["i-s1"]
    gone = live.__class__(**{**live.__dict__, "state": InstanceState.TERMINATED})
    for state in (gone, gone, live, gone, gone):
        cloud.instances["i-s1"] = state
        loops(daemon, clock, 1)
    assert slurm.calls == []
    healthy = slurm.nodes
    slurm.nodes = lambda: parse_nodes(UNREACHABLE)  # type: ignore[method-assign]
    loops(daemon, clock, 1)
    slurm.nodes = healthy  # type: ignore[method-assign]
    loops(daemon, clock, 2)
    assert slurm.calls == []
    loops(daemon, clock, 1)
    assert slurm.called("mark_down")


def test_the_executor_marks_nodes_down_with_one_scontrol_call(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def runner(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        return subprocess.CompletedProcess(list(argv), 0, "", "")

    spec = load_spec(Path(__file__).parents[2] / "examples" / "local.yaml")
    store = Store(tmp_path / "state.db")
    Applier(SlurmClient(runner), FakeCloud(Clock()), store, lambda: NOW).apply(
        [MarkDown(("a-01",), "slurmforge: gone"), MarkDown(("a-02",), "slurmforge: gone")], topology(spec))
    assert calls == [["scontrol", "update", "nodename=a-[01-02]", "state=down", "reason=slurmforge: gone"]]
    assert [(e.kind, e.count, e.detail) for e in store.events()] == [("mark-down", 2, "slurmforge: gone")]


def test_a_resume_waits_while_the_controller_is_away(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    slurm, cloud = running_cluster(clock)
    slurm._set("t-spot-03", *POWERING_UP[:1], *POWERING_UP[2:])
    resume(env, monkeypatch, "t-spot-03", '{"jobs":[{"job_id":8,"nodes":"t-spot-03"}]}')
    healthy = slurm.nodes
    slurm.nodes = lambda: parse_nodes(UNREACHABLE)  # type: ignore[method-assign]
    daemon = make(env, slurm, cloud, clock)
    loops(daemon, clock, 2)
    assert cloud.requests == [] and daemon.store.snapshot().node_jobs == {"t-spot-03": 8}  # taken, kept
    slurm.nodes = healthy  # type: ignore[method-assign]
    loops(daemon, clock, 1)
    assert [(r.nodes, r.jobs) for r in cloud.requests] == [(("t-spot-03",), (8,))]
