"""The cluster-wide sweeps, once every node was assessed and answered: launches planned per
pool over the fallback chain (`plan_launches`, the daemon's fall-back's too), crashed launches
retried, orphan and duplicate machines terminated, spot interruption notices carried through,
signalled jobs settled, jobs kept off replaced nodes let back, stale bindings and done
hand-off requests closed."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from slurmforge.hostlists import expand
from slurmforge.hosts import TAG_LINK, TAG_TOKEN
from slurmforge.provider import Instance
from slurmforge.service.actions import (
    AbandonLaunch,
    Action,
    AdvanceInterruption,
    CloseRequests,
    Drain,
    ForgetSignalled,
    KeepAway,
    Launch,
    LetBack,
    PowerDown,
    Release,
    Requeue,
    Signal,
    Terminate,
    Unbind,
)
from slurmforge.service.handoff import HandoffKind
from slurmforge.service.respond import cooldown
from slurmforge.service.state import INTERRUPTION_COOLDOWN, KEEP_NEW, InterruptionRecord, Request
from slurmforge.service.world import LIVE, Lookups
from slurmforge.slurm.client import signal_name
from slurmforge.slurm.reasons import DUPLICATE_LAUNCH, OWN_REASON, own_reason

NEW_NODE_GRACE = 900.0
"""Seconds a machine of a node neither Slurm nor this service's spec knows is left alone: a
newer spec's node, whose machine `up --local` makes before the rollout publishes that spec
and reconfigures Slurm (a static node of a pool added or grown). Older, it is an orphan."""
FINISHED = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                      "DEADLINE", "OUT_OF_MEMORY"})
"""Job states of a job that has ended (squeue's job_state, its first word)."""


def plan_launches(ctx: Lookups, nodes: Iterable[str]) -> list[Action]:
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


def retry_pending_launches(ctx: Lookups) -> list[Action]:
    actions: list[Action] = []
    for record in ctx.state.pending_launches:
        if record.token in ctx.retrying_tokens:
            actions.append(Launch(record.pool, record.link, record.nodes, record.token, record.jobs, retry=True))
        else:
            actions.append(AbandonLaunch(record.token, "retry window passed"))
    return actions


def orphans(ctx: Lookups) -> list[Action]:
    actions: list[Action] = []
    for inst in ctx.world.instances:
        if inst.state not in LIVE:
            continue
        why = _orphan_reason(ctx, inst)
        if why:
            actions.append(Terminate(inst.id, ctx.owner[inst.id], why))
    return actions


def _orphan_reason(ctx: Lookups, inst: Instance) -> str | None:
    node = ctx.owner[inst.id]
    ours = inst.pool is not None or TAG_TOKEN in inst.tags
    if node is None:
        if not ours or inst.tags.get(TAG_TOKEN) in ctx.retrying_tokens:
            return None
        return f"orphan: instance {inst.id} belongs to no node"
    slurm_node = ctx.slurm.get(node)
    if slurm_node is None and node not in ctx.topology.nodes and ours \
            and ctx.now - (inst.launched_at or 0.0) < NEW_NODE_GRACE:
        return None  # a newer spec's node: the rollout under way adds it
    if slurm_node is None or node not in ctx.topology.nodes:
        return f"orphan: node {node} is not in the cluster" if ours else None
    current = ctx.instance(node)
    if slurm_node.is_cloud() and current is not None and current.id != inst.id:
        return f"duplicate: node {node} already has {current.id}"
    return None


def interruptions(ctx: Lookups) -> list[Action]:
    actions: list[Action] = []
    for record in ctx.state.interruptions:
        actions += _interruption(ctx, record)
    return actions


def _interruption(ctx: Lookups, record: InterruptionRecord) -> list[Action]:
    inst = ctx.by_id.get(record.instance)
    node = record.node or ctx.owner.get(record.instance)
    if node is None or node not in ctx.slurm or node not in ctx.topology.nodes:
        return [AdvanceInterruption(record.instance, "done")]
    jobs = ctx.world.jobs.get(node, ())
    if record.stage == "new":
        binding = ctx.state.bindings.get(node)
        link = (record.link or (binding.link if binding else None) or (inst.tags.get(TAG_LINK) if inst else None)
                or ctx.topology.nodes[node].pool)
        actions: list[Action] = [Drain((node,), own_reason("spot interruption notice"))]
        if jobs:
            actions.append(Signal(jobs, ctx.tun.signal, f"spot interruption notice for {node}"))
        return [*actions, cooldown(ctx, link, "spot interruption",
                                   at_least=ctx.tun.checkpoint_grace + INTERRUPTION_COOLDOWN),
                AdvanceInterruption(record.instance, "signalled")]
    gone = inst is None or inst.state not in LIVE
    busy = bool(jobs) or ctx.slurm[node].has_jobs()
    if ctx.now - record.noticed_at < ctx.tun.checkpoint_grace and not gone and busy:
        return []  # time to checkpoint; a job that requeued itself on the signal has left
    actions = [Requeue(jobs, "spot interruption")] if jobs else []
    actions.append(PowerDown((node,), own_reason("spot instance interrupted")))
    if not gone and inst is not None:
        actions.append(Terminate(inst.id, node, "spot instance interrupted"))
    return [*actions, AdvanceInterruption(record.instance, "done")]


def signalled(ctx: Lookups) -> list[Action]:
    """A job the service signalled and that the signal ended - a script that neither
    traps it nor passes it on, for which USR1 is the end - is requeued: the service's
    signal never ends a job that Slurm would have requeued when its machine went.
    A job still running (or requeued by its own handler) is left; the record goes once
    the job has ended, or once slurmctld no longer holds it."""
    if ctx.world.signalled is None:
        return []
    actions: list[Action] = []
    settled: list[int] = []
    for job_id, record in sorted(ctx.state.signalled.items()):
        job = ctx.world.signalled.get(job_id)
        if job is not None and job.state not in FINISHED:
            continue
        if job is not None and job.exit_signal == signal_name(record.signal):
            actions.append(Requeue((job_id,), f"its batch script ended on the service's {record.signal} "
                                              f"({record.why or 'signalled'})"))
        settled.append(job_id)
    return [*actions, ForgetSignalled(tuple(settled))] if settled else actions


def kept_away(ctx: Lookups) -> list[Action]:
    """Jobs kept off a replaced node (STALE_RPC_WINDOW): excluded while the window lasts
    (again after a service restart that came between the record and the exclusion),
    let back once it is over."""
    due: dict[tuple[str, float], list[int]] = {}
    over: dict[str, list[int]] = {}
    for record in ctx.state.kept_away:
        if ctx.now >= record.until:
            over.setdefault(record.node, []).append(record.job)
        elif record.stage == KEEP_NEW:
            due.setdefault((record.node, record.until), []).append(record.job)
    return [*(KeepAway(node, tuple(jobs), until) for (node, until), jobs in sorted(due.items())),
            *(LetBack(node, tuple(jobs)) for node, jobs in sorted(over.items()))]


def stale_bindings(ctx: Lookups) -> list[Action]:
    """Bindings of nodes that are off (or gone from Slurm) and have no live machine."""
    actions: list[Action] = []
    for name, binding in ctx.state.bindings.items():
        node = ctx.slurm.get(name)
        inst = ctx.by_id.get(binding.instance)
        if (node is None or not node.is_powered()) and (inst is None or inst.state not in LIVE):
            actions.append(Unbind(name))
    return actions


def duplicate_launches(ctx: Lookups) -> list[Action]:
    """A slurmctld killed -9 may have started a job and lost that from its state; the next
    one starts it again, the node's slurmd refuses the duplicate, and slurmctld drains
    the node ("Duplicate jobid") and requeues the job held. The node is reset or
    replaced like any node Slurm failed (the old machine and its copy of the job go); the
    job is released, so that it runs once, on a machine without that copy."""
    if not ctx.world.held or not any(DUPLICATE_LAUNCH in n.reason for n in ctx.world.nodes):
        return []
    return [Release(ctx.world.held, "its launch found a copy a killed slurmctld had started")]


def close_requests(ctx: Lookups) -> list[Action]:
    done = [r.id for r in ctx.state.requests if _request_done(ctx, r)]
    return [CloseRequests(tuple(done))] if done else []


def _request_done(ctx: Lookups, request: Request) -> bool:
    """Suspend and resume-fail requests are only recorded; a resume request is done
    once none of its nodes is still on its way up; a takeover after ResumeTimeout."""
    age = ctx.now - request.at
    if request.kind is HandoffKind.CONTROL:  # stale_machine reads it while Slurm may still wait
        return age > ctx.topology.resume_timeout
    if request.kind is not HandoffKind.RESUME or age > ctx.tun.request_max_age:
        return True
    if age <= ctx.tun.listing_grace:
        return False
    return not any(ctx.slurm[n].is_powering_up() for n in expand(request.nodes) if n in ctx.slurm)
