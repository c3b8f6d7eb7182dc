"""The classifier: (Slurm nodes, cloud instances, service state, spec, now) -> actions.

A pure function. Every managed node is first sorted into a `NodeStatus`, then each status
maps to its actions; launches are planned per pool over the fallback chain; orphans,
interruption notices, crashed launches and old requests are handled after the nodes.

Rules learned the hard way:
- a machine is matched to its node by instance id (service bindings) or node tag, and a
  field the cloud has not filled in yet (no private IP, not listed yet) means "not yet";
- a node whose links all lack capacity is powered down (POWER_DOWN_FORCE, never DOWN) and
  its jobs requeued at once; failed links cool down (60 s, doubling); a link the account's
  quota stops is blocked longer (15 min, doubling), and the node's reason names the quota;
- spot notices drain the node and signal the whole job, then requeue after a grace that
  leaves time to checkpoint - or release the node as soon as its jobs left (requeued
  themselves after their checkpoint); the spot link cools down so the job lands elsewhere;
- only nodes whose reason the service or Slurm's own timeouts wrote are reset or replaced;
  an admin's DOWN or DRAIN is left alone;
- a node whose machine is gone while Slurm still runs jobs on it is marked DOWN, so its
  jobs are requeued (or fail) now, not after SlurmdTimeout;
- a mark that started a grace ("missing since", "not responding since") stays while its
  verdict waits for the guard's confirmation: cleared at once, the grace began again
  every loop and the repair was never confirmed;
- a machine that started before its node's power-up was requested is never taken for the
  power-up's: slurmctld ignores the registration of a slurmd whose boot is older than the
  request (node_mgr.c, waiting_for_node_boot) until ResumeTimeout. Such a machine - left
  running from before a power-down the service did not see - is released and a new one
  launched (`stale_machine`);
- a slurmctld that took control (a restart, a crash, a failover) recovered its nodes from
  the state file and never asks a POWERING_UP node to register (ping_nodes.c skips them): a
  slurmd that registered with the slurmctld before it is not heard again, and a job that
  slurmctld had started there is started a second time (slurmd refuses the duplicate; Slurm
  drains the node and holds the job). So a powering-up node's machine that started before
  the takeover is stale too: released, and a new one launched, which registers with the
  slurmctld in control and runs the job once.

Static nodes (a pool's first min_nodes) are kept alive in place, on every target, CLOUD
node or not: Slurm never powers them down, so the service replaces a failed machine under
its node (docs/service.md, "Static nodes are kept alive"):

1. Dead or alive. A machine is *gone* when the provider lists it stopped or terminated,
   or has not listed it for `missing_grace`. A machine it lists pending, running or
   stopping is never taken for gone, whatever Slurm says, since it may still run the
   node's jobs: when its slurmd has not answered for `unresponsive_grace`, or Slurm or
   the health hook failed the node (DOWN, or drained and empty), the service terminates
   it, and goes on only once the provider lists it stopped or terminated. A node its
   health check drained while jobs run there has them signalled (USR1, to checkpoint)
   and requeued `evacuate_grace` later, so that it empties and is replaced.
2. Jobs. A node whose machine is gone is set DOWN with the service's reason: slurmctld
   requeues its batch jobs at once (others end NODE_FAIL). Only then, from the next
   loop, the node is the service's to replace: what squeue still shows on it is
   requeued with `scontrol requeue`,
3. and a new machine is launched through `Machines.start`, as for a power-up (pool's
   first link not cooling down, idempotency token, launch record), one node per launch.
   Its slurmd registers and ReturnToService=2 returns the node to service; a DRAIN that
   outlived the DOWN is lifted (`state=resume`) once the node's slurmd started after the
   launch. One that has not registered by ResumeTimeout is terminated and replaced again.
4. The admin's nodes. DOWN or DRAIN with a reason that neither the service, the health
   hook nor slurmctld wrote is maintenance: no replacement, no requeue, no resume. Only
   when its machine is gone under running jobs is the node set DOWN, the admin's reason
   kept first, so that it stays the admin's.
Terminating a machine and setting a node DOWN are repairs (service.guard): the same
verdict over 3 trusted loops and 20 s, a bounded number a loop, nothing while Slurm's or
the cloud's view is in doubt; only the leader acts (service.leader).

The classifier trusts its World: the daemon builds one only from answers it could check,
and `guard` decides which destructive actions run (docs/service.md).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from slurmforge.hostlists import expand
from slurmforge.hosts import TAG_LINK, TAG_TOKEN
from slurmforge.provider import Instance, InstanceState, Quota
from slurmforge.service import when
from slurmforge.service.actions import (
    AbandonLaunch,
    Action,
    AdvanceInterruption,
    ClearMark,
    CloseRequests,
    Drain,
    ForgetSignalled,
    Joined,
    KeepAway,
    Launch,
    LetBack,
    MarkCooldown,
    MarkDown,
    PowerDown,
    PowerUp,
    Release,
    Replaced,
    Requeue,
    Resume,
    SetAddress,
    SetMark,
    Signal,
    Terminate,
    Unbind,
)
from slurmforge.service.handoff import HandoffKind
from slurmforge.service.slurm import Job, NodeState, signal_name
from slurmforge.service.slurmd_failures import SlurmdFailure
from slurmforge.service.state import (
    INTERRUPTION_COOLDOWN,
    JOINING,
    KEEP_NEW,
    InterruptionRecord,
    Request,
    ServiceState,
    backoff,
)
from slurmforge.service.topology import NodeInfo, Topology

OWN_REASON = "slurmforge:"
"""Reasons the service writes start with this."""
HEALTH_REASON = "health:"
"""The node's health check (slurm.conf's HealthCheckProgram: the join program's health mode)
drains a failing node with a reason starting so."""
MOUNT_PROBLEM = re.compile(r"(/\S*) (?:unreadable|not mounted(?: \(.*\))?|not answering)")
"""One of the health check's mount problems ("<path> unreadable", "... not mounted (its
automount found nothing)", "... not answering"): the join program's check_mounts."""
DUPLICATE_LAUNCH = "Duplicate jobid"
SLURM_REASONS = ("ResumeTimeout reached", "Not responding", "Node unexpectedly rebooted", "Kill task failed",
                 DUPLICATE_LAUNCH)
"""Reasons slurmctld itself writes for nodes that failed; such nodes are reset. "Duplicate
jobid": a launch found its job already there - the node runs a job a slurmctld killed -9
started and lost from its state (agent.c); a new machine ends it."""

LIVE = frozenset({InstanceState.PENDING, InstanceState.RUNNING})
GONE = frozenset({InstanceState.STOPPED, InstanceState.TERMINATED})
"""A machine in these states runs nothing: a static node's may be replaced."""
MISSING, UNRESPONSIVE = "missing", "unresponsive"
EVACUATING = "evacuating"
"""Mark of a node its health check drained under jobs, since the service signalled them."""
NEW_NODE_GRACE = 900.0
"""Seconds a machine of a node neither Slurm nor this service's spec knows is left alone: a
newer spec's node, whose machine `up --local` makes before the rollout publishes that spec
and reconfigures Slurm (a static node of a pool added or grown). Older, it is an orphan."""
STALE_RPC_WINDOW = 65.0
"""Seconds after a static node was set DOWN during which an RPC meant for its dead machine
may still reach the new one. Slurm 24.11: an RPC sent with retry (signals to a job or its
steps - `_signal_job`, `_signal_batch_job` in job_mgr.c, `signal_step_tasks` in
stepmgr.c) that the node did not answer is queued again unless the node is DOWN then
(`_queue_agent_retry`, agent.c: "Do not re-send RPC to DOWN node") and resent when
RPC_RETRY_INTERVAL (60 s) has passed (`_agent_retry`); one queued just before the DOWN is
resent up to 60 s after it, and reaches the new machine if its slurmd registered by then
(the node is no longer DOWN: ReturnToService=2). The message names only the job and step
ids, which restart with the job's next run (`batch_requeue_fini` sets next_step_id = 0),
and slurmd acts on any step of that id (`_rpc_terminate_job` in slurmd/req.c signals every
step of the job id; `cred_revoke` weighs the kill's start_time against nothing but its
own revocation). The kill slurmctld sends at the DOWN itself is not retried
(deallocate_nodes: "retry = 0", and re_kill_job skips DOWN nodes). So the jobs that ran
on the dead machine - not the node - are kept off it for this window: their requeue hold
is only CRED_EXPIRE + 1 s (batch_requeue_fini)."""
SLURMD_FAILED = "slurmd failed on "
"""The service's reason (after OWN_REASON) for a node whose new machine's slurmd stopped on an
error: `slurmd failed on <machine>: <slurmd's line>` (service.slurmd_failures)."""
REPLACEMENT_STOPPED = "replacement stopped: "
"""The service's reason (after OWN_REASON) for a static node whose replacements' slurmd failed
the same way twice: no new machine until an admin resumes the node (docs/service.md)."""
REPLACING = "replacing"
"""Mark of a static node whose machine failed, since the first sign of it, until the node
is in service again on a new one (for the event's measured times)."""


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


FINISHED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                      "DEADLINE", "OUT_OF_MEMORY"})
"""Job states of a job that has ended (squeue's job_state, its first word)."""


class NodeStatus(Enum):
    OFF = "off"
    RELEASE = "release"
    RESET = "reset"
    START_STATIC = "start-static"
    NEEDS_LAUNCH = "needs-launch"
    LAUNCHING = "launching"
    NEEDS_ADDRESS = "needs-address"
    BOOT_FAILED = "boot-failed"
    STALE_MACHINE = "stale-machine"
    """Powering up on a machine that started before the power-up was requested, or before
    the slurmctld in control took control."""
    DIED_BOOTING = "died-booting"
    COMPLETING_ON_NOTHING = "completing-on-nothing"
    """Slurm waits for a job to finish on a node whose machine is gone (a requeue or a
    POWER_DOWN_FORCE that reached the node as its machine went): no slurmd will ever answer,
    and the power-save thread powers down no node with a completing job, so the job would
    wait for SlurmdTimeout (300 s) and the node with it. POWER_DOWN_FORCE again ends it:
    slurmctld takes the node out of each completing job (kill_running_job_by_node_name,
    job_mgr.c) and the requeued job may start elsewhere at once."""
    INSTANCE_LOST = "instance-lost"
    MISSING = "missing"
    NOT_RESPONDING = "not-responding"
    UNRESPONSIVE = "unresponsive"
    REPLACE = "replace"
    EVACUATE = "evacuate"
    """Drained by its health check with jobs still on it: signal them, then requeue them."""
    LEFT_ALONE = "left-alone"
    STORAGE_OUTAGE = "storage-outage"
    """Drained by its health check for a shared mount other nodes lost too: not replaced,
    its jobs not moved; its health check resumes it once the mount answers again."""
    INTERRUPTED = "interrupted"
    HEALTHY = "healthy"
    # static nodes kept alive in place (module docstring)
    MACHINE_STOPPING = "machine-stopping"
    """The machine is on its way down: not gone yet."""
    REPLACEMENT_DUE = "replacement-due"
    """DOWN by the service and the machine gone: requeue what is left, launch a new one."""
    REPLACEMENT_BOOTING = "replacement-booting"
    """The new machine is up or on its way; its slurmd has not registered yet."""
    REPLACEMENT_JOINED = "replacement-joined"
    """The new machine's slurmd registered, the service's DOWN or DRAIN is still on."""
    SLURMD_FAILED = "slurmd-failed"
    """The new machine's slurmd stopped on an error (its line recorded in the node kit): the
    machine is replaced now, not at ResumeTimeout."""
    REPLACEMENT_STOPPED = "replacement-stopped"
    """Two new machines of a static node failed the same way: no third one until an admin
    resumes the node."""


def classify(world: World) -> list[Action]:
    ctx = Context(world)
    actions: list[Action] = [*ctx.retry_pending_launches()]
    needs_launch: list[str] = []
    for node in world.nodes:
        info = world.topology.nodes.get(node.name)
        if info is None:
            continue
        actions += ctx.joined(node, info)
        if not node.is_cloud() and not info.static:
            actions += ctx.gone_under_jobs(node)
            continue
        status = ctx.assess(node, info)
        if status in (NodeStatus.NEEDS_LAUNCH, NodeStatus.REPLACEMENT_DUE, NodeStatus.STALE_MACHINE):
            needs_launch.append(node.name)  # a stale machine is terminated first (applier order)
        actions += ctx.respond(status, node, info)
    actions += plan_launches(ctx, needs_launch)
    actions += ctx.orphans()
    actions += ctx.interruptions()
    actions += ctx.signalled()
    actions += ctx.kept_away()
    actions += ctx.stale_bindings()
    actions += ctx.duplicate_launches()
    actions += ctx.close_requests()
    return list(dict.fromkeys(actions))


def plan_launches(ctx: Context, nodes: Iterable[str]) -> list[Action]:
    """One Launch per pool on the first link of its chain not cooling down; when every
    link cools down, power the nodes down and requeue their jobs at once.

    A static node replaced in place gets a Launch of its own (the guard and the pool page
    see one machine per replacement) and, with every link cooling, waits DOWN: it has no
    power save to return to, and its jobs were requeued when it went DOWN."""
    by_pool: dict[str, list[str]] = {}
    for name in nodes:
        by_pool.setdefault(ctx.topology.nodes[name].pool, []).append(name)
    actions: list[Action] = []
    for pool, members in sorted(by_pool.items()):
        link = ctx.available_link(pool)
        in_place = sorted(n for n in members if ctx.in_place(n))
        if link is not None:
            actions += [Launch(pool, link, (n,), launch_token(link, [n], ctx.now)) for n in in_place]
        members = [n for n in members if n not in in_place]
        if not members:
            continue
        members.sort(key=lambda n: (ctx.state.node_jobs.get(n, 0), n))
        jobs = tuple(sorted({ctx.state.node_jobs[n] for n in members if n in ctx.state.node_jobs}))
        if link is None:
            why = ctx.why_no_link(pool)
            actions.append(PowerDown(tuple(members), f"{OWN_REASON} {why}"))
            if jobs:
                actions.append(Requeue(jobs, why))
            continue
        actions.append(Launch(pool, link, tuple(members), launch_token(link, members, ctx.now), jobs))
    return actions


def launch_token(link: str, nodes: Sequence[str], now: float) -> str:
    """Deterministic, so the classifier stays pure; unique per (link, nodes, moment).
    EC2 ClientToken allows 64 ASCII characters."""
    digest = hashlib.sha256(f"{link}|{','.join(nodes)}|{now:.6f}".encode()).hexdigest()
    return f"sf-{digest[:40]}"


def is_recoverable(reason: str) -> bool:
    return reason.startswith((OWN_REASON, HEALTH_REASON)) or reason.startswith(SLURM_REASONS)


def held_by_admin(node: NodeState) -> bool:
    """DOWN or DRAIN for a reason an admin wrote: maintenance, the admin's to end."""
    return (node.is_down() or node.is_drain()) and not is_recoverable(node.reason)


def sick_under_jobs(node: NodeState) -> bool:
    """Drained by its health check while jobs still run there: they are moved off (signal,
    then requeue), so the node empties and is replaced, instead of waiting for the jobs
    on a node that lost its storage or a GPU."""
    return node.is_drain() and not node.is_down() and node.has_jobs() and node.reason.startswith(HEALTH_REASON)


def health_problems(node: NodeState) -> list[str]:
    """The problems a node's health check drained it for ([] when it did not)."""
    if not (node.is_drain() and node.reason.startswith(HEALTH_REASON)):
        return []
    return [p.strip() for p in node.reason[len(HEALTH_REASON):].split(";") if p.strip()]


def lost_mounts(problems: Iterable[str]) -> set[str]:
    """The shared mounts among a health check's problems."""
    return {m.group(1) for m in map(MOUNT_PROBLEM.fullmatch, problems) if m}


STORAGE_OUTAGE_NODES = 2
"""Nodes whose health checks lost the same shared mount at once: the file system's outage,
not their machines' fault (a Ceph or NAS restart, a whole cluster started again before its
storage answered). Replacing them would fix nothing and throw their jobs away."""
MOUNT_GRACE = 60.0
"""Seconds a node drained only for lost mounts waits before it is replaced on its own: two
of the health check's intervals (slurmforge.render.HEALTH_CHECK_INTERVAL, 30 s), so every
other node's check has run meanwhile - the first node to see a storage outage is not
replaced before the others report it - and a mount back by then lifts the drain itself."""


def replacement_stopped(node: NodeState) -> bool:
    """A static node whose replacements failed the same way twice (the service's reason)."""
    return node.is_down() and node.reason.startswith(_own(REPLACEMENT_STOPPED))


def held_by_service(node: NodeState) -> bool:
    """DOWN or DRAIN for a reason the service wrote."""
    return (node.is_down() or node.is_drain()) and node.reason.startswith(OWN_REASON)


CLOCK_SLACK = 2.0
"""Seconds of doubt when a machine's start is compared with a request: Slurm counts boot
times in whole seconds, EC2's LaunchTime too, and two hosts' clocks differ a little."""


def started_at(state: ServiceState, node: str, inst: Instance) -> float | None:
    """When a node's machine started: the service's own launch of it (its clock, the one the
    hand-offs carry), else what the cloud says; None when nobody knows."""
    binding = state.bindings.get(node)
    if binding is not None and binding.instance == inst.id:
        return binding.launched_at
    return inst.launched_at


def boot_needed_after(state: ServiceState, node: str) -> tuple[float, str] | None:
    """The moment a powering-up node's machine must have started after for Slurm to take its
    slurmd, and what happened then: the newest open resume request that names the node
    (written as slurmctld set the node's boot request time), or the newest takeover by a
    slurmctld, whichever is later."""
    requested, took = _request_times(state.requests)
    moments = ([(requested[node], "its power-up was requested")] if node in requested else []) + (
        [(took, "slurmctld took control")] if took is not None else [])
    return max(moments, default=None)


@functools.lru_cache(maxsize=4)
def _request_times(requests: tuple[Request, ...]) -> tuple[dict[str, float], float | None]:
    """node -> its newest open resume request, and the newest takeover: once per loop's
    requests (the classifier and the guard ask per node; hostlists are expanded once)."""
    requested: dict[str, float] = {}
    for r in requests:
        if r.kind is HandoffKind.RESUME:
            for name in expand(r.nodes):
                requested[name] = max(requested.get(name, r.at), r.at)
    took = max((r.at for r in requests if r.kind is HandoffKind.CONTROL), default=None)
    return requested, took


def stale_machine(state: ServiceState, node: str, inst: Instance) -> bool:
    """A live machine of a powering-up node that started before `boot_needed_after`: Slurm
    will not take its slurmd (or, after a takeover, may start its job a second time)."""
    needed, started = boot_needed_after(state, node), started_at(state, node, inst)
    return needed is not None and started is not None and started < needed[0] - CLOCK_SLACK


class Context:
    """Indexes over one World, and the per-node rules."""

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
        lost: dict[str, int] = {}
        for slurm_node in world.nodes:
            for path in lost_mounts(health_problems(slurm_node)):
                lost[path] = lost.get(path, 0) + 1
        self.storage_out = frozenset(p for p, n in lost.items() if n >= STORAGE_OUTAGE_NODES)

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

    def unresponsive(self, node: NodeState) -> NodeStatus:
        """A node Slurm says is not responding: UNRESPONSIVE once the grace has passed."""
        late = self.past_grace(node.name, UNRESPONSIVE, self.tun.unresponsive_grace)
        return NodeStatus.UNRESPONSIVE if late else NodeStatus.NOT_RESPONDING

    def recently_launched(self, node: str) -> bool:
        binding = self.state.bindings.get(node)
        return binding is not None and self.now - binding.launched_at < self.tun.listing_grace

    def in_place(self, name: str) -> bool:
        """A static node Slurm has up (not powered down, not powering up, no spot notice
        under way): a failed machine is replaced under it, the node staying as it is."""
        node, info = self.slurm.get(name), self.topology.nodes.get(name)
        return (node is not None and info is not None and info.static and node.is_powered()
                and not node.is_powering_up() and name not in self.interrupted)

    # ------------------------------------------------------------------ sorting

    def assess(self, node: NodeState, info: NodeInfo) -> NodeStatus:
        inst = self.instance(node.name)
        live = inst is not None and inst.state in LIVE
        if not node.is_powered():
            return self._assess_off(node, info, live)
        if node.name in self.interrupted:
            return NodeStatus.INTERRUPTED
        if node.is_powering_up():
            return self._assess_booting(node, inst)
        if info.static:
            return self._assess_static(node, self.machine(node.name))
        return self._assess_up(node, self.machine(node.name))

    def waits_for_storage(self, node: NodeState) -> bool:
        """Drained by its health check only for shared mounts that other nodes lost too, or
        for MOUNT_GRACE s whatever the others say."""
        problems = health_problems(node)
        lost = lost_mounts(problems)
        if not problems or len(lost) != len(problems):
            return False
        return lost <= self.storage_out or self.now - node.reason_changed_at < MOUNT_GRACE

    def stale_health_verdict(self, node: NodeState, inst: Instance) -> NodeStatus | None:
        """A health drain older than the node's machine judged an earlier machine (one `up`
        or a restart made again): the new one gets its own check. Resumed once its slurmd
        registered (its health check drains it again if it is sick too); replaced when it
        has not registered by ResumeTimeout."""
        if not (node.reason.startswith(HEALTH_REASON) and (node.is_drain() or node.is_down())
                and node.reason_changed_at > 0):
            return None
        binding = self.state.bindings.get(node.name)
        launched = binding.launched_at if binding is not None and binding.instance == inst.id else 0.0
        started = max(inst.launched_at or 0.0, launched)
        if started <= node.reason_changed_at + CLOCK_SLACK:
            return None
        if node.slurmd_started_at >= started - CLOCK_SLACK:
            return NodeStatus.REPLACEMENT_JOINED
        if self.now - started > self.topology.resume_timeout:
            return None
        return NodeStatus.REPLACEMENT_BOOTING

    def _assess_off(self, node: NodeState, info: NodeInfo, live: bool) -> NodeStatus:
        if live:
            return NodeStatus.RELEASE
        if node.is_powering_down():
            if "COMPLETING" in node.flags and "POWERING_DOWN" not in node.flags:
                return NodeStatus.COMPLETING_ON_NOTHING
            return NodeStatus.OFF
        if (node.is_down() or node.is_drain()) and is_recoverable(node.reason):
            return NodeStatus.RESET
        if info.static and not (node.is_down() or node.is_drain()) and self.available_link(info.pool):
            return NodeStatus.START_STATIC
        return NodeStatus.OFF

    def _assess_booting(self, node: NodeState, inst: Instance | None) -> NodeStatus:
        if inst is None:
            if node.name in self.retrying_nodes or self.recently_launched(node.name):
                return NodeStatus.LAUNCHING
            return NodeStatus.NEEDS_LAUNCH
        if inst.state not in LIVE:
            return NodeStatus.DIED_BOOTING
        if stale_machine(self.state, node.name, inst):
            return NodeStatus.STALE_MACHINE
        binding = self.state.bindings.get(node.name)
        started = inst.launched_at or (binding.launched_at if binding else None)
        if started is not None and self.slurmd_failure(node.name, started) is not None:
            return NodeStatus.SLURMD_FAILED
        if started is not None and self.now - started > self.topology.resume_timeout:
            return NodeStatus.BOOT_FAILED
        if inst.address and inst.address != node.address:
            return NodeStatus.NEEDS_ADDRESS
        return NodeStatus.LAUNCHING

    def _assess_up(self, node: NodeState, inst: Instance | None) -> NodeStatus:
        if inst is None:
            if self.recently_launched(node.name):
                return NodeStatus.HEALTHY
            lost = self.past_grace(node.name, MISSING, self.tun.missing_grace)
            return NodeStatus.INSTANCE_LOST if lost else NodeStatus.MISSING
        if inst.state not in LIVE:
            return NodeStatus.INSTANCE_LOST
        if self.waits_for_storage(node):
            return NodeStatus.STORAGE_OUTAGE
        if sick_under_jobs(node):
            return NodeStatus.EVACUATE
        if node.is_down() or (node.is_drain() and not node.has_jobs()):
            return NodeStatus.REPLACE if is_recoverable(node.reason) else NodeStatus.LEFT_ALONE
        if node.is_not_responding():
            return self.unresponsive(node)
        return NodeStatus.HEALTHY

    def _assess_static(self, node: NodeState, inst: Instance | None) -> NodeStatus:
        """A static node that is up (in_place): the module docstring's rules, in order."""
        if held_by_admin(node):
            return NodeStatus.LEFT_ALONE
        if replacement_stopped(node):
            return NodeStatus.REPLACEMENT_STOPPED
        binding = self.state.bindings.get(node.name)
        unlisted = binding is not None and binding.instance not in self.by_id and self.recently_launched(node.name)
        if node.name in self.retrying_nodes or unlisted:  # a launch under way: the old machine is not the node's
            return NodeStatus.REPLACEMENT_BOOTING if held_by_service(node) else NodeStatus.HEALTHY
        if inst is None:
            lost = self.past_grace(node.name, MISSING, self.tun.missing_grace)
            return self._machine_gone(node, inst) if lost else NodeStatus.MISSING
        if inst.state in GONE:
            return self._machine_gone(node, inst)
        if inst.state not in LIVE:
            return NodeStatus.MACHINE_STOPPING
        if held_by_service(node):
            started = self.machine_started(node, inst)
            if node.slurmd_started_at >= started > 0:
                return NodeStatus.REPLACEMENT_JOINED
            if self.slurmd_failure(node.name, started) is not None:
                return NodeStatus.SLURMD_FAILED
            if self.now - started > self.topology.resume_timeout:
                return NodeStatus.BOOT_FAILED
            if node.is_cloud() and inst.address and inst.address != node.address:
                return NodeStatus.NEEDS_ADDRESS  # a node without CLOUD keeps the address the rollout gave it
            return NodeStatus.REPLACEMENT_BOOTING
        stale = self.stale_health_verdict(node, inst)
        if stale is not None:
            return stale
        if node.is_not_responding():
            return self.unresponsive(node)
        if self.waits_for_storage(node):
            return NodeStatus.STORAGE_OUTAGE
        if sick_under_jobs(node):
            return NodeStatus.EVACUATE
        if node.is_down() or node.is_drained():
            return NodeStatus.REPLACE  # failed by Slurm or the health check (not the admin's)
        return NodeStatus.HEALTHY

    def _machine_gone(self, node: NodeState, inst: Instance | None) -> NodeStatus:
        """Gone before the node is DOWN by the service: set it DOWN. After: replace it,
        unless it was the replacement itself (launched since), which died booting."""
        if not (held_by_service(node) and node.is_down()):
            return NodeStatus.INSTANCE_LOST
        binding = self.state.bindings.get(node.name)
        if binding is not None and binding.launched_at >= node.reason_changed_at and (
                inst is None or binding.instance == inst.id):
            return NodeStatus.DIED_BOOTING
        return NodeStatus.REPLACEMENT_DUE

    def slurmd_failure(self, name: str, started: float) -> SlurmdFailure | None:
        """The node's recorded slurmd failure, when its current machine (started at `started`)
        wrote it."""
        failure = self.world.slurmd_failures.get(name)
        return failure if failure is not None and failure.at >= started - CLOCK_SLACK else None

    def _slurmd_failed(self, node: NodeState, inst: Instance | None) -> list[Action]:
        """A static node's new machine whose slurmd failed: replaced at once, the reason on the
        node; a second new machine failing the same way ends the replacements, in one line."""
        if inst is None:
            return []
        failure = self.world.slurmd_failures[node.name]
        before = node.reason.removeprefix(_own(SLURMD_FAILED))
        previous, _, line = before.partition(": ")
        if before != node.reason and line == failure.line and previous != inst.id:
            stop = _own(f"{REPLACEMENT_STOPPED}slurmd failed the same way on 2 new machines "
                        f"({previous}, {inst.id}): {failure.line}")
            return [MarkDown((node.name,), stop), Terminate(inst.id, node.name, stop)]
        detail = f"{SLURMD_FAILED}{inst.id}: {failure.line}"
        # the reason is the memory of this failure (and, changed after the launch, makes the
        # machine's end a replacement due rather than a death while booting)
        return [MarkDown((node.name,), _own(detail)), Terminate(inst.id, node.name, detail)]

    def machine_started(self, node: NodeState, inst: Instance) -> float:
        """When the node's live machine started, as far as anyone knows: the service's
        launch of it, the cloud's launch time, or else when the service set the node
        DOWN (a machine that came back later started after that)."""
        binding = self.state.bindings.get(node.name)
        known = [inst.launched_at or 0.0, node.reason_changed_at]
        if binding is not None and binding.instance == inst.id:
            known.append(binding.launched_at)
        return max(known)

    # ------------------------------------------------------------------ acting

    def respond(self, status: NodeStatus, node: NodeState, info: NodeInfo) -> list[Action]:
        name, inst = node.name, self.machine(node.name)
        actions = self._clear_marks(name, status)
        if self.in_place(name):
            return actions + self._keep_alive(status, node, info, inst)
        if status is NodeStatus.RELEASE and inst is not None:
            # no longer the node's: a power-up that follows (a restarted slurmctld may power it
            # up again at once) launches a new machine now, not after the listing grace
            actions.append(Terminate(inst.id, name, f"node {name} is powered down"))
            actions += self._unbind(name, inst)
        elif status is NodeStatus.RESET:
            actions.append(PowerDown((name,), _own(f"reset after '{node.reason}'")))
        elif status is NodeStatus.COMPLETING_ON_NOTHING:
            actions.append(PowerDown((name,), node.reason or _own(f"no machine finishes {name}'s jobs")))
        elif status is NodeStatus.START_STATIC:
            actions.append(PowerUp((name,)))
        elif status is NodeStatus.NEEDS_ADDRESS and inst is not None and inst.address:
            actions.append(SetAddress(name, inst.address))
        elif status is NodeStatus.DIED_BOOTING and inst is not None:
            actions += self._died_booting(name, inst)
        elif status is NodeStatus.STALE_MACHINE and inst is not None:
            at, what = boot_needed_after(self.state, name) or (0.0, "")
            actions.append(Terminate(inst.id, name, f"stale: {inst.id} of {name} started before {what} "
                                                    f"({when.clock(at)}); Slurm waits for a new boot"))
            actions += self._unbind(name, inst)
        elif status is NodeStatus.SLURMD_FAILED and inst is not None:
            failure = self.world.slurmd_failures[name]
            actions += self._replace(name, inst, f"{SLURMD_FAILED}{inst.id}: {failure.line}")
        elif status is NodeStatus.INSTANCE_LOST and node.has_jobs() and not node.is_down():
            actions.append(MarkDown((name,), _own(_detail(status, node, inst))))
        elif status in _REPLACING:
            actions += self._replace(name, inst, _detail(status, node, inst))
        elif status in _GRACE_MARK:
            actions += self._start_grace(name, status)
        elif status is NodeStatus.EVACUATE:
            actions += self._evacuate(name)
        return actions

    def _evacuate(self, name: str) -> list[Action]:
        """The jobs of a node its health check drained: signalled once (to checkpoint), then
        requeued after `evacuate_grace`; the empty node is then replaced (REPLACE)."""
        jobs = self.world.jobs.get(name, ())
        if not jobs:
            return []
        age = self.mark_age(name, EVACUATING)
        why = f"{name} failed its health check"
        if age is None:
            return [SetMark(name, EVACUATING, self.now), Signal(jobs, self.tun.signal, why)]
        return [Requeue(jobs, why)] if age >= self.tun.evacuate_grace else []

    def _unbind(self, name: str, inst: Instance) -> list[Action]:
        """Forget the node's binding to a machine it is about to lose."""
        binding = self.state.bindings.get(name)
        return [Unbind(name)] if binding is not None and binding.instance == inst.id else []

    def _start_grace(self, name: str, status: NodeStatus) -> list[Action]:
        """The mark a grace counts from (MISSING, NOT_RESPONDING), set once."""
        kind = _GRACE_MARK[status]
        return [SetMark(name, kind, self.now)] if self.mark_age(name, kind) is None else []

    def _keep_alive(self, status: NodeStatus, node: NodeState, info: NodeInfo, inst: Instance | None
                    ) -> list[Action]:
        """A static node in place: terminate a failed machine, set the node DOWN once its
        machine is gone, then requeue and launch (plan_launches), resume once the new
        machine's slurmd registered, and say when it is back."""
        name = node.name
        if status in _GRACE_MARK:
            return self._start_grace(name, status)
        if status is NodeStatus.LEFT_ALONE:
            return self.gone_under_jobs(node)
        if status is NodeStatus.HEALTHY:
            return self._replaced(node, info)
        if status is NodeStatus.EVACUATE:
            return self._evacuate(name)
        if status is NodeStatus.NEEDS_ADDRESS and inst is not None and inst.address:
            return [SetAddress(name, inst.address)]
        if status is NodeStatus.REPLACEMENT_JOINED:
            # at once: the jobs a stale RPC could hit are kept off the node, not the node held
            return [Resume((name,))]
        if status is NodeStatus.DIED_BOOTING:
            return self._died_booting(name, inst)
        if status is NodeStatus.SLURMD_FAILED:
            return self._mark_replacing(name) + self._slurmd_failed(node, inst)
        if status is NodeStatus.REPLACEMENT_DUE:
            jobs = self.world.jobs.get(name, ())
            actions: list[Action] = [Requeue(jobs, f"replacing {name}")] if jobs else []
            until = node.reason_changed_at + STALE_RPC_WINDOW
            if jobs and until > self.now:  # they ran on the dead machine too
                actions.append(KeepAway(name, jobs, until))
            if inst is not None and inst.state is InstanceState.STOPPED:  # runs nothing, costs its disks
                actions.append(Terminate(inst.id, name, f"replaced: instance {inst.id} of {name} is stopped"))
            return actions
        if status not in _REPLACING:
            return []
        actions = self._mark_replacing(name)
        detail = _detail(status, node, inst)
        if status is NodeStatus.INSTANCE_LOST:
            # its jobs, not the node, kept off it for STALE_RPC_WINDOW after the DOWN
            return [*actions, MarkDown((name,), _own(detail), keep_away=self.world.jobs.get(name, ()),
                                       keep_for=STALE_RPC_WINDOW)]
        if inst is not None and inst.state in LIVE:
            actions.append(Terminate(inst.id, name, detail))
        return actions

    def _mark_replacing(self, name: str) -> list[Action]:
        """The REPLACING mark, dated from the first sign of trouble (an earlier mark)."""
        marks = self.state.marks.get(name, {})
        return [] if REPLACING in marks else [SetMark(name, REPLACING, min([*marks.values(), self.now]))]

    def _replaced(self, node: NodeState, info: NodeInfo) -> list[Action]:
        """In service again: with a new machine launched since the trouble began, that
        is a replacement (its times go to the event); without, the old one came back."""
        since = self.state.marks.get(node.name, {}).get(REPLACING)
        binding = self.state.bindings.get(node.name)
        if since is None or binding is None or binding.launched_at < since:
            return []
        registered = node.slurmd_started_at if node.slurmd_started_at >= binding.launched_at else 0.0
        return [Replaced(node.name, info.pool, binding.instance, since, binding.launched_at, registered)]

    def joined(self, node: NodeState, info: NodeInfo) -> list[Action]:
        """A machine the service launched (the JOINING mark, dated by the launch) whose slurmd
        has started since: the join share's event. The mark goes without one when the node
        went back to power save or did not register by ResumeTimeout. Slurm's slurmd start
        time has whole seconds: a slurmd that started in the launch's second counts."""
        since = self.state.marks.get(node.name, {}).get(JOINING)
        if since is None:
            return []
        if node.slurmd_started_at >= int(since) > 0:
            return [Joined(node.name, info.pool, since, node.slurmd_started_at), ClearMark(node.name, JOINING)]
        if not node.is_powered() or self.now - since > self.topology.resume_timeout:
            return [ClearMark(node.name, JOINING)]
        return []

    def _clear_marks(self, name: str, status: NodeStatus) -> list[Action]:
        """Marks the status no longer needs. The mark a verdict rests on stays while the
        verdict waits for the guard; REPLACING stays until the node is in service again
        (HEALTHY) or the admin takes it over (LEFT_ALONE); JOINING is `joined`'s."""
        if name not in self.state.marks:
            return []
        keep = _MARKS_KEPT.get(status, frozenset()) | {JOINING}
        if status not in (NodeStatus.HEALTHY, NodeStatus.LEFT_ALONE):
            keep |= {REPLACING}
        return [ClearMark(name, kind) for kind in self.state.marks[name] if kind not in keep]

    def _died_booting(self, name: str, inst: Instance | None) -> list[Action]:
        """The machine went away before the node registered (spot taken back at once,
        failed boot): forget it and cool its link, so the next loop launches elsewhere."""
        binding = self.state.bindings.get(name)
        link = binding.link if binding else ((inst.pool if inst else None) or self.topology.nodes[name].pool)
        what = f"instance {inst.id} {inst.state.value}" if inst else \
            f"instance {binding.instance if binding else '-'} not listed"
        return [Unbind(name), self._cooldown(link, f"{what} while booting")]

    def gone_under_jobs(self, node: NodeState) -> list[Action]:
        """Tell Slurm that the machine is gone while jobs run on the node, and nothing
        more: for a node the spec and Slurm disagree about (no CLOUD state, not static)
        and for one in the admin's maintenance, whose reason stays first (and so the
        admin's: the node is not replaced)."""
        inst = self.machine(node.name)
        if inst is None or inst.state not in GONE or not node.has_jobs() or node.is_down():
            return []
        reason = _own(_detail(NodeStatus.INSTANCE_LOST, node, inst))
        return [MarkDown((node.name,), f"{node.reason}; {reason}" if held_by_admin(node) else reason)]

    def _replace(self, name: str, inst: Instance | None, detail: str) -> list[Action]:
        actions: list[Action] = [PowerDown((name,), _own(detail))]
        if inst is not None and inst.state in LIVE:
            actions.append(Terminate(inst.id, name, detail))
        return actions

    def _cooldown(self, link: str, reason: str, at_least: float = 0.0) -> MarkCooldown:
        previous = self.state.cooldowns.get(link)
        failures = (previous.failures if previous else 0) + 1
        return MarkCooldown(link, self.now + max(backoff(failures), at_least), failures, reason)

    # ------------------------------------------------------------------ after the nodes

    def retry_pending_launches(self) -> list[Action]:
        actions: list[Action] = []
        for record in self.state.pending_launches:
            if record.token in self.retrying_tokens:
                actions.append(Launch(record.pool, record.link, record.nodes, record.token, record.jobs, retry=True))
            else:
                actions.append(AbandonLaunch(record.token, "retry window passed"))
        return actions

    def orphans(self) -> list[Action]:
        actions: list[Action] = []
        for inst in self.world.instances:
            if inst.state not in LIVE:
                continue
            why = self._orphan_reason(inst)
            if why:
                actions.append(Terminate(inst.id, self.owner[inst.id], why))
        return actions

    def _orphan_reason(self, inst: Instance) -> str | None:
        node = self.owner[inst.id]
        ours = inst.pool is not None or TAG_TOKEN in inst.tags
        if node is None:
            if not ours or inst.tags.get(TAG_TOKEN) in self.retrying_tokens:
                return None
            return f"orphan: instance {inst.id} belongs to no node"
        slurm_node = self.slurm.get(node)
        if slurm_node is None and node not in self.topology.nodes and ours \
                and self.now - (inst.launched_at or 0.0) < NEW_NODE_GRACE:
            return None  # a newer spec's node: the rollout under way adds it
        if slurm_node is None or node not in self.topology.nodes:
            return f"orphan: node {node} is not in the cluster" if ours else None
        current = self.instance(node)
        if slurm_node.is_cloud() and current is not None and current.id != inst.id:
            return f"duplicate: node {node} already has {current.id}"
        return None

    def interruptions(self) -> list[Action]:
        actions: list[Action] = []
        for record in self.state.interruptions:
            actions += self._interruption(record)
        return actions

    def _interruption(self, record: InterruptionRecord) -> list[Action]:
        inst = self.by_id.get(record.instance)
        node = record.node or self.owner.get(record.instance)
        if node is None or node not in self.slurm or node not in self.topology.nodes:
            return [AdvanceInterruption(record.instance, "done")]
        jobs = self.world.jobs.get(node, ())
        if record.stage == "new":
            binding = self.state.bindings.get(node)
            link = (record.link or (binding.link if binding else None) or (inst.tags.get(TAG_LINK) if inst else None)
                    or self.topology.nodes[node].pool)
            actions: list[Action] = [Drain((node,), _own("spot interruption notice"))]
            if jobs:
                actions.append(Signal(jobs, self.tun.signal, f"spot interruption notice for {node}"))
            return [*actions, self._cooldown(link, "spot interruption",
                                             at_least=self.tun.checkpoint_grace + INTERRUPTION_COOLDOWN),
                    AdvanceInterruption(record.instance, "signalled")]
        gone = inst is None or inst.state not in LIVE
        busy = bool(jobs) or self.slurm[node].has_jobs()
        if self.now - record.noticed_at < self.tun.checkpoint_grace and not gone and busy:
            return []  # time to checkpoint; a job that requeued itself on the signal has left
        actions = [Requeue(jobs, "spot interruption")] if jobs else []
        actions.append(PowerDown((node,), _own("spot instance interrupted")))
        if not gone and inst is not None:
            actions.append(Terminate(inst.id, node, "spot instance interrupted"))
        return [*actions, AdvanceInterruption(record.instance, "done")]

    def signalled(self) -> list[Action]:
        """A job the service signalled and that the signal ended - a script that neither
        traps it nor passes it on, for which USR1 is the end - is requeued: the service's
        signal never ends a job that Slurm would have requeued when its machine went.
        A job still running (or requeued by its own handler) is left; the record goes once
        the job has ended, or once slurmctld no longer holds it."""
        if self.world.signalled is None:
            return []
        actions: list[Action] = []
        settled: list[int] = []
        for job_id, record in sorted(self.state.signalled.items()):
            job = self.world.signalled.get(job_id)
            if job is not None and job.state not in FINISHED:
                continue
            if job is not None and job.exit_signal == signal_name(record.signal):
                actions.append(Requeue((job_id,), f"its batch script ended on the service's {record.signal} "
                                                  f"({record.why or 'signalled'})"))
            settled.append(job_id)
        return [*actions, ForgetSignalled(tuple(settled))] if settled else actions

    def kept_away(self) -> list[Action]:
        """Jobs kept off a replaced node (STALE_RPC_WINDOW): excluded while the window lasts
        (again after a service restart that came between the record and the exclusion),
        let back once it is over."""
        due: dict[tuple[str, float], list[int]] = {}
        over: dict[str, list[int]] = {}
        for record in self.state.kept_away:
            if self.now >= record.until:
                over.setdefault(record.node, []).append(record.job)
            elif record.stage == KEEP_NEW:
                due.setdefault((record.node, record.until), []).append(record.job)
        return [*(KeepAway(node, tuple(jobs), until) for (node, until), jobs in sorted(due.items())),
                *(LetBack(node, tuple(jobs)) for node, jobs in sorted(over.items()))]

    def stale_bindings(self) -> list[Action]:
        """Bindings of nodes that are off (or gone from Slurm) and have no live machine."""
        actions: list[Action] = []
        for name, binding in self.state.bindings.items():
            node = self.slurm.get(name)
            inst = self.by_id.get(binding.instance)
            if (node is None or not node.is_powered()) and (inst is None or inst.state not in LIVE):
                actions.append(Unbind(name))
        return actions

    def duplicate_launches(self) -> list[Action]:
        """A slurmctld killed -9 may have started a job and lost that from its state; the next
        one starts it again, the node's slurmd refuses the duplicate, and slurmctld drains
        the node ("Duplicate jobid") and requeues the job held. The node is reset or
        replaced like any node Slurm failed (the old machine and its copy of the job go); the
        job is released, so that it runs once, on a machine without that copy."""
        if not self.world.held or not any(DUPLICATE_LAUNCH in n.reason for n in self.world.nodes):
            return []
        return [Release(self.world.held, "its launch found a copy a killed slurmctld had started")]

    def close_requests(self) -> list[Action]:
        done = [r.id for r in self.state.requests if self._request_done(r)]
        return [CloseRequests(tuple(done))] if done else []

    def _request_done(self, request: Request) -> bool:
        """Suspend and resume-fail requests are only recorded; a resume request is done
        once none of its nodes is still on its way up; a takeover after ResumeTimeout."""
        age = self.now - request.at
        if request.kind is HandoffKind.CONTROL:  # stale_machine reads it while Slurm may still wait
            return age > self.topology.resume_timeout
        if request.kind is not HandoffKind.RESUME or age > self.tun.request_max_age:
            return True
        if age <= self.tun.listing_grace:
            return False
        return not any(self.slurm[n].is_powering_up() for n in expand(request.nodes) if n in self.slurm)


def _own(detail: str) -> str:
    return f"{OWN_REASON} {detail}"


def _detail(status: NodeStatus, node: NodeState, inst: Instance | None) -> str:
    if inst is None and status is NodeStatus.INSTANCE_LOST:
        return f"no machine of {node.name} is listed"
    return _REPLACING[status].format(node=node.name, instance=inst.id if inst else "-",
                                     state=inst.state.value if inst else "-", reason=node.reason)


_REPLACING = {
    NodeStatus.BOOT_FAILED: "bootstrap failure: {node} not registered by resume timeout on {instance}",
    NodeStatus.INSTANCE_LOST: "instance {instance} of {node} is {state}",
    NodeStatus.UNRESPONSIVE: "slurmd on {node} not responding",
    NodeStatus.REPLACE: "replacing {node} ({reason})",
}

_MARKS_KEPT = {
    NodeStatus.MISSING: frozenset({MISSING}),
    NodeStatus.INSTANCE_LOST: frozenset({MISSING}),
    NodeStatus.REPLACEMENT_DUE: frozenset({MISSING}),
    NodeStatus.DIED_BOOTING: frozenset({MISSING}),
    NodeStatus.NOT_RESPONDING: frozenset({UNRESPONSIVE}),
    NodeStatus.UNRESPONSIVE: frozenset({UNRESPONSIVE}),
    NodeStatus.EVACUATE: frozenset({EVACUATING}),
}
"""The marks each status rests on (Context._clear_marks)."""

_GRACE_MARK = {NodeStatus.MISSING: MISSING, NodeStatus.NOT_RESPONDING: UNRESPONSIVE}
"""The statuses that start a grace, and the mark it counts from."""
