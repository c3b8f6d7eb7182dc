"""Responding to a node's status: the actions each `NodeStatus` calls for. A static node Slurm
has up is kept alive in place (`_keep_alive`: its failed machine terminated, the node set DOWN
once the machine is gone, resumed when the new one joined); any other node is released, reset,
powered up or replaced through power save (`respond`). Also the join share's event (`joined`)
and a node whose machine went while Slurm still runs jobs there (`gone_under_jobs`)."""

from __future__ import annotations

from slurmforge.provider import Instance, InstanceState
from slurmforge.service import when
from slurmforge.service.actions import (
    Action,
    ClearMark,
    Joined,
    KeepAway,
    MarkCooldown,
    MarkDown,
    PowerDown,
    PowerUp,
    Replaced,
    Requeue,
    Resume,
    SetAddress,
    SetMark,
    Signal,
    Terminate,
    Unbind,
)
from slurmforge.service.assess import NodeStatus, boot_needed_after
from slurmforge.service.state import JOINING, backoff
from slurmforge.service.topology import NodeInfo
from slurmforge.service.world import EVACUATING, GONE, LIVE, MISSING, REPLACING, UNRESPONSIVE, Lookups
from slurmforge.slurm.client import NodeState
from slurmforge.slurm.reasons import REPLACEMENT_STOPPED, SLURMD_FAILED, held_by_admin, own_reason

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


def respond(ctx: Lookups, status: NodeStatus, node: NodeState, info: NodeInfo) -> list[Action]:
    name, inst = node.name, ctx.machine(node.name)
    actions = _clear_marks(ctx, name, status)
    if ctx.in_place(name):
        return actions + _keep_alive(ctx, status, node, info, inst)
    if status is NodeStatus.RELEASE and inst is not None:
        # no longer the node's: a power-up that follows (a restarted slurmctld may power it
        # up again at once) launches a new machine now, not after the listing grace
        actions.append(Terminate(inst.id, name, f"node {name} is powered down"))
        actions += _unbind(ctx, name, inst)
    elif status is NodeStatus.RESET:
        actions.append(PowerDown((name,), own_reason(f"reset after '{node.reason}'")))
    elif status is NodeStatus.COMPLETING_ON_NOTHING:
        actions.append(PowerDown((name,), node.reason or own_reason(f"no machine finishes {name}'s jobs")))
    elif status is NodeStatus.START_STATIC:
        actions.append(PowerUp((name,)))
    elif status is NodeStatus.NEEDS_ADDRESS and inst is not None and inst.address:
        actions.append(SetAddress(name, inst.address))
    elif status is NodeStatus.DIED_BOOTING and inst is not None:
        actions += _died_booting(ctx, name, inst)
    elif status is NodeStatus.STALE_MACHINE and inst is not None:
        at, what = boot_needed_after(ctx.state, name) or (0.0, "")
        actions.append(Terminate(inst.id, name, f"stale: {inst.id} of {name} started before {what} "
                                                f"({when.clock(at)}); Slurm waits for a new boot"))
        actions += _unbind(ctx, name, inst)
    elif status is NodeStatus.SLURMD_FAILED and inst is not None:
        failure = ctx.world.slurmd_failures[name]
        actions += _replace(ctx, name, inst, f"{SLURMD_FAILED}{inst.id}: {failure.line}")
    elif status is NodeStatus.INSTANCE_LOST and node.has_jobs() and not node.is_down():
        actions.append(MarkDown((name,), own_reason(_detail(status, node, inst))))
    elif status in _REPLACING:
        actions += _replace(ctx, name, inst, _detail(status, node, inst))
    elif status in _GRACE_MARK:
        actions += _start_grace(ctx, name, status)
    elif status is NodeStatus.EVACUATE:
        actions += _evacuate(ctx, name)
    return actions


def _keep_alive(ctx: Lookups, status: NodeStatus, node: NodeState, info: NodeInfo, inst: Instance | None
                ) -> list[Action]:
    """A static node in place: terminate a failed machine, set the node DOWN once its
    machine is gone, then requeue and launch (plan_launches), resume once the new
    machine's slurmd registered, and say when it is back."""
    name = node.name
    if status in _GRACE_MARK:
        return _start_grace(ctx, name, status)
    if status is NodeStatus.LEFT_ALONE:
        return gone_under_jobs(ctx, node)
    if status is NodeStatus.HEALTHY:
        return _replaced(ctx, node, info)
    if status is NodeStatus.EVACUATE:
        return _evacuate(ctx, name)
    if status is NodeStatus.NEEDS_ADDRESS and inst is not None and inst.address:
        return [SetAddress(name, inst.address)]
    if status is NodeStatus.REPLACEMENT_JOINED:
        # at once: the jobs a stale RPC could hit are kept off the node, not the node held
        return [Resume((name,))]
    if status is NodeStatus.DIED_BOOTING:
        return _died_booting(ctx, name, inst)
    if status is NodeStatus.SLURMD_FAILED:
        return _mark_replacing(ctx, name) + _slurmd_failed(ctx, node, inst)
    if status is NodeStatus.REPLACEMENT_DUE:
        jobs = ctx.world.jobs.get(name, ())
        actions: list[Action] = [Requeue(jobs, f"replacing {name}")] if jobs else []
        until = node.reason_changed_at + STALE_RPC_WINDOW
        if jobs and until > ctx.now:  # they ran on the dead machine too
            actions.append(KeepAway(name, jobs, until))
        if inst is not None and inst.state is InstanceState.STOPPED:  # runs nothing, costs its disks
            actions.append(Terminate(inst.id, name, f"replaced: instance {inst.id} of {name} is stopped"))
        return actions
    if status not in _REPLACING:
        return []
    actions = _mark_replacing(ctx, name)
    detail = _detail(status, node, inst)
    if status is NodeStatus.INSTANCE_LOST:
        # its jobs, not the node, kept off it for STALE_RPC_WINDOW after the DOWN
        return [*actions, MarkDown((name,), own_reason(detail), keep_away=ctx.world.jobs.get(name, ()),
                                   keep_for=STALE_RPC_WINDOW)]
    if inst is not None and inst.state in LIVE:
        actions.append(Terminate(inst.id, name, detail))
    return actions


def _evacuate(ctx: Lookups, name: str) -> list[Action]:
    """The jobs of a node its health check drained: signalled once (to checkpoint), then
    requeued after `evacuate_grace`; the empty node is then replaced (REPLACE)."""
    jobs = ctx.world.jobs.get(name, ())
    if not jobs:
        return []
    age = ctx.mark_age(name, EVACUATING)
    why = f"{name} failed its health check"
    if age is None:
        return [SetMark(name, EVACUATING, ctx.now), Signal(jobs, ctx.tun.signal, why)]
    return [Requeue(jobs, why)] if age >= ctx.tun.evacuate_grace else []


def _unbind(ctx: Lookups, name: str, inst: Instance) -> list[Action]:
    """Forget the node's binding to a machine it is about to lose."""
    binding = ctx.state.bindings.get(name)
    return [Unbind(name)] if binding is not None and binding.instance == inst.id else []


def _start_grace(ctx: Lookups, name: str, status: NodeStatus) -> list[Action]:
    """The mark a grace counts from (MISSING, NOT_RESPONDING), set once."""
    kind = _GRACE_MARK[status]
    return [SetMark(name, kind, ctx.now)] if ctx.mark_age(name, kind) is None else []


def _mark_replacing(ctx: Lookups, name: str) -> list[Action]:
    """The REPLACING mark, dated from the first sign of trouble (an earlier mark)."""
    marks = ctx.state.marks.get(name, {})
    return [] if REPLACING in marks else [SetMark(name, REPLACING, min([*marks.values(), ctx.now]))]


def _replaced(ctx: Lookups, node: NodeState, info: NodeInfo) -> list[Action]:
    """In service again: with a new machine launched since the trouble began, that
    is a replacement (its times go to the event); without, the old one came back."""
    since = ctx.state.marks.get(node.name, {}).get(REPLACING)
    binding = ctx.state.bindings.get(node.name)
    if since is None or binding is None or binding.launched_at < since:
        return []
    registered = node.slurmd_started_at if node.slurmd_started_at >= binding.launched_at else 0.0
    return [Replaced(node.name, info.pool, binding.instance, since, binding.launched_at, registered)]


def joined(ctx: Lookups, node: NodeState, info: NodeInfo) -> list[Action]:
    """A machine the service launched (the JOINING mark, dated by the launch) whose slurmd
    has started since: the join share's event. The mark goes without one when the node
    went back to power save or did not register by ResumeTimeout. Slurm's slurmd start
    time has whole seconds: a slurmd that started in the launch's second counts."""
    since = ctx.state.marks.get(node.name, {}).get(JOINING)
    if since is None:
        return []
    if node.slurmd_started_at >= int(since) > 0:
        return [Joined(node.name, info.pool, since, node.slurmd_started_at), ClearMark(node.name, JOINING)]
    if not node.is_powered() or ctx.now - since > ctx.topology.resume_timeout:
        return [ClearMark(node.name, JOINING)]
    return []


def _clear_marks(ctx: Lookups, name: str, status: NodeStatus) -> list[Action]:
    """Marks the status no longer needs. The mark a verdict rests on stays while the
    verdict waits for the guard; REPLACING stays until the node is in service again
    (HEALTHY) or the admin takes it over (LEFT_ALONE); JOINING is `joined`'s."""
    if name not in ctx.state.marks:
        return []
    keep = _MARKS_KEPT.get(status, frozenset()) | {JOINING}
    if status not in (NodeStatus.HEALTHY, NodeStatus.LEFT_ALONE):
        keep |= {REPLACING}
    return [ClearMark(name, kind) for kind in ctx.state.marks[name] if kind not in keep]


def _died_booting(ctx: Lookups, name: str, inst: Instance | None) -> list[Action]:
    """The machine went away before the node registered (spot taken back at once,
    failed boot): forget it and cool its link, so the next loop launches elsewhere."""
    binding = ctx.state.bindings.get(name)
    link = binding.link if binding else ((inst.pool if inst else None) or ctx.topology.nodes[name].pool)
    what = f"instance {inst.id} {inst.state.value}" if inst else \
        f"instance {binding.instance if binding else '-'} not listed"
    return [Unbind(name), cooldown(ctx, link, f"{what} while booting")]


def gone_under_jobs(ctx: Lookups, node: NodeState) -> list[Action]:
    """Tell Slurm that the machine is gone while jobs run on the node, and nothing
    more: for a node the spec and Slurm disagree about (no CLOUD state, not static)
    and for one in the admin's maintenance, whose reason stays first (and so the
    admin's: the node is not replaced)."""
    inst = ctx.machine(node.name)
    if inst is None or inst.state not in GONE or not node.has_jobs() or node.is_down():
        return []
    reason = own_reason(_detail(NodeStatus.INSTANCE_LOST, node, inst))
    return [MarkDown((node.name,), f"{node.reason}; {reason}" if held_by_admin(node) else reason)]


def _replace(ctx: Lookups, name: str, inst: Instance | None, detail: str) -> list[Action]:
    actions: list[Action] = [PowerDown((name,), own_reason(detail))]
    if inst is not None and inst.state in LIVE:
        actions.append(Terminate(inst.id, name, detail))
    return actions


def _slurmd_failed(ctx: Lookups, node: NodeState, inst: Instance | None) -> list[Action]:
    """A static node's new machine whose slurmd failed: replaced at once, the reason on the
    node; a second new machine failing the same way ends the replacements, in one line."""
    if inst is None:
        return []
    failure = ctx.world.slurmd_failures[node.name]
    before = node.reason.removeprefix(own_reason(SLURMD_FAILED))
    previous, _, line = before.partition(": ")
    if before != node.reason and line == failure.line and previous != inst.id:
        stop = own_reason(f"{REPLACEMENT_STOPPED}slurmd failed the same way on 2 new machines "
                          f"({previous}, {inst.id}): {failure.line}")
        return [MarkDown((node.name,), stop), Terminate(inst.id, node.name, stop)]
    detail = f"{SLURMD_FAILED}{inst.id}: {failure.line}"
    # the reason is the memory of this failure (and, changed after the launch, makes the
    # machine's end a replacement due rather than a death while booting)
    return [MarkDown((node.name,), own_reason(detail)), Terminate(inst.id, node.name, detail)]


def cooldown(ctx: Lookups, link: str, reason: str, at_least: float = 0.0) -> MarkCooldown:
    previous = ctx.state.cooldowns.get(link)
    failures = (previous.failures if previous else 0) + 1
    return MarkCooldown(link, ctx.now + max(backoff(failures), at_least), failures, reason)


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
"""The marks each status rests on (_clear_marks)."""

_GRACE_MARK = {NodeStatus.MISSING: MISSING, NodeStatus.NOT_RESPONDING: UNRESPONSIVE}
"""The statuses that start a grace, and the mark it counts from."""
