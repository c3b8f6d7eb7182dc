"""What a pool becomes in Slurm: node hardware (from the catalog or the spec) and
node sets written as hostlist ranges."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from slurmforge.instance_types import lookup
from slurmforge.spec.models import Cluster, Pool

# EC2's catalog memory is not what the instance's kernel reports: the kernel keeps its own
# image, page tables and reserved ranges out of MemTotal, and slurmd registers MemTotal.
# Slurm drains a node whose RealMemory is above what slurmd finds ("Low RealMemory",
# slurm.conf(5) RealMemory), so a pool node must be promised less than its smallest type's
# MemTotal. No measured MemTotal per type is kept here; the reserve is Karpenter's, which
# AWS's own node provisioner applies to every EC2 type (settings VM_MEMORY_OVERHEAD_PERCENT,
# default 0.075: karpenter.sh/docs/reference/settings/; its issue #5161 on discovering it
# per type instead): a 4 GiB t3.medium schedules 3,788 MiB, not the 3,891 of a 5 % reserve
# that its kernel does not leave. A pool's memory_mb overrides it.
SCHEDULABLE_MEMORY = 0.925


@dataclass(frozen=True)
class NodeHardware:
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mb: int
    gpus: int = 0
    gpu_model: str | None = None
    gpu_kind: str | None = None
    uniform_layout: bool = True
    """False for a flexible pool whose types differ in sockets/cores/threads (t2 vs t3):
    its node line then names only CPUs, which every member satisfies."""

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @property
    def gres_name(self) -> str | None:
        if not self.gpus:
            return None
        return "neuron" if self.gpu_kind == "neuron" else "gpu"

    @property
    def device_glob(self) -> str | None:
        """The device files gres.conf names, e.g. /dev/nvidia[0-3]: what the driver makes
        for the GPUs of one machine (minors 0..N-1)."""
        if not self.gpus:
            return None
        base = "/dev/neuron" if self.gpu_kind == "neuron" else "/dev/nvidia"
        return f"{base}0" if self.gpus == 1 else f"{base}[0-{self.gpus - 1}]"


def pool_hardware(pool: Pool) -> NodeHardware | None:
    """The hardware every node of the pool has; None when the pool names an unknown
    instance type (the checks report that)."""
    if pool.hardware is not None:
        hw = pool.hardware
        gpus = hw.gpus
        return NodeHardware(
            sockets=hw.sockets,
            cores_per_socket=hw.cores_per_socket,
            threads_per_core=hw.threads_per_core,
            memory_mb=pool.memory_mb or hw.memory_mb,
            gpus=gpus.count if gpus else 0,
            gpu_model=gpus.model if gpus else None,
            gpu_kind=gpus.kind if gpus else None,
        )
    types = [lookup(name) for name in pool.instance_types]
    if not types or any(t is None for t in types):
        return None
    known = [t for t in types if t is not None]
    preferred = known[0]  # lookup(pool.preferred_type): its layout and GPU model are the node line's
    # a flexible pool is as large as its smallest member
    memory = min(t.memory_mib for t in known)
    accel = min(t.accelerators for t in known)
    return NodeHardware(
        sockets=preferred.sockets,
        cores_per_socket=preferred.cores_per_socket,
        threads_per_core=preferred.threads_per_core,
        memory_mb=pool.memory_mb or int(memory * SCHEDULABLE_MEMORY),
        gpus=accel if pool.gpus is None else pool.gpus,
        gpu_model=preferred.accelerator_model,
        gpu_kind=preferred.accelerator_kind,
        uniform_layout=len({(t.sockets, t.cores_per_socket, t.threads_per_core) for t in known}) == 1,
    )


def hardware_key(pool: Pool) -> tuple[object, ...]:
    """Every field of the pool pool_hardware reads: pools with the same key have the same
    hardware (the checks work it out once per key: 88,000 pools are a few shapes)."""
    hw = pool.hardware
    if hw is None:
        return ("types", tuple(pool.instance_types), pool.memory_mb, pool.gpus)
    gpus = (hw.gpus.count, hw.gpus.model, hw.gpus.kind) if hw.gpus else None
    return ("hardware", hw.sockets, hw.cores_per_socket, hw.threads_per_core, hw.memory_mb, gpus, pool.memory_mb)


def index_width(pool: Pool) -> int:
    return pool.index_width or max(2, len(str(pool.max_nodes)))


@dataclass(frozen=True)
class NodeSet:
    """A contiguous range of one pool's nodes: prefix-[first..last]."""

    pool: str
    prefix: str
    width: int
    first: int
    last: int
    dynamic: bool

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    @property
    def hostlist(self) -> str:
        return ranged(self.prefix, [(self.first, self.last)], self.width)

    def names(self) -> Iterator[str]:
        return map(f"{self.prefix}-{{:0{self.width}d}}".format, range(self.first, self.last + 1))


def node_sets(spec: Cluster, pool: Pool) -> list[NodeSet]:
    """Static nodes (1..min_nodes) and dynamic nodes (min_nodes+1..max_nodes)."""
    prefix, width = spec.node_prefix(pool), index_width(pool)
    sets = []
    if pool.min_nodes:
        sets.append(NodeSet(pool.name, prefix, width, 1, min(pool.min_nodes, pool.max_nodes), False))
    if pool.max_nodes > pool.min_nodes:
        sets.append(NodeSet(pool.name, prefix, width, pool.min_nodes + 1, pool.max_nodes, True))
    return sets


def ranged(prefix: str, spans: Iterable[tuple[int, int]], width: int) -> str:
    """prefix-[01-04,07] from index spans; a single node is written plainly."""
    parts = []
    spans = list(spans)
    if len(spans) == 1 and spans[0][0] == spans[0][1]:
        return f"{prefix}-{spans[0][0]:0{width}d}"
    for lo, hi in spans:
        parts.append(f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}")
    return f"{prefix}-[{','.join(parts)}]"


def pool_hostlist(spec: Cluster, pool: Pool) -> str:
    return ranged(spec.node_prefix(pool), [(1, pool.max_nodes)], index_width(pool))


def node_names(spec: Cluster, pool: Pool) -> list[str]:
    return [n for s in node_sets(spec, pool) for n in s.names()]


def ceph_host_name(cluster: str, index: int, local: bool) -> str:
    """The name of Ceph host `index` (from 1): <cluster>-ceph-1 on AWS, <cluster>-ceph-01
    on the local target."""
    return f"{cluster}-ceph-{index:02d}" if local else f"{cluster}-ceph-{index}"


def node_index(name: str, prefix: str, width: int, count: int) -> int | None:
    """The index of `name` among a pool's node names prefix-<index> (1..count, zero-padded
    to width), or None when it is not one of them."""
    head, _, digits = name.rpartition("-")
    if head != prefix or not digits.isascii() or not digits.isdigit():
        return None
    index = int(digits)
    return index if 1 <= index <= count and digits == f"{index:0{width}d}" else None
