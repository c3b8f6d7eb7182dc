"""Whether a loop may act, and which destructive actions it may take now.

    observe -> doubts -> classify -> guard -> act

1. The view. A loop's view is "unknown" when a Slurm command fails or answers with
   errors or without its list, when Slurm's answer lacks nodes the spec names, when the
   cloud's list raises, or when many machines that were live are not listed at all any
   more. Such a loop classifies (to count what it holds back) but acts on nothing, and
   every confirmation under way starts over.
2. Destructive actions, each sorted by its evidence:
   - a *repair* rests on an absence or a failure: terminating an orphan or a duplicate,
     powering down or terminating a lost, unresponsive or failed node that is up,
     marking a node DOWN. It runs once the same verdict came out of `stable_loops`
     trusted loops in a row spanning `stable_seconds`; a loop runs at most `budget` of
     them, and none when more are confirmed at once (that many at once is the mark of a
     view gone wrong, not of machines failing one by one);
   - a *release* terminates the machine of a node Slurm itself powered down, or one that
     started before Slurm asked for its node's power-up or before a slurmctld took
     control (Slurm waits for a newer boot): Slurm's positive word, so it runs at once,
     at most the budget left in a loop;
   - everything else is free: launches, bookkeeping, nodes not up (powering up, powered
     down), and the steps of a spot interruption (the cloud takes the machine anyway).

docs/service.md says why this is safe and what bounds it sets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, StrEnum

from slurmforge.hostlists import compress
from slurmforge.service.actions import Action, MarkDown, PowerDown, Terminate
from slurmforge.service.assess import stale_machine
from slurmforge.service.world import LIVE, World
from slurmforge.slurm.client import NodeState


class HoldReason(StrEnum):
    SLURM_VIEW = "slurm-view"
    """A Slurm command failed, or answered with errors or without its list."""
    SLURM_PARTIAL = "slurm-partial"
    """Slurm's answer lacks nodes the spec names."""
    CLOUD_VIEW = "cloud-view"
    """The cloud's instance list failed (throttled, unreachable, a page missing)."""
    CLOUD_VANISHED = "cloud-vanished"
    """More machines than the budget, live in the last list, are not listed at all."""
    MASS_ACTION = "mass-action"
    """More confirmed repairs than a loop may run."""
    RELEASE_RATE = "release-rate"
    """More released machines than a loop may terminate: the rest wait for the next loop."""
    STANDBY = "standby"
    """The other controller's service leads (service.leader): this one does nothing."""


VIEW_REASONS = frozenset({HoldReason.SLURM_VIEW, HoldReason.SLURM_PARTIAL, HoldReason.CLOUD_VIEW,
                          HoldReason.CLOUD_VANISHED})


@dataclass(frozen=True)
class Doubt:
    """Why this loop's view cannot be acted on."""

    reason: HoldReason
    detail: str


@dataclass(frozen=True)
class Hold:
    reason: HoldReason
    detail: str
    since: float
    held: int = 0
    """Actions held back this loop."""


@dataclass(frozen=True)
class Decision:
    run: list[Action]
    holds: tuple[Hold, ...] = ()
    unconfirmed: int = 0
    """Repairs waiting for their verdict to hold over enough loops."""

    @property
    def held(self) -> int:
        return sum(h.held for h in self.holds)


class Kind(Enum):
    FREE = "free"
    RELEASE = "release"
    REPAIR = "repair"


@dataclass
class _Streak:
    first: float
    loops: int = 1


@dataclass
class _Sorted:
    """One loop's actions split per node or machine, each with its kind and unit."""

    parts: list[tuple[Action, Kind, str]] = field(default_factory=list)
    confirmed: set[int] = field(default_factory=set)
    """Indexes of the repairs whose verdict held long enough."""


def budget(world: World) -> int:
    tun = world.tunables
    return max(tun.max_destructive, math.ceil(tun.max_destructive_fraction * len(world.topology.nodes)))


class Guard:
    """Kept by the daemon across loops: verdict streaks, hold start times, and the
    machines live in the last cloud list."""

    def __init__(self) -> None:
        self._streaks: dict[tuple[str, str], _Streak] = {}
        self._since: dict[HoldReason, float] = {}
        self._live: frozenset[str] | None = None
        self._terminated: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ the view

    def doubts(self, world: World, slurm_answered: bool, cloud_answered: bool) -> list[Doubt]:
        """What is wrong with a view whose answers came: spec nodes Slurm did not list,
        live machines the cloud stopped listing all at once."""
        found: list[Doubt] = []
        if slurm_answered:
            listed = {n.name for n in world.nodes}
            missing = [name for name in world.topology.nodes if name not in listed]
            if missing:
                found.append(Doubt(HoldReason.SLURM_PARTIAL, f"{len(missing)} node(s) of the spec are not in "
                                   f"Slurm's answer: {_names(missing)}"))
        if cloud_answered:
            listed_ids = {i.id for i in world.instances}
            vanished = sorted((self._live or frozenset()) - listed_ids - self._terminated)
            if len(vanished) > budget(world):
                found.append(Doubt(HoldReason.CLOUD_VANISHED, f"{len(vanished)} machine(s) live in the last list "
                                   f"are not listed at all: {_names(vanished)}"))
            self._live = frozenset(i.id for i in world.instances if i.state in LIVE)
        return found

    # ------------------------------------------------------------------ the actions

    def decide(self, world: World, actions: Sequence[Action], doubts: Sequence[Doubt]) -> Decision:
        if doubts:
            self._streaks.clear()
            merged: dict[HoldReason, list[str]] = {}
            for doubt in doubts:
                merged.setdefault(doubt.reason, []).append(doubt.detail)
            return Decision([], self._holds(world.now, [(reason, "; ".join(details), len(actions))
                                                        for reason, details in merged.items()]))
        sorted_ = self._sort(world, actions)
        limit = budget(world)
        repairs = {sorted_.parts[i][2] for i in sorted_.confirmed}
        held: list[tuple[HoldReason, str, int]] = []
        mass = len(repairs) > limit
        if mass:
            held.append((HoldReason.MASS_ACTION, f"{len(repairs)} machine(s) would be stopped, replaced or marked "
                         f"down at once, at most {limit} a loop: {_names(sorted(repairs))}", len(sorted_.confirmed)))
        releases = [unit for _, kind, unit in sorted_.parts if kind is Kind.RELEASE]
        room = set(list(dict.fromkeys(releases))[:limit - (0 if mass else len(repairs))])
        waiting = [unit for unit in releases if unit not in room]
        if waiting:
            held.append((HoldReason.RELEASE_RATE, f"{len(set(waiting))} released machine(s) wait: at most {limit} "
                         "terminated a loop", len(waiting)))
        run = [part for i, (part, kind, unit) in enumerate(sorted_.parts)
               if kind is Kind.FREE or (kind is Kind.RELEASE and unit in room)
               or (kind is Kind.REPAIR and i in sorted_.confirmed and not mass)]
        unconfirmed = sum(1 for _, kind, _ in sorted_.parts if kind is Kind.REPAIR) - len(sorted_.confirmed)
        return Decision(run, self._holds(world.now, held), unconfirmed)

    def acted(self, run: Sequence[Action]) -> None:
        """The machines this loop terminated may leave the next list: not a vanishing."""
        self._terminated = frozenset(a.instance for a in run if isinstance(a, Terminate))

    def _sort(self, world: World, actions: Sequence[Action]) -> _Sorted:
        index = _Index(world)
        out = _Sorted()
        seen: dict[tuple[str, str], _Streak] = {}
        for action in actions:
            for part, kind, unit in index.parts(action):
                if kind is Kind.REPAIR:
                    key = (type(part).__name__, unit)
                    streak = self._streaks.get(key)
                    streak = _Streak(world.now) if streak is None else _Streak(streak.first, streak.loops + 1)
                    seen[key] = streak
                    if streak.loops >= world.tunables.stable_loops and \
                            world.now - streak.first >= world.tunables.stable_seconds:
                        out.confirmed.add(len(out.parts))
                out.parts.append((part, kind, unit))
        self._streaks = seen  # a verdict missing from one trusted loop starts over
        return out

    def _holds(self, now: float, active: Sequence[tuple[HoldReason, str, int]]) -> tuple[Hold, ...]:
        reasons = {reason for reason, _, _ in active}
        self._since = {r: self._since.get(r, now) for r in reasons}
        return tuple(Hold(reason, detail, self._since[reason], held) for reason, detail, held in active)


class _Index:
    """Lookups over one World for sorting actions."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.slurm = {n.name: n for n in world.nodes}
        self.by_id = {i.id: i for i in world.instances}
        self.interrupted = {r.instance for r in world.state.interruptions}
        self.interrupted_nodes = {r.node or (self.by_id[r.instance].node if r.instance in self.by_id else None)
                                  for r in world.state.interruptions}

    def parts(self, action: Action) -> list[tuple[Action, Kind, str]]:
        if isinstance(action, Terminate):
            return [(action, self.terminate_kind(action), action.node or action.instance)]
        if isinstance(action, PowerDown | MarkDown):
            return [(replace(action, nodes=(n,)), self.node_kind(action, n), n) for n in action.nodes]
        return [(action, Kind.FREE, "")]

    def terminate_kind(self, action: Terminate) -> Kind:
        inst = self.by_id.get(action.instance)
        if inst is None or inst.state not in LIVE or inst.id in self.interrupted:
            return Kind.FREE
        node = self.slurm.get(action.node or "")
        if node is None or node.name not in self.world.topology.nodes:
            return Kind.REPAIR
        if not node.is_powered() or (node.is_powering_up() and stale_machine(self.world.state, node.name, inst)):
            return Kind.RELEASE
        return Kind.REPAIR

    def node_kind(self, action: PowerDown | MarkDown, name: str) -> Kind:
        if isinstance(action, MarkDown):
            return Kind.REPAIR
        node: NodeState | None = self.slurm.get(name)
        if name in self.interrupted_nodes or node is None or not node.is_powered() or node.is_powering_up():
            return Kind.FREE
        return Kind.REPAIR


def _names(names: Sequence[str], limit: int = 200) -> str:
    text = compress(list(names))
    return text if len(text) <= limit else text[:limit - 3] + "..."
