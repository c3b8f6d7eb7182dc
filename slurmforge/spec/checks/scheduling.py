"""Scheduling policy: priority, QoS and preemption settings that can take effect."""

from __future__ import annotations

from collections.abc import Iterator

from slurmforge.errors import Problem
from slurmforge.spec.checks.registry import check
from slurmforge.spec.models import Cluster

# Slurm's default partition PriorityTier (man slurm.conf).
DEFAULT_PRIORITY_TIER = 1


@check
def preempt_mode_needs_preemption(spec: Cluster) -> Iterator[Problem]:
    """A partition preempt_mode needs scheduling.preemption.type other than none."""
    if spec.scheduling.preemption.type != "none":
        return
    for i, part in enumerate(spec.partitions):
        if part.preempt_mode and part.preempt_mode != "OFF":
            yield Problem(f"partitions[{i}].preempt_mode", "preemption is off cluster-wide",
                          "set scheduling.preemption.type: partition_prio (or qos)", part.preempt_mode)


@check
def partition_prio_needs_tiers(spec: Cluster) -> Iterator[Problem]:
    """partition_prio preemption needs partitions with different priority tiers."""
    if spec.scheduling.preemption.type != "partition_prio":
        return
    tiers = {DEFAULT_PRIORITY_TIER if p.priority_tier is None else p.priority_tier for p in spec.partitions}
    if len(tiers) < 2:
        yield Problem("scheduling.preemption.type", "partition_prio, but every partition has the same priority_tier",
                      "give the high-priority partition a larger priority_tier", "partition_prio")


@check
def preemption_mode_not_off(spec: Cluster) -> Iterator[Problem]:
    """With preemption on, some mode actually preempts: the cluster's mode, or a partition's."""
    pre = spec.scheduling.preemption
    if pre.type == "none" or pre.mode != "OFF":
        return
    if not any(p.preempt_mode not in (None, "OFF") for p in spec.partitions):
        yield Problem("scheduling.preemption.mode", f"OFF with preemption type {pre.type}: no job would be preempted",
                      "use REQUEUE, CANCEL or SUSPEND,GANG, or set type: none", pre.mode)


@check
def qos_preemption_needs_accounting(spec: Cluster) -> Iterator[Problem]:
    """QoS (and qos preemption) live in the accounting database."""
    if spec.accounting.enabled:
        return
    if spec.scheduling.qos:
        yield Problem("scheduling.qos", "QoS needs accounting", "set accounting.enabled: true", show_value=False)
    if spec.scheduling.preemption.type == "qos":
        yield Problem("scheduling.preemption.type", "qos preemption needs accounting",
                      "enable accounting or use partition_prio", "qos")


@check
def qos_preempt_targets(spec: Cluster) -> Iterator[Problem]:
    """A QoS preempts only QoS that exist, never itself."""
    names = {q.name for q in spec.scheduling.qos} | {"normal"}
    for i, q in enumerate(spec.scheduling.qos):
        for j, target in enumerate(q.preempt):
            if target == q.name:
                yield Problem(f"scheduling.qos[{i}].preempt[{j}]", "a QoS cannot preempt itself", "remove it", target)
            elif target not in names:
                yield Problem(f"scheduling.qos[{i}].preempt[{j}]", "unknown QoS", "define it under scheduling.qos",
                              target)


@check
def qos_preempt_needs_qos_preemption(spec: Cluster) -> Iterator[Problem]:
    """QoS preempt lists take effect only with preemption type qos, and type qos needs a
    QoS that preempts another."""
    kind = spec.scheduling.preemption.type
    preempting = [i for i, q in enumerate(spec.scheduling.qos) if q.preempt]
    if kind != "qos":
        for i in preempting:
            yield Problem(f"scheduling.qos[{i}].preempt", f"ignored: scheduling.preemption.type is {kind}",
                          "set scheduling.preemption.type: qos", show_value=False)
    elif not preempting:
        yield Problem("scheduling.preemption.type", "qos, but no QoS lists others under preempt: no job would be "
                      "preempted", "list the QoS to preempt under the high-priority QoS's preempt", kind)


# slurmctld adds the PriorityWeight* values in 64 bits and warns that job priorities (32
# bits) may overflow above this (read_config.c).
MAX_PRIORITY_WEIGHTS = 0xFFFFFFFF


@check
def priority_weights_fit(spec: Cluster) -> Iterator[Problem]:
    """The priority weights add up to at most 4,294,967,295: a job's priority is a 32-bit
    number and larger weights overflow it."""
    prio = spec.scheduling.priority
    total = prio.weight_fairshare + prio.weight_age + prio.weight_job_size + prio.weight_partition + prio.weight_qos
    if prio.type == "multifactor" and total > MAX_PRIORITY_WEIGHTS:
        yield Problem("scheduling.priority", f"the weights add up to {total:,}: job priorities would overflow "
                      "Slurm's 32 bits", f"keep their sum at {MAX_PRIORITY_WEIGHTS:,} or less (they only count "
                      "relative to each other)", show_value=False)


@check
def fairshare_needs_accounting(spec: Cluster) -> Iterator[Problem]:
    """Fair share (multifactor weight_fairshare > 0) needs accounting."""
    prio = spec.scheduling.priority
    if not spec.accounting.enabled and prio.type == "multifactor" and prio.weight_fairshare:
        yield Problem("scheduling.priority.weight_fairshare", "fair share needs accounting",
                      "enable accounting or set weight_fairshare: 0", prio.weight_fairshare)


@check
def elastic_pools_need_accounting(spec: Cluster) -> Iterator[Problem]:
    """The scheduler service powers nodes up and down (scontrol update): Slurm (24.11 too)
    allows that to root, SlurmUser and AdminLevel=Administrator only, and admin levels live
    in the accounting database."""
    if spec.accounting.enabled:
        return
    for i, pool in enumerate(spec.pools):
        if pool.max_nodes > pool.min_nodes:
            yield Problem(f"pools[{i}].max_nodes",
                          f"pool {pool.name} is elastic (max_nodes > min_nodes), but accounting is off: the "
                          "scheduler service needs Slurm's Administrator level to power nodes up and down",
                          "set accounting.enabled: true, or max_nodes equal to min_nodes", pool.max_nodes)
