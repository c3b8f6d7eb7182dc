"""The daemon loop: a list of named steps, every 10 s (sooner when a hand-off arrives).

    read_spec -> take_handoffs -> take_interruptions -> observe -> classify -> guard
              -> act -> fall_back -> pool hosts -> close_runaway -> publish -> beat

The pool hosts (service.pool_hosts) are written after the actions and after each launch.
The spec is re-read every loop; when it cannot be read the last good one is kept. Side
effects go through the Slurm client, the provider and the store only. `observe` never
lets a failed or doubtful answer pass for an empty one, and `guard` (service.guard)
holds back what the view does not support, saying so in the log, the metrics and the
pool page.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from slurmforge.contract import HEARTBEAT_FILE, NODE_EXPORTER_PORT
from slurmforge.cost import SACCT_ENV, sacct_argv
from slurmforge.errors import SlurmforgeError
from slurmforge.provider import Instance, Machines
from slurmforge.service import handoff
from slurmforge.service.actions import Action
from slurmforge.service.applier import ActReport, Applier
from slurmforge.service.classify import classify
from slurmforge.service.guard import VIEW_REASONS, Decision, Doubt, Guard, Hold, HoldReason
from slurmforge.service.leader import Leadership
from slurmforge.service.pool_hosts import PoolHosts
from slurmforge.service.runaway import RUNAWAY_INTERVAL, RunawayCloser
from slurmforge.service.slurmd_failures import SlurmdFailure, read_failures
from slurmforge.service.snapshot import ClusterSnapshot, build_snapshot, cooling_links
from slurmforge.service.spend import SPEND_INTERVAL, SpendTracker
from slurmforge.service.state import Event, InterruptionRecord, Store
from slurmforge.service.sweeps import plan_launches
from slurmforge.service.targets import dynamic_targets, write_targets
from slurmforge.service.topology import Topology, topology
from slurmforge.service.usage import usage_rows
from slurmforge.service.world import Lookups, Tunables, World
from slurmforge.slurm.client import Job, NodeState, SlurmClient, jobs_by_node
from slurmforge.spec.models import Cluster

log = logging.getLogger(__name__)

Answer = TypeVar("Answer")

LOOP_INTERVAL = 10.0
"""ParallelCluster's clustermgtd loops every 60 s; launches here wait at most one loop."""
WAKE_POLL = 0.25
"""How often the daemon looks into the spool while it waits for the next loop."""


@dataclass(frozen=True)
class DaemonConfig:
    spec_path: Path
    spool: Path = handoff.SPOOL_DIR
    heartbeat: Path = Path(HEARTBEAT_FILE)
    interval: float = LOOP_INTERVAL
    tunables: Tunables = field(default_factory=Tunables)
    targets_file: Path | None = None
    """Prometheus file_sd of the dynamic nodes' exporters, rewritten every loop (None: off)."""
    exporter_port: int = NODE_EXPORTER_PORT
    spend_interval: float = SPEND_INTERVAL
    """How often the pool page's spend this month is read from sacct."""
    spend_in_background: bool = True
    """Read it in a thread of its own (tests: in the loop)."""
    runaway_interval: float = RUNAWAY_INTERVAL
    """How often the leader closes runaway job records (service.runaway)."""
    pool_hosts_file: Path | None = None
    """The node kit's pool hosts (service.pool_hosts), written by the leader (None: off)."""
    slurmd_failures_dir: Path | None = None
    """The node kit's slurmd failures (service.slurmd_failures), read every loop (None: off)."""


@dataclass(frozen=True)
class LoopReport:
    started: float
    seconds: float
    actions: int = 0
    launched: int = 0
    failed: int = 0
    passes: int = 0
    error: str = ""
    held: int = 0
    """Actions the guard held back (service.guard)."""
    standby: str = ""
    """Why this service did not act: the other controller's service leads (service.leader)."""


class Daemon:
    def __init__(self, config: DaemonConfig, slurm: SlurmClient, provider: Machines, store: Store,
                 load_spec: Callable[[Path], Cluster], clock: Callable[[], float] = time.time,
                 leadership: Leadership | None = None) -> None:
        self.config, self.slurm, self.provider, self.store = config, slurm, provider, store
        self.load_spec, self.clock, self.leadership = load_spec, clock, leadership
        self.pool_hosts = PoolHosts(config.pool_hosts_file) if config.pool_hosts_file is not None else None
        self.applier = Applier(slurm, provider, store, clock, self.pool_hosts)
        self.spec: Cluster | None = None
        self.topology: Topology | None = None
        self.snapshot: ClusterSnapshot | None = None
        self.last: LoopReport | None = None
        self._notice_error = ""
        """The last failure of the notice queue, said once until it changes."""
        self.guard = Guard()
        self.decision = Decision([])
        self._job_users: dict[int, str] = {}
        self._job_accounts: dict[int, str] = {}
        self._jobs: list[Job] = []
        self._nodes: list[NodeState] = []
        """Slurm's nodes as last read: what the pool page shows while Slurm does not answer."""
        self.spend = SpendTracker(lambda period, now: slurm.sacct(sacct_argv(period, now), SACCT_ENV).splitlines(),
                                  config.spend_interval, config.spend_in_background)
        self.runaway = RunawayCloser(slurm.run, config.runaway_interval)
        self._failures_said: dict[str, float] = {}
        """node -> the slurmd failure last reported (its time): each is said once."""

    # ------------------------------------------------------------------ the loop

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.loop_once()
            self.wait(stop)

    def loop_once(self) -> LoopReport:
        started = self.clock()
        try:
            report = self._steps(started)
        except Exception as exc:  # one bad loop must not end the service
            log.exception("loop failed")
            report = LoopReport(started, self.clock() - started, error=str(exc))
        self.last = report
        self.beat()
        log.debug("loop %.2f s: %d action(s), %d launched, %d held%s", report.seconds, report.actions,
                  report.launched, report.held, f", {report.error}" if report.error else "")
        return report

    def _steps(self, started: float) -> LoopReport:
        topo = self.read_spec()
        if topo is None:
            return LoopReport(started, self.clock() - started, error="no valid spec yet")
        standing = self.leadership.check() if self.leadership is not None else None
        if standing is not None and not standing.acting:
            return self.stand_by(topo, started, standing.why, standing.reason)
        self.take_handoffs()
        self.take_interruptions()
        world, doubts = self.observe(topo)
        actions = classify(world)
        decision = self.check(world, actions, doubts)
        act = self.act(world, decision.run)
        passes = self.fall_back(world, act) if not doubts else 0
        if self.pool_hosts is not None:  # addresses listed since the launch, nodes released
            self.pool_hosts.publish(self.store.bindings())
        self.close_runaway()
        seconds = self.clock() - started
        self.publish(world, seconds, trusted=not doubts)
        return LoopReport(started, seconds, len(decision.run), len(act.launched), len(act.failed), passes,
                          held=decision.held)

    def stand_by(self, topo: Topology, started: float, why: str,
                 reason: HoldReason = HoldReason.STANDBY) -> LoopReport:
        """Not the leader: touch nothing (not the cloud, not Slurm, not the shared store);
        the page says who leads."""
        now = self.clock()
        if self.last is None or self.last.standby != why:
            log.info("%s", why)
        hold = Hold(reason, why, now)
        self.snapshot = build_snapshot(topo, [], {}, [], now, now - started, holds=[hold])
        return LoopReport(started, now - started, standby=why)

    def wait(self, stop: threading.Event) -> None:
        """Until the next loop is due, or at once when a hand-off arrives."""
        deadline = time.monotonic() + self.config.interval
        while not stop.is_set() and time.monotonic() < deadline:
            if handoff.has_pending(self.config.spool):
                return
            stop.wait(WAKE_POLL)

    # ------------------------------------------------------------------ steps

    def read_spec(self) -> Topology | None:
        try:
            spec = self.load_spec(self.config.spec_path)
        except (SlurmforgeError, OSError) as exc:
            log.error("cannot read %s, keeping the last good spec: %s", self.config.spec_path, exc)
            return self.topology
        if spec != self.spec or self.topology is None:
            self.spec, self.topology = spec, topology(spec)
        return self.topology

    def take_handoffs(self) -> int:
        found = handoff.pending(self.config.spool)
        if not found:
            return 0
        added = self.store.add_handoffs(item for _, item in found)
        for _, item in found:
            if item.kind is not handoff.HandoffKind.RESUME:
                self.store.add_event(Event(item.at, item.kind.value, "", "", 0, item.nodes))
        for path, _ in found:
            path.unlink(missing_ok=True)
        return added

    def take_interruptions(self) -> int:
        """Notices from the cloud's queue into the store, then acknowledged. Reading or
        acknowledging may fail (the queue's API, a permission the stack lacks): the loop
        goes on - nodes still launch and jobs still run - and the next one reads again
        (a notice read twice is one record). The failure is said once until it changes."""
        try:
            notices = self.provider.interruptions()
            for notice in notices:
                if self.store.add_interruption(InterruptionRecord(notice.instance, None, None, notice.noticed_at)):
                    self.store.add_event(Event(notice.noticed_at, "interruption", "", "", 1, notice.instance))
                    self.store.count("slurmforge_interruptions_total", {})
            if notices:
                self.provider.acknowledge(notices)
        except Exception as exc:  # any failure of the notice queue: one line, not the loop
            said = f"spot notices: {type(exc).__name__}: {exc}"[:300]
            if said != self._notice_error:
                log.error("%s", said)
            self._notice_error = said
            self.store.count("slurmforge_interruption_errors_total", {})
            return 0
        self._notice_error = ""
        return len(notices)

    def observe(self, topo: Topology) -> tuple[World, list[Doubt]]:
        """Slurm's nodes and jobs and the cloud's machines, and every doubt about them: a
        failed or doubtful answer is a doubt, never an empty list."""
        doubts: list[Doubt] = []
        nodes = _ask(self.slurm.nodes, HoldReason.SLURM_VIEW, doubts)
        # every loop: the usage metrics (queue, allocation per account) need the jobs too
        jobs = _ask(self.slurm.jobs, HoldReason.SLURM_VIEW, doubts)
        instances = _ask(self.provider.list_instances, HoldReason.CLOUD_VIEW, doubts)
        if nodes is not None:
            self._nodes = nodes
        if instances is not None and self.pool_hosts is not None:
            self.pool_hosts.learn(instances, listing=True)
        if jobs is not None:
            self._jobs, self._job_users = jobs, {j.id: j.user for j in jobs}
            self._job_accounts = {j.id: j.account for j in jobs if j.account}
        state = self.store.snapshot()
        found = _ask(lambda: self.slurm.jobs_by_id(sorted(state.signalled)), HoldReason.SLURM_VIEW,
                     doubts) if state.signalled else []
        signalled = None if found is None else {j.id: j for j in found}
        failures = read_failures(self.config.slurmd_failures_dir)
        now = self.clock()
        self.report_failures(topo, failures, now)
        world = World(nodes=nodes or [], instances=instances or [], state=state, topology=topo,
                      now=now, jobs=jobs_by_node(jobs or []), tunables=self.config.tunables,
                      held=tuple(j.id for j in jobs or [] if j.is_held_after_failed_launch()),
                      signalled=signalled, slurmd_failures=failures)
        doubts += self.guard.doubts(world, nodes is not None and jobs is not None, instances is not None)
        return world, doubts

    def report_failures(self, topo: Topology, failures: dict[str, SlurmdFailure], now: float) -> int:
        """Each new slurmd failure of a node of the spec, said once in the loop that reads it:
        the log, an event on the pool page, a counter (what the classifier does about it waits
        for the guard's confirmation). Only failures of the last hour: not every old file at
        each start of the service."""
        said = 0
        for node, failure in sorted(failures.items()):
            info = topo.nodes.get(node)
            if info is None or self._failures_said.get(node) == failure.at or now - failure.at > 3600:
                continue
            self._failures_said[node] = failure.at
            log.warning("slurmd on %s failed at %s: %s", node, time.strftime("%H:%M:%S", time.gmtime(failure.at)),
                        failure.line)
            self.store.add_event(Event(failure.at, "slurmd-failed", info.pool, "", 1, f"{node}: {failure.line}"[:300]))
            self.store.count("slurmforge_slurmd_failures_total", {"pool": info.pool})
            said += 1
        return said

    def check(self, world: World, actions: Sequence[Action], doubts: Sequence[Doubt]) -> Decision:
        """What of the classifier's actions runs now; says loudly what is held back."""
        decision = self.decision = self.guard.decide(world, actions, doubts)
        for hold in decision.holds:
            log.warning("holding back %d action(s) since %s: %s: %s", hold.held,
                        time.strftime("%H:%M:%S", time.gmtime(hold.since)), hold.reason.value, hold.detail)
            self.store.count("slurmforge_service_held_actions_total", {"reason": hold.reason.value}, hold.held)
            if hold.reason in VIEW_REASONS:
                self.store.count("slurmforge_service_untrusted_loops_total", {"reason": hold.reason.value})
        self.guard.acted(decision.run)
        if decision.run:
            log.debug("acting on: %s", decision.run)
        return decision

    def act(self, world: World, actions: Sequence[Action]) -> ActReport:
        return self.applier.apply(actions, world.topology, world.instances, self._job_users,
                                     world.state.node_jobs, self._job_accounts)

    def fall_back(self, world: World, report: ActReport) -> int:
        """Nodes whose link just failed go to the next link now, not in 10 s; when the
        chain is exhausted they are powered down and their jobs requeued."""
        passes, failed = 0, dict(report.failed)
        launched: dict[str, Instance] = dict(report.launched)
        while failed and passes < max((len(p.chain) for p in world.topology.pools.values()), default=1):
            passes += 1
            retry = replace(world, state=self.store.snapshot(), now=self.clock())
            actions = plan_launches(Lookups(retry), sorted(failed))
            # the nodes' jobs as the loop began: the first launch closed their hand-off requests
            node_jobs = {**world.state.node_jobs, **retry.state.node_jobs}
            again = self.applier.apply(actions, world.topology, world.instances, self._job_users,
                                          node_jobs, self._job_accounts)
            failed = dict(again.failed)
            launched.update(again.launched)
        report.launched.update(launched)
        return passes

    def close_runaway(self) -> int:
        """Runaway job records closed (service.runaway), when the cluster keeps accounting."""
        if self.spec is None or not self.spec.accounting.enabled:
            return 0
        now = self.clock()
        closed = self.runaway.update(now)
        if closed:
            self.store.add_event(Event(now, "runaway-closed", "", "", len(closed),
                                       ",".join(r.job for r in closed)[:200]))
            self.store.count("slurmforge_runaway_records_closed_total", {}, len(closed))
        return len(closed)

    def publish(self, world: World, seconds: float, trusted: bool = True) -> None:
        """The snapshot (page, /metrics) from the last nodes Slurm gave, with what is held
        back; the scrape targets only from a trusted view."""
        now = self.clock()
        self.store.prune(now)
        cooldowns = self.store.cooldowns()
        topo, nodes = world.topology, self._nodes
        cooling = {name: len(cooling_links(pool.chain, cooldowns, now)) for name, pool in topo.pools.items()}
        spend = self.spend.update(self.spec, now) if self.spec is not None else None
        self.snapshot = build_snapshot(topo, nodes, cooldowns, self.store.events(since=now - 3600), now,
                                       seconds, counters=self.store.counters(),
                                       gauges=usage_rows(topo, nodes, self._jobs, now, cooling),
                                       holds=self.decision.holds, unconfirmed=self.decision.unconfirmed,
                                       jobs=self._jobs, spend=spend)
        if self.config.targets_file is not None and trusted:
            write_targets(self.config.targets_file, dynamic_targets(topo, nodes, self.config.exporter_port))

    def beat(self) -> None:
        path = self.config.heartbeat
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(f"{self.clock():.3f}\n")
            tmp.replace(path)
        except OSError as exc:
            log.warning("heartbeat %s: %s", path, exc)


def _ask(read: Callable[[], list[Answer]], reason: HoldReason, doubts: list[Doubt]) -> list[Answer] | None:
    """One answer, or None and a doubt: whatever goes wrong (a command, a parse, the
    cloud's API) makes the answer unknown, not empty."""
    try:
        return read()
    except Exception as exc:  # any failure of a source is a doubt about it
        detail = f"{type(exc).__name__}: {exc}"[:300]
        log.debug("%s: %s", reason.value, detail)  # check() says it, with what it holds back
        doubts.append(Doubt(reason, detail))
        return None
