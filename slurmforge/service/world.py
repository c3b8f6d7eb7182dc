"""One loop's inputs (`World`, with its `Tunables`) and the lookups over them that the
classifier's rules share (`Lookups`): a node's machine, the link a pool may launch on, a
mark's age. The marks the classifier sets on a node are named here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmforge.provider import Instance, InstanceState, Quota
from slurmforge.service.slurmd_failures import SlurmdFailure
from slurmforge.service.state import ServiceState
from slurmforge.service.topology import Topology
from slurmforge.slurm.client import Job, NodeState


@dataclass(frozen=True)
class Tunables:
    listing_grace: float = 120.0
    """A launched instance may not be listed by the cloud yet for this long."""
    missing_grace: float = 60.0
    """A powered node whose instance is not listed at all is replaced after this."""
    unresponsive_grace: float = 180.0
    """A powered node whose slurmd does not answer is replaced after this (a static
    node's running machine is terminated first)."""
    checkpoint_grace: float = 90.0
    """Spot notice -> requeue after this; EC2 takes the machine 120 s after the notice."""
    evacuate_grace: float = 30.0
    """A node its health check drained under jobs: they are signalled, and requeued after
    this, time to write a checkpoint (a job that requeues itself on the signal goes sooner)."""
    launch_retry_window: float = 900.0
    """A launch a crash interrupted is retried with its token for this long."""
    request_max_age: float = 3600.0
    signal: str = "USR1"
    stable_loops: int = 3
    """A repair (terminate, power down or mark DOWN on absent or failed evidence) runs once
    the same verdict came out of this many trusted loops in a row (service.guard) ..."""
    stable_seconds: float = 20.0
    """... spanning at least this long (hand-offs wake the loop early)."""
    max_destructive: int = 5
    max_destructive_fraction: float = 0.05
    """A loop stops, replaces or marks down at most max(max_destructive, fraction x the
    spec's nodes) machines; more confirmed repairs than that and it runs none of them."""


@dataclass(frozen=True)
class World:
    """One loop's inputs."""

    nodes: Sequence[NodeState]
    instances: Sequence[Instance]
    state: ServiceState
    topology: Topology
    now: float
    jobs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """node -> jobs on it (squeue); the daemon reads it when a notice needs it."""
    tunables: Tunables = Tunables()
    held: tuple[int, ...] = ()
    """Jobs slurmctld requeued and held after their launch failed (squeue)."""
    signalled: Mapping[int, Job] | None = field(default_factory=dict)
    """The jobs the service signalled (state.signalled) as slurmctld holds them now, the
    finished ones included; None when that could not be read."""
    slurmd_failures: Mapping[str, SlurmdFailure] = field(default_factory=dict)
    """node -> its slurmd's last failure, as the node recorded it (service.slurmd_failures)."""


LIVE = frozenset({InstanceState.PENDING, InstanceState.RUNNING})
GONE = frozenset({InstanceState.STOPPED, InstanceState.TERMINATED})
"""A machine in these states runs nothing: a static node's may be replaced."""
MISSING, UNRESPONSIVE = "missing", "unresponsive"
EVACUATING = "evacuating"
"""Mark of a node its health check drained under jobs, since the service signalled them."""
REPLACING = "replacing"
"""Mark of a static node whose machine failed, since the first sign of it, until the node
is in service again on a new one (for the event's measured times)."""


class Lookups:
    """Indexes over one World, and the lookups the rules share."""

    def __init__(self, world: World) -> None:
        self.world, self.state, self.topology = world, world.state, world.topology
        self.now, self.tun = world.now, world.tunables
        self.slurm = {n.name: n for n in world.nodes}
        self.by_id = {i.id: i for i in world.instances}
        bound = {b.instance: b.node for b in self.state.bindings.values()}
        self.owner = {i.id: i.node or bound.get(i.id) for i in world.instances}
        self.live_by_node: dict[str, list[Instance]] = {}
        self.last_dead: dict[str, Instance] = {}
        for inst in sorted(world.instances, key=lambda i: (i.launched_at or 0.0, i.id)):
            node = self.owner[inst.id]
            if node is not None and inst.state in LIVE:
                self.live_by_node.setdefault(node, []).append(inst)
            elif node is not None:
                self.last_dead[node] = inst
        self.retrying = [r for r in self.state.pending_launches
                         if self.now - r.created_at <= self.tun.launch_retry_window]
        self.retrying_nodes = {n for r in self.retrying for n in r.nodes}
        self.retrying_tokens = {r.token for r in self.retrying}
        self.interrupted = {r.node or self.owner.get(r.instance) for r in self.state.interruptions}

    # ------------------------------------------------------------------ lookups

    def instance(self, node: str) -> Instance | None:
        """The node's machine: the bound one if it is listed, else the oldest live one."""
        binding = self.state.bindings.get(node)
        if binding is not None and binding.instance in self.by_id:
            return self.by_id[binding.instance]
        live = self.live_by_node.get(node)
        return live[0] if live else None

    def machine(self, node: str) -> Instance | None:
        """instance(), or else the newest stopped/terminated machine tagged for the node."""
        found = self.instance(node)
        return found if found is not None else self.last_dead.get(node)

    def available_link(self, pool: str) -> str | None:
        for link in self.topology.chain(pool):
            cooldown = self.state.cooldowns.get(link)
            if cooldown is None or not cooldown.active(self.now):
                return link
        return None

    def why_no_link(self, pool: str) -> str:
        """Why no link of the pool's chain may launch now (all cool down): no capacity, or
        the account's quota that stops a link, named so that someone can raise it."""
        capacity: list[str] = []
        quotas: dict[tuple[Quota, ...], list[str]] = {}
        for link in self.topology.chain(pool):
            cooldown = self.state.cooldowns.get(link)
            if cooldown is not None and cooldown.quotas:
                quotas.setdefault(cooldown.quotas, []).append(link)
            else:
                capacity.append(link)
        parts = [f"no capacity on {', '.join(capacity)}"] if capacity else []
        if quotas:
            parts.append("EC2 quota reached: " + ", ".join(
                f"{' and '.join(map(str, q))} on {', '.join(links)}" for q, links in quotas.items()))
        return "; ".join(parts)

    def mark_age(self, node: str, kind: str) -> float | None:
        since = self.state.marks.get(node, {}).get(kind)
        return None if since is None else self.now - since

    def past_grace(self, node: str, kind: str, grace: float) -> bool:
        """The node's `kind` mark (MISSING, UNRESPONSIVE) is at least `grace` old."""
        age = self.mark_age(node, kind)
        return age is not None and age >= grace

    def recently_launched(self, node: str) -> bool:
        binding = self.state.bindings.get(node)
        return binding is not None and self.now - binding.launched_at < self.tun.listing_grace

    def in_place(self, name: str) -> bool:
        """A static node Slurm has up (not powered down, not powering up, no spot notice
        under way): a failed machine is replaced under it, the node staying as it is."""
        node, info = self.slurm.get(name), self.topology.nodes.get(name)
        return (node is not None and info is not None and info.static and node.is_powered()
                and not node.is_powering_up() and name not in self.interrupted)
