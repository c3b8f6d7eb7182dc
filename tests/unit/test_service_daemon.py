"""The daemon loop end to end against a fake Slurm and a fake cloud (real SQLite, real
spool files, fake clock): hand-off -> launch, fallback within one loop, no capacity ->
power down + requeue, crash mid-launch, orphans, spot notices, spec reloads."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from test_service_world import NOW, POWERED_DOWN, POWERING_UP, SPEC, Clock, instance, node

from slurmforge.hosts import TAG_POOL
from slurmforge.provider import Instance, InstanceState, Interruption, LaunchRequest, LaunchResult, Machines
from slurmforge.service import handoff
from slurmforge.service.daemon import Daemon, DaemonConfig
from slurmforge.service.state import Binding, Store
from slurmforge.slurm.client import Job, NodeState, SlurmClient
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

S1, S2, OD1 = "t-spot-01", "t-spot-02", "t-od-01"


class FakeSlurm(SlurmClient):
    """Just enough slurmctld: node states change as scontrol would change them."""

    def __init__(self, nodes: Sequence[NodeState], jobs: Sequence[Job] = ()) -> None:
        super().__init__(self._command)
        self.commands: list[tuple[str, ...]] = []
        self.dbd_queue = 0
        self.runaway_output = "Runaway Jobs: No runaway jobs found on cluster t\n"
        self.state = {n.name: n for n in nodes}
        self.job_list = list(jobs)
        self.ended: dict[int, Job] = {}
        """Jobs that have ended, as `squeue --states=all` still shows them."""
        self.calls: list[tuple[str, tuple[object, ...]]] = []

    def _command(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """sdiag and sacctmgr, as the runaway-record step calls them."""
        self.commands.append(tuple(argv))
        if argv[0] == "sdiag":
            return subprocess.CompletedProcess(argv, 0, json.dumps({"statistics": {
                "dbd_agent_queue_size": self.dbd_queue}}), "")
        if argv[0] == "sacctmgr":
            return subprocess.CompletedProcess(argv, 0, self.runaway_output, "")
        return subprocess.CompletedProcess(argv, 0, "", "")

    def nodes(self) -> list[NodeState]:
        return list(self.state.values())

    def jobs(self) -> list[Job]:
        return self.job_list

    def jobs_by_id(self, ids: Sequence[int]) -> list[Job]:
        return [j for j in [*self.job_list, *self.ended.values()] if j.id in ids]

    def _set(self, name: str, state: str, *flags: str, reason: str | None = None) -> None:
        old = self.state[name]
        self.state[name] = replace(old, state=state, flags=frozenset(("CLOUD", *flags)),
                                   reason=old.reason if reason is None else reason)

    def power_down(self, nodes: Sequence[str], reason: str) -> None:
        self.calls.append(("power_down", (tuple(nodes), reason)))
        for n in nodes:
            self._set(n, "idle", "POWERING_DOWN", reason=reason)

    def power_up(self, nodes: Sequence[str]) -> None:
        self.calls.append(("power_up", (tuple(nodes),)))
        for n in nodes:
            self._set(n, "idle", "POWERING_UP", "NOT_RESPONDING")

    def mark_down(self, nodes: Sequence[str], reason: str) -> None:
        self.calls.append(("mark_down", (tuple(nodes), reason)))
        for n in nodes:  # slurmctld ends the node's jobs
            self._set(n, "down", *(self.state[n].flags - {"CLOUD"}), reason=reason)
            self.job_list = [j for j in self.job_list if n not in j.node_names()]

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        self.calls.append(("drain", (tuple(nodes), reason)))
        for n in nodes:
            self.state[n] = replace(self.state[n], flags=self.state[n].flags | {"DRAIN"}, reason=reason)

    def set_address(self, node: str, address: str, hostname: str | None = None) -> None:
        self.calls.append(("set_address", (node, address)))
        self.state[node] = replace(self.state[node], address=address)

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        for name, address in addresses.items():
            self.set_address(name, address)

    def requeue(self, jobs: Sequence[int]) -> None:
        self.calls.append(("requeue", (tuple(jobs),)))

    def signal(self, jobs: Sequence[int], signal: str = "USR1") -> None:
        self.calls.append(("signal", (tuple(jobs), signal)))

    def called(self, name: str) -> list[tuple[object, ...]]:
        return [args for n, args in self.calls if n == name]


class FakeCloud(Machines):
    """Instances in a dict; the same token returns the same instances (like ClientToken)."""

    def __init__(self, clock: Clock, failing: dict[str, str] | None = None) -> None:
        self.clock, self.failing = clock, failing or {}
        self.instances: dict[str, Instance] = {}
        self.requests: list[LaunchRequest] = []
        self.by_token: dict[str, LaunchResult] = {}
        self.crash_after_launch = False
        self.notices: list[Interruption] = []
        self.acked: list[Interruption] = []
        self.terminated: list[str] = []

    def start(self, request: LaunchRequest) -> LaunchResult:
        self.requests.append(request)
        if request.token in self.by_token:
            return self.by_token[request.token]
        link = request.capacity_pool
        if link in self.failing:
            result = LaunchResult({}, dict.fromkeys(request.nodes, self.failing[link]))
        else:
            launched = {}
            for n in request.nodes:
                iid = f"i-{len(self.instances) + 1:04d}"
                launched[n] = self.instances[iid] = instance(iid, n, InstanceState.RUNNING, address=None,
                                                             launched=self.clock(), pool=request.pool, link=link)
            result = LaunchResult(launched, {})
        self.by_token[request.token] = result
        if self.crash_after_launch:
            raise ConnectionError("the daemon never heard back")
        return result

    def list_instances(self) -> list[Instance]:
        return list(self.instances.values())

    def terminate(self, instances: Sequence[Instance]) -> None:
        for i in instances:
            self.terminated.append(i.id)
            self.instances[i.id] = replace(self.instances[i.id], state=InstanceState.TERMINATED)

    def interruptions(self) -> list[Interruption]:
        found, self.notices = self.notices, []
        return found

    def acknowledge(self, interruptions: Sequence[Interruption]) -> None:
        self.acked += interruptions

    def live(self, node_name: str) -> list[Instance]:
        return [i for i in self.instances.values() if i.node == node_name and i.state is InstanceState.RUNNING]


def make(env: dict[str, Path], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock) -> Daemon:
    config = DaemonConfig(spec_path=env["spec"], spool=env["spool"], heartbeat=env["beat"], interval=0.01)
    return Daemon(config, slurm, cloud, Store(env["db"]), load_spec, clock)


def resume(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, nodes: str, resume_file: str) -> None:
    fd = env["spool"].parent / "resume-file"
    fd.write_text(resume_file)
    monkeypatch.setenv("SLURM_RESUME_FILE", str(fd))
    handoff.record(handoff.HandoffKind.RESUME, [nodes], env["spool"])


def all_nodes(**states: tuple[str, ...]) -> list[NodeState]:
    names = [f"t-spot-0{i}" for i in range(1, 5)] + [f"t-od-0{i}" for i in range(1, 5)] + [
        f"t-cpu-0{i}" for i in range(1, 4)]
    return [node(n, states.get(n.replace("-", "_"), POWERED_DOWN)) for n in names]


def test_resume_handoff_launches_tags_and_publishes(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_spot_01=POWERING_UP, t_spot_02=POWERING_UP, t_od_01=("idle", "CLOUD")),
                      [Job(7, "CONFIGURING", "t-spot-[01-02]", "alice")])
    cloud = FakeCloud(clock)
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    resume(env, monkeypatch, "t-spot-[01-02]", '{"jobs":[{"job_id":7,"nodes":"t-spot-[01-02]"}]}')
    daemon = make(env, slurm, cloud, clock)
    report = daemon.loop_once()
    assert report.error == "" and report.launched == 2 and report.passes == 0
    (request,) = cloud.requests
    assert (request.pool, request.link, request.nodes, request.jobs) == ("spot", "spot", (S1, S2), (7,))
    assert request.node_jobs == {S1: 7, S2: 7} and request.job_users == {7: "alice"}
    assert not handoff.has_pending(env["spool"])
    assert daemon.store.bindings()[S1].link == "spot"
    assert env["beat"].read_text().strip() == f"{NOW:.3f}"
    spot = next(p for p in daemon.snapshot.pools if p.name == "spot")  # type: ignore[union-attr]
    assert spot.nodes == {"powering_up": 2, "powered_down": 2} and spot.launches == 2
    # the next loop does not launch again (the instances are listed now, addresses not yet)
    clock.advance(10)
    daemon.loop_once()
    assert len(cloud.requests) == 1 and slurm.called("set_address") == []
    # EC2 fills in the private addresses: Slurm learns them in one call
    for n, iid in ((S1, daemon.store.bindings()[S1].instance), (S2, daemon.store.bindings()[S2].instance)):
        cloud.instances[iid] = replace(cloud.instances[iid], address=f"10.0.16.{n[-1]}")
    clock.advance(10)
    daemon.loop_once()
    assert sorted(slurm.called("set_address")) == [(S1, "10.0.16.1"), (S2, "10.0.16.2")]


def test_capacity_failure_falls_back_within_the_same_loop(env: dict[str, Path]) -> None:
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_spot_01=POWERING_UP, t_od_01=("idle", "CLOUD")))
    cloud = FakeCloud(clock, failing={"spot": "InsufficientInstanceCapacity"})
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    daemon = make(env, slurm, cloud, clock)
    report = daemon.loop_once()
    assert [(r.link, r.nodes) for r in cloud.requests] == [("spot", (S1,)), ("od", (S1,))]
    assert report.passes == 1 and cloud.live(S1)
    cooldown = daemon.store.cooldowns()["spot"]
    assert cooldown.until == NOW + 60 and cooldown.last_error == "InsufficientInstanceCapacity"
    spot = next(p for p in daemon.snapshot.pools if p.name == "spot")  # type: ignore[union-attr]
    assert [c.link for c in spot.cooling] == ["spot"] and spot.failures == 1
    assert slurm.called("power_down") == []


def test_a_fallback_launch_keeps_its_jobs_tags(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The first launch closes the hand-off request; the fallback in the same loop still
    knows the node's job, its user and its account (for the instance's tags)."""
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_spot_01=POWERING_UP, t_od_01=("idle", "CLOUD")),
                      [Job(9, "CONFIGURING", S1, "alice", account="vision")])
    cloud = FakeCloud(clock, failing={"spot": "InsufficientInstanceCapacity"})
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    resume(env, monkeypatch, S1, f'{{"jobs":[{{"job_id":9,"nodes":"{S1}"}}]}}')
    daemon = make(env, slurm, cloud, clock)
    daemon.loop_once()
    first, fallback = cloud.requests
    assert (first.link, fallback.link) == ("spot", "od")
    for request in (first, fallback):
        assert (request.node_jobs, request.job_users, request.job_accounts) == ({S1: 9}, {9: "alice"}, {9: "vision"})
    launch = next(e for e in daemon.store.events() if e.kind == "launch")
    assert launch.detail == f"{S1} for job 9"


def test_no_capacity_anywhere_powers_down_and_requeues_at_once(env: dict[str, Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(time.time())  # the spool file carries the real time
    slurm = FakeSlurm(all_nodes(t_spot_01=POWERING_UP, t_od_01=("idle", "CLOUD")))
    cloud = FakeCloud(clock, failing={"spot": "InsufficientInstanceCapacity", "od": "InsufficientCapacity"})
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    resume(env, monkeypatch, S1, '{"jobs":[{"job_id":9,"nodes":"t-spot-01"}]}')
    daemon = make(env, slurm, cloud, clock)
    daemon.loop_once()
    assert [r.link for r in cloud.requests] == ["spot", "od"]
    assert slurm.called("power_down") == [((S1,), "slurmforge: no capacity on spot, od")]
    assert slurm.called("requeue") == [((9,),)]
    assert slurm.state[S1].is_powering_down()
    # cooling links are not retried in a tight loop
    slurm._set(S1, "idle", "POWERING_UP", "NOT_RESPONDING")
    clock.advance(10)
    daemon.loop_once()
    assert len(cloud.requests) == 2


def test_a_used_up_quota_blocks_every_link_drawing_on_it_until_a_launch_works(
        env: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    """spot (g5 spot) falls back to od (g5 on-demand in one zone), then odb (the same in
    another zone, for its capacity): both draw on one on-demand quota, so once od finds it
    used up odb is not tried; the node's reason says which links lack capacity and which
    quota stops the others. A launch on od that works later lifts the block of both."""
    odb = "  - {name: odb, kind: gpu, instance_types: [g5.12xlarge], max_nodes: 2, zones: [us-east-1b], weight: 10}\n"
    env["spec"].write_text(SPEC.replace("fallback: [od]", "fallback: [od, odb]").replace(
        "  - {name: cpu,", odb + "  - {name: cpu,", 1).replace("pools: [spot, od]}", "pools: [spot, od, odb]}"))
    caplog.set_level("INFO")
    clock = Clock()
    slurm = FakeSlurm([*all_nodes(t_spot_01=POWERING_UP, t_od_01=("idle", "CLOUD")),
                       *(node(f"t-odb-0{i}", POWERED_DOWN) for i in (1, 2))])
    cloud = FakeCloud(clock, failing={"spot": "InsufficientInstanceCapacity", "od": "VcpuLimitExceeded"})
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    daemon = make(env, slurm, cloud, clock)
    daemon.loop_once()
    assert [r.link for r in cloud.requests] == ["spot", "od"]
    quota = "Running On-Demand G and VT instances (L-DB2E81BA)"
    assert slurm.called("power_down") == [((S1,), f"slurmforge: no capacity on spot; EC2 quota reached: {quota} "
                                                  "on od, odb")]
    cooldowns = daemon.store.cooldowns()
    assert cooldowns["od"].until == cooldowns["odb"].until == NOW + 900
    assert [str(q) for q in cooldowns["odb"].quotas] == [quota]
    (said,) = [r.getMessage() for r in caplog.records if "L-DB2E81BA" in r.getMessage()]
    assert said.startswith(f"EC2 quota {quota} stops launches on links od, odb (VcpuLimitExceeded): raise it")

    del cloud.failing["od"]  # the quota is raised
    clock.advance(900)
    slurm._set(S1, "idle", "POWERING_UP", "NOT_RESPONDING")
    daemon.loop_once()
    assert [r.link for r in cloud.requests][2:] == ["spot", "od"] and cloud.live(S1)
    assert set(daemon.store.cooldowns()) == {"spot"}  # odb draws on the quota that had room again
    assert f"EC2 quota {quota} no longer stops launches on links od, odb" in [r.getMessage() for r in caplog.records]


def test_crash_mid_launch_never_double_launches(env: dict[str, Path]) -> None:
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_spot_01=POWERING_UP, t_spot_02=POWERING_UP, t_od_01=("idle", "CLOUD")))
    cloud = FakeCloud(clock)
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    cloud.crash_after_launch = True  # instances exist, the daemon never learns of them
    first = make(env, slurm, cloud, clock)
    first.loop_once()
    first.store.close()
    cloud.crash_after_launch = False
    clock.advance(15)
    second = make(env, slurm, cloud, clock)  # the restarted service
    second.loop_once()
    tokens = [r.token for r in cloud.requests]
    assert len(tokens) == 2 and tokens[0] == tokens[1]
    assert len(cloud.live(S1)) == 1 and len(cloud.live(S2)) == 1
    assert second.store.pending_launches() == [] and set(second.store.bindings()) == {S1, S2}
    assert cloud.terminated == []


def test_orphan_terminated_once_its_verdict_held_for_three_loops(env: dict[str, Path]) -> None:
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_od_01=("idle", "CLOUD")))
    cloud = FakeCloud(clock)
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    cloud.instances["i-lost"] = instance("i-lost", None, tags={TAG_POOL: "spot"})
    daemon = make(env, slurm, cloud, clock)
    for _ in range(2):
        daemon.loop_once()
        assert cloud.terminated == [] and daemon.snapshot.unconfirmed == 1  # type: ignore[union-attr]
        clock.advance(10)
    daemon.loop_once()
    assert cloud.terminated == ["i-lost"]


def test_a_node_not_responding_is_replaced_once_its_grace_and_its_confirmation_passed(env: dict[str, Path]) -> None:
    """The mark that starts the grace stays while the guard confirms the verdict: cleared
    at once (it was), the grace began again every loop and the node was never replaced."""
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_spot_01=("idle", "CLOUD", "NOT_RESPONDING"), t_od_01=("idle", "CLOUD")))
    cloud = FakeCloud(clock)
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    cloud.instances["i-s1"] = instance("i-s1", S1, pool="spot")
    daemon = make(env, slurm, cloud, clock)
    for _ in range(20):  # 180 s of grace, then the verdict over 3 loops and 20 s
        daemon.loop_once()
        clock.advance(10)
    assert cloud.terminated == [] and daemon.snapshot.unconfirmed == 2  # type: ignore[union-attr]
    daemon.loop_once()
    assert cloud.terminated == ["i-s1"]
    assert slurm.called("power_down") == [((S1,), "slurmforge: slurmd on t-spot-01 not responding")]


def spot_notice(env: dict[str, Path], *jobs: int) -> tuple[Clock, FakeSlurm, FakeCloud, Daemon]:
    """A spot node running `jobs`, its machine's interruption notice in the queue."""
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_spot_01=("allocated", "CLOUD"), t_od_01=("idle", "CLOUD")),
                      [Job(j, "RUNNING", S1, "bob") for j in jobs])
    cloud = FakeCloud(clock)
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    cloud.instances["i-s1"] = instance("i-s1", S1, pool="spot")
    cloud.notices = [Interruption("i-s1", NOW, receipt="r-1")]
    return clock, slurm, cloud, make(env, slurm, cloud, clock)


def test_spot_notice_drains_signals_then_requeues(env: dict[str, Path]) -> None:
    clock, slurm, cloud, daemon = spot_notice(env, 21)
    daemon.loop_once()
    assert slurm.called("drain") == [((S1,), "slurmforge: spot interruption notice")]
    assert slurm.called("signal") == [((21,), "USR1")] and [n.receipt for n in cloud.acked] == ["r-1"]
    assert daemon.store.cooldowns()["spot"].last_error == "spot interruption"
    clock.advance(30)
    daemon.loop_once()
    assert slurm.called("requeue") == []
    clock.advance(61)
    daemon.loop_once()
    assert slurm.called("requeue") == [((21,),)]
    assert slurm.called("power_down") == [((S1,), "slurmforge: spot instance interrupted")]
    assert "i-s1" in cloud.terminated


def test_a_notice_queue_that_fails_holds_back_nothing_else(env: dict[str, Path],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Acknowledging is refused (a permission the stack lacked: the AWS rehearsal found
    sqs:DeleteMessageBatch so): the notice is still acted on, the loop goes on, the error is
    said once, and the notice acknowledged once the queue lets it."""
    _, slurm, cloud, daemon = spot_notice(env, 21)
    queue, refused = list(cloud.notices), ["AccessDenied: sqs:DeleteMessageBatch"]

    def acknowledge(notices: Sequence[Interruption]) -> None:
        if refused:
            raise RuntimeError(refused[0])
        cloud.acked += notices
        queue.clear()

    cloud.interruptions = lambda: list(queue)  # type: ignore[method-assign]  # a queue keeps what is not deleted
    cloud.acknowledge = acknowledge  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="slurmforge.service.daemon"):
        first, second = daemon.loop_once(), daemon.loop_once()
    assert first.error == second.error == ""
    assert slurm.called("drain") == [((S1,), "slurmforge: spot interruption notice")]
    assert slurm.called("signal") == [((21,), "USR1")]
    assert [r.message for r in caplog.records] == ["spot notices: RuntimeError: AccessDenied: sqs:DeleteMessageBatch"]
    refused.clear()
    daemon.loop_once()
    assert [n.receipt for n in cloud.acked] == ["r-1"] and len(daemon.store.interruptions(include_done=True)) == 1


def test_a_job_the_notices_signal_ended_is_requeued(env: dict[str, Path]) -> None:
    """The batch script did not trap USR1 and ended on it (FAILED, signal 10): the service
    requeues it at the next loop, as Slurm would have at the machine's loss, and forgets it."""
    clock, slurm, _, daemon = spot_notice(env, 21, 22)
    daemon.loop_once()
    assert slurm.called("signal") == [((21, 22), "USR1")] and set(daemon.store.signalled()) == {21, 22}
    slurm.job_list = [Job(22, "RUNNING", S1, "bob")]  # 21 ended on the signal; 22 traps it and goes on
    slurm.ended = {21: Job(21, "FAILED", S1, "bob", exit_signal="USR1")}
    clock.advance(5)
    daemon.loop_once()
    assert slurm.called("requeue") == [((21,),)] and set(daemon.store.signalled()) == {22}
    slurm.job_list, slurm.ended[22] = [], Job(22, "COMPLETED", S1, "bob")  # checkpointed, exited 0
    clock.advance(5)
    daemon.loop_once()
    assert slurm.called("requeue") == [((21,),)] and daemon.store.signalled() == {}


def test_static_node_kept_at_count(env: dict[str, Path]) -> None:
    clock = Clock()
    slurm = FakeSlurm(all_nodes())
    cloud = FakeCloud(clock)
    daemon = make(env, slurm, cloud, clock)
    daemon.loop_once()
    assert slurm.called("power_up") == [((OD1,),)]
    clock.advance(10)
    daemon.loop_once()
    assert [r.nodes for r in cloud.requests] == [(OD1,)]


def test_bad_spec_keeps_the_last_good_one(env: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_od_01=("idle", "CLOUD")))
    cloud = FakeCloud(clock)
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    daemon = make(env, slurm, cloud, clock)
    daemon.loop_once()
    env["spec"].write_text("pools: [this is not a spec")
    slurm._set(S2, "idle", "POWERING_UP", "NOT_RESPONDING")
    report = daemon.loop_once()
    assert report.error == "" and [r.nodes for r in cloud.requests] == [(S2,)]
    assert "keeping the last good spec" in caplog.text


def test_loop_survives_a_failing_slurm(env: dict[str, Path]) -> None:
    clock = Clock()
    slurm = FakeSlurm([])
    slurm.nodes = lambda: (_ for _ in ()).throw(OSError("slurmctld down"))  # type: ignore[method-assign]
    daemon = make(env, slurm, FakeCloud(clock), clock)
    report = daemon.loop_once()
    assert report.error == "" and env["beat"].exists()
    (hold,) = daemon.snapshot.holds  # type: ignore[union-attr]
    assert hold.reason.value == "slurm-view" and "slurmctld down" in hold.detail


def test_service_entry_point_runs_one_loop(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """`slurmforge-service --once`: builds its clients, runs a loop through real
    subprocesses (stand-in sinfo/squeue), writes the heartbeat and its state."""
    from slurmforge.service import main as service_main

    bin_dir = env["spool"].parent / "bin"
    bin_dir.mkdir()
    nodes = json.dumps({"meta": {}, "errors": [], "warnings": [], "nodes": [
        {"name": n.name, "state": [n.state.upper(), *sorted(n.flags)]} for n in all_nodes()]})
    for name, body in (("scontrol", f'case "$1" in --version) echo slurm 24.11.5;; *) echo \'{nodes}\';; esac'),
                       ("squeue", 'echo \'{"meta": {}, "errors": [], "warnings": [], "jobs": []}\'')):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    clock = Clock()
    monkeypatch.setattr(service_main, "build_provider", lambda spec, options: FakeCloud(clock))
    state_dir = env["spool"].parent / "state"
    code = service_main.main(["--spec", str(env["spec"]), "--state-dir", str(state_dir), "--spool",
                              str(env["spool"]), "--slurm-bin", str(bin_dir), "--listen", "", "--once"])
    assert code == 0 and (state_dir / "heartbeat").exists() and (state_dir / "state.db").exists()
    counters = {name for name, _, _ in Store(state_dir / "state.db").counters()}
    assert "slurmforge_service_untrusted_loops_total" not in counters  # it trusted what Slurm answered


def test_unknown_target_has_no_service_provider() -> None:
    from slurmforge.errors import ProvisionError
    from slurmforge.provider import build_provider

    lab = load_spec(Path(__file__).parents[2] / "examples" / "lab.yaml")
    with pytest.raises(ProvisionError, match="static"):
        build_provider(lab, {})


def test_each_loop_publishes_usage_and_the_scrape_targets(env: dict[str, Path]) -> None:
    """One loop: the jobs are read (usage gauges in the snapshot) and the file_sd of the
    nodes Slurm has powered is written (an AWS spec: dynamic nodes, and the static t-od-01,
    which no inventory lists there); it follows Slurm's state loop by loop."""
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_spot_01=("allocated", "CLOUD"), t_od_01=("idle", "CLOUD")),
                      [Job(7, "RUNNING", "t-spot-01", "alice", partition="gpu", account="vision",
                           tres="cpu=4,mem=1G,node=1,gres/gpu=2"),
                       Job(8, "PENDING", "", "bob", partition="gpu", reason="Resources", eligible_at=NOW - 300)])
    targets = env["spool"].parent / "targets" / "nodes.json"
    config = DaemonConfig(spec_path=env["spec"], spool=env["spool"], heartbeat=env["beat"], interval=0.01,
                          targets_file=targets)
    daemon = Daemon(config, slurm, FakeCloud(clock), Store(env["db"]), load_spec, clock)
    assert daemon.loop_once().error == ""
    gauges = {(n, tuple(sorted(lab.items()))): v for n, lab, v in daemon.snapshot.gauges}  # type: ignore[union-attr]
    assert gauges[("slurmforge_account_gpus", (("account", "vision"), ("pool", "spot")))] == 2
    assert gauges[("slurmforge_partition_oldest_pending_seconds", (("partition", "gpu"),))] == 300
    assert [g["labels"]["instance"] for g in json.loads(targets.read_text())] == ["t-od-01", "t-spot-01"]
    slurm._set("t-spot-01", "idle", "POWERED_DOWN")
    clock.advance(10)
    daemon.loop_once()
    assert [g["labels"]["instance"] for g in json.loads(targets.read_text())] == ["t-od-01"]


def test_a_takeover_during_a_power_up_replaces_the_booting_machine(env: dict[str, Path],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """slurmctld restarted (or a backup took over) while a machine booted: its slurmd may
    have registered with the slurmctld before - which may have started the job there too -
    and the new one never asks a powering-up node to register. The hand-off of
    SlurmctldPrimaryOnProg makes the service release that machine and launch a new one."""
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_spot_01=POWERING_UP), [Job(7, "CONFIGURING", S1, "alice")])
    cloud = FakeCloud(clock)
    monkeypatch.setattr(handoff.time, "time", clock)  # hand-offs are dated by the service's clock
    resume(env, monkeypatch, S1, '{"jobs":[{"job_id":7,"nodes":"t-spot-01"}]}')
    daemon = make(env, slurm, cloud, clock)
    daemon.loop_once()
    (first,) = cloud.live(S1)
    clock.advance(6)
    monkeypatch.delenv(handoff.RECONFIGURE_ENV, raising=False)
    monkeypatch.setenv(handoff.SPOOL_ENV, str(env["spool"]))
    assert handoff.control_main() == 0
    daemon.loop_once()  # released and launched anew in the same loop
    (second,) = cloud.live(S1)
    assert cloud.terminated == [first.id] and second.id != first.id
    clock.advance(10)
    daemon.loop_once()  # the new machine started after the takeover: kept
    assert cloud.live(S1) == [second] and cloud.terminated == [first.id]
    # the new slurmctld of a reconfigure runs the program too: it saved its state and pushes
    # the config to every slurmd, so it records nothing
    monkeypatch.setenv(handoff.RECONFIGURE_ENV, "1")
    assert handoff.control_main() == 0 and not handoff.has_pending(env["spool"])


def test_a_machine_left_from_before_a_power_down_is_never_the_power_ups(env: dict[str, Path],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The service was stopped while Slurm powered a node down and up again: its machine from
    before still runs, and slurmctld ignores that slurmd (its boot is older than the power-up
    request). The machine is released at once and a new one launched."""
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_spot_01=POWERING_UP), [Job(8, "CONFIGURING", S1, "alice")])
    cloud = FakeCloud(clock)
    cloud.instances["i-old"] = instance("i-old", S1, launched=NOW - 900, pool="spot", link="spot")
    daemon = make(env, slurm, cloud, clock)
    daemon.store.bind(Binding(S1, "i-old", "spot", NOW - 900, "sf-old"))
    monkeypatch.setattr(handoff.time, "time", clock)
    handoff.record(handoff.HandoffKind.SUSPEND, [S1], env["spool"])
    resume(env, monkeypatch, S1, '{"jobs":[{"job_id":8,"nodes":"t-spot-01"}]}')
    daemon.loop_once()  # released and launched anew in the same loop
    (new,) = cloud.live(S1)
    assert cloud.terminated == ["i-old"] and new.id != "i-old" and daemon.store.bindings()[S1].instance == new.id


def test_a_released_machine_is_not_waited_for_when_slurm_powers_the_node_up_again(
        env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """slurmctld killed -9 right after a power-up: it comes back with the node powered down
    (its last saved state) and powers it up again for the same job seconds later. The machine
    released meanwhile is not the node's any more: the new power-up launches at once, not
    after the listing grace that covers a launch the cloud does not list yet."""
    clock = Clock()
    slurm = FakeSlurm(all_nodes(t_spot_01=POWERED_DOWN), [Job(9, "PENDING", "", "alice")])
    cloud = FakeCloud(clock)
    cloud.instances["i-0001"] = instance("i-0001", S1, launched=NOW - 4, pool="spot", link="spot")
    daemon = make(env, slurm, cloud, clock)
    daemon.store.bind(Binding(S1, "i-0001", "spot", NOW - 4, "sf-first"))
    daemon.loop_once()
    assert cloud.terminated == ["i-0001"] and S1 not in daemon.store.bindings()
    clock.advance(4)
    slurm.state[S1] = node(S1, POWERING_UP)
    monkeypatch.setattr(handoff.time, "time", clock)
    resume(env, monkeypatch, S1, '{"jobs":[{"job_id":9,"nodes":"t-spot-01"}]}')
    daemon.loop_once()
    (new,) = cloud.live(S1)
    assert new.id != "i-0001"
