"""What a working cluster's nodes may look like in Slurm, and what is wrong otherwise: one
line per node that names it, what it has and what it should have.

A cluster in use is the normal case: nodes run jobs (allocated, mixed, completing), Slurm
powers dynamic nodes up and down for them, and an admin drains a node for maintenance with
a reason. None of that is a fault. A fault is a node Slurm cannot use and nobody asked to
keep out of service: DOWN, FAIL, not responding, a registration Slurm refused, drained by
the scheduler service, the health check or Slurm itself, a static node in power save.
"""

from __future__ import annotations

from slurmforge.slurm.client import NodeState
from slurmforge.slurm.reasons import held_by_admin
from slurmforge.spec.nodes import NodeHardware
from slurmforge.validation.facts import found_wanted

WORKING = frozenset({"idle", "mixed", "allocated"})
"""Base states of a node in service (COMPLETING and the power flags ride on them)."""
REFUSED = frozenset({"INVALID_REG", "FAIL"})


def hardware_problem(node: NodeState, hw: NodeHardware, gres_name: str | None) -> str | None:
    """The node's CPUs, memory and GPUs against the spec's."""
    found = f"{node.cpus} CPUs, {node.memory_mb} MB"
    wanted = f"{hw.cpus} CPUs, {hw.memory_mb} MB"
    if hw.gpus:
        found += f", {node.gres or 'no gres'}"
        wanted += f", {gres_name}:{hw.gpus}"
    same = node.cpus == hw.cpus and node.memory_mb == hw.memory_mb and (
        not hw.gpus or f"{gres_name}:{hw.gpus}" in node.gres)
    return None if same else found_wanted(node.name, "hardware", found, wanted)


def state_problem(node: NodeState, dynamic: bool) -> str | None:
    """None when the node is in a state a working cluster has; else the one line."""
    wanted = "in service or in power save" if dynamic else "in service (a static node is never powered down)"
    refused = sorted(REFUSED & node.flags)
    if refused:
        return _line(node, wanted, f"Slurm refused: {'+'.join(refused)}")
    if node.is_down():
        return _line(node, wanted)
    if node.is_powering_up() or node.is_powering_down():
        return None  # on its way, whichever way; ResumeTimeout and the service judge a slow one
    if node.is_powered_down():
        return None if dynamic else _line(node, wanted)
    if node.is_not_responding():
        return _line(node, wanted, "its slurmd does not answer")
    if node.is_drain() and not held_by_admin(node):
        return _line(node, "in service (drained by the admin, if at all)")
    if node.state not in WORKING:
        return _line(node, wanted)
    return None


def _line(node: NodeState, wanted: str, why: str = "") -> str:
    state = "+".join([node.state.upper(), *sorted(node.flags)])
    reason = f", reason '{node.reason}'" if node.reason else ""
    return found_wanted(node.name, "Slurm state", f"{state}{reason}{f' ({why})' if why else ''}", wanted)
