"""What the classifier decides and the daemon carries out: plain, hashable data.

The daemon executes actions in the order the classifier returns them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Launch:
    """Start machines for `nodes` (all of pool `pool`) on link `link`. `token` makes the
    launch idempotent; `retry` marks the re-issue of a launch a crash interrupted."""

    pool: str
    link: str
    nodes: tuple[str, ...]
    token: str
    jobs: tuple[int, ...] = ()
    retry: bool = False


@dataclass(frozen=True)
class Terminate:
    instance: str
    node: str | None
    reason: str


@dataclass(frozen=True)
class PowerDown:
    """POWER_DOWN_FORCE: requeue the nodes' jobs and return them to power save."""

    nodes: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class MarkDown:
    """DOWN: the nodes' machines are gone; slurmctld ends or requeues their jobs now."""

    nodes: tuple[str, ...]
    reason: str
    keep_away: tuple[int, ...] = ()
    """The jobs on the node (one node): recorded before the DOWN and kept off the node for
    `keep_for` s after it (KeepAway), not the node held: its new machine takes other jobs
    as soon as its slurmd registered (ReturnToService=2 ends the DOWN)."""
    keep_for: float = 0.0


@dataclass(frozen=True)
class PowerUp:
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Resume:
    """Back in service (state=resume): the node's new machine has registered, and the
    DOWN or DRAIN the service set while it replaced the old one is lifted."""

    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Drain:
    nodes: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Requeue:
    jobs: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class KeepAway:
    """Keep jobs that ran on `node`'s dead machine off the node until `until` (recorded,
    then added to each pending job's ExcNodeList): a retried RPC for them may still reach
    the node's new machine (service.respond, STALE_RPC_WINDOW)."""

    node: str
    jobs: tuple[int, ...]
    until: float


@dataclass(frozen=True)
class LetBack:
    """The window is over: take `node` out of the ExcNodeList of the jobs the service kept
    off it (once each job is pending; forgotten once it ended)."""

    node: str
    jobs: tuple[int, ...]


@dataclass(frozen=True)
class Release:
    """`scontrol release`: jobs slurmctld held after a launch that failed for a reason the
    service repairs (a duplicate of a job a killed slurmctld started and lost)."""

    jobs: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class Signal:
    """Tell the jobs (the whole of each, scancel --full); the service remembers it, and
    requeues a job the signal ended (ForgetSignalled once settled)."""

    jobs: tuple[int, ...]
    signal: str
    why: str = ""


@dataclass(frozen=True)
class SetAddress:
    node: str
    address: str
    hostname: str | None = None


@dataclass(frozen=True)
class MarkCooldown:
    link: str
    until: float
    failures: int
    reason: str


@dataclass(frozen=True)
class Bind:
    node: str
    instance: str
    link: str
    launched_at: float


@dataclass(frozen=True)
class Unbind:
    node: str


@dataclass(frozen=True)
class SetMark:
    node: str
    kind: str
    since: float


@dataclass(frozen=True)
class ClearMark:
    node: str
    kind: str


@dataclass(frozen=True)
class Replaced:
    """A static node is in service again on a new machine: the event with its measured
    times and the count (service.classify, "Static nodes are kept alive")."""

    node: str
    pool: str
    instance: str
    since: float
    """When the service first saw the old machine fail (gone, not listed, not responding)."""
    launched_at: float
    registered_at: float = 0.0
    """When the new machine's slurmd started (0: Slurm did not say)."""


@dataclass(frozen=True)
class Joined:
    """A node's machine the service launched has joined: its slurmd started (Slurm's
    slurmd_start_time, whole seconds) after the launch. The event with the join share."""

    node: str
    pool: str
    launched_at: float
    slurmd_started_at: float


@dataclass(frozen=True)
class AbandonLaunch:
    token: str
    reason: str


@dataclass(frozen=True)
class CloseRequests:
    ids: tuple[str, ...]


@dataclass(frozen=True)
class ForgetSignalled:
    """The service's signal to these jobs is settled: requeued if it ended them, else
    nothing more to do."""

    jobs: tuple[int, ...]


@dataclass(frozen=True)
class AdvanceInterruption:
    instance: str
    stage: str


Action = (
    Launch | Terminate | PowerDown | MarkDown | PowerUp | Resume | Drain | Requeue | Release | Signal | SetAddress
    | MarkCooldown | Bind | Unbind | SetMark | ClearMark | Replaced | Joined | AbandonLaunch | CloseRequests
    | AdvanceInterruption | ForgetSignalled | KeepAway | LetBack
)
