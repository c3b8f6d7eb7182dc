"""Safe apply: the nodes a rollout makes again or takes out of Slurm are drained first, and
their jobs end before it touches them - or, told to (`--requeue`), are requeued.

The plan says which nodes (slurmforge.plan.engine: `ClusterPlan.drains`, a node with a
machine that is rebuilt or leaves) and `up --local` / `rollout --inventory` act on exactly
that, in this order:

1. `drain`: `scontrol update nodename=... state=drain reason="slurmforge rollout: <why>"`,
   then wait until no job holds them (RUNNING, COMPLETING, ...), bounded by
   `JobPolicy.timeout` (None: as long as the jobs run); with `JobPolicy.requeue`, their jobs
   are requeued at once (`scontrol requeue`: back to pending, they start again on another
   node or after the rollout) and only those Slurm refuses to requeue are waited for.
2. the target's own step: `up --local` makes a rebuilt static node's container again and
   removes a leaving one (LocalProvider.provision), then rolls out;
   `rollout --inventory` rolls out, then `replace` sets each rebuilt static node DOWN with
   the scheduler service's own reason, so the service gives it a new machine (AWS: from the
   pool's launch template, which `pulumi up` changed).
3. `finish`: a rebuilt static node is resumed once a slurmd started after step 1 has
   registered; a rebuilt dynamic node that has a machine is powered down
   (POWER_DOWN_FORCE: it starts on the new hardware when a job needs it). A node that left
   is gone from slurm.conf: nothing to undo.

The drain reason does not start with the service's own prefix ("slurmforge:"): to the
scheduler service a rollout's drain is maintenance it leaves alone (slurm.reasons.held_by_admin),
so it neither replaces the empty node under the rollout nor powers it down.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from slurmforge.errors import ProvisionError, RemoteError, SlurmCommandError, listing
from slurmforge.hostlists import compress
from slurmforge.hosts import Host
from slurmforge.slurm.client import Job, NodeState, SlurmClient
from slurmforge.slurm.reasons import REBUILD as REBUILD_REASON
from slurmforge.slurm.reasons import own_reason

ROLLOUT_REASON = "slurmforge rollout:"
REPLACE_REASON = own_reason(REBUILD_REASON)
"""The scheduler service's own prefix: a DOWN node with it gets a new machine (slurm.reasons)."""
HOLDING = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED"})
"""Job states that hold a node."""
REBUILD, REMOVE = "rebuild", "remove"
POLL = 2.0
REGISTER_TIMEOUT = 300.0
"""Seconds a rebuilt node's new slurmd has to register."""


@dataclass(frozen=True)
class Drain:
    """Nodes the rollout drains first, why (the drain reason), and what then happens to them."""

    nodes: tuple[str, ...]
    why: str
    then: str
    """REBUILD or REMOVE."""
    dynamic: bool = False
    """Nodes of the pool's on-demand part (powered down after, instead of resumed)."""


@dataclass(frozen=True)
class JobPolicy:
    requeue: bool = False
    timeout: float | None = None
    """Seconds to wait for the jobs on drained nodes; None: as long as they run."""

    def words(self) -> str:
        """What happens to the jobs, as the plan says it."""
        if self.requeue:
            return ("the rollout drains them first and requeues their jobs (--requeue; one Slurm will not requeue "
                    "is waited for)")
        bound = f"up to {self.timeout:.0f} s, --drain-timeout" if self.timeout is not None else \
            "as long as they run; --drain-timeout bounds it, --requeue requeues them"
        return f"the rollout drains them first and waits for their jobs to end ({bound})"


@dataclass
class Decision:
    holding: list[int] = field(default_factory=list)
    """Jobs on the drained nodes now."""
    requeue: list[int] = field(default_factory=list)
    """Jobs to requeue now."""
    timed_out: bool = False

    @property
    def done(self) -> bool:
        return not self.holding


def jobs_on(jobs: Iterable[Job], nodes: Iterable[str]) -> list[int]:
    wanted = set(nodes)
    return sorted(j.id for j in jobs if j.state in HOLDING and wanted.intersection(j.node_names()))


def decide(jobs: Sequence[Job], nodes: Sequence[str], policy: JobPolicy, waited: float,
           asked: Iterable[int] = ()) -> Decision:
    """The next step of the wait on `nodes` (drained), `waited` seconds after it began;
    `asked`: jobs already told to requeue (not asked twice: one Slurm refused is waited for)."""
    holding = jobs_on(jobs, nodes)
    decision = Decision(holding)
    if not holding:
        return decision
    if policy.requeue:
        decision.requeue = [j for j in holding if j not in set(asked)
                            and next(job for job in jobs if job.id == j).state != "COMPLETING"]
    decision.timed_out = policy.timeout is not None and waited >= policy.timeout and not decision.requeue
    return decision


def registered_since(node: NodeState, since: float) -> bool:
    """A slurmd started after `since` has registered and answers: the rebuilt node's own."""
    return node.slurmd_started_at >= since and not node.is_not_responding() and node.state != "unknown"


def ours(node: NodeState) -> bool:
    """Drained (or set DOWN for a new machine) by a rollout: resumed by one, never an admin's drain."""
    return node.reason.startswith((ROLLOUT_REASON, REPLACE_REASON))


# --------------------------------------------------------------------------- on the cluster


def controller_client(host: Host) -> SlurmClient:
    """Slurm's commands run on `host` (a controller) over the inventory's connection."""
    from slurmforge.remote.node import executor_for

    node = executor_for(host)

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        try:
            done = node.run(list(argv), timeout=60)
        except RemoteError as exc:
            raise ProvisionError(str(exc)) from None
        return subprocess.CompletedProcess(list(argv), done.rc, done.stdout, done.stderr)

    return SlurmClient(run)


@dataclass
class Drained:
    nodes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    """How long the jobs took to leave the nodes."""
    requeued: list[int] = field(default_factory=list)
    since: float = 0.0
    """When the drain began (this machine's clock)."""


def drain(client: SlurmClient, drains: Sequence[Drain], policy: JobPolicy, say: Callable[[str], None],
          clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> Drained:
    """Drain every node of `drains`, then wait until no job holds them (requeue with the policy)."""
    out = Drained(since=clock())
    if not drains:
        return out
    for item in drains:
        client.drain(list(item.nodes), f"{ROLLOUT_REASON} {item.why}")
        out.nodes += item.nodes
    said: tuple[int, ...] = ()
    while True:
        decision = decide(client.jobs(), out.nodes, policy, clock() - out.since, out.requeued)
        if decision.done:
            break
        if decision.requeue:
            for job in decision.requeue:  # one at a time: a job Slurm will not requeue is waited for
                try:
                    client.requeue([job])
                except SlurmCommandError as exc:
                    say(f"job {job} cannot be requeued ({exc.stderr.strip() or 'refused'}): waiting for it to end")
            out.requeued += decision.requeue
            say(f"requeued {listing([str(j) for j in decision.requeue])} from {compress(out.nodes)}")
            continue
        if decision.timed_out:
            raise ProvisionError(
                f"jobs {listing([str(j) for j in decision.holding])} still run on the drained node(s) "
                f"{compress(out.nodes)} after {policy.timeout:.0f} s: nothing was changed; run again with a longer "
                "--drain-timeout or with --requeue (the nodes stay drained: `scontrol update "
                f"nodename={compress(out.nodes)} state=resume` undoes it)")
        if tuple(decision.holding) != said:
            said = tuple(decision.holding)
            say(f"drained {compress(out.nodes)}: waiting for job(s) {listing([str(j) for j in said])} to end")
        sleep(POLL)
    out.seconds = clock() - out.since
    return out


def replace(client: SlurmClient, drains: Sequence[Drain]) -> list[str]:
    """Rebuilt static nodes (drained and empty) set DOWN with the scheduler service's reason:
    the service gives each a new machine, which registers and clears DOWN (ReturnToService=2)."""
    nodes = [n for d in drains if d.then == REBUILD and not d.dynamic for n in d.nodes]
    if nodes:
        client.mark_down(nodes, REPLACE_REASON)
    return nodes


def finish(client: SlurmClient, drains: Sequence[Drain], since: float, say: Callable[[str], None],
           clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
           timeout: float = REGISTER_TIMEOUT) -> list[str]:
    """Rebuilt static nodes back in service once their new slurmd registered; rebuilt dynamic
    ones powered down. The nodes resumed."""
    static = [n for d in drains if d.then == REBUILD and not d.dynamic for n in d.nodes]
    dynamic = [n for d in drains if d.then == REBUILD and d.dynamic for n in d.nodes]
    if dynamic:
        client.power_down(dynamic, f"{ROLLOUT_REASON} powered down to start on its new hardware")
    left, resumed, deadline = set(static), [], clock() + timeout
    while left:
        ready = [n for n in client.nodes() if n.name in left and registered_since(n, since)]
        back = [n.name for n in ready if ours(n) and (n.is_drain() or n.is_down())]
        if back:
            client.resume(back)
        resumed += back
        left -= {n.name for n in ready}
        if not left:
            break
        if clock() > deadline:
            raise ProvisionError(f"the rebuilt node(s) {compress(sorted(left))} did not register within "
                                 f"{timeout:.0f} s: they stay drained; see their slurmd log, then `scontrol update "
                                 f"nodename={compress(sorted(left))} state=resume`")
        sleep(POLL)
    if resumed:
        say(f"rebuilt and back in service: {compress(resumed)}")
    return sorted(resumed)

