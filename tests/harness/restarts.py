"""A busy local cluster through a slurmctld restart: jobs that start or wait for a node across
a kill -9 of slurmctld, a controller failover or a rollout, and how late each one started.

The measure is the one a user feels: a job cannot start before it was submitted nor before
the machine of its node is up (the node's slurmd started), so it is *ready* at the later of
the two, and its *delay* is its start minus that. A job Slurm itself had to hold back (a
requeue's credential hold, a node busy with another job) shows as delayed too: the runs
keep their jobs short and their nodes free so that only the restart is measured.

- `NodeWatch` reads `scontrol show nodes --json` every second in a thread: every slurmd start
  time each node had, and every node that was ever marked failed (a bootstrap failure, a
  ResumeTimeout) - with the cluster right, none is.
- `Load` submits a job every few seconds in a thread, cycling through a list of sbatch
  arguments, and counts the refused submissions.
- `delays` turns sacct's records and the watch into one `JobDelay` per job.

Used by tests/integration/test_restarts.py and bench/restart_bench.py.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Self

from slurmforge.errors import ProvisionError
from slurmforge.slurm.client import NODES_COMMAND, parse_nodes
from tests.harness.faults import FAULT_JOB, clear_leftovers
from tests.harness.live import LiveCluster, wait_until

DELAY_SLACK = 5.0
"""Seconds a job may start after it was ready and still count as on time: Slurm's times are
whole seconds, and a powered-up node's job starts once PrologSlurmctld saw it registered."""
SAVED_AFTER = 8
"""Seconds after which slurmctld has written a submitted job to its state file (at most 5)."""
FAILED_REASONS = ("bootstrap failure", "ResumeTimeout", "not registered", "reboot timed out")
"""Reasons that call a node failed (the scheduler service's and slurmctld's)."""


@dataclass(frozen=True)
class JobDelay:
    job: str
    state: str
    nodes: str
    submitted: float
    started: float
    ready: float
    requeued: int = 0
    """How often Slurm requeued it (sacct -D: its REQUEUED records)."""

    @property
    def delay(self) -> float:
        return max(self.started - self.ready, 0.0) if self.started else float("inf")

    @property
    def late(self) -> bool:
        return self.delay > DELAY_SLACK


class Periodic:
    """A thread that calls `tick` every `every` s while the `with` block runs, then `last`."""

    every: float
    _stop: threading.Event
    _thread: threading.Thread

    def __enter__(self) -> Self:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=90)
        self.last()

    def _run(self) -> None:
        while True:
            started = time.monotonic()
            self.tick()
            if self._stop.wait(max(self.every - (time.monotonic() - started), 0.0)):
                return

    def tick(self) -> None:
        raise NotImplementedError

    def last(self) -> None:
        """After the thread ended."""


@dataclass
class NodeWatch(Periodic):
    """Every slurmd start time and every failed-node reason Slurm showed while it ran."""

    live: LiveCluster
    every: float = 1.0
    starts: dict[str, set[float]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def tick(self) -> None:
        """From the login node: its commands reach whichever slurmctld is in control (the
        primary's container is gone during a failover)."""
        try:
            nodes = parse_nodes(self.live.on(self.live.login, " ".join(NODES_COMMAND), timeout=20))
        except Exception:  # slurmctld restarting: the next look sees it
            return
        for node in nodes:
            if node.slurmd_started_at:
                self.starts.setdefault(node.name, set()).add(node.slurmd_started_at)
            if any(r in node.reason for r in FAILED_REASONS):
                self.failed.setdefault(node.name, node.reason)

    def last(self) -> None:
        self.tick()  # the last word

    def up_since(self, node: str, before: float) -> float:
        """When the machine that ran a job started at `before` had its slurmd start."""
        return max((t for t in self.starts.get(node, ()) if t <= before), default=0.0)


@dataclass
class Load(Periodic):
    """A job every `every` s from the login node, cycling through `jobs` (sbatch arguments)."""

    live: LiveCluster
    jobs: Sequence[str]
    every: float = 2.0
    submitted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    _next: Iterator[str] = field(init=False)

    def __post_init__(self) -> None:
        self._next = itertools.cycle(self.jobs)

    def tick(self) -> None:
        try:
            self.submitted.append(self.live.submit(f"-J {FAULT_JOB} {next(self._next)}"))
        except ProvisionError as exc:
            self.refused.append(str(exc).splitlines()[0][:200])


def delays(live: LiveCluster, jobs: Sequence[str], watch: NodeWatch) -> list[JobDelay]:
    """One record per job (array tasks apart), from sacct in epoch seconds. A slurmctld killed
    -9 may have started a job, lost that start and started it again: slurmdbd then holds a
    record of each start, the first one never ended; the last start is the job's."""
    out = live.on(live.login, f"SLURM_TIME_FORMAT=%s sacct -n -X -P -j {','.join(jobs)} "
                              "-o JobID,State,NodeList,Submit,Start || true")
    found: dict[str, JobDelay] = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5:
            continue
        job, state, nodes, submit, start = parts
        submitted, started = _epoch(submit), _epoch(start)
        names = live.root(f"scontrol show hostnames {nodes} || true").split() if nodes and nodes != "None" else []
        ready = max([submitted, *(watch.up_since(n, started) for n in names)]) if started else submitted
        record = JobDelay(job, state, nodes, submitted, started, ready)
        if job not in found or record.started >= found[job].started:
            found[job] = record
    history = live.on(live.login, f"sacct -n -X -D -P -j {','.join(jobs)} -o JobID,State || true")
    requeues = [line.split("|")[0] for line in history.splitlines() if line.strip().endswith("|REQUEUED")]
    return [replace(r, requeued=requeues.count(r.job)) for r in found.values()]


def wait_done(live: LiveCluster, jobs: Sequence[str], limit: float) -> None:
    """Every job out of the queue and in sacct with its end state."""
    if not jobs:
        return
    wait_until(lambda: not live.on(live.login, f"squeue -h -j {','.join(jobs)} -o %i || true").strip(), limit,
               f"jobs {','.join(jobs)} done", every=1)


@dataclass(frozen=True)
class RestartRun:
    """One sequence: every job's delay, the refused submissions, the nodes called failed."""

    sequence: str
    jobs: tuple[JobDelay, ...]
    refused: tuple[str, ...]
    failed: dict[str, str]
    seconds: float

    @property
    def late(self) -> list[JobDelay]:
        return [j for j in self.jobs if j.late]

    @property
    def lost(self) -> list[JobDelay]:
        return [j for j in self.jobs if j.state != "COMPLETED"]

    @property
    def worst(self) -> float:
        return max((j.delay for j in self.jobs), default=0.0)

    @property
    def requeued(self) -> list[JobDelay]:
        return [j for j in self.jobs if j.requeued]

    def row(self) -> str:
        return (f"{self.sequence}: {len(self.jobs)} job(s), {len(self.late)} late (worst {self.worst:.0f} s), "
                f"{len(self.requeued)} requeued, {len(self.lost)} not COMPLETED, {len(self.refused)} refused, "
                f"{len(self.failed)} node(s) called failed, {self.seconds:.0f} s")


def kill_mid_power_up(live: LiveCluster, nodes: Sequence[str], offset: float, limit: float = 240,
                      freeze: bool = False) -> RestartRun:
    """Per powered-down node a 2-task array (the tasks fit the node together); slurmctld
    killed -9 `offset` s after Slurm has one of them powering up (systemd starts it again).
    Every task must run as soon as its node's machine is up. With `freeze` slurmctld is
    stopped (SIGSTOP) the moment the service made the nodes' machines, for those `offset`
    s, then killed: the machines boot and their slurmds knock meanwhile, unheard; the
    slurmctld that takes over has the power-up from its state file, or not even the job's
    allocation (written at most every 5 s), and no task started."""
    started = time.monotonic()
    _prepare(live, nodes)
    with NodeWatch(live) as watch:
        # eligible a few seconds later: slurmctld has the jobs on disk before it powers the
        # nodes up (a kill in the first seconds after sbatch loses them: Slurm's own limit)
        jobs = [live.submit(f"-J {FAULT_JOB} -p ml-cpu -w {node} -n 1 --mem=100M --array=1-2 "
                            f"--begin=now+{SAVED_AFTER} -o kill-%A_%a.out --wrap 'sleep 3'") for node in nodes]
        submitted = float(live.root("date +%s.%N"))

        def powering_up() -> bool:
            return any(live.slurm_state(n).endswith("#") for n in nodes)

        wait_until(powering_up, 60, f"{', '.join(nodes)} powering up", every=0.2)
        if freeze:  # once the service made their machines: they boot while slurmctld hangs
            wait_until(lambda: set(nodes) <= live.running_containers(), 30, "the nodes' machines made", every=0.1)
            live.root("pkill -STOP -x slurmctld || true")
            time.sleep(offset)
        else:
            up_at = float(live.root("date +%s.%N"))
            # slurmctld writes its state at most every 5 s; a SIGKILL before that loses what
            # it did since (Slurm's own limit: a job it took or started comes back pending or
            # is started twice): kill once the power-up is on disk, `offset` s after
            wait_until(lambda: state_saved_since(live, max(submitted, up_at)), 30, "the power-up's state saved",
                       every=0.2)
            time.sleep(max(offset - (float(live.root("date +%s.%N")) - up_at), 0.0))
        live.root("pkill -9 -x slurmctld || true")
        wait_done(live, jobs, limit)
    return RestartRun("kill -9 slurmctld", tuple(delays(live, jobs, watch)), (), watch.failed,
                      time.monotonic() - started)


def under_load(live: LiveCluster, sequence: str, change: Callable[[], object], jobs: Sequence[str],
               every: float = 2.0, limit: float = 300) -> RestartRun:
    """`change` (a rollout, a failover) while a job arrives every `every` s."""
    started = time.monotonic()
    clear_leftovers(live)
    with NodeWatch(live) as watch:
        with Load(live, jobs, every) as load:
            change()
        wait_done(live, load.submitted, limit)
    return RestartRun(sequence, tuple(delays(live, load.submitted, watch)), tuple(load.refused), watch.failed,
                      time.monotonic() - started)


def state_saved_since(live: LiveCluster, since: float) -> bool:
    """slurmctld wrote its job state after `since` (the controller's clock)."""
    location = live.root("scontrol show config | sed -n 's/^StateSaveLocation *= *//p'").strip()
    return float(live.root(f"stat -c %.9Y {location}/job_state")) > since


def _prepare(live: LiveCluster, nodes: Sequence[str]) -> None:
    """No job of an earlier run left, no node moving, `nodes` in power save."""
    clear_leftovers(live)
    wait_until(lambda: not live.nodes_in_transition(), 180, "no node powering up or down", every=2)
    for node in nodes:
        live.power_down(node)


def _epoch(text: str) -> float:
    with contextlib.suppress(ValueError):
        return float(text)
    return 0.0
