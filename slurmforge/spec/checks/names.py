"""Rules that relate several fields of a spec. Each check yields every Problem it
finds; `run_checks` runs them all, so the user sees every error at once.

A check is a small generator registered with @check. Its docstring is the rule, and
the test suite has an invalid-*.yaml file for each one.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterator

from slurmforge.catalog import load_catalog, lookup
from slurmforge.errors import Problem
from slurmforge.nodes import node_names, pool_hardware
from slurmforge.spec.models import AwsTarget, Cluster, LocalTarget, Market, PoolKind, StaticTarget
from slurmforge.spec.slurmtime import parse_slurm_time

Check = Callable[[Cluster], Iterator[Problem]]
CHECKS: list[Check] = []

# Slurm's limit on a node name (hostnames longer than this break DNS as well).
MAX_NODE_NAME = 63


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


def run_checks(spec: Cluster) -> list[Problem]:
    problems: list[Problem] = []
    for fn in CHECKS:
        problems.extend(fn(spec))
    return problems


def _dupes(names: list[str]) -> set[str]:
    return {n for n, c in Counter(names).items() if c > 1}


def _is_aws(spec: Cluster) -> bool:
    return isinstance(spec.target, AwsTarget)


# --------------------------------------------------------------------------- names


@check
def unique_pool_names(spec: Cluster) -> Iterator[Problem]:
    """Pool names are unique."""
    dupes = _dupes([p.name for p in spec.pools])
    for i, p in enumerate(spec.pools):
        if p.name in dupes:
            yield Problem(f"pools[{i}].name", "duplicate pool name", "give every pool its own name", p.name)


@check
def unique_partition_names(spec: Cluster) -> Iterator[Problem]:
    """Partition names are unique."""
    dupes = _dupes([p.name for p in spec.partitions])
    for i, p in enumerate(spec.partitions):
        if p.name in dupes:
            yield Problem(f"partitions[{i}].name", "duplicate partition name", "rename one of them", p.name)


@check
def unique_node_prefixes(spec: Cluster) -> Iterator[Problem]:
    """Two pools never produce the same node names."""
    seen: dict[str, str] = {}
    for i, p in enumerate(spec.pools):
        prefix = spec.node_prefix(p)
        if prefix in seen:
            yield Problem(
                f"pools[{i}].node_prefix",
                f"pool '{p.name}' uses the same node prefix as pool '{seen[prefix]}'",
                "set a distinct node_prefix",
                prefix,
            )
        seen.setdefault(prefix, p.name)


@check
def node_names_slurm_can_take(spec: Cluster) -> Iterator[Problem]:
    """Node names start with a letter, hold only letters, digits and '-', fit 63 chars,
    and do not end in a digit before the index (prefix1-01 parses ambiguously)."""
    for i, p in enumerate(spec.pools):
        prefix = spec.node_prefix(p)
        path = f"pools[{i}].node_prefix"
        if not prefix[:1].isalpha() or not all(c.isalnum() or c == "-" for c in prefix):
            yield Problem(path, "node names must start with a letter and hold only letters, digits and '-'",
                          "use a prefix such as 'gpu-a100'", prefix)
        elif prefix != prefix.lower():
            yield Problem(path, "node names must be lowercase (hostnames)", "use a lowercase prefix", prefix)
        if len(prefix) + 1 + max(2, len(str(p.max_nodes))) > MAX_NODE_NAME:
            yield Problem(path, f"node names would exceed {MAX_NODE_NAME} characters", "shorten the prefix", prefix)


@check
def reserved_host_names(spec: Cluster) -> Iterator[Problem]:
    """Pool node names cannot collide with the head nodes' names."""
    reserved = {f"{spec.name}-controller", f"{spec.name}-login", f"{spec.name}-db"}
    for i, p in enumerate(spec.pools):
        clash = reserved.intersection(node_names(spec, p)) | ({spec.node_prefix(p)} & reserved)
        if clash:
            yield Problem(f"pools[{i}].node_prefix", f"collides with head node name {sorted(clash)[0]}",
                          "choose another prefix", spec.node_prefix(p))


@check
def unique_group_names_and_gids(spec: Cluster) -> Iterator[Problem]:
    """Group names and gids are unique."""
    names, gids = _dupes([g.name for g in spec.groups]), _dupes([str(g.gid) for g in spec.groups])
    for i, g in enumerate(spec.groups):
        if g.name in names:
            yield Problem(f"groups[{i}].name", "duplicate group name", "define each group once", g.name)
        if str(g.gid) in gids:
            yield Problem(f"groups[{i}].gid", "duplicate gid", "give every group its own gid", g.gid)


@check
def unique_user_names_and_uids(spec: Cluster) -> Iterator[Problem]:
    """User names and uids are unique."""
    names, uids = _dupes([u.name for u in spec.users]), _dupes([str(u.uid) for u in spec.users])
    for i, u in enumerate(spec.users):
        if u.name in names:
            yield Problem(f"users[{i}].name", "duplicate user name", "define each user once", u.name)
        if str(u.uid) in uids:
            yield Problem(f"users[{i}].uid", "duplicate uid", "give every user its own uid", u.uid)


@check
def user_group_gid_clash(spec: Cluster) -> Iterator[Problem]:
    """A user's name is not also a group name (each user gets a private group)."""
    groups = {g.name for g in spec.groups}
    for i, u in enumerate(spec.users):
        if u.name in groups:
            yield Problem(f"users[{i}].name", "a group has the same name as this user",
                          "rename the group; every user gets a private group of its own name", u.name)


@check
def unique_account_names(spec: Cluster) -> Iterator[Problem]:
    """Account names are unique."""
    dupes = _dupes([a.name for a in spec.accounting.accounts])
    for i, a in enumerate(spec.accounting.accounts):
        if a.name in dupes:
            yield Problem(f"accounting.accounts[{i}].name", "duplicate account", "define each account once", a.name)


@check
def unique_qos_names(spec: Cluster) -> Iterator[Problem]:
    """QoS names are unique and 'normal' (Slurm's own) is not redefined twice."""
    dupes = _dupes([q.name for q in spec.scheduling.qos])
    for i, q in enumerate(spec.scheduling.qos):
        if q.name in dupes:
            yield Problem(f"scheduling.qos[{i}].name", "duplicate QoS", "define each QoS once", q.name)


# --------------------------------------------------------------------------- pools


@check
def pool_hardware_source(spec: Cluster) -> Iterator[Problem]:
    """A pool has instance_types or hardware: exactly one of them."""
    for i, p in enumerate(spec.pools):
        if p.instance_types and p.hardware:
            yield Problem(f"pools[{i}]", "both instance_types and hardware are set",
                          "keep instance_types for AWS, hardware for on-premise/local nodes", show_value=False)
        elif not p.instance_types and not p.hardware:
            yield Problem(f"pools[{i}]", "neither instance_types nor hardware is set",
                          "add instance_types: [g5.xlarge] or a hardware: block", show_value=False)


@check
def aws_pools_need_instance_types(spec: Cluster) -> Iterator[Problem]:
    """On AWS every pool names instance types (explicit hardware cannot be launched)."""
    if not _is_aws(spec):
        return
    for i, p in enumerate(spec.pools):
        if p.hardware and not p.instance_types:
            yield Problem(f"pools[{i}].hardware", "an AWS pool needs instance_types, not hardware",
                          "replace hardware with instance_types: [...]", show_value=False)


@check
def known_instance_types(spec: Cluster) -> Iterator[Problem]:
    """Every instance type is in the catalog."""
    catalog = load_catalog()
    for i, p in enumerate(spec.pools):
        for j, t in enumerate(p.instance_types):
            if t not in catalog:
                close = sorted(n for n in catalog if n.split(".")[0] == t.split(".")[0])[:4]
                fix = f"known {t.split('.')[0]} types: {', '.join(close)}" if close else \
                    "use a type from slurmforge/data/instance_types.yaml (or add it there)"
                yield Problem(f"pools[{i}].instance_types[{j}]", "unknown instance type", fix, t)


@check
def unique_instance_types(spec: Cluster) -> Iterator[Problem]:
    """A pool lists each instance type once."""
    for i, p in enumerate(spec.pools):
        for t in sorted(_dupes(p.instance_types)):
            yield Problem(f"pools[{i}].instance_types", "instance type listed twice", "list it once", t)


@check
def flexible_types_agree(spec: Cluster) -> Iterator[Problem]:
    """Types of one flexible pool agree on vCPUs and accelerators (Slurm has one node line)."""
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
                    "put types with the same vCPUs and GPUs in one pool, others in a fallback pool",
                    t.name,
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
                          "declare hardware.gpus: {count: N, model: ...}", p.gpus)


@check
def memory_fits_type(spec: Cluster) -> Iterator[Problem]:
    """memory_mb never exceeds what the instance type (or hardware) has."""
    for i, p in enumerate(spec.pools):
        if p.memory_mb is None:
            continue
        for t in (lookup(n) for n in p.instance_types):
            if t is not None and p.memory_mb > t.memory_mib:
                yield Problem(f"pools[{i}].memory_mb", f"{p.memory_mb} MiB, but {t.name} has {t.memory_mib} MiB",
                              f"set memory_mb to at most {int(t.memory_mib * 0.95)}", show_value=False)
        if p.hardware and p.memory_mb > p.hardware.memory_mb:
            yield Problem(f"pools[{i}].memory_mb", f"{p.memory_mb} MiB is more than hardware.memory_mb",
                          "lower memory_mb or drop it", show_value=False)


@check
def kind_matches_hardware(spec: Cluster) -> Iterator[Problem]:
    """A gpu pool has GPUs; a cpu pool has none."""
    for i, p in enumerate(spec.pools):
        hw = pool_hardware(p)
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
def fallback_targets_exist(spec: Cluster) -> Iterator[Problem]:
    """Fallback names existing pools, not the pool itself, each once."""
    names = {p.name for p in spec.pools}
    for i, p in enumerate(spec.pools):
        for j, f in enumerate(p.fallback):
            if f not in names:
                yield Problem(f"pools[{i}].fallback[{j}]", "unknown pool", f"use one of: {', '.join(sorted(names))}", f)
            elif f == p.name:
                yield Problem(f"pools[{i}].fallback[{j}]", "a pool cannot fall back to itself", "remove it", f)
        for f in sorted(_dupes(p.fallback)):
            yield Problem(f"pools[{i}].fallback", "pool listed twice", "list it once", f)


@check
def fallback_same_kind(spec: Cluster) -> Iterator[Problem]:
    """A pool falls back only to pools of the same kind (a GPU job cannot run on CPUs)."""
    kinds = {p.name: p.kind for p in spec.pools}
    for i, p in enumerate(spec.pools):
        for j, f in enumerate(p.fallback):
            if f in kinds and kinds[f] is not p.kind:
                yield Problem(f"pools[{i}].fallback[{j}]", f"{p.kind.value} pool falls back to {kinds[f].value} pool",
                              f"fall back to a {p.kind.value} pool", f)


@check
def fallback_acyclic(spec: Cluster) -> Iterator[Problem]:
    """Fallback chains have no cycles."""
    graph = {p.name: [f for f in p.fallback if f != p.name] for p in spec.pools}
    reported: set[frozenset[str]] = set()
    for i, p in enumerate(spec.pools):
        stack = [(p.name, [p.name])]
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, []):
                if nxt == p.name:
                    cycle = frozenset(path)
                    if cycle not in reported:
                        reported.add(cycle)
                        yield Problem(f"pools[{i}].fallback", f"fallback cycle {' -> '.join([*path, nxt])}",
                                      "make the chain end at a pool without fallback", show_value=False)
                elif nxt not in path:
                    stack.append((nxt, [*path, nxt]))


@check
def fallback_only_on_aws(spec: Cluster) -> Iterator[Problem]:
    """Spot markets exist only on AWS."""
    if _is_aws(spec):
        return
    for i, p in enumerate(spec.pools):
        if p.market is Market.SPOT:
            yield Problem(f"pools[{i}].market", f"spot needs target aws (target is {spec.target.kind})",
                          "use market: on-demand", p.market.value)


@check
def spot_pool_has_fallback(spec: Cluster) -> Iterator[Problem]:
    """A spot pool whose fallback chain never reaches on-demand is allowed but must say so:
    static (min) nodes on spot are refused, since nothing can keep them at count."""
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
        for z in sorted(_dupes(p.zones)):
            yield Problem(f"pools[{i}].zones", "zone listed twice", "list each zone once", z)
        for j, z in enumerate(p.zones):
            if isinstance(target, AwsTarget):
                if not z.startswith(target.region):
                    yield Problem(f"pools[{i}].zones[{j}]", f"not a zone of region {target.region}",
                                  f"use {target.region}a, {target.region}b, ...", z)
                elif subnet_zones and z not in subnet_zones:
                    yield Problem(f"pools[{i}].zones[{j}]", "no private subnet in this zone",
                                  "add a network.private_subnets entry for it", z)
            else:
                yield Problem(f"pools[{i}].zones[{j}]", "zones only apply to target aws", "remove zones", z)


@check
def placement_and_efa(spec: Cluster) -> Iterator[Problem]:
    """EFA needs a type that has it and a placement group; a placement group keeps one zone."""
    for i, p in enumerate(spec.pools):
        if p.efa:
            for t in (lookup(n) for n in p.instance_types):
                if t is not None and not t.efa:
                    yield Problem(f"pools[{i}].efa", f"{t.name} does not support EFA",
                                  "use p4d/p5/g5.8xlarge+ or set efa: false", show_value=False)
            if not p.placement_group:
                yield Problem(f"pools[{i}].placement_group", "efa needs a cluster placement group",
                              "set placement_group: true", False)
        if p.placement_group and len(p.zones) > 1:
            yield Problem(f"pools[{i}].zones", "a cluster placement group lives in one zone",
                          "list one zone, or set placement_group: false", p.zones)
        if (p.placement_group or p.efa) and not _is_aws(spec):
            yield Problem(f"pools[{i}]", "placement_group/efa only apply to target aws",
                          "remove them", show_value=False)


@check
def gpu_hardware_model_is_feature(spec: Cluster) -> Iterator[Problem]:
    """features never repeat (the GPU model is added automatically)."""
    for i, p in enumerate(spec.pools):
        for f in sorted(_dupes(p.features)):
            yield Problem(f"pools[{i}].features", "feature listed twice", "list it once", f)


@check
def default_pools(spec: Cluster) -> Iterator[Problem]:
    """default_cpu_pool names a cpu pool and default_gpu_pool a gpu pool."""
    kinds = {p.name: p.kind for p in spec.pools}
    for field, want in (("default_cpu_pool", PoolKind.CPU), ("default_gpu_pool", PoolKind.GPU)):
        name = getattr(spec.scheduling, field)
        if name is None:
            continue
        if name not in kinds:
            yield Problem(f"scheduling.{field}", "unknown pool", f"use one of: {', '.join(sorted(kinds))}", name)
        elif kinds[name] is not want:
            yield Problem(f"scheduling.{field}", f"pool is kind {kinds[name].value}", f"name a {want.value} pool", name)


@check
def pools_in_some_partition(spec: Cluster) -> Iterator[Problem]:
    """Every pool is in at least one partition (or its nodes can never run jobs),
    unless it is only a fallback target."""
    used = {name for part in spec.partitions for name in part.pools}
    fallbacks = {f for p in spec.pools for f in p.fallback}
    for i, p in enumerate(spec.pools):
        if p.name not in used and p.name not in fallbacks:
            yield Problem(f"pools[{i}].name", "pool is in no partition", "add it to a partition's pools", p.name)


# --------------------------------------------------------------------------- partitions


@check
def partitions_name_known_pools(spec: Cluster) -> Iterator[Problem]:
    """Partitions name existing pools, each once."""
    names = {p.name for p in spec.pools}
    for i, part in enumerate(spec.partitions):
        for j, pool in enumerate(part.pools):
            if pool not in names:
                yield Problem(f"partitions[{i}].pools[{j}]", "unknown pool",
                              f"use one of: {', '.join(sorted(names))}", pool)
        for d in sorted(_dupes(part.pools)):
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
    """AllowGroups names groups the spec defines."""
    groups = {g.name for g in spec.groups}
    for i, part in enumerate(spec.partitions):
        for j, g in enumerate(part.allow_groups):
            if g not in groups:
                yield Problem(f"partitions[{i}].allow_groups[{j}]", "undefined group",
                              f"add it under groups: (defined: {', '.join(sorted(groups)) or 'none'})", g)


@check
def allow_accounts_defined(spec: Cluster) -> Iterator[Problem]:
    """AllowAccounts names accounts the spec defines."""
    accounts = {a.name for a in spec.accounting.accounts}
    for i, part in enumerate(spec.partitions):
        for j, a in enumerate(part.allow_accounts):
            if a not in accounts:
                yield Problem(f"partitions[{i}].allow_accounts[{j}]", "undefined account",
                              "add it under accounting.accounts", a)


@check
def partition_qos_defined(spec: Cluster) -> Iterator[Problem]:
    """A partition QoS is one the spec defines, and needs accounting."""
    qos = {q.name for q in spec.scheduling.qos}
    for i, part in enumerate(spec.partitions):
        if part.qos and part.qos not in qos:
            yield Problem(f"partitions[{i}].qos", "undefined QoS", "add it under scheduling.qos", part.qos)
        if part.qos and not spec.accounting.enabled:
            yield Problem(f"partitions[{i}].qos", "a partition QoS needs accounting", "enable accounting", part.qos)


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
    tiers = {p.priority_tier or 1 for p in spec.partitions}
    if len(tiers) < 2:
        yield Problem("scheduling.preemption.type", "partition_prio, but every partition has the same priority_tier",
                      "give the high-priority partition a larger priority_tier", "partition_prio")


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
def fairshare_needs_accounting(spec: Cluster) -> Iterator[Problem]:
    """Fair share (multifactor weight_fairshare > 0) needs accounting."""
    prio = spec.scheduling.priority
    if not spec.accounting.enabled and prio.type == "multifactor" and prio.weight_fairshare:
        yield Problem("scheduling.priority.weight_fairshare", "fair share needs accounting",
                      "enable accounting or set weight_fairshare: 0", prio.weight_fairshare)


# --------------------------------------------------------------------------- accounting and users


@check
def external_db_needs_host(spec: Cluster) -> Iterator[Problem]:
    """An external database names its host; a local one does not."""
    db = spec.accounting.database
    if db.kind == "external" and not db.host:
        yield Problem("accounting.database.host", "external database without a host",
                      "set host (e.g. the RDS endpoint)", show_value=False)
    if db.kind == "local" and db.host:
        yield Problem("accounting.database.host", "host is only for kind: external", "remove host", db.host)


@check
def account_parents(spec: Cluster) -> Iterator[Problem]:
    """An account's parent exists and is not itself."""
    names = {a.name for a in spec.accounting.accounts}
    for i, a in enumerate(spec.accounting.accounts):
        if a.parent and (a.parent not in names or a.parent == a.name):
            yield Problem(f"accounting.accounts[{i}].parent", "parent is not another defined account",
                          "name an account defined above, or drop parent", a.parent)


@check
def user_groups_defined(spec: Cluster) -> Iterator[Problem]:
    """Users belong only to defined groups."""
    groups = {g.name for g in spec.groups}
    for i, u in enumerate(spec.users):
        for j, g in enumerate(u.groups):
            if g not in groups:
                yield Problem(f"users[{i}].groups[{j}]", "undefined group", "add it under groups:", g)


@check
def user_accounts_defined(spec: Cluster) -> Iterator[Problem]:
    """Users' accounts exist; default_account is one of them; accounts need accounting."""
    names = {a.name for a in spec.accounting.accounts}
    for i, u in enumerate(spec.users):
        for j, a in enumerate(u.accounts):
            if a not in names:
                yield Problem(f"users[{i}].accounts[{j}]", "undefined account",
                              "add it under accounting.accounts", a)
        if u.default_account and u.default_account not in u.accounts:
            yield Problem(f"users[{i}].default_account", "not one of the user's accounts",
                          "add it to accounts, or pick one of them", u.default_account)
        if u.accounts and not spec.accounting.enabled:
            yield Problem(f"users[{i}].accounts", "accounts need accounting", "set accounting.enabled: true",
                          show_value=False)


@check
def uid_gid_ranges(spec: Cluster) -> Iterator[Problem]:
    """uids and gids do not collide between users' private groups and groups."""
    gids = {g.gid: g.name for g in spec.groups}
    for i, u in enumerate(spec.users):
        if u.uid in gids:
            yield Problem(f"users[{i}].uid", f"equals the gid of group '{gids[u.uid]}' (users get a private "
                          "group with gid = uid)", "pick uids and gids from separate ranges", u.uid)


@check
def ssh_keys_look_like_keys(spec: Cluster) -> Iterator[Problem]:
    """SSH keys are public keys in OpenSSH format."""
    prefixes = ("ssh-ed25519 ", "ssh-rsa ", "ecdsa-sha2-", "sk-ssh-ed25519@", "sk-ecdsa-")
    for i, u in enumerate(spec.users):
        for j, k in enumerate(u.ssh_keys):
            if not k.startswith(prefixes):
                yield Problem(f"users[{i}].ssh_keys[{j}]", "not an OpenSSH public key",
                              "paste the .pub file's line (ssh-ed25519 AAAA...)", show_value=False)
            elif "PRIVATE KEY" in k:
                yield Problem(f"users[{i}].ssh_keys[{j}]", "this is a private key", "use the .pub file",
                              show_value=False)


# --------------------------------------------------------------------------- storage


def _mounts(spec: Cluster) -> list[tuple[str, str]]:
    nas = spec.storage.nas.mounts
    mounts = [("storage.nas.mounts.home", nas.home), ("storage.nas.mounts.software", nas.software),
              ("storage.nas.mounts.slurm_state", nas.slurm_state)]
    if spec.storage.ceph:
        mounts.append(("storage.ceph.mount", spec.storage.ceph.mount))
    if spec.storage.scratch:
        mounts.append(("storage.scratch.path", spec.storage.scratch.path))
    return mounts


@check
def mounts_do_not_overlap(spec: Cluster) -> Iterator[Problem]:
    """No mount point equals or sits inside another."""
    mounts = _mounts(spec)
    for a, (path_a, dir_a) in enumerate(mounts):
        for path_b, dir_b in mounts[a + 1:]:
            da, db = dir_a.rstrip("/") + "/", dir_b.rstrip("/") + "/"
            if da.startswith(db) or db.startswith(da):
                yield Problem(path_a, f"overlaps {path_b} ({dir_b})", "give every mount its own directory", dir_a)


@check
def mounts_not_system_dirs(spec: Cluster) -> Iterator[Problem]:
    """Mount points are not system directories (/, /etc, /usr, ...)."""
    system = {"/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/var", "/boot", "/proc", "/sys", "/dev", "/run", "/tmp"}
    for path, d in _mounts(spec):
        if d.rstrip("/") in system or d == "/":
            yield Problem(path, "a system directory cannot be a shared mount", "use e.g. /shared/<name>", d)


@check
def nas_kind_fields(spec: Cluster) -> Iterator[Problem]:
    """nfs needs server and export; efs is only for aws; bind is for local/static."""
    nas = spec.storage.nas
    if nas.kind == "nfs" and (not nas.server or not nas.export):
        yield Problem("storage.nas", "kind nfs needs server and export", "set server: and export:", show_value=False)
    if nas.kind == "efs" and not _is_aws(spec):
        yield Problem("storage.nas.kind", f"efs only exists on aws (target is {spec.target.kind})",
                      "use kind: bind (local) or nfs", "efs")
    if nas.kind == "bind" and _is_aws(spec):
        yield Problem("storage.nas.kind", "bind mounts cannot share storage across EC2 instances",
                      "use kind: efs", "bind")
    if nas.kind != "nfs" and (nas.server or nas.export):
        yield Problem("storage.nas", "server/export only apply to kind nfs", "remove them", show_value=False)


@check
def ceph_replication(spec: Cluster) -> Iterator[Problem]:
    """Ceph has at least as many OSDs, on as many hosts, as its replication."""
    ceph = spec.storage.ceph
    if ceph is None:
        return
    if ceph.osd_count < ceph.replication:
        yield Problem("storage.ceph.hosts", f"{ceph.osd_count} OSD(s) cannot hold {ceph.replication} replicas",
                      f"add OSDs (hosts x osds_per_host >= {ceph.replication}) or lower replication",
                      show_value=False)
    elif ceph.hosts < ceph.replication and not isinstance(spec.target, LocalTarget):
        yield Problem("storage.ceph.hosts", f"{ceph.hosts} host(s) for {ceph.replication} replicas: one host "
                      "failure loses data", f"use at least {ceph.replication} hosts", ceph.hosts)
    if ceph.replication == 1:
        yield Problem("storage.ceph.replication", "1 replica loses data when a node fails",
                      "use replication: 2 or 3", 1)
    if lookup(ceph.instance_type) is None and _is_aws(spec):
        yield Problem("storage.ceph.instance_type", "unknown instance type", "use e.g. m6i.xlarge",
                      ceph.instance_type)


@check
def modules_on_software_mount(spec: Cluster) -> Iterator[Problem]:
    """The LMOD tree lives on the shared software mount, so every node sees it."""
    soft = spec.storage.nas.mounts.software.rstrip("/") + "/"
    if not (spec.modules.root.rstrip("/") + "/").startswith(soft):
        yield Problem("modules.root", f"not under the shared software mount {soft.rstrip('/')}",
                      f"use {soft}modules", spec.modules.root)


# --------------------------------------------------------------------------- network and target


@check
def subnets_inside_vpc(spec: Cluster) -> Iterator[Problem]:
    """Subnets lie inside the VPC CIDR."""
    vpc = ipaddress.ip_network(spec.network.vpc_cidr)
    for kind in ("public_subnets", "private_subnets"):
        for i, s in enumerate(getattr(spec.network, kind)):
            if not ipaddress.ip_network(s.cidr).subnet_of(vpc):  # type: ignore[arg-type]
                yield Problem(f"network.{kind}[{i}].cidr", f"outside vpc_cidr {vpc}", "pick a range inside the VPC",
                              s.cidr)


@check
def subnets_do_not_overlap(spec: Cluster) -> Iterator[Problem]:
    """No two subnets overlap."""
    subnets = [(f"network.{k}[{i}].cidr", ipaddress.ip_network(s.cidr))
               for k in ("public_subnets", "private_subnets") for i, s in enumerate(getattr(spec.network, k))]
    for a, (pa, na) in enumerate(subnets):
        for pb, nb in subnets[a + 1:]:
            if na.overlaps(nb):
                yield Problem(pa, f"overlaps {pb} ({nb})", "use disjoint ranges", str(na))


@check
def private_subnets_distinct_zones(spec: Cluster) -> Iterator[Problem]:
    """Private subnets sit in distinct zones, and on AWS there are at least two."""
    zones = [s.zone for s in spec.network.private_subnets]
    for i, s in enumerate(spec.network.private_subnets):
        if s.zone in _dupes(zones):
            yield Problem(f"network.private_subnets[{i}].zone", "duplicate zone",
                          "one private subnet per zone", s.zone)
    if _is_aws(spec) and len(set(zones)) < 2:
        yield Problem("network.private_subnets", f"{len(set(zones))} zone(s); AWS needs private subnets in >= 2",
                      "add a private subnet in a second zone", show_value=False)


@check
def aws_needs_public_subnet(spec: Cluster) -> Iterator[Problem]:
    """On AWS a public subnet carries the login node and the NAT gateway."""
    if _is_aws(spec) and not spec.network.public_subnets:
        yield Problem("network.public_subnets", "none defined", "add one, e.g. {cidr: 10.0.0.0/24, zone: ...a}",
                      show_value=False)


@check
def subnet_zones_in_region(spec: Cluster) -> Iterator[Problem]:
    """Subnet zones belong to the target region."""
    if not isinstance(spec.target, AwsTarget):
        return
    region = spec.target.region
    for kind in ("public_subnets", "private_subnets"):
        for i, s in enumerate(getattr(spec.network, kind)):
            if not s.zone.startswith(region) or len(s.zone) != len(region) + 1:
                yield Problem(f"network.{kind}[{i}].zone", f"not a zone of {region}", f"use {region}a", s.zone)


@check
def admin_cidrs_not_world(spec: Cluster) -> Iterator[Problem]:
    """0.0.0.0/0 in admin_cidrs needs allow_ssh_from_anywhere: true."""
    for i, c in enumerate(spec.network.admin_cidrs):
        if ipaddress.ip_network(c).prefixlen == 0 and not spec.network.allow_ssh_from_anywhere:
            yield Problem(f"network.admin_cidrs[{i}]", "opens SSH to the whole internet",
                          "list your office/VPN ranges, or set network.allow_ssh_from_anywhere: true", c)


@check
def aws_needs_admin_cidrs(spec: Cluster) -> Iterator[Problem]:
    """On AWS somebody must be able to reach the login node."""
    if _is_aws(spec) and not spec.network.admin_cidrs:
        yield Problem("network.admin_cidrs", "empty: nobody could reach the login node over SSH",
                      "add your office/VPN CIDR (e.g. 203.0.113.0/24)", show_value=False)


@check
def head_instance_types_known(spec: Cluster) -> Iterator[Problem]:
    """Head node instance types are in the catalog and not burstable for the controller."""
    if not _is_aws(spec):
        return
    for role in ("controller", "login"):
        t = getattr(spec.head, role).instance_type
        if lookup(t) is None:
            yield Problem(f"head.{role}.instance_type", "unknown instance type", "use e.g. m6i.xlarge", t)
    if spec.head.controller.instance_type.startswith(("t2.", "t3.")):
        yield Problem("head.controller.instance_type", "burstable types throttle slurmctld under load",
                      "use m6i.large or bigger", spec.head.controller.instance_type)


@check
def static_target_hosts(spec: Cluster) -> Iterator[Problem]:
    """A static target lists hosts only for known pools, never more than max_nodes, each once."""
    target = spec.target
    if not isinstance(target, StaticTarget):
        return
    pools = {p.name: p for p in spec.pools}
    seen: list[str] = [target.controller.name] + [h.name for h in target.login]
    for pool_name, hosts in target.nodes.items():
        if pool_name not in pools:
            yield Problem(f"target.nodes.{pool_name}", "unknown pool", "use a pool name", pool_name)
            continue
        if len(hosts) > pools[pool_name].max_nodes:
            yield Problem(f"target.nodes.{pool_name}", f"{len(hosts)} hosts for max_nodes "
                          f"{pools[pool_name].max_nodes}", "raise max_nodes", show_value=False)
        seen += [h.name for h in hosts]
    for name in sorted(_dupes(seen)):
        yield Problem("target", "host named twice", "give each machine one role", name)


@check
def local_target_size(spec: Cluster) -> Iterator[Problem]:
    """The local target runs every node as a container on this machine: keep it small."""
    if not isinstance(spec.target, LocalTarget):
        return
    total = sum(p.max_nodes for p in spec.pools)
    if total > 32:
        yield Problem("pools", f"{total} nodes on one machine", "keep local clusters at 32 nodes or fewer",
                      show_value=False)
    net = ipaddress.ip_network(spec.target.subnet)
    if net.num_addresses < total + 8:
        yield Problem("target.subnet", "too small for every node", "use a /24", spec.target.subnet)


@check
def mail_domain(spec: Cluster) -> Iterator[Problem]:
    """mail.domain is a DNS domain, without '@'."""
    d = spec.mail.domain
    if d is not None and ("@" in d or "." not in d or " " in d):
        yield Problem("mail.domain", "not a DNS domain", "use e.g. example.org (no '@')", d)


@check
def images_ami_only_on_aws(spec: Cluster) -> Iterator[Problem]:
    """images.ami only applies to target aws."""
    if spec.images.ami and not _is_aws(spec):
        yield Problem("images.ami", "only applies to target aws", "remove it", spec.images.ami)
