"""Partitions: which pools they offer, to whom, for how long, in which order."""

from __future__ import annotations

from collections.abc import Iterator

from slurmforge.errors import Problem, SortedListing, listing
from slurmforge.spec.checks.registry import check, dupes, hardware_by_name, pool_names, reaching_on_demand
from slurmforge.spec.models import Cluster, Market, Pool, PoolKind
from slurmforge.spec.routing import pool_partitions
from slurmforge.spec.slurmtime import parse_slurm_time

# Slurm's node Weight when none is set (man slurm.conf).
DEFAULT_WEIGHT = 1


def _weight(pool: Pool) -> int:
    return DEFAULT_WEIGHT if pool.weight is None else pool.weight


@check
def default_pools(spec: Cluster) -> Iterator[Problem]:
    """default_cpu_pool names a cpu pool and default_gpu_pool a gpu pool."""
    kinds = {p.name: p.kind for p in spec.pools}
    for field, want in (("default_cpu_pool", PoolKind.CPU), ("default_gpu_pool", PoolKind.GPU)):
        name = getattr(spec.scheduling, field)
        if name is None:
            continue
        if name not in kinds:
            yield Problem(f"scheduling.{field}", "unknown pool", f"use one of: {listing(sorted(kinds))}", name)
        elif kinds[name] is not want:
            yield Problem(f"scheduling.{field}", f"pool is kind {kinds[name].value}", f"name a {want.value} pool", name)


@check
def default_pools_in_partitions(spec: Cluster) -> Iterator[Problem]:
    """A default pool is in some partition (a fallback-only pool cannot be the default)."""
    if spec.scheduling.default_cpu_pool is None and spec.scheduling.default_gpu_pool is None:
        return
    used = {name for part in spec.partitions for name in part.pools}
    known = pool_names(spec)
    for field in ("default_cpu_pool", "default_gpu_pool"):
        name = getattr(spec.scheduling, field)
        if name in known and name not in used:
            yield Problem(f"scheduling.{field}", "pool is in no partition, so no job can reach it",
                          "add it to a partition's pools, or name a pool that is", name)


@check
def default_pools_have_one_partition(spec: Cluster) -> Iterator[Problem]:
    """A default pool stands for one partition (where jobs naming none go): the one that
    lists it; of several, the default partition, else the one listing the fewest pools.
    Two that list equally few are ambiguous."""
    for field in ("default_cpu_pool", "default_gpu_pool"):
        name = getattr(spec.scheduling, field)
        found = pool_partitions(spec, name) if name else []
        if len(found) > 1:
            names = [p.name for p in found]
            yield Problem(f"scheduling.{field}", f"pool is in partitions {listing(names)}, each with "
                          f"{len(set(found[0].pools))} pool(s): which one takes jobs that name no partition is not "
                          "clear", "keep the pool in one of them (the default partition wins), or give the one for "
                          "such jobs fewer pools", name)


@check
def pools_in_some_partition(spec: Cluster) -> Iterator[Problem]:
    """Every pool is in at least one partition (or its nodes can never run jobs),
    unless it is only a fallback target."""
    used = {name for part in spec.partitions for name in part.pools}
    fallbacks = {f for p in spec.pools for f in p.fallback}
    for i, p in enumerate(spec.pools):
        if p.name not in used and p.name not in fallbacks:
            yield Problem(f"pools[{i}].name", "pool is in no partition", "add it to a partition's pools", p.name)


@check
def partitions_name_known_pools(spec: Cluster) -> Iterator[Problem]:
    """Partitions name existing pools, each once."""
    names = pool_names(spec)
    known = SortedListing(names)
    for i, part in enumerate(spec.partitions):
        for j, pool in enumerate(part.pools):
            if pool not in names:
                yield Problem(f"partitions[{i}].pools[{j}]", "unknown pool", f"use one of: {known}", pool)
        for d in sorted(dupes(part.pools)):
            yield Problem(f"partitions[{i}].pools", "pool listed twice", "list it once", d)


@check
def exactly_one_default_partition(spec: Cluster) -> Iterator[Problem]:
    """Exactly one partition is Default=YES."""
    defaults = [i for i, p in enumerate(spec.partitions) if p.default]
    if not defaults:
        yield Problem("partitions", "no partition has default: true",
                      "mark one partition (e.g. ml-cpu) default: true", show_value=False)
    for i in defaults[1:]:
        yield Problem(f"partitions[{i}].default", f"second default partition (first is "
                      f"'{spec.partitions[defaults[0]].name}')", "keep default: true on one partition only", True)


@check
def default_time_within_max(spec: Cluster) -> Iterator[Problem]:
    """DefaultTime <= MaxTime."""
    for i, part in enumerate(spec.partitions):
        if part.default_time and part.max_time and \
                parse_slurm_time(part.default_time) > parse_slurm_time(part.max_time):
            yield Problem(f"partitions[{i}].default_time", f"{part.default_time} is longer than max_time "
                          f"{part.max_time}", "lower default_time or raise max_time", show_value=False)


@check
def allow_groups_defined(spec: Cluster) -> Iterator[Problem]:
    """AllowGroups names groups the spec defines (or a user's private group)."""
    groups = {g.name for g in spec.groups}
    private = {u.name for u in spec.users}
    defined = SortedListing(groups) if groups else "none"
    for i, part in enumerate(spec.partitions):
        for j, g in enumerate(part.allow_groups):
            if g not in groups and g not in private:
                yield Problem(f"partitions[{i}].allow_groups[{j}]", "undefined group",
                              f"add it under groups: (defined: {defined})", g)


@check
def allow_accounts_defined(spec: Cluster) -> Iterator[Problem]:
    """AllowAccounts names accounts the spec defines (ignoring case: slurmctld finds each in
    the associations, which match account names so: accounts_list_build, assoc_mgr.c), and
    needs accounting."""
    accounts = {a.name.lower() for a in spec.accounting.accounts}
    for i, part in enumerate(spec.partitions):
        for j, a in enumerate(part.allow_accounts):
            if a.lower() not in accounts:
                yield Problem(f"partitions[{i}].allow_accounts[{j}]", "undefined account",
                              "add it under accounting.accounts", a)
        if part.allow_accounts and not spec.accounting.enabled:
            yield Problem(f"partitions[{i}].allow_accounts", "allow_accounts needs accounting",
                          "set accounting.enabled: true, or use allow_groups", show_value=False)


@check
def partition_qos_defined(spec: Cluster) -> Iterator[Problem]:
    """A partition QoS is one the spec defines (or Slurm's own 'normal'; ignoring case, as
    slurmctld finds it: assoc_mgr_fill_in_qos compares QoS names so), and needs accounting."""
    qos = {q.name.lower() for q in spec.scheduling.qos} | {"normal"}
    for i, part in enumerate(spec.partitions):
        if part.qos and part.qos.lower() not in qos:
            yield Problem(f"partitions[{i}].qos", "undefined QoS", "add it under scheduling.qos", part.qos)
        if part.qos and not spec.accounting.enabled:
            yield Problem(f"partitions[{i}].qos", "a partition QoS needs accounting", "enable accounting", part.qos)


@check
def partition_pool_weights(spec: Cluster) -> Iterator[Problem]:
    """In a partition that mixes pools, GPU nodes weigh more than CPU nodes (or CPU-only jobs
    fill them), and a spot and an on-demand pool of the same hardware never tie on weight."""
    pools = {p.name: p for p in spec.pools}
    shapes = hardware_by_name(spec)
    for i, part in enumerate(spec.partitions):
        members = [pools[n] for n in dict.fromkeys(part.pools) if n in pools]
        cpu = [p for p in members if p.kind is PoolKind.CPU]
        gpu = [p for p in members if p.kind is PoolKind.GPU]
        if cpu and gpu:
            heavy = max(cpu, key=_weight)
            light = min(gpu, key=_weight)
            if _weight(light) <= _weight(heavy):
                yield Problem(f"partitions[{i}].pools", f"gpu pool '{light.name}' (weight {_weight(light)}) is not "
                              f"heavier than cpu pool '{heavy.name}' (weight {_weight(heavy)}): CPU-only jobs would "
                              "take the GPU nodes", "give the gpu pools a higher weight than the cpu pools",
                              show_value=False)
        # one line per spot pool that ties, naming the first on-demand pool it ties with
        on_demand: dict[tuple[object, int], str] = {}
        for o in members:
            if o.market is Market.ON_DEMAND and shapes[o.name] is not None:
                on_demand.setdefault((shapes[o.name], _weight(o)), o.name)
        for s in (p for p in members if p.market is Market.SPOT):
            tie = on_demand.get((shapes[s.name], _weight(s)))
            if tie is not None:
                yield Problem(f"partitions[{i}].pools", f"spot pool '{s.name}' and on-demand pool '{tie}' "
                              f"have the same hardware and weight {_weight(s)}: Slurm may start either first",
                              "give the pool to fill first (usually the spot one) a lower weight",
                              show_value=False)


@check
def default_partition_not_only_spot(spec: Cluster) -> Iterator[Problem]:
    """The default partition is not made only of spot pools without an on-demand fallback
    (every job submitted without -p could be interrupted)."""
    markets = {p.name: p.market for p in spec.pools}
    for i, part in enumerate(spec.partitions):
        members = [n for n in part.pools if n in markets] if part.default else []
        if not members or any(markets[n] is Market.ON_DEMAND for n in members):
            continue
        safe = reaching_on_demand(spec)  # only for a default partition of spot pools: a walk over all pools
        if not any(n in safe for n in members):
            yield Problem(f"partitions[{i}].default", "only spot pools without an on-demand fallback: every job "
                          "submitted without -p could be interrupted", "make an on-demand partition the default, "
                          "or give the spot pools an on-demand fallback", show_value=False)
