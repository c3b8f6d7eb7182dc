"""What the pool page, /metrics and `slurmforge pools` show: every pool's nodes by
state, GPUs used / free / powered off, recent launches and failures, links cooling down,
and what the service holds back and why (service.guard).

Built by the daemon once per loop from data it already has; serialisable as JSON so the
CLI can read it from the service (`GET /pools.json`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from slurmforge.service.guard import Hold, HoldReason
from slurmforge.service.slurm import NodeState
from slurmforge.service.state import Cooldown, Event
from slurmforge.service.topology import Topology

NODE_STATES = ("idle", "mixed", "allocated", "powering_up", "powered_down", "powering_down",
               "draining", "drained", "down", "other")


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

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> ClusterSnapshot:
        data = json.loads(text)
        pools = tuple(
            PoolSnapshot(**{**p, "chain": tuple(p["chain"]),
                            "cooling": tuple(LinkCooldown(**c) for c in p["cooling"])})
            for p in data["pools"])
        return ClusterSnapshot(
            cluster=data["cluster"], taken_at=data["taken_at"], loop_seconds=data["loop_seconds"],
            window_seconds=data["window_seconds"], pools=pools,
            events=tuple(Event(**e) for e in data["events"]),
            counters=tuple((c[0], dict(c[1]), float(c[2])) for c in data["counters"]),
            gauges=tuple((g[0], dict(g[1]), float(g[2])) for g in data.get("gauges", ())),
            holds=tuple(Hold(**{**h, "reason": HoldReason(h["reason"])}) for h in data.get("holds", ())),
            unconfirmed=int(data.get("unconfirmed", 0)))


def cooling_links(chain: Iterable[str], cooldowns: Mapping[str, Cooldown], now: float) -> list[Cooldown]:
    """The links of a fallback chain that are cooling down now, in chain order."""
    return [c for link in chain if (c := cooldowns.get(link)) is not None and c.active(now)]


def build_snapshot(topology: Topology, nodes: Iterable[NodeState], cooldowns: Mapping[str, Cooldown],
                   events: Sequence[Event], now: float, loop_seconds: float = 0.0, window: float = 3600.0,
                   counters: Sequence[tuple[str, dict[str, str], float]] = (),
                   gauges: Sequence[tuple[str, dict[str, str], float]] = (), holds: Sequence[Hold] = (),
                   unconfirmed: int = 0) -> ClusterSnapshot:
    tallies: dict[str, dict[str, Any]] = {
        name: {"nodes": dict.fromkeys(NODE_STATES, 0), "used": 0, "free": 0, "off": 0} for name in topology.pools}
    for node in nodes:
        info = topology.nodes.get(node.name)
        if info is not None:
            _tally(tallies[info.pool], node, topology.pools[info.pool].gpus_per_node)
    recent = [e for e in events if e.at >= now - window]
    pools = []
    for name, pool in topology.pools.items():
        t = tallies[name]
        pools.append(PoolSnapshot(
            name=name, kind=pool.kind, market=pool.market, chain=pool.chain, min_nodes=pool.min_nodes,
            max_nodes=pool.max_nodes, nodes={k: v for k, v in t["nodes"].items() if v},
            gpus_used=t["used"], gpus_free=t["free"], gpus_off=t["off"],
            launches=sum(e.count for e in recent if e.kind == "launch" and e.pool == name),
            failures=sum(e.count for e in recent if e.kind == "launch-failed" and e.pool == name),
            cooling=tuple(LinkCooldown(c.link, c.until, c.failures, c.last_error)
                          for c in cooling_links(pool.chain, cooldowns, now)),
        ))
    return ClusterSnapshot(topology.cluster, now, loop_seconds, window, tuple(pools), tuple(recent[:50]),
                           tuple(counters), tuple(gauges), tuple(holds), unconfirmed)


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
