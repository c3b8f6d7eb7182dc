"""Default pools: which partition a job that names none is sent to.

`scheduling.default_gpu_pool` and `default_cpu_pool` name pools; Slurm routes by
partition. A pool's partition is the one partition that lists it. When several list it,
the default partition wins if it is one of them; otherwise the one that lists the fewest
pools (ml-gpu: [gpu] over all: [cpu, gpu]). Two with equally few pools are ambiguous, and
the spec check `default_pools_have_one_partition` refuses them; a pool in no partition is
refused by `default_pools_in_partitions`.

The rule runs in slurmctld as a job_submit/lua script (templates/job_submit.lua.j2):
Slurm calls it for every sbatch, srun and salloc that creates a job.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurmforge.spec.models import Cluster, Partition, PoolKind
from slurmforge.spec.nodes import pool_hardware

JOB_SUBMIT_SCRIPT = "job_submit.lua"
"""Slurm reads it from the directory slurm.conf is in (get_extra_conf_path)."""


def pool_partitions(spec: Cluster, pool: str) -> list[Partition]:
    """The partitions that could stand for the pool, best first: [one] when the rule
    decides, several when it cannot (a tie), [] when no partition lists the pool."""
    listing = [p for p in spec.partitions if pool in p.pools]
    if len(listing) <= 1:
        return listing
    default = [p for p in listing if p.default]
    if default:
        return default[:1]
    fewest = min(len(set(p.pools)) for p in listing)
    return [p for p in listing if len(set(p.pools)) == fewest]


def pool_partition(spec: Cluster, pool: str | None) -> str | None:
    """The partition the pool stands for; None when the pool is unset, unknown or ambiguous."""
    if pool is None or pool not in {p.name for p in spec.pools}:
        return None
    found = pool_partitions(spec, pool)
    return found[0].name if len(found) == 1 else None


@dataclass(frozen=True)
class Routing:
    """What the job_submit script does: a job without a partition that asks for one of
    `gpu_gres` goes to `gpu_partition`, any other to `cpu_partition`; None leaves such jobs
    to Slurm's default partition."""

    gpu_partition: str | None
    cpu_partition: str | None
    gpu_pool: str | None
    cpu_pool: str | None
    gpu_gres: tuple[str, ...]

    @property
    def active(self) -> bool:
        return self.gpu_partition is not None or self.cpu_partition is not None


def routing(spec: Cluster) -> Routing:
    sched = spec.scheduling
    # --gpus, --gpus-per-* always ask for gres/gpu; --gres may name any GPU pool's GRES
    gres = {"gpu"} | {hw.gres_name for p in spec.pools if p.kind is PoolKind.GPU
                      for hw in [pool_hardware(p)] if hw is not None and hw.gres_name}
    return Routing(
        gpu_partition=pool_partition(spec, sched.default_gpu_pool),
        cpu_partition=pool_partition(spec, sched.default_cpu_pool),
        gpu_pool=sched.default_gpu_pool,
        cpu_pool=sched.default_cpu_pool,
        gpu_gres=tuple(sorted(gres)),
    )
