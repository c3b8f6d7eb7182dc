"""Faults injected into a running local cluster with jobs in flight, and what they did
(a controller outage or a dead machine never takes the cluster down):

- a controller outage: slurmctld stopped for a while under a running 2-node job and a
  pending one; which of the cluster's machines stopped meanwhile, what the scheduler
  service logged, whether it said it was holding back, how the jobs ended in sacct;
- a dead node machine: its container killed under a running 2-node `--requeue` job; how
  long the job stays RUNNING;
- a dead primary controller: its container killed under a running job array;
  how long until the backup takes submissions, how long until the primary is back in
  control once its container starts again, where the scheduler service led, and whether
  every job (the array's tasks and one submitted to the backup) is COMPLETED in sacct.

Each restores what it changed (slurmctld started, jobs cancelled, the container started and
back in service) even when it fails half-way. Used by tests/integration/test_never_down.py
and bench/never_down_bench.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from slurmforge.contract import SERVICE_UNIT
from slurmforge.errors import ProvisionError, SlurmforgeError
from slurmforge.hostlists import compress, expand
from slurmforge.hosts import Host, HostRole
from slurmforge.local.podman import Podman
from slurmforge.spec import Cluster
from tests.harness.live import IN_SERVICE, LiveCluster, wait_until

T = TypeVar("T")

TERMINATION = re.compile(r"\bterminat(?:e|ing)\b")
"""A service log line that terminates machines (the executor's "terminate i-... (node)" and
"terminating N instance(s) failed"; not a hold's "at most N terminated a loop")."""
POLL_SECONDS = 5.0
JOB_GRACE = 20
"""The running job outlives the outage by this much: it ends with slurmctld back."""
FAULT_JOB = "slurmforge-fault"
"""The name of every job a fault submits. A fault cancels those a run killed half-way left
behind before it starts: Slurm keeps them across restarts and `up`, and they would hold the
nodes it needs (seen: a dead-node job's 600 s sleep left by an interrupted bench)."""


def _submit(live: LiveCluster, args: str) -> str:
    return live.submit(f"-J {FAULT_JOB} {args}")


def clear_leftovers(live: LiveCluster) -> None:
    live.root(f"scancel -n {FAULT_JOB} 2>/dev/null || true")
    wait_until(lambda: not live.root(f"squeue -h -n {FAULT_JOB} -o %i 2>/dev/null || true").strip(), 60,
               "no job of an earlier fault left")


def in_service_first(live: LiveCluster, nodes: str, limit: float = 180) -> None:
    """A fault starts from nodes in service: one an earlier fault left drained (a storage
    outage's health drain, lifted at the node's next check) or being replaced is waited for."""
    names = expand(nodes)
    wait_until(lambda: all(live.slurm_state(n) in IN_SERVICE for n in names), limit, f"{nodes} in service",
               every=2)


@dataclass(frozen=True)
class JobNodes:
    """Where the 2-node jobs run: a partition and two of its static nodes (a hostlist)."""

    partition: str
    nodes: str
    victim: str
    """The node whose machine the dead-node fault kills (one of `nodes`)."""

    @classmethod
    def of(cls, spec: Cluster, hosts: Sequence[Host], partition: str | None = None) -> JobNodes:
        """The partition (default: the spec's default one) and its first two static nodes;
        the second is the victim."""
        names = [p.name for p in spec.partitions]
        if partition is not None and partition not in names:
            raise ProvisionError(f"no partition {partition} in {spec.name} (known: {', '.join(names)})")
        chosen = next((p for p in spec.partitions if p.name == partition or (partition is None and p.default)),
                      spec.partitions[0])
        static = sorted(h.name for h in hosts
                        if h.role is HostRole.COMPUTE and not h.dynamic and h.pool in chosen.pools)
        if len(static) < 2:
            raise ProvisionError(f"partition {chosen.name} has {len(static)} static node(s); the jobs need 2")
        return cls(chosen.name, compress(static[:2]), victim=static[1])


@dataclass(frozen=True)
class Outage:
    seconds: float
    stopped: tuple[str, ...]
    """The cluster's containers that ran before the outage and stopped or vanished during it."""
    terminations: tuple[str, ...]
    """The service's log lines, during the outage, that terminate machines."""
    holding: bool
    """The service said on /metrics, at least once, that it held back (slurm-view)."""
    log: str
    """The service's log during the outage."""
    jobs: dict[str, str]
    """The running and the pending job -> their state in sacct afterwards."""

    @property
    def machines_terminated(self) -> int:
        return max(len(self.stopped), len(self.terminations))

    @property
    def jobs_completed(self) -> int:
        return sum(1 for state in self.jobs.values() if state == "COMPLETED")


def kill_machines(podman: Podman, names: Sequence[str]) -> None:
    """What a host restart or a machine restore leaves of these containers: each one's conmon
    killed first (killed after the container's process it may record the exit, and podman would
    know the container stopped), then its process, until the kernel has reaped them. podman
    still lists them running."""
    pids: list[int] = []
    for name in names:
        found = podman.run(["inspect", name, "--format", "{{.State.ConmonPid}} {{.State.Pid}}"]).split()
        pids += [int(pid) for pid in found if pid.isdigit() and int(pid) > 0]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)


@dataclass(frozen=True)
class DeadNode:
    job: str
    seconds: float | None
    """From the kill to the job leaving RUNNING; None when it did not within the limit."""
    after: str
    """The job's state then (`LiveCluster.queue_state`: squeue's, or sacct's once it left the
    queue - NODE_FAIL: not requeued; PENDING: requeued)."""
    back: float | None = None
    """From the kill to the node in service again on a machine the scheduler service started
    (nobody else starts it); None when it was not within the limit."""
    requeued: bool = False
    """The job was seen back in the queue (PENDING) before it was cancelled."""
    completed: float | None = None
    """With `finish`: from the kill to the requeued job COMPLETED in sacct (it ran again on
    the replacement); None when it did not within the limit, or not asked."""
    joined: float | None = None
    """From the kill to the replacement's slurmd registered (the node no longer DOWN: it
    takes jobs at once; only the jobs of the dead machine are kept off it for
    STALE_RPC_WINDOW after its DOWN)."""
    first_job: float | None = None
    """With `probe`: from the kill to a job that fits only the victim (submitted right after
    the kill, `-w victim`) running there; None when it did not within the limit."""


def controller_outage(live: LiveCluster, seconds: float, where: JobNodes) -> Outage:
    """Every slurmctld stopped for `seconds` under a running 2-node job and a pending job (eligible
    halfway through the outage); then both are awaited to COMPLETED in sacct."""
    clear_leftovers(live)
    # a node Slurm is powering down now would stop during the outage for a reason of its own
    wait_until(lambda: not live.nodes_in_transition(), 180, "no node powering up or down", every=2)
    running = _submit(live, f"-N 2 -p {where.partition} -w {where.nodes} -o nd-%j.out "
                          f"--wrap 'sleep {int(seconds) + JOB_GRACE}'")
    jobs = [running]
    try:
        wait_until(lambda: live.squeue_state(running) == "RUNNING", 60, f"job {running} running")
        jobs.append(_submit(live, f"-p {where.partition} -o nd-%j.out --begin=now+{max(int(seconds) // 2, 1)} "
                                "--wrap hostname"))
        if (state := live.squeue_state(jobs[1])) != "PENDING":
            raise ProvisionError(f"job {jobs[1]} should wait for its begin time, but is {state or 'gone'}")
        return _outage(live, seconds, jobs)
    finally:
        live.root(f"scancel {' '.join(jobs)} 2>/dev/null || true")


def _outage(live: LiveCluster, seconds: float, jobs: list[str]) -> Outage:
    before = live.running_containers()
    since = live.root("date '+%Y-%m-%d %H:%M:%S'").strip()
    stopped: set[str] = set()
    holding = False
    # every slurmctld: with a backup controller, stopping the primary alone is a failover
    # (controller_failover), not an outage; the backup first, so it never takes over
    for host in (*live.backups, live.controller):
        live.on(host, "systemctl stop slurmctld")
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            time.sleep(min(POLL_SECONDS, max(seconds - (time.monotonic() - started), 0)))
            stopped |= before - live.running_containers()
            holding = holding or live.is_holding()
        log = live.root(f"journalctl -u {SERVICE_UNIT} --no-pager -q --since '{since}'")
    finally:
        for host in (live.controller, *live.backups):
            live.on(host, "systemctl start slurmctld")
    took = time.monotonic() - started
    wait_until(live.controller_up, 60, "slurmctld back")
    with contextlib.suppress(ProvisionError):  # the states say which did not
        wait_until(lambda: set(live.sacct_states(*jobs).values()) == {"COMPLETED"}, seconds + 120,
                   "both jobs COMPLETED", every=2)
    return Outage(took, tuple(sorted(stopped)), tuple(line for line in log.splitlines() if TERMINATION.search(line)),
                  holding, log, live.sacct_states(*jobs))


FINISH_JOB_SECONDS = 30
"""With `finish`, the job's length: it is killed seconds after it starts, and runs again whole."""
FINISH_LIMIT = 600.0
"""Slurm holds a requeued batch job back for the credential lifetime plus 1 s (121 s by
default) before it may run again; then the job's own length."""


def dead_node(live: LiveCluster, where: JobNodes, limit: float = 180, back_limit: float = 180,
              finish: bool = False, probe: bool = False) -> DeadNode:
    """The victim's container killed under a running 2-node `--requeue` job: timed until the
    job leaves RUNNING (requeued), and until the node is in service again on a machine the
    scheduler service started by itself (a static node is kept alive). Then the job is
    cancelled or (`finish`) awaited COMPLETED in sacct, run again on the replacement; a
    victim the service did not bring back within `back_limit` is started, so the cluster is
    left as it was found. `probe`: a 1-node job for the victim alone is submitted right after
    the kill and timed until it runs on the replacement (`first_job`)."""
    clear_leftovers(live)
    in_service_first(live, where.nodes)
    probe_job: str | None = None
    first_job: float | None = None
    length = FINISH_JOB_SECONDS if finish else 600
    job = _submit(live, f"-N 2 -p {where.partition} -w {where.nodes} -o nd-%j.out --requeue --wrap 'sleep {length}'")
    back: float | None = None
    joined: float | None = None
    completed: float | None = None
    states: set[str] = set()
    try:
        wait_until(lambda: live.queue_state(job) == "RUNNING", 60, f"job {job} running")
        live.podman.run(["kill", where.victim])
        killed = time.monotonic()
        if probe:
            probe_job = _submit(live, f"-N 1 -p {where.partition} -w {where.victim} -o nd-%j.out --wrap 'sleep 20'")
        try:
            wait_until(lambda: live.queue_state(job) != "RUNNING", limit, f"job {job} leaving RUNNING", every=1)
            seconds: float | None = time.monotonic() - killed
        except ProvisionError:
            seconds = None
        after = live.queue_state(job)
        states.add(after)

        def in_service() -> bool:
            nonlocal joined
            states.add(live.queue_state(job))  # COMPLETING on the surviving node first, then PENDING
            if where.victim not in live.running_containers():
                return False
            state = live.slurm_state(where.victim)
            if joined is None and (state in IN_SERVICE or state == "drained"):
                joined = time.monotonic() - killed
            return state in IN_SERVICE

        with contextlib.suppress(ProvisionError):
            wait_until(in_service, max(back_limit - (time.monotonic() - killed), 1), f"{where.victim} replaced",
                       every=1)
            back = time.monotonic() - killed
        if probe_job is not None:
            with contextlib.suppress(ProvisionError):
                wait_until(lambda: live.squeue_state(probe_job) not in ("PENDING", ""), max(limit - (
                    time.monotonic() - killed), 1), f"job {probe_job} running on {where.victim}", every=1)
                first_job = time.monotonic() - killed
        if "PENDING" not in states:  # Slurm requeues once the job's other node finished its part
            with contextlib.suppress(ProvisionError):
                wait_until(lambda: live.queue_state(job) == "PENDING", max(min(60.0, limit), 1), f"job {job} requeued",
                           every=1)
                states.add("PENDING")
        if finish and back is not None and "PENDING" in states:
            with contextlib.suppress(ProvisionError):
                wait_until(lambda: live.sacct_states(job).get(job) == "COMPLETED",
                           max(FINISH_LIMIT - (time.monotonic() - killed), 1), f"job {job} COMPLETED", every=2)
                completed = time.monotonic() - killed
    finally:
        live.root(f"scancel {' '.join(filter(None, (job, probe_job)))} 2>/dev/null || true")
        if back is None:
            live.podman.run(["start", where.victim], check=False)
    wait_until(lambda: live.slurm_state(where.victim) in IN_SERVICE, 180, f"{where.victim} back in service", every=2)
    return DeadNode(job, seconds, after, back, requeued="PENDING" in states, completed=completed, joined=joined,
                    first_job=first_job)


@dataclass(frozen=True)
class Failover:
    """One failover cycle: `takeover` (s) from the primary's container killed to the backup
    accepting a submission, `handback` (s) from the primary's container started to its
    slurmctld in control again, every job of the cycle (array tasks, the job submitted to
    the backup) -> its sacct state, and where the scheduler service took the lead
    (`led`: the backup while the primary was gone, the primary again afterwards)."""

    takeover: float
    handback: float
    jobs: dict[str, str]
    led: tuple[bool, bool]

    @property
    def lost(self) -> int:
        return sum(1 for state in self.jobs.values() if state != "COMPLETED")


@dataclass(frozen=True)
class PowerUpFailover:
    """A node powering up for a job when the primary controller died: what its state was
    at the kill, the job's sacct state and node list afterwards, the seconds from the kill
    to the job's end, and the backup's service log lines about the node."""

    node: str
    at_kill: str
    state: str
    ran_on: str
    seconds: float
    backup_lines: tuple[str, ...]
    job: str = ""


def failover_mid_power_up(live: LiveCluster, backup: str, partition: str, node: str,
                          limit: float = 240) -> PowerUpFailover:
    """A job for the powered-down `node`; the primary's container SIGKILLed the moment
    slurmctld has the node powering up (its hand-off written, the launch in flight or just
    done); the backup's slurmctld and service must bring the node up and run the job. The
    primary is started again and back in control afterwards, whatever happens."""
    wait_until(lambda: not live.nodes_in_transition(), 180, "no node powering up or down", every=2)
    clear_leftovers(live)
    live.power_down(node)  # the jobs of a test before may have left it up (idle until its timeout)
    since = live.on(backup, "date '+%Y-%m-%d %H:%M:%S'").strip()
    job = _submit(live, f"-p {partition} -w {node} -o pu-%j.out --wrap hostname")
    try:
        def powering_up() -> str:
            state = live.slurm_state(node)
            return state if state.endswith("#") else ""

        at_kill = wait_until(powering_up, 60, f"{node} powering up", every=0.2)
        live.podman.run(["kill", "-s", "KILL", live.controller])
        killed = time.monotonic()
        wait_until(lambda: not live.on(live.login, f"squeue -h -j {job} -o %i || true").strip(), limit,
                   f"job {job} done while the backup is in control", every=1)
        seconds = time.monotonic() - killed
        log = live.on(backup, f"journalctl -u {SERVICE_UNIT} --no-pager -q --since '{since}'")
    finally:
        live.podman.run(["start", live.controller], check=False)
        with contextlib.suppress(ProvisionError):
            wait_until(lambda: _primary_in_control(live, backup), 120, "the primary back in control", every=0.5)
    with contextlib.suppress(ProvisionError):  # the state says which did not
        wait_until(lambda: _states(live, [job]).get(job) == "COMPLETED", 120, f"job {job} COMPLETED in sacct",
                   every=2)
    ran_on = live.on(live.login, f"sacct -n -X -P -j {job} -o NodeList || true").strip()
    return PowerUpFailover(node, at_kill, _states(live, [job]).get(job, ""), ran_on, seconds,
                           tuple(line for line in log.splitlines() if node in line), job)


def target(cluster: str | None, partition: str | None) -> tuple[Cluster, JobNodes, LiveCluster]:
    """The local cluster named `cluster` (default: the only one), where its 2-node jobs run
    and its live view, for a bench run as root on the host. SlurmforgeError otherwise."""
    from slurmforge.local.host import require_root
    from slurmforge.local.manage import find_cluster

    require_root()
    spec, hosts = find_cluster(cluster)
    return spec, JobNodes.of(spec, hosts, partition), LiveCluster.of(spec, hosts)


def repeat(runs: int, once: Callable[[], T], row: Callable[[T], str]) -> list[T | str]:
    """`once` run `runs` times, a row printed for each (the run's number, then `row` of its
    result, or why it failed); every result, or the failure's message."""
    results: list[T | str] = []
    for run in range(1, runs + 1):
        try:
            result = once()
        except SlurmforgeError as exc:
            print(f"{run:>5} failed: {exc}", flush=True)
            results.append(str(exc))
            continue
        results.append(result)
        print(f"{run:>5} {row(result)}", flush=True)
    return results


def ping(live: LiveCluster, node: str) -> dict[str, bool]:
    """`scontrol ping --json` from `node`: every controller -> whether it answers."""
    import json

    out = live.on(node, "scontrol ping --json || true")
    return {p["hostname"]: bool(p["responding"]) for p in json.loads(out)["pings"]}


def controller_failover(live: LiveCluster, backup: str, where: JobNodes, tasks: int = 4,
                        task_seconds: int = 20, limit: float = 120) -> Failover:
    """The primary controller's container killed (SIGKILL) under a running job array, a job
    submitted while the backup is in control, the primary's container started again; then
    every job is awaited in sacct. The primary's container runs again, in control, afterwards,
    whatever happens."""
    clear_leftovers(live)
    in_service_first(live, where.nodes)
    array = _submit(live, f"-p {where.partition} -w {where.nodes} --array=1-{tasks} -o fo-%A_%a.out "
                        f"--wrap 'sleep {task_seconds}'")
    jobs = [array]
    try:
        wait_until(lambda: "RUNNING" in live.root(f"squeue -h -j {array} -o %T"), 60, f"array {array} running")
        # slurmctld saves job state a few seconds after a change; a SIGKILL before that loses
        # what it had not written (Slurm's own limit): kill once the running tasks are on disk
        state = live.root("scontrol show config | sed -n 's/^StateSaveLocation *= *//p'").strip() + "/job_state"
        running_at = float(live.root("date +%s.%N"))
        wait_until(lambda: float(live.root(f"stat -c %.9Y {state}")) > running_at, 30, "the array's state saved")
        since = live.on(backup, "date '+%Y-%m-%d %H:%M:%S'").strip()
        live.podman.run(["kill", "-s", "KILL", live.controller])
        killed = time.monotonic()
        submitted = wait_until(lambda: _try_submit(live, f"-p {where.partition} -o fo-%j.out --wrap hostname"),
                               limit, "the backup to take a submission", every=0.5)
        takeover = time.monotonic() - killed
        jobs.append(submitted)
        wait_until(lambda: not live.on(live.login, f"squeue -h -j {','.join(jobs)} -o %i || true").strip(),
                   task_seconds + limit, "every job done while the backup is in control", every=1)
        backup_log = live.on(backup, f"journalctl -u {SERVICE_UNIT} --no-pager -q --since '{since}'")
    except BaseException:
        # whatever failed, the cluster is left as found: the primary running and in control,
        # and no job of this cycle left to hold the nodes the next cycle's array needs
        live.podman.run(["start", live.controller], check=False)
        with contextlib.suppress(ProvisionError):
            wait_until(lambda: _primary_in_control(live, backup), limit, "the primary back in control", every=0.5)
        with contextlib.suppress(ProvisionError):  # whichever controller answers
            live.root(f"scancel {' '.join(jobs)}")
        raise
    live.podman.run(["start", live.controller], check=False)
    started = time.monotonic()
    wait_until(lambda: _primary_in_control(live, backup), limit, "the primary back in control", every=0.5)
    handback = time.monotonic() - started
    with contextlib.suppress(ProvisionError):  # the states say which did not
        wait_until(lambda: _all_completed(live, jobs, tasks), limit, "every job COMPLETED in sacct", every=2)
    primary_leads = wait_until(lambda: "taking the lead" in live.root(
        f"journalctl -u {SERVICE_UNIT} --no-pager -q -b"), 60, "the primary's service leading", every=1)
    return Failover(takeover, handback, _states(live, jobs), ("taking the lead" in backup_log, bool(primary_leads)))


def _try_submit(live: LiveCluster, args: str) -> str:
    """A job id, or "" while no controller takes submissions."""
    try:
        return _submit(live, args)
    except ProvisionError:
        return ""


def _primary_in_control(live: LiveCluster, backup: str) -> bool:
    try:
        answers = ping(live, backup)
    except (ProvisionError, ValueError, KeyError):
        return False
    return bool(answers.get(live.controller)) and "is UP" in live.root("scontrol ping || true")


def _states(live: LiveCluster, jobs: Sequence[str]) -> dict[str, str]:
    """Every job and array task -> its sacct state."""
    out = live.on(live.login, f"sacct -n -X -P -j {','.join(jobs)} -o JobID,State || true")
    return dict(line.strip().split("|", 1) for line in out.splitlines() if "|" in line)


def _all_completed(live: LiveCluster, jobs: Sequence[str], tasks: int) -> bool:
    states = _states(live, jobs)
    return len(states) >= tasks + len(jobs) - 1 and set(states.values()) == {"COMPLETED"}
