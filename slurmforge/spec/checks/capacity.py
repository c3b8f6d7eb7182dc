"""Capacity: fallback chains, spot markets, zones, placement groups, boot time."""

from __future__ import annotations

from collections.abc import Iterator

from slurmforge.errors import Problem, SortedListing
from slurmforge.instance_types import lookup
from slurmforge.spec.checks.registry import check, cycles, dupes, hardware_by_name, hardwares, is_aws, pool_names
from slurmforge.spec.models import AwsTarget, Cluster, LocalTarget, Market
from slurmforge.spec.nodes import NodeHardware

# EC2 nodes take 2-6 minutes from RunInstances to a registered slurmd.
MIN_AWS_RESUME_TIMEOUT = 300


@check
def fallback_targets_exist(spec: Cluster) -> Iterator[Problem]:
    """Fallback names existing pools, not the pool itself, each once."""
    names = pool_names(spec)
    known = SortedListing(names)
    for i, p in enumerate(spec.pools):
        for j, f in enumerate(p.fallback):
            if f not in names:
                yield Problem(f"pools[{i}].fallback[{j}]", "unknown pool", f"use one of: {known}", f)
            elif f == p.name:
                yield Problem(f"pools[{i}].fallback[{j}]", "a pool cannot fall back to itself", "remove it", f)
        for f in sorted(dupes(p.fallback)) if len(p.fallback) > 1 else ():
            yield Problem(f"pools[{i}].fallback", "pool listed twice", "list it once", f)


@check
def fallback_same_kind(spec: Cluster) -> Iterator[Problem]:
    """A pool falls back only to pools of the same kind (a GPU job cannot run on CPUs)."""
    kinds = {p.name: p.kind for p in spec.pools}
    for i, p in enumerate(spec.pools):
        for j, f in enumerate(p.fallback):
            if kinds.get(f, p.kind) is not p.kind:
                yield Problem(f"pools[{i}].fallback[{j}]", f"{p.kind.value} pool falls back to {kinds[f].value} pool",
                              f"fall back to a {p.kind.value} pool", f)


def _shape(hw: NodeHardware) -> str:
    gpus = f", {hw.gpus} {hw.gpu_model} GPU(s)" if hw.gpus else ""
    return f"{hw.cpus} CPUs{gpus}"


@check
def fallback_same_hardware(spec: Cluster) -> Iterator[Problem]:
    """A fallback pool's nodes have the pool's CPUs and GPUs and at least its memory: the
    service launches the pool's nodes on the fallback's capacity, and Slurm keeps the pool's
    node line (a smaller node drains)."""
    kinds = {p.name: p.kind for p in spec.pools}
    shapes = hardware_by_name(spec)
    for i, (p, hw) in enumerate(zip(spec.pools, hardwares(spec), strict=True)):
        if hw is None or not p.fallback:
            continue
        for j, f in enumerate(p.fallback):
            other = shapes.get(f) if f != p.name else None
            if other is hw or other is None or kinds[f] is not p.kind:
                continue  # unknown, itself, or another kind: reported by the checks above
            if (other.cpus, other.gpus, other.gpu_model) != (hw.cpus, hw.gpus, hw.gpu_model):
                yield Problem(f"pools[{i}].fallback[{j}]", f"nodes have {_shape(other)}, this pool's {_shape(hw)}",
                              "fall back to a pool of the same hardware (e.g. the same type on-demand)", f)
            elif other.memory_mb < hw.memory_mb:
                yield Problem(f"pools[{i}].fallback[{j}]", f"nodes have {other.memory_mb} MiB, this pool's "
                              f"{hw.memory_mb} MiB", "fall back to a pool with at least as much memory, or lower "
                              "this pool's memory_mb", f)


@check
def fallback_acyclic(spec: Cluster) -> Iterator[Problem]:
    """Fallback chains have no cycles."""
    graph = {p.name: p.fallback for p in spec.pools if p.fallback}
    if not graph:
        return
    index = {p.name: i for i, p in enumerate(spec.pools)}
    for cycle in cycles(graph):
        yield Problem(f"pools[{index[cycle[0]]}].fallback", f"fallback cycle {' -> '.join(cycle)}",
                      "make the chain end at a pool without fallback", show_value=False)


@check
def spot_needs_interruptions(spec: Cluster) -> Iterator[Problem]:
    """Spot markets exist where something takes machines back with a notice: on AWS, and on
    the local target, whose provider delivers notices on request (the interrupt file); on
    machines you own nothing does."""
    if is_aws(spec) or isinstance(spec.target, LocalTarget):
        return
    for i, p in enumerate(spec.pools):
        if p.market is Market.SPOT:
            yield Problem(f"pools[{i}].market", f"spot needs target aws or local (target is {spec.target.kind})",
                          "use market: on-demand", p.market.value)


@check
def spot_pools_have_no_static_nodes(spec: Cluster) -> Iterator[Problem]:
    """Static (min_nodes) nodes are never spot: nothing could keep them at count through
    interruptions."""
    for i, p in enumerate(spec.pools):
        if p.market is Market.SPOT and p.min_nodes:
            yield Problem(f"pools[{i}].min_nodes", "static nodes cannot be spot (interruptions would drop them)",
                          "set min_nodes: 0 and keep static nodes in an on-demand pool", p.min_nodes)


@check
def zones_unique_and_in_region(spec: Cluster) -> Iterator[Problem]:
    """A pool's zones are distinct, in the target region, and have a private subnet."""
    target = spec.target
    subnet_zones = {s.zone for s in spec.network.private_subnets}
    for i, p in enumerate(spec.pools):
        for z in sorted(dupes(p.zones)):
            yield Problem(f"pools[{i}].zones", "zone listed twice", "list each zone once", z)
        for j, z in enumerate(p.zones):
            if not isinstance(target, AwsTarget):
                yield Problem(f"pools[{i}].zones[{j}]", "zones only apply to target aws", "remove zones", z)
            elif z != z.strip():
                continue  # aws_names_as_written
            elif not z.startswith(target.region):
                yield Problem(f"pools[{i}].zones[{j}]", f"not a zone of region {target.region}",
                              f"use {target.region}a, {target.region}b, ...", z)
            elif subnet_zones and z not in subnet_zones:
                yield Problem(f"pools[{i}].zones[{j}]", "no private subnet in this zone",
                              "add a network.private_subnets entry for it", z)


@check
def placement_and_efa(spec: Cluster) -> Iterator[Problem]:
    """EFA needs a type that has it and a placement group; a cluster placement group lives
    in one zone."""
    subnet_zones = {s.zone for s in spec.network.private_subnets}
    for i, p in enumerate(spec.pools):
        if (p.placement_group or p.efa) and not is_aws(spec):
            yield Problem(f"pools[{i}]", "placement_group/efa only apply to target aws",
                          "remove them", show_value=False)
            continue
        if p.efa:
            for t in (lookup(n) for n in p.instance_types):
                if t is not None and not t.efa:
                    yield Problem(f"pools[{i}].efa", f"{t.name} does not support EFA",
                                  "use p4d/p5/g5.8xlarge+ or set efa: false", show_value=False)
            if not p.placement_group:
                yield Problem(f"pools[{i}].placement_group", "efa needs a cluster placement group",
                              "set placement_group: true", False)
        if p.placement_group and (len(p.zones) > 1 or (not p.zones and len(subnet_zones) > 1)):
            yield Problem(f"pools[{i}].zones", f"a cluster placement group lives in one zone; the pool would span "
                          f"{len(p.zones) or len(subnet_zones)}", "list one zone, or set placement_group: false",
                          show_value=False)


@check
def resume_timeout_covers_boot(spec: Cluster) -> Iterator[Problem]:
    """On AWS, resume_timeout leaves EC2 nodes time to boot and register (at least 300 s);
    Slurm marks slower nodes DOWN and requeues their jobs."""
    timeout = spec.scheduling.resume_timeout
    if is_aws(spec) and timeout < MIN_AWS_RESUME_TIMEOUT:
        yield Problem("scheduling.resume_timeout", f"{timeout} s; EC2 nodes take 2-6 minutes to boot and register",
                      f"use at least {MIN_AWS_RESUME_TIMEOUT} (default 600)", show_value=False)
