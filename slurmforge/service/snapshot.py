"""What the pool page, /metrics and `slurmforge pools` show: every pool's nodes by
state, its jobs running and pending (with Slurm's reasons), GPUs used / wanted by
pending jobs / free / powered off, spend so far this month, recent launches and
failures, links cooling down (and the account quotas that stop some), and what the
service holds back and why (service.guard).

Built by the daemon once per loop from data it already has; serialisable as JSON so the
CLI can read it from the service (`GET /pools.json`).
"""

from __future__ import annotations

import functools
import heapq
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from slurmforge.provider import Quota
from slurmforge.service.guard import Hold, HoldReason
from slurmforge.service.spend import Spend
from slurmforge.service.state import Cooldown, Event
from slurmforge.service.topology import Topology
from slurmforge.slurm.client import Job, NodeState, parse_tres
from slurmforge.slurm.reasons import replacement_stopped

NODE_STATES = ("idle", "mixed", "allocated", "powering_up", "powered_down", "powering_down",
               "draining", "drained", "down", "other")
JOB_ROWS = 15
"""Jobs listed per pool (pending first, longest waiting first; then running); the counts cover all."""
HOLDING_JOB = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"})


def display_state(node: NodeState) -> str:
    """The one state a node is counted under. Depends on the base state and the flags
    only, and thousands of nodes share a handful of those: decided once per combination."""
    return _display_state(node.state, node.flags)


@functools.lru_cache(maxsize=1024)
def _display_state(state: str, flags: frozenset[str]) -> str:
    node = NodeState(name="", state=state, flags=flags)
    # the order of the checks matters
    if node.is_powering_up():
        return "powering_up"
    if node.is_powering_down():
        return "powering_down"
    if node.is_down():
        return "down"
    if node.is_powered_down():
        return "powered_down"
    if node.is_drain():
        return "draining" if node.has_jobs() else "drained"
    return node.state if node.state in ("idle", "mixed", "allocated") else "other"


@dataclass(frozen=True)
class LinkCooldown:
    link: str
    until: float
    failures: int
    last_error: str
    quotas: tuple[Quota, ...] = ()
    """The account quotas that stop the link's launches (none: no capacity)."""


@dataclass(frozen=True)
class JobRow:
    """One job as the pool page lists it."""

    id: int
    user: str
    account: str
    state: str
    reason: str
    """Slurm's reason (pending: why it waits)."""
    gpus: int
    since: float
    """When it started (running) or became eligible (pending); 0 unknown."""


@dataclass(frozen=True)
class PoolSnapshot:
    name: str
    kind: str
    market: str
    chain: tuple[str, ...]
    min_nodes: int
    max_nodes: int
    nodes: dict[str, int]
    gpus_used: int = 0
    gpus_free: int = 0
    gpus_off: int = 0
    launches: int = 0
    failures: int = 0
    cooling: tuple[LinkCooldown, ...] = ()
    jobs_running: int = 0
    jobs_pending: int = 0
    """Pending jobs that may run here: submitted to a partition holding this pool."""
    pending_reasons: tuple[tuple[str, int], ...] = ()
    """Slurm's reasons of the pending jobs, with how many wait for each, most first."""
    gpus_wanted: int = 0
    """GPUs the pending jobs ask for (a job that may run in several pools counts in each)."""
    jobs: tuple[JobRow, ...] = ()
    spend: float | None = None
    """Dollars this month (slurmforge.service.spend); None without prices."""
    stopped: tuple[tuple[str, str], ...] = ()
    """(node, Slurm's reason) of the static nodes whose replacement the service stopped: two
    new machines failed the same way (slurm.reasons.REPLACEMENT_STOPPED)."""

    @property
    def total(self) -> int:
        return sum(self.nodes.values())

    def count(self, state: str) -> int:
        return self.nodes.get(state, 0)


@dataclass(frozen=True)
class ClusterSnapshot:
    cluster: str
    taken_at: float
    loop_seconds: float
    window_seconds: float
    pools: tuple[PoolSnapshot, ...]
    events: tuple[Event, ...] = ()
    counters: tuple[tuple[str, dict[str, str], float], ...] = field(default=())
    gauges: tuple[tuple[str, dict[str, str], float], ...] = field(default=())
    """Slurm usage (slurmforge.service.usage): allocation, jobs, waiting, unavailable nodes."""
    holds: tuple[Hold, ...] = ()
    """What the last loop held back and why; empty when it acted on everything."""
    unconfirmed: int = 0
    """Repairs waiting for their verdict to hold over enough loops."""
    spend: Spend | None = None
    """Spend so far this month: when the period started, when it was read, any error."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> ClusterSnapshot:
        data = json.loads(text)
        pools = tuple(
            PoolSnapshot(**{**p, "chain": tuple(p["chain"]),
                            "cooling": tuple(LinkCooldown(**{**c, "quotas": tuple(
                                Quota(**q) for q in c.get("quotas", ()))}) for c in p["cooling"]),
                            "pending_reasons": tuple((str(r), int(n)) for r, n in p.get("pending_reasons", ())),
                            "jobs": tuple(JobRow(**j) for j in p.get("jobs", ())),
                            "stopped": tuple((str(n), str(r)) for n, r in p.get("stopped", ()))})
            for p in data["pools"])
        spend = data.get("spend")
        return ClusterSnapshot(
            cluster=data["cluster"], taken_at=data["taken_at"], loop_seconds=data["loop_seconds"],
            window_seconds=data["window_seconds"], pools=pools,
            events=tuple(Event(**e) for e in data["events"]),
            counters=tuple((c[0], dict(c[1]), float(c[2])) for c in data["counters"]),
            gauges=tuple((g[0], dict(g[1]), float(g[2])) for g in data.get("gauges", ())),
            holds=tuple(Hold(**{**h, "reason": HoldReason(h["reason"])}) for h in data.get("holds", ())),
            unconfirmed=int(data.get("unconfirmed", 0)), spend=Spend(**spend) if spend else None)


def cooling_links(chain: Iterable[str], cooldowns: Mapping[str, Cooldown], now: float) -> list[Cooldown]:
    """The links of a fallback chain that are cooling down now, in chain order."""
    return [c for link in chain if (c := cooldowns.get(link)) is not None and c.active(now)]


def build_snapshot(topology: Topology, nodes: Iterable[NodeState], cooldowns: Mapping[str, Cooldown],
                   events: Sequence[Event], now: float, loop_seconds: float = 0.0, window: float = 3600.0,
                   counters: Sequence[tuple[str, dict[str, str], float]] = (),
                   gauges: Sequence[tuple[str, dict[str, str], float]] = (), holds: Sequence[Hold] = (),
                   unconfirmed: int = 0, jobs: Iterable[Job] = (), spend: Spend | None = None) -> ClusterSnapshot:
    tallies: dict[str, dict[str, Any]] = {
        name: {"nodes": dict.fromkeys(NODE_STATES, 0), "used": 0, "free": 0, "off": 0} for name in topology.pools}
    for node in nodes:
        info = topology.nodes.get(node.name)
        if info is not None:
            _tally(tallies[info.pool], node, topology.pools[info.pool].gpus_per_node)
    stopped: dict[str, list[tuple[str, str]]] = {}
    for node in nodes:
        info = topology.nodes.get(node.name)
        if info is not None and replacement_stopped(node):
            stopped.setdefault(info.pool, []).append((node.name, node.reason))
    work = _pool_jobs(topology, jobs)
    recent = [e for e in events if e.at >= now - window]
    pools = []
    for name, pool in topology.pools.items():
        t, w = tallies[name], work[name]
        pools.append(PoolSnapshot(
            name=name, kind=pool.kind, market=pool.market, chain=pool.chain, min_nodes=pool.min_nodes,
            max_nodes=pool.max_nodes, nodes={k: v for k, v in t["nodes"].items() if v},
            gpus_used=t["used"], gpus_free=t["free"], gpus_off=t["off"],
            launches=sum(e.count for e in recent if e.kind == "launch" and e.pool == name),
            failures=sum(e.count for e in recent if e.kind == "launch-failed" and e.pool == name),
            cooling=tuple(LinkCooldown(c.link, c.until, c.failures, c.last_error, c.quotas)
                          for c in cooling_links(pool.chain, cooldowns, now)),
            jobs_running=w.running, jobs_pending=w.pending,
            pending_reasons=tuple(sorted(w.reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
            gpus_wanted=w.gpus_wanted, jobs=w.rows(),
            spend=spend.pools.get(name, 0.0) if spend is not None else None,
            stopped=tuple(sorted(stopped.get(name, []))),
        ))
    return ClusterSnapshot(topology.cluster, now, loop_seconds, window, tuple(pools), tuple(recent[:50]),
                           tuple(counters), tuple(gauges), tuple(holds), unconfirmed, spend)


@dataclass
class _Work:
    running: int = 0
    pending: int = 0
    gpus_wanted: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    waiting: list[JobRow] = field(default_factory=list)
    busy: list[JobRow] = field(default_factory=list)

    def rows(self) -> tuple[JobRow, ...]:
        """Pending first, longest waiting first; then running, longest running first."""
        def oldest(rows: list[JobRow], most: int) -> list[JobRow]:
            return heapq.nsmallest(most, rows, key=lambda r: (r.since or float("inf"), r.id))

        waiting = oldest(self.waiting, JOB_ROWS)
        return tuple(waiting + oldest(self.busy, JOB_ROWS - len(waiting)))


def _pool_jobs(topology: Topology, jobs: Iterable[Job]) -> dict[str, _Work]:
    """Each pool's jobs: running where its nodes are, pending in every pool of the
    partitions it was submitted to."""
    work = {name: _Work() for name in topology.pools}
    for job in jobs:
        if job.is_pending():
            pools = {p for part in job.partition.split(",") for p in topology.partitions.get(part, ())}
            if not pools:
                continue
            gpus = parse_tres(job.tres).gpus
            row = JobRow(job.id, job.user, job.account, job.state, job.reason or "None", gpus, job.eligible_at)
            for name in pools:
                w = work[name]
                w.pending += 1
                w.gpus_wanted += gpus
                w.reasons[row.reason] = w.reasons.get(row.reason, 0) + 1
                w.waiting.append(row)
        elif job.state in HOLDING_JOB:
            pools = {info.pool for n in job.node_names() if (info := topology.nodes.get(n)) is not None}
            row = JobRow(job.id, job.user, job.account, job.state, job.reason if job.reason != "None" else "",
                         parse_tres(job.tres).gpus, job.started_at)
            for name in pools:
                work[name].running += 1
                work[name].busy.append(row)
    return work


def _tally(tally: dict[str, Any], node: NodeState, pool_gpus: int) -> None:
    state = display_state(node)
    tally["nodes"][state] += 1
    gpus = node.gpus() or pool_gpus
    used = min(node.gpus_used(), gpus)
    tally["used"] += used
    if state in ("idle", "mixed", "allocated"):
        tally["free"] += gpus - used
    elif state != "draining":
        tally["off"] += gpus - used
