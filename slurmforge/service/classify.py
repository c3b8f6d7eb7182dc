"""The classifier: (Slurm nodes, cloud instances, service state, spec, now) -> actions.

A pure function, in three steps of a module each: every managed node is first sorted into a
`NodeStatus` (service.assess: what state it is in), then each status maps to its actions
(service.respond: what to do about it); launches are planned per pool over the fallback
chain, and orphans, interruption notices, crashed launches and old requests are handled
after the nodes (service.sweeps). service.world holds one loop's inputs and the lookups
over them; slurmforge.slurm.reasons tells the service's, the health check's and
slurmctld's reasons on a node from an admin's.

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

from slurmforge.service.actions import Action
from slurmforge.service.assess import Context, NodeStatus
from slurmforge.service.respond import gone_under_jobs, joined, respond
from slurmforge.service.sweeps import (
    close_requests,
    duplicate_launches,
    interruptions,
    kept_away,
    orphans,
    plan_launches,
    retry_pending_launches,
    signalled,
    stale_bindings,
)
from slurmforge.service.world import World


def classify(world: World) -> list[Action]:
    ctx = Context(world)
    actions: list[Action] = [*retry_pending_launches(ctx)]
    needs_launch: list[str] = []
    for node in world.nodes:
        info = world.topology.nodes.get(node.name)
        if info is None:
            continue
        actions += joined(ctx, node, info)
        if not node.is_cloud() and not info.static:
            actions += gone_under_jobs(ctx, node)
            continue
        status = ctx.assess(node, info)
        if status in (NodeStatus.NEEDS_LAUNCH, NodeStatus.REPLACEMENT_DUE, NodeStatus.STALE_MACHINE):
            needs_launch.append(node.name)  # a stale machine is terminated first (applier order)
        actions += respond(ctx, status, node, info)
    actions += plan_launches(ctx, needs_launch)
    actions += orphans(ctx)
    actions += interruptions(ctx)
    actions += signalled(ctx)
    actions += kept_away(ctx)
    actions += stale_bindings(ctx)
    actions += duplicate_launches(ctx)
    actions += close_requests(ctx)
    return list(dict.fromkeys(actions))
