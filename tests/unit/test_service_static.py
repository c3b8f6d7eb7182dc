"""Static nodes kept alive by the service, loop by loop on the local example's spec
(dev-cpu-01/02 and dev-gpu-01 static, no CLOUD state): a fake slurmctld that does what
24.11 does with ReturnToService=2, fake pool containers, real SQLite and a fake clock.

What must hold (slurmforge.service.classify, "Static nodes are kept alive"): a dead
machine's node is set DOWN (its jobs requeued) and gets a new machine; a machine that runs
but does not answer is stopped first and replaced only once the provider says it is gone;
nothing happens while Slurm's view is lost or another service leads; the admin's
maintenance is left alone."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from test_service_daemon import FakeSlurm
from test_service_world import NOW, Clock, node

from slurmforge.errors import SlurmCommandError
from slurmforge.provider import Instance, InstanceState, LaunchRequest, LaunchResult, Machines
from slurmforge.service.daemon import Daemon, DaemonConfig
from slurmforge.service.leader import Leadership
from slurmforge.service.respond import STALE_RPC_WINDOW
from slurmforge.service.state import Store
from slurmforge.service.web import metrics_text
from slurmforge.slurm.client import Job, NodeState
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).parents[2] / "examples" / "local.yaml"
CPU1, CPU2, GPU1 = "dev-cpu-01", "dev-cpu-02", "dev-gpu-01"
STATIC = {CPU1: "cpu", CPU2: "cpu", GPU1: "gpu"}
DYNAMIC = ("dev-cpu-03", "dev-cpu-04", "dev-cpu-fallback-01", "dev-cpu-spot-01", "dev-cpu-spot-02")
LOOP = 10.0


class Slurmctld(FakeSlurm):
    """slurmctld as the keep-alive path meets it: `state=down` keeps the node's flags and
    ends its jobs (batch jobs requeued, --no-requeue ones NODE_FAIL); a slurmd that
    registers returns a DOWN node to service (ReturnToService=2) and leaves DRAIN on;
    `state=resume` clears both; `scontrol requeue` refuses a job that is not running."""

    def __init__(self, clock: Clock, jobs: Sequence[Job] = (), no_requeue: Sequence[int] = ()) -> None:
        started = NOW - 3600
        nodes = [node(n, ("idle",), address=f"10.89.7.{20 + i}", slurmd_started_at=started)
                 for i, n in enumerate(STATIC)]
        nodes += [node(n, ("idle", "CLOUD", "POWERED_DOWN")) for n in DYNAMIC]
        super().__init__(nodes, jobs)
        self.clock, self.no_requeue = clock, set(no_requeue)
        self.answering = True

    def nodes(self) -> list[NodeState]:
        if not self.answering:
            raise SlurmCommandError(["scontrol", "show", "nodes", "--json"], 1,
                                    "slurm_load_node error: Unable to contact slurm controller")
        return super().nodes()

    def set_node(self, name: str, state: str, add: Sequence[str] = (), drop: Sequence[str] = (),
                 reason: str | None = None) -> None:
        old = self.state[name]
        changed = reason is not None and reason != old.reason
        self.state[name] = replace(old, state=state, flags=(old.flags | set(add)) - set(drop),
                                   reason=old.reason if reason is None else reason,
                                   reason_changed_at=self.clock() if changed else old.reason_changed_at)

    def on(self, name: str) -> list[Job]:
        return [j for j in self.job_list if name in j.node_names() and j.is_running()]

    def mark_down(self, nodes: Sequence[str], reason: str) -> None:
        self.calls.append(("mark_down", (tuple(nodes), reason)))
        for n in nodes:
            self.set_node(n, "down", reason=reason)
            for job in self.on(n):
                self.job_list.remove(job)
                if job.id not in self.no_requeue:  # requeued; the others end NODE_FAIL
                    self.job_list.append(replace(job, state="PENDING", nodes=""))

    def requeue(self, jobs: Sequence[int]) -> None:
        self.calls.append(("requeue", (tuple(jobs),)))
        for job_id in jobs:
            job = next(j for j in self.job_list if j.id == job_id)
            if not job.is_running() or job_id in self.no_requeue:
                raise SlurmCommandError(["scontrol", "requeue", str(job_id)], 1, "Job is pending execution")
            self.job_list[self.job_list.index(job)] = replace(job, state="PENDING", nodes="")

    def exclude_nodes(self, job: int, nodes: Sequence[str]) -> None:
        """Slurm changes a job's ExcNodeList only while it is pending (_update_job, job_mgr.c)."""
        self.calls.append(("exclude_nodes", (job, tuple(nodes))))
        found = next(j for j in self.job_list if j.id == job)
        if not found.is_pending():
            raise SlurmCommandError(["scontrol", "update", f"jobid={job}"], 1, "Job is no longer pending execution")
        self.job_list[self.job_list.index(found)] = replace(found, excluded=",".join(nodes))

    def begin_after(self, job: int, seconds: float) -> None:
        self.calls.append(("begin_after", (job, seconds)))

    def start(self, job_id: int, name: str) -> None:
        """The scheduler starts a pending job on a node its ExcNodeList allows."""
        job = next(j for j in self.job_list if j.id == job_id)
        assert job.is_pending() and name not in job.excluded.split(","), job
        self.job_list[self.job_list.index(job)] = replace(job, state="RUNNING", nodes=name)

    def resume(self, nodes: Sequence[str]) -> None:
        self.calls.append(("resume", (tuple(nodes),)))
        for n in nodes:
            self.set_node(n, "idle", drop=("DRAIN",), reason="")

    def register(self, name: str) -> None:
        """The node's (new) slurmd starts and registers."""
        old = self.state[name]
        self.state[name] = replace(old, slurmd_started_at=self.clock())
        self.set_node(name, "idle" if old.is_down() else old.state, drop=("NOT_RESPONDING",))

    def stops_answering(self, name: str) -> None:
        self.set_node(name, self.state[name].state, add=("NOT_RESPONDING",))


@dataclass
class Containers(Machines):
    """The local pool containers: a machine's id is its node's name; `start` makes the
    node's machine run again, `terminate` stops it (slowly, when told to)."""

    clock: Clock
    machines: dict[str, Instance] = field(default_factory=dict)
    requests: list[LaunchRequest] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    slow_stop: bool = False
    crash_after_start: bool = False

    def __post_init__(self) -> None:
        for i, (name, pool) in enumerate(STATIC.items()):
            self.machines[name] = Instance(name, name, pool, InstanceState.RUNNING, f"10.89.7.{20 + i}")

    def list_instances(self) -> list[Instance]:
        return list(self.machines.values())

    def start(self, request: LaunchRequest) -> LaunchResult:
        self.requests.append(request)
        launched = {}
        for name in request.nodes:
            launched[name] = self.machines[name] = replace(self.machines[name], state=InstanceState.RUNNING)
        if self.crash_after_start:
            raise ConnectionError("the podman API went away mid-call")
        return LaunchResult(launched, {})

    def terminate(self, instances: Sequence[Instance]) -> None:
        for inst in instances:
            self.terminated.append(inst.id)
            self.set(inst.id, InstanceState.STOPPING if self.slow_stop else InstanceState.STOPPED)

    def set(self, name: str, state: InstanceState) -> None:
        self.machines[name] = replace(self.machines[name], state=state)

    def started(self) -> list[str]:
        return [n for r in self.requests for n in r.nodes]


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    return Path(shutil.copy(EXAMPLE, tmp_path / "cluster.yaml"))


def daemon(tmp_path: Path, spec_file: Path, slurm: Slurmctld, machines: Containers, clock: Clock,
           leadership: Leadership | None = None) -> Daemon:
    spool = tmp_path / "spool"
    spool.mkdir(exist_ok=True)
    config = DaemonConfig(spec_path=spec_file, spool=spool, heartbeat=tmp_path / "beat", interval=0.01,
                          spend_in_background=False)
    return Daemon(config, slurm, machines, Store(tmp_path / "state.db"), load_spec, clock, leadership)


def loops(d: Daemon, clock: Clock, count: int) -> None:
    for _ in range(count):
        clock.advance(LOOP)
        assert d.loop_once().error == ""


def test_a_dead_machine_is_replaced_and_its_jobs_requeued(tmp_path: Path, spec_file: Path) -> None:
    """The issue's case: dev-cpu-01's container killed under a job. The node is set DOWN
    once the verdict held (slurmctld requeues the batch job), what squeue still shows on it
    is requeued, a new machine is started the loop after, and when its slurmd registers the
    node is back with an event that gives the times and a count in /metrics."""
    clock = Clock()
    slurm = Slurmctld(clock, [Job(7, "RUNNING", CPU1, "alice"), Job(8, "RUNNING", CPU2, "bob")])
    machines = Containers(clock)
    d = daemon(tmp_path, spec_file, slurm, machines, clock)
    loops(d, clock, 2)
    assert slurm.calls == [] and machines.requests == []
    machines.set(CPU1, InstanceState.STOPPED)  # podman kill dev-cpu-01
    killed = clock.now
    loops(d, clock, 2)
    assert slurm.called("mark_down") == [] and d.snapshot.unconfirmed == 1  # type: ignore[union-attr]
    loops(d, clock, 1)  # the third loop over 20 s: confirmed
    assert slurm.called("mark_down") == [((CPU1,), f"slurmforge: instance {CPU1} of {CPU1} is stopped")]
    assert machines.requests == []  # the node is the service's to replace from the next loop on
    assert [j.state for j in slurm.job_list if j.id == 7] == ["PENDING"]  # requeued by the DOWN
    slurm.job_list.append(Job(9, "RUNNING", CPU1, "carol"))  # one slurmctld still shows on the node
    loops(d, clock, 1)
    (request,) = machines.requests
    assert (request.pool, request.link, request.nodes) == ("cpu", "cpu", (CPU1,)) and request.token.startswith("sf-")
    assert slurm.called("requeue") == [((9,),)] and slurm.on(CPU1) == []
    assert [j.state for j in slurm.job_list if j.id == 8] == ["RUNNING"]  # dev-cpu-02 untouched
    loops(d, clock, 1)
    assert len(machines.requests) == 1  # booting: not launched again
    slurm.register(CPU1)
    slurm.job_list.append(Job(10, "PENDING", "", "dave"))  # submitted as the machine died
    loops(d, clock, 1)
    # ReturnToService=2 ended DOWN and nothing else holds the node: in service at once, for
    # every job but those that ran on the dead machine (STALE_RPC_WINDOW)
    assert slurm.state[CPU1].state == "idle" and "DRAIN" not in slurm.state[CPU1].flags
    assert slurm.called("resume") == [] and slurm.called("drain") == []
    slurm.start(10, CPU1)
    down_at = slurm.state[CPU1].reason_changed_at
    assert slurm.called("exclude_nodes") == [(7, (CPU1,)), (9, (CPU1,))]
    assert {j.id: j.excluded for j in slurm.job_list if j.id in (7, 9)} == {7: CPU1, 9: CPU1}
    (event,) = [e for e in d.store.events() if e.kind == "replaced"]
    assert event.pool == "cpu" and event.detail.startswith(f"{CPU1} in service again on {CPU1}: trouble seen ")
    assert "new machine launched +30.0 s, its slurmd started +40.0 s, seen in service +50.0 s" in event.detail
    assert clock.now - killed == 60  # killed -> in service, at this loop's pace
    while len(slurm.called("exclude_nodes")) < 4:  # let back once the window is over
        assert clock.now - down_at < STALE_RPC_WINDOW + LOOP
        loops(d, clock, 1)
    assert clock.now - down_at >= STALE_RPC_WINDOW
    assert slurm.called("exclude_nodes")[2:] == [(7, ()), (9, ())] and d.store.kept_away() == []
    slurm.start(7, CPU1)
    metrics = metrics_text(d.snapshot)  # type: ignore[arg-type]
    assert 'slurmforge_replaced_nodes_total{pool="cpu"} 1' in metrics
    assert 'slurmforge_replacement_seconds_total{pool="cpu"} 50' in metrics
    # the join share, as for every machine the service launches: launch -> its slurmd started
    (joined,) = [e for e in d.store.events() if e.kind == "joined"]
    assert (joined.pool, joined.detail) == ("cpu", f"{CPU1} joined: machine started -> slurmd started 10.0 s")
    assert 'slurmforge_joined_nodes_total{pool="cpu"} 1' in metrics
    assert 'slurmforge_join_seconds_total{pool="cpu"} 10' in metrics
    assert "joining" not in d.store.marks().get(CPU1, {})
    loops(d, clock, 3)
    assert len(machines.requests) == 1 and len([e for e in d.store.events() if e.kind == "replaced"]) == 1


def test_a_running_machine_that_does_not_answer_is_stopped_before_it_is_replaced(tmp_path: Path,
                                                                                  spec_file: Path) -> None:
    """slurmd on dev-cpu-02 stops answering while its container runs (a hung machine, a
    network cut): it might still run its job. The service waits out the grace, terminates
    the machine, and neither sets the node DOWN (requeueing the job) nor launches while the
    provider still lists the machine stopping; only once it is stopped."""
    clock = Clock()
    slurm = Slurmctld(clock, [Job(8, "RUNNING", CPU2, "bob")])
    machines = Containers(clock, slow_stop=True)
    d = daemon(tmp_path, spec_file, slurm, machines, clock)
    slurm.stops_answering(CPU2)
    loops(d, clock, 18)  # the 180 s grace
    assert machines.terminated == []
    loops(d, clock, 3)  # a repair: confirmed over 3 loops
    assert machines.terminated == [CPU2] and slurm.called("mark_down") == []
    loops(d, clock, 6)  # the provider says "stopping" for a minute
    assert slurm.called("mark_down") == [] and machines.requests == [] and slurm.called("requeue") == []
    assert [j.state for j in slurm.job_list] == ["RUNNING"]
    machines.set(CPU2, InstanceState.STOPPED)
    loops(d, clock, 3)
    assert slurm.called("mark_down") == [((CPU2,), f"slurmforge: instance {CPU2} of {CPU2} is stopped")]
    assert [j.state for j in slurm.job_list] == ["PENDING"] and machines.requests == []
    loops(d, clock, 1)
    assert machines.started() == [CPU2] and machines.terminated == [CPU2, CPU2]  # the stopped one, for good
    slurm.register(CPU2)
    loops(d, clock, 8)  # held drained until slurmctld's retries of the dead machine's kills are over
    (event,) = [e for e in d.store.events() if e.kind == "replaced"]
    assert event.detail.startswith(f"{CPU2} in service again")


def test_nothing_is_replaced_while_slurms_view_is_lost(tmp_path: Path, spec_file: Path) -> None:
    clock = Clock()
    slurm = Slurmctld(clock, [Job(7, "RUNNING", CPU1, "alice")])
    machines = Containers(clock)
    d = daemon(tmp_path, spec_file, slurm, machines, clock)
    machines.set(CPU1, InstanceState.STOPPED)
    slurm.answering = False
    loops(d, clock, 12)
    assert slurm.calls == [] and machines.requests == [] and machines.terminated == []
    assert [h.reason.value for h in d.snapshot.holds] == ["slurm-view"]  # type: ignore[union-attr]
    slurm.answering = True  # the verdict starts over: three trusted loops again
    loops(d, clock, 2)
    assert slurm.calls == []
    loops(d, clock, 1)
    assert [name for name, _ in slurm.calls] == ["mark_down", "exclude_nodes"]  # DOWN, its job kept off it


def test_a_standby_service_replaces_nothing(tmp_path: Path, spec_file: Path) -> None:
    """With two controllers only the service beside the slurmctld in control acts."""
    clock = Clock()
    slurm = Slurmctld(clock, [Job(7, "RUNNING", CPU1, "alice")])
    machines = Containers(clock)
    lead = Leadership("dev-controller-backup", ["dev-controller", "dev-controller-backup"], tmp_path,
                      lambda: {"dev-controller": True, "dev-controller-backup": True})
    d = daemon(tmp_path, spec_file, slurm, machines, clock, lead)
    machines.set(CPU1, InstanceState.STOPPED)
    loops(d, clock, 10)
    assert slurm.calls == [] and machines.requests == [] and d.last.standby  # type: ignore[union-attr]


def test_the_admins_maintenance_is_left_alone(tmp_path: Path, spec_file: Path) -> None:
    """DRAIN or DOWN with the admin's reason: the machine is neither replaced nor the node
    touched, until the admin resumes the node; then it is the service's again."""
    clock = Clock()
    slurm = Slurmctld(clock)
    machines = Containers(clock)
    d = daemon(tmp_path, spec_file, slurm, machines, clock)
    slurm.set_node(CPU1, "idle", add=("DRAIN",), reason="kernel update")
    slurm.set_node(GPU1, "down", reason="rack 4 maintenance")
    machines.set(CPU1, InstanceState.STOPPED)
    machines.set(GPU1, InstanceState.STOPPED)
    slurm.stops_answering(GPU1)
    loops(d, clock, 30)
    assert slurm.calls == [] and machines.requests == [] and machines.terminated == []
    slurm.resume([CPU1])  # the admin is done; the machine is still gone
    slurm.calls.clear()
    loops(d, clock, 4)
    assert slurm.called("mark_down") == [((CPU1,), f"slurmforge: instance {CPU1} of {CPU1} is stopped")]
    assert machines.started() == [CPU1]


def test_the_admins_draining_node_whose_machine_died_is_marked_down_and_stays_the_admins(
        tmp_path: Path, spec_file: Path) -> None:
    """Jobs are told the truth even on a node in maintenance; the admin's reason stays
    first, so the node is not replaced."""
    clock = Clock()
    slurm = Slurmctld(clock, [Job(7, "RUNNING", CPU1, "alice")])
    machines = Containers(clock)
    d = daemon(tmp_path, spec_file, slurm, machines, clock)
    slurm.set_node(CPU1, "allocated", add=("DRAIN",), reason="kernel update")
    machines.set(CPU1, InstanceState.STOPPED)
    loops(d, clock, 10)
    assert slurm.called("mark_down") == [((CPU1,), f"kernel update; slurmforge: instance {CPU1} of {CPU1} is stopped")]
    assert [j.state for j in slurm.job_list] == ["PENDING"] and machines.requests == []


def test_a_health_drained_node_gets_a_new_machine_and_its_drain_is_lifted(tmp_path: Path, spec_file: Path) -> None:
    """The health check drains dev-gpu-01 (a GPU fell off the bus): its machine still
    answers, so it is terminated first; the DRAIN outlives the DOWN and the new slurmd's
    registration, so the service resumes the node once that slurmd started and the dead
    machine's stale kills are over."""
    clock = Clock()
    slurm = Slurmctld(clock)
    machines = Containers(clock)
    d = daemon(tmp_path, spec_file, slurm, machines, clock)
    slurm.set_node(GPU1, "idle", add=("DRAIN",), reason="health: gpu 1 xid 79")
    loops(d, clock, 3)
    assert machines.terminated == [GPU1]
    loops(d, clock, 3)
    assert slurm.called("mark_down") == [((GPU1,), f"slurmforge: instance {GPU1} of {GPU1} is stopped")]
    loops(d, clock, 1)
    assert machines.started() == [GPU1]
    slurm.register(GPU1)
    assert slurm.state[GPU1].flags == {"DRAIN"} and slurm.state[GPU1].state == "idle"
    loops(d, clock, 1)  # the health check's DRAIN outlived the DOWN: lifted at once
    assert slurm.called("resume") == [((GPU1,),)]
    loops(d, clock, 1)
    assert [e.pool for e in d.store.events() if e.kind == "replaced"] == ["gpu"]


def test_a_replacement_launch_the_service_crashed_in_is_retried_with_its_token(tmp_path: Path,
                                                                                spec_file: Path) -> None:
    clock = Clock()
    slurm = Slurmctld(clock)
    machines = Containers(clock, crash_after_start=True)
    d = daemon(tmp_path, spec_file, slurm, machines, clock)
    machines.set(CPU1, InstanceState.STOPPED)
    loops(d, clock, 4)
    assert machines.started() == [CPU1]
    d.store.close()
    machines.crash_after_start = False
    d = daemon(tmp_path, spec_file, slurm, machines, clock)  # the restarted service
    loops(d, clock, 3)
    first, again = machines.requests
    assert again.token == first.token and d.store.pending_launches() == []


def test_jobs_kept_away_survive_a_restart_and_are_let_back_once_pending(tmp_path: Path, spec_file: Path) -> None:
    """A service that recorded the jobs of a dead machine and died before excluding them
    excludes them when it runs again; a job that excluded the node itself, or is not
    pending, is left as it is; once the window is over the node leaves the ExcNodeList the
    service added it to - the user's own entries stay - when the job is pending (Slurm
    refuses the change for a running job), so a job that started elsewhere keeps its record
    until it is pending again."""
    clock = Clock()
    slurm = Slurmctld(clock, [Job(7, "PENDING", "", "alice", excluded=GPU1),
                              Job(8, "PENDING", "", "bob", excluded=CPU1), Job(9, "RUNNING", CPU2, "carol")])
    d = daemon(tmp_path, spec_file, slurm, Containers(clock), clock)
    d.store.keep_away((7, 8, 9), CPU1, clock.now + 30)
    loops(d, clock, 1)
    assert slurm.called("exclude_nodes") == [(7, (GPU1, CPU1))]
    assert {r.job: r.stage for r in d.store.kept_away()} == {7: "added", 8: "nothing", 9: "nothing"}
    loops(d, clock, 1)
    assert len(slurm.called("exclude_nodes")) == 1  # excluded once
    slurm.start(7, CPU2)
    loops(d, clock, 2)  # the window is over: 7 runs, its record stays
    assert [r.job for r in d.store.kept_away()] == [7] and len(slurm.called("exclude_nodes")) == 1
    slurm.requeue([7])
    loops(d, clock, 1)
    assert slurm.called("exclude_nodes")[1:] == [(7, (GPU1,))] and d.store.kept_away() == []
    assert [j.excluded for j in slurm.job_list if j.id == 7] == [GPU1]


def test_a_job_that_must_run_on_the_node_waits_out_the_window_instead(tmp_path: Path, spec_file: Path) -> None:
    """-w dev-cpu-01: excluding the node would contradict the job's own node list, so its
    begin time is set to the window's end (Slurm lifts that itself: nothing to undo)."""
    clock = Clock()
    slurm = Slurmctld(clock, [Job(7, "PENDING", "", "alice", required=f"{CPU1},{CPU2}")])
    d = daemon(tmp_path, spec_file, slurm, Containers(clock), clock)
    d.store.keep_away((7,), CPU1, clock.now + LOOP + 30)
    loops(d, clock, 1)
    assert slurm.called("begin_after") == [(7, 30.0)] and slurm.called("exclude_nodes") == []
    loops(d, clock, 4)
    assert slurm.called("exclude_nodes") == [] and d.store.kept_away() == []


def test_a_node_the_rollout_rebuilds_gets_a_new_machine_at_once(tmp_path: Path, spec_file: Path) -> None:
    """`slurmforge upgrade` (or a rollout) drains dev-cpu-01, waits for its jobs, and sets it
    DOWN with the rebuild reason (slurmforge.drain.replace; AWS: its new machine comes from the
    launch template `pulumi up` moved to the new AMI). Its old machine still runs and answers:
    the service terminates it as soon as the verdict holds and launches a new one - it does
    not wait ResumeTimeout (600 s) for the old machine to become the replacement, which
    `finish` gives 300 s (the AWS rehearsal's upgrade met that wait)."""
    from slurmforge.drain import REPLACE_REASON

    clock = Clock()
    slurm = Slurmctld(clock)
    machines = Containers(clock)
    d = daemon(tmp_path, spec_file, slurm, machines, clock)
    loops(d, clock, 2)
    slurm.set_node(CPU1, "down", add=("DRAIN",), reason=REPLACE_REASON)
    asked = clock.now
    loops(d, clock, 3)  # the guard's 3 loops over 20 s
    assert machines.terminated == [CPU1] and machines.started() == []
    loops(d, clock, 2)  # gone (the fake stops it at once): a new machine, the stopped one terminated for good
    assert machines.started() == [CPU1] and clock.now - asked < 120
    slurm.register(CPU1)
    loops(d, clock, 2)
    assert slurm.called("resume") == [((CPU1,),)] and "DRAIN" not in slurm.state[CPU1].flags
