"""Pools: where their hardware comes from and whether Slurm's node lines can be true."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from slurmforge.errors import Problem
from slurmforge.instance_types import InstanceType, load_instance_types, lookup
from slurmforge.spec.checks.registry import check, dupes, hardwares, is_aws
from slurmforge.spec.models import MAX_SLURM_NODES, Cluster, LocalTarget, PoolKind
from slurmforge.spec.nodes import SCHEDULABLE_MEMORY

# A local node is a container on this machine; larger claims let Slurm place jobs the
# machine cannot run (config_overrides makes slurmd trust the spec).
LOCAL_MAX_CPUS = 8
LOCAL_MAX_MEMORY_MB = 16384


@check
def pool_hardware_source(spec: Cluster) -> Iterator[Problem]:
    """A pool has instance_types or hardware: exactly one of them."""
    for i, p in enumerate(spec.pools):
        if p.instance_types and p.hardware:
            yield Problem(f"pools[{i}]", "both instance_types and hardware are set",
                          "keep instance_types for AWS, hardware for on-premise/local nodes", show_value=False)
        elif not p.instance_types and not p.hardware:
            yield Problem(f"pools[{i}]", "neither instance_types nor hardware is set",
                          "add instance_types (e.g. g5.xlarge) or a hardware block", show_value=False)


@check
def aws_pools_need_instance_types(spec: Cluster) -> Iterator[Problem]:
    """On AWS every pool names instance types (explicit hardware cannot be launched)."""
    if not is_aws(spec):
        return
    for i, p in enumerate(spec.pools):
        if p.hardware and not p.instance_types:
            yield Problem(f"pools[{i}].hardware", "an AWS pool needs instance_types, not hardware",
                          "replace hardware with instance_types (e.g. m6i.xlarge)", show_value=False)


def _type_fix(name: str, catalog: dict[str, InstanceType]) -> str:
    close = difflib.get_close_matches(name, catalog, n=1, cutoff=0.8)
    if close:
        return f"did you mean '{close[0]}'?"
    family = name.split(".")[0]
    same = [n for n in catalog if n.split(".")[0] == family][:4]  # catalog order: by size
    if same:
        return f"known {family} types: {', '.join(same)}, ..."
    return "use a type from slurmforge/data/instance_types.yaml (or add it there)"


@check
def known_instance_types(spec: Cluster) -> Iterator[Problem]:
    """Every instance type is in the catalog."""
    typed = [(i, p) for i, p in enumerate(spec.pools) if p.instance_types]
    catalog = load_instance_types() if typed else {}  # read only when asked (a tenth of a local spec's checks)
    for i, p in typed:
        for j, t in enumerate(p.instance_types):
            if t not in catalog:
                yield Problem(f"pools[{i}].instance_types[{j}]", "unknown instance type", _type_fix(t, catalog), t)


@check
def nvswitch_types_need_fabric_manager(spec: Cluster) -> Iterator[Problem]:
    """On AWS without a pinned image, no type whose GPUs share NVSwitches (p4d, p4de, p5):
    CUDA runs there only with NVIDIA's fabric manager, which Debian does not package, so
    the gpu image variant cannot run them."""
    if not is_aws(spec) or spec.images.ami is not None:
        return
    for i, p in enumerate(spec.pools):
        for j, t in enumerate(p.instance_types):
            found = lookup(t)
            if found is not None and found.nvswitch:
                yield Problem(f"pools[{i}].instance_types[{j}]",
                              "its GPUs share NVSwitches, which need NVIDIA's fabric manager; Debian does not "
                              "package it, so slurmforge's GPU image cannot run them",
                              "pick a type without NVSwitch (g5, g6, p3, ...), or set images.ami to an image with "
                              "the NVIDIA driver and its nvidia-fabricmanager", t)


@check
def unique_instance_types(spec: Cluster) -> Iterator[Problem]:
    """A pool lists each instance type once."""
    for i, p in enumerate(spec.pools):
        for t in sorted(dupes(p.instance_types)) if len(p.instance_types) > 1 else ():
            yield Problem(f"pools[{i}].instance_types", "instance type listed twice", "list it once", t)


@check
def flexible_types_agree(spec: Cluster) -> Iterator[Problem]:
    """Types of one flexible pool agree on vCPUs, GPU count and GPU model (Slurm has one node
    line, and the GPU model is its feature)."""
    for i, p in enumerate(spec.pools):
        types = [t for t in (lookup(n) for n in p.instance_types) if t is not None]
        if len(types) < 2:
            continue
        first = types[0]
        for t in types[1:]:
            if (t.vcpus, t.accelerators) != (first.vcpus, first.accelerators):
                yield Problem(
                    f"pools[{i}].instance_types",
                    f"{t.name} has {t.vcpus} vCPUs/{t.accelerators} GPUs but {first.name} has "
                    f"{first.vcpus}/{first.accelerators}",
                    "put types with the same vCPUs and GPUs in one pool, others in another pool",
                    t.name,
                )
            elif t.accelerator_model != first.accelerator_model:
                yield Problem(
                    f"pools[{i}].instance_types",
                    f"{t.name} has {t.accelerator_model} GPUs but {first.name} has {first.accelerator_model} "
                    "(--constraint would pick the wrong ones)",
                    "keep one GPU model per pool", t.name,
                )


@check
def gpu_count_fits_type(spec: Cluster) -> Iterator[Problem]:
    """gpus: no GPUs on a CPU-only type, never more than the type has."""
    for i, p in enumerate(spec.pools):
        if p.gpus is None:
            continue
        for t in (lookup(n) for n in p.instance_types):
            if t is None:
                continue
            if p.gpus and not t.accelerators:
                yield Problem(f"pools[{i}].gpus", f"{p.gpus}, but {t.name} has no GPUs",
                              "pick a GPU type (g5, g6, p4d, ...) or drop gpus", show_value=False)
            elif p.gpus > t.accelerators:
                yield Problem(f"pools[{i}].gpus", f"{p.gpus}, but {t.name} has {t.accelerators} GPU(s)",
                              f"set gpus to at most {t.accelerators}", show_value=False)


@check
def gpus_with_hardware(spec: Cluster) -> Iterator[Problem]:
    """With explicit hardware, GPUs are declared under hardware.gpus, not pool.gpus."""
    for i, p in enumerate(spec.pools):
        if p.hardware and p.gpus is not None:
            yield Problem(f"pools[{i}].gpus", "pool.gpus only applies to instance types",
                          "declare hardware.gpus with count and model", p.gpus)


@check
def memory_fits_type(spec: Cluster) -> Iterator[Problem]:
    """memory_mb never exceeds what the instance type (or hardware) has."""
    for i, p in enumerate(spec.pools):
        if p.memory_mb is None:
            continue
        for t in (lookup(n) for n in p.instance_types):
            if t is not None and p.memory_mb > t.memory_mib:
                yield Problem(f"pools[{i}].memory_mb", f"{p.memory_mb} MiB, but {t.name} has {t.memory_mib} MiB",
                              f"drop memory_mb (default {int(t.memory_mib * SCHEDULABLE_MEMORY)}, room for the OS) "
                              f"or set at most {t.memory_mib}", show_value=False)
        if p.hardware and p.memory_mb > p.hardware.memory_mb:
            yield Problem(f"pools[{i}].memory_mb", f"{p.memory_mb} MiB is more than hardware.memory_mb "
                          f"{p.hardware.memory_mb}", "lower memory_mb or drop it", show_value=False)


@check
def kind_matches_hardware(spec: Cluster) -> Iterator[Problem]:
    """A gpu pool has GPUs; a cpu pool has none."""
    for i, (p, hw) in enumerate(zip(spec.pools, hardwares(spec), strict=True)):
        if hw is None:
            continue
        if p.kind is PoolKind.GPU and not hw.gpus:
            yield Problem(f"pools[{i}].kind", "gpu pool whose nodes have no GPUs",
                          "choose a GPU instance type / hardware.gpus, or kind: cpu", p.kind.value)
        if p.kind is PoolKind.CPU and hw.gpus:
            yield Problem(f"pools[{i}].kind", f"cpu pool whose nodes have {hw.gpus} GPU(s)",
                          "set kind: gpu (or gpus: 0 to hide them)", p.kind.value)


@check
def min_not_above_max(spec: Cluster) -> Iterator[Problem]:
    """min_nodes <= max_nodes."""
    for i, p in enumerate(spec.pools):
        if p.min_nodes > p.max_nodes:
            yield Problem(f"pools[{i}].min_nodes", f"{p.min_nodes} is above max_nodes {p.max_nodes}",
                          "raise max_nodes or lower min_nodes", show_value=False)


@check
def node_count_slurm_holds(spec: Cluster) -> Iterator[Problem]:
    """The pools' nodes fit slurmctld's node table: at most 65,536 in all (Slurm's
    MAX_SLURM_NODES; slurmctld 24.11 refuses to create more node records). One pool is one
    hostlist range, which holds as many at most (the models refuse a larger pool)."""
    total = sum(p.max_nodes for p in spec.pools)
    if total > MAX_SLURM_NODES:
        largest = max(range(len(spec.pools)), key=lambda i: spec.pools[i].max_nodes)
        yield Problem("pools", f"{total:,} nodes in all; slurmctld holds at most {MAX_SLURM_NODES:,}",
                      f"lower max_nodes (pools[{largest}], {spec.pools[largest].name}, has "
                      f"{spec.pools[largest].max_nodes:,}), or run a second cluster", show_value=False)


@check
def features_listed_once(spec: Cluster) -> Iterator[Problem]:
    """features never repeat, and never repeat the GPU model (it is added automatically)."""
    for i, (p, hw) in enumerate(zip(spec.pools, hardwares(spec), strict=True)):
        if not p.features:
            continue
        for f in sorted(dupes(p.features)):
            yield Problem(f"pools[{i}].features", "feature listed twice", "list it once", f)
        if hw and hw.gpus and hw.gpu_model in p.features:
            yield Problem(f"pools[{i}].features[{p.features.index(hw.gpu_model)}]",
                          "the GPU model is already a feature of every node", "remove it", hw.gpu_model)


@check
def local_pools_fit_a_container(spec: Cluster) -> Iterator[Problem]:
    """On the local target every node is a container on this machine: at most 8 CPUs and
    16 GiB of memory per node, so Slurm never places jobs the machine cannot run."""
    if not isinstance(spec.target, LocalTarget):
        return
    for i, (p, hw) in enumerate(zip(spec.pools, hardwares(spec), strict=True)):
        if hw is None or (hw.cpus <= LOCAL_MAX_CPUS and hw.memory_mb <= LOCAL_MAX_MEMORY_MB):
            continue
        where = f"pools[{i}].instance_types" if p.instance_types else f"pools[{i}].hardware"
        if hw.cpus > LOCAL_MAX_CPUS:
            yield Problem(where, f"{hw.cpus} CPUs per node; local nodes are containers sharing this machine",
                          f"use at most {LOCAL_MAX_CPUS} CPUs per node (e.g. hardware with cores_per_socket: 2)",
                          show_value=False)
        if hw.memory_mb > LOCAL_MAX_MEMORY_MB:
            yield Problem(where, f"{hw.memory_mb} MiB per node; local nodes are containers sharing this machine",
                          f"use at most {LOCAL_MAX_MEMORY_MB} MiB per node (memory_mb)", show_value=False)

