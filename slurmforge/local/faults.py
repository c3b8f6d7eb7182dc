"""Faults injected into a running local cluster with jobs in flight, and what they did
(issue 16: a controller outage or a dead machine never takes the cluster down):

- a controller outage: slurmctld stopped for a while under a running 2-node job and a
  pending one; which of the cluster's machines stopped meanwhile, what the scheduler
  service logged, whether it said it was holding back, how the jobs ended in sacct;
- a dead node machine: its container killed under a running 2-node `--requeue` job; how
  long the job stays RUNNING.

Each restores what it changed (slurmctld started, jobs cancelled, the container started and
back in service) even when it fails half-way. Used by tests/integration/test_never_down.py
and bench/never_down_bench.py.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from slurmforge.errors import ProvisionError
from slurmforge.hostlists import compress
from slurmforge.local.live import IN_SERVICE, LiveCluster, wait_until
from slurmforge.providers.base import Host, HostRole
from slurmforge.spec import Cluster

SERVICE_UNIT = "slurmforge-service"
TERMINATION = re.compile(r"\bterminat(?:e|ing)\b")
"""A service log line that terminates machines (the executor's "terminate i-... (node)" and
"terminating N instance(s) failed"; not a hold's "at most N terminated a loop")."""
POLL_SECONDS = 5.0
JOB_GRACE = 20
"""The running job outlives the outage by this much: it ends with slurmctld back."""


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


@dataclass(frozen=True)
class DeadNode:
    job: str
    seconds: float | None
    """From the kill to the job leaving RUNNING; None when it did not within the limit."""
    after: str
    """The job's squeue state then ("" once it left the queue)."""


def controller_outage(live: LiveCluster, seconds: float, where: JobNodes) -> Outage:
    """slurmctld stopped for `seconds` under a running 2-node job and a pending job (eligible
    halfway through the outage); then both are awaited to COMPLETED in sacct."""
    # a node Slurm is powering down now would stop during the outage for a reason of its own
    wait_until(lambda: not live.nodes_in_transition(), 180, "no node powering up or down", every=2)
    running = live.submit(f"-N 2 -p {where.partition} -w {where.nodes} -o nd-%j.out "
                          f"--wrap 'sleep {int(seconds) + JOB_GRACE}'")
    jobs = [running]
    try:
        wait_until(lambda: live.squeue_state(running) == "RUNNING", 60, f"job {running} running")
        jobs.append(live.submit(f"-p {where.partition} -o nd-%j.out --begin=now+{max(int(seconds) // 2, 1)} "
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
    live.root("systemctl stop slurmctld")
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            time.sleep(min(POLL_SECONDS, max(seconds - (time.monotonic() - started), 0)))
            stopped |= before - live.running_containers()
            holding = holding or live.is_holding()
        log = live.root(f"journalctl -u {SERVICE_UNIT} --no-pager -q --since '{since}'")
    finally:
        live.root("systemctl start slurmctld")
    took = time.monotonic() - started
    wait_until(live.controller_up, 60, "slurmctld back")
    with contextlib.suppress(ProvisionError):  # the states say which did not
        wait_until(lambda: set(live.sacct_states(*jobs).values()) == {"COMPLETED"}, seconds + 120,
                   "both jobs COMPLETED", every=2)
    return Outage(took, tuple(sorted(stopped)), tuple(line for line in log.splitlines() if TERMINATION.search(line)),
                  holding, log, live.sacct_states(*jobs))


def dead_node(live: LiveCluster, where: JobNodes, limit: float = 180) -> DeadNode:
    """The victim's container killed under a running 2-node `--requeue` job; then the job is
    cancelled, the container started and the node awaited back in service."""
    job = live.submit(f"-N 2 -p {where.partition} -w {where.nodes} -o nd-%j.out --requeue --wrap 'sleep 600'")
    try:
        wait_until(lambda: live.squeue_state(job) == "RUNNING", 60, f"job {job} running")
        live.podman.run(["kill", where.victim])
        killed = time.monotonic()
        try:
            wait_until(lambda: live.squeue_state(job) != "RUNNING", limit, f"job {job} leaving RUNNING", every=1)
            seconds: float | None = time.monotonic() - killed
        except ProvisionError:
            seconds = None
        after = live.squeue_state(job)
    finally:
        live.root(f"scancel {job} 2>/dev/null || true")
        live.podman.run(["start", where.victim], check=False)
    wait_until(lambda: live.slurm_state(where.victim) in IN_SERVICE, 180, f"{where.victim} back in service", every=2)
    return DeadNode(job, seconds, after)
