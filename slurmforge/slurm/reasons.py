"""The reasons on a node in Slurm, and whose they say it is: the scheduler service's own
(OWN_REASON), the health check's (HEALTH_REASON) and slurmctld's for a node that failed
(SLURM_REASONS) - the service may reset or replace such a node - or anyone else's: an admin's
maintenance, which it leaves alone (`held_by_admin`; a rollout's drain is one, slurmforge.drain)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from slurmforge.slurm.client import NodeState

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

SLURMD_FAILED = "slurmd failed on "
"""The service's reason (after OWN_REASON) for a node whose new machine's slurmd stopped on an
error: `slurmd failed on <machine>: <slurmd's line>` (service.slurmd_failures)."""
REBUILD = "the rollout rebuilds its machine"
"""The service's reason (after OWN_REASON) a rollout or `slurmforge upgrade` sets on a drained,
empty static node it wants made again from the current image (slurmforge.drain.replace): the
service terminates the machine the node had then and launches a new one."""
REPLACEMENT_STOPPED = "replacement stopped: "
"""The service's reason (after OWN_REASON) for a static node whose replacements' slurmd failed
the same way twice: no new machine until an admin resumes the node (docs/service.md)."""


def own_reason(detail: str) -> str:
    return f"{OWN_REASON} {detail}"


def is_recoverable(reason: str) -> bool:
    return reason.startswith((OWN_REASON, HEALTH_REASON)) or reason.startswith(SLURM_REASONS)


def held_by_admin(node: NodeState) -> bool:
    """DOWN or DRAIN for a reason an admin wrote: maintenance, the admin's to end."""
    return (node.is_down() or node.is_drain()) and not is_recoverable(node.reason)


def held_by_service(node: NodeState) -> bool:
    """DOWN or DRAIN for a reason the service wrote."""
    return (node.is_down() or node.is_drain()) and node.reason.startswith(OWN_REASON)


def replacement_stopped(node: NodeState) -> bool:
    """A static node whose replacements failed the same way twice (the service's reason)."""
    return node.is_down() and node.reason.startswith(own_reason(REPLACEMENT_STOPPED))


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
