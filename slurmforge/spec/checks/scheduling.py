"""Scheduling policy: priority, QoS and preemption settings that can take effect."""

from __future__ import annotations

from collections.abc import Iterator

from slurmforge.errors import Problem
from slurmforge.spec.checks.registry import check, hardwares
from slurmforge.spec.models import Cluster, Partition

# Slurm's default partition PriorityTier (man slurm.conf).
DEFAULT_PRIORITY_TIER = 1


def _tier(part: Partition) -> int:
    return DEFAULT_PRIORITY_TIER if part.priority_tier is None else part.priority_tier


def top_tiers(spec: Cluster) -> dict[str, int]:
    """Each pool's highest priority tier among the partitions that hold it."""
    top: dict[str, int] = {}
    for part in spec.partitions:
        tier = _tier(part)
        for name in part.pools:
            if top.get(name, -1) < tier:
                top[name] = tier
    return top


def preemptible_partitions(spec: Cluster) -> list[int]:
    """partition_prio: the partitions whose jobs a job of another partition may preempt (a
    partition of a higher tier shares a pool with them: one of their pools is in a higher
    tier)."""
    top = top_tiers(spec)
    return [i for i, low in enumerate(spec.partitions) if any(top[name] > _tier(low) for name in low.pools)]


def suspending(spec: Cluster) -> list[tuple[str, str]]:
    """Where the spec makes Slurm suspend preempted jobs: (path, mode) for each setting that
    applies SUSPEND to jobs that can be preempted."""
    pre = spec.scheduling.preemption
    if pre.type == "qos":  # the QoS have no mode of their own in the spec: the cluster's applies
        return [("scheduling.preemption.mode", pre.mode)] if pre.mode.startswith("SUSPEND") else []
    if pre.type != "partition_prio":
        return []
    found: dict[str, str] = {}
    for i in preemptible_partitions(spec):
        part = spec.partitions[i]
        path, mode = ((f"partitions[{i}].preempt_mode", part.preempt_mode) if part.preempt_mode
                      else ("scheduling.preemption.mode", pre.mode))
        if mode.startswith("SUSPEND"):
            found.setdefault(path, mode)
    return list(found.items())


@check
def preempt_mode_needs_preemption(spec: Cluster) -> Iterator[Problem]:
    """A partition preempt_mode takes effect only with scheduling.preemption.type
    partition_prio (preempt/qos takes the mode from the cluster)."""
    kind = spec.scheduling.preemption.type
    if kind == "partition_prio":
        return
    for i, part in enumerate(spec.partitions):
        if not part.preempt_mode or part.preempt_mode == "OFF":
            continue
        if kind == "none":
            yield Problem(f"partitions[{i}].preempt_mode", "preemption is off cluster-wide",
                          "set scheduling.preemption.type: partition_prio (or qos)", part.preempt_mode)
        else:
            yield Problem(f"partitions[{i}].preempt_mode", "ignored: with preemption type qos Slurm takes the mode "
                          "from scheduling.preemption.mode", "remove it, or use scheduling.preemption.type: "
                          "partition_prio", part.preempt_mode)


@check
def partition_prio_needs_tiers(spec: Cluster) -> Iterator[Problem]:
    """partition_prio preemption needs partitions of different priority tiers that share a
    pool (a job preempts only jobs on the nodes it needs)."""
    if spec.scheduling.preemption.type != "partition_prio":
        return
    if len({_tier(p) for p in spec.partitions}) < 2:
        yield Problem("scheduling.preemption.type", "partition_prio, but every partition has the same priority_tier",
                      "give the high-priority partition a larger priority_tier", "partition_prio")
    elif not preemptible_partitions(spec):
        yield Problem("scheduling.preemption.type", "partition_prio, but no two partitions of different priority_tier "
                      "share a pool: no job would be preempted", "put a pool in a partition of a higher and one of "
                      "a lower priority_tier", "partition_prio")


@check
def suspend_needs_gang(spec: Cluster) -> Iterator[Problem]:
    """A partition that suspends preempted jobs needs gang scheduling, which only the
    cluster-wide mode SUSPEND,GANG turns on (Slurm resumes suspended jobs through it)."""
    pre = spec.scheduling.preemption
    if pre.type != "partition_prio" or pre.mode == "SUSPEND,GANG":
        return
    for i, part in enumerate(spec.partitions):
        if part.preempt_mode == "SUSPEND":
            yield Problem(f"partitions[{i}].preempt_mode", f"SUSPEND needs gang scheduling, but the cluster's mode is "
                          f"{pre.mode}: suspended jobs would never resume", "set scheduling.preemption.mode: "
                          "SUSPEND,GANG (partitions keep their own preempt_mode)", part.preempt_mode)


def _gpu_pools(spec: Cluster) -> set[str]:
    return {p.name for p, hw in zip(spec.pools, hardwares(spec), strict=True) if hw is not None and hw.gpus}


@check
def suspend_not_over_gpus(spec: Cluster) -> Iterator[Problem]:
    """Preempted jobs are never suspended on GPU nodes: a suspended job keeps its GPUs
    ("Suspended jobs will not release GRES. Higher priority jobs will not be able to
    preempt to gain access to GRES": slurm.conf(5), PreemptMode), so the job that
    preempts it could never have them. partition_prio: a SUSPEND partition shares no GPU
    pool with a partition of a higher tier; qos: SUSPEND,GANG needs a cluster without GPU
    pools in its partitions."""
    pre = spec.scheduling.preemption
    gpus = _gpu_pools(spec)
    if not gpus or pre.type == "none":
        return
    if pre.type == "qos":
        used = sorted({name for part in spec.partitions for name in part.pools} & gpus)
        if used and pre.mode.startswith("SUSPEND"):
            yield Problem("scheduling.preemption.mode", f"QoS preemption would suspend jobs on the GPU nodes of "
                          f"pool {used[0]}, and a suspended job keeps its GPUs: the preempting job could never have "
                          "them", "use mode REQUEUE or CANCEL", pre.mode)
        return
    top = top_tiers(spec)
    for i in preemptible_partitions(spec):
        low = spec.partitions[i]
        mode = low.preempt_mode or pre.mode
        if not mode.startswith("SUSPEND"):
            continue
        shared = sorted({name for name in low.pools if name in gpus and top[name] > _tier(low)})
        if shared:
            path = f"partitions[{i}].preempt_mode" if low.preempt_mode else "scheduling.preemption.mode"
            yield Problem(path, f"jobs of partition {low.name} on pool {shared[0]}'s GPU nodes would be suspended, "
                          "and a suspended job keeps its GPUs: the preempting job could never have them",
                          f"set partitions[{i}].preempt_mode: REQUEUE (or CANCEL), or keep GPU pools out of "
                          f"{low.name}", mode)


@check
def suspend_needs_memory_room(spec: Cluster) -> Iterator[Problem]:
    """Suspending preempted jobs while Slurm schedules memory needs a default memory per
    CPU of at most half a node's memory per CPU: a suspended job keeps its memory, so the
    job taking its place must fit beside it (a job that asks for no memory otherwise holds
    its node's whole memory, or with a larger default, too much of it)."""
    sched = spec.scheduling
    found = suspending(spec) if sched.select_parameters.endswith("_Memory") else []
    if not found:
        return
    halves = [(p, hw, hw.memory_mb // (2 * hw.cpus)) for p, hw in zip(spec.pools, hardwares(spec), strict=True) if hw]
    if not halves:
        return
    pool, hw, half = min(halves, key=lambda phh: phh[2])
    per_cpu = sched.default_mem_per_cpu_mb
    fix = (f"set scheduling.default_mem_per_cpu_mb to at most {half} (half of pool {pool.name}'s memory per CPU), "
           "or select_parameters CR_CPU or CR_Core")
    if per_cpu is None:
        path, mode = found[0]
        yield Problem(path, "suspended jobs keep their memory, and a job that asks for none holds its node's whole "
                      "memory: no job could take its place", fix, mode)
    elif per_cpu > half:
        yield Problem("scheduling.default_mem_per_cpu_mb", f"a job on all {hw.cpus} CPUs of a {pool.name} node "
                      f"holds {per_cpu * hw.cpus} of its {hw.memory_mb} MB while suspended: one like it cannot take "
                      "its place", fix, per_cpu)


@check
def default_mem_per_cpu_fits(spec: Cluster) -> Iterator[Problem]:
    """default_mem_per_cpu_mb times a node's CPUs fits in its memory (or a job asking for
    all of a node's CPUs and no memory could not run there)."""
    per_cpu = spec.scheduling.default_mem_per_cpu_mb
    if per_cpu is None:
        return
    over = [(p, hw) for p, hw in zip(spec.pools, hardwares(spec), strict=True)
            if hw and per_cpu * hw.cpus > hw.memory_mb]
    if over:
        pool, hw = min(over, key=lambda ph: ph[1].memory_mb // ph[1].cpus)
        yield Problem("scheduling.default_mem_per_cpu_mb", f"{per_cpu} MB x {hw.cpus} CPUs is more than pool "
                      f"{pool.name}'s {hw.memory_mb} MB: a job asking for all its CPUs could not run there",
                      f"use at most {hw.memory_mb // hw.cpus}", per_cpu)


@check
def exempt_time_takes_effect(spec: Cluster) -> Iterator[Problem]:
    """preemption.exempt_time takes effect only when jobs are preempted, and not with mode
    SUSPEND,GANG: Slurm's gang scheduler then suspends or requeues a job at once, however
    short it has run (Slurm 24.11 requeued a job 3 s into a 10 s PreemptExemptTime)."""
    pre = spec.scheduling.preemption
    if pre.exempt_time is None:
        return
    if pre.type == "none":
        yield Problem("scheduling.preemption.exempt_time", "ignored: preemption is off (type none)",
                      "remove it, or set scheduling.preemption.type", pre.exempt_time)
    elif pre.mode == "SUSPEND,GANG":
        yield Problem("scheduling.preemption.exempt_time", "not honoured with mode SUSPEND,GANG: the gang scheduler "
                      "preempts at once", "remove it, or use mode REQUEUE or CANCEL", pre.exempt_time)


@check
def preemption_mode_not_off(spec: Cluster) -> Iterator[Problem]:
    """With preemption on, the cluster-wide mode is not OFF: slurmctld refuses PreemptType
    with PreemptMode=OFF, whatever the partitions say (read_config.c)."""
    pre = spec.scheduling.preemption
    if pre.type != "none" and pre.mode == "OFF":
        yield Problem("scheduling.preemption.mode", f"OFF with preemption type {pre.type}: slurmctld refuses it "
                      "(partitions may say OFF, the cluster may not)", "use REQUEUE, CANCEL or SUSPEND,GANG, or set "
                      "type: none", pre.mode)


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
    """A QoS preempts only QoS that exist, never itself; names compare ignoring case (sacctmgr
    stores QoS names in lowercase, and slurmdbd matches them so: assoc_mgr_fill_in_qos)."""
    names = {q.name.lower() for q in spec.scheduling.qos} | {"normal"}
    for i, q in enumerate(spec.scheduling.qos):
        for j, target in enumerate(q.preempt):
            if target.lower() == q.name.lower():
                yield Problem(f"scheduling.qos[{i}].preempt[{j}]", "a QoS cannot preempt itself", "remove it", target)
            elif target.lower() not in names:
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
