"""The check registry and the small helpers several checks share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TypeVar

from slurmforge.errors import Problem
from slurmforge.hosts import login_names
from slurmforge.spec.models import AwsTarget, Cluster, LocalTarget, Market, StaticHost, StaticTarget
from slurmforge.spec.nodes import NodeHardware, ceph_host_name, hardware_key, pool_hardware

Check = Callable[[Cluster], Iterator[Problem]]
T = TypeVar("T", bound=Hashable)
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    """Register a check. Its docstring is the rule (docs/spec.md lists them)."""
    CHECKS.append(fn)
    return fn


# What several checks work out from the spec, kept while run_checks runs (the spec and
# every part of it live until it returns): 100,000 pools must not be worked out a dozen times.
_RUN: dict[object, object] | None = None
R = TypeVar("R")


def run_checks(spec: Cluster, most: int | None = None) -> list[Problem]:
    """Every check's problems, in order; with `most`, it stops once it has found more
    (most + 1 problems then: a spec of 100,000 bad pools need not be worded to the last)."""
    global _RUN
    problems: list[Problem] = []
    _RUN = {}
    try:
        for fn in CHECKS:
            if most is None:
                problems.extend(fn(spec))
                continue
            for problem in fn(spec):
                problems.append(problem)
                if len(problems) > most:
                    return problems
    finally:
        _RUN = None
    return problems


def per_run(fn: Callable[[Cluster], R]) -> Callable[[Cluster], R]:
    """fn(spec), worked out once while run_checks runs."""
    def cached(spec: Cluster) -> R:
        if _RUN is None:
            return fn(spec)
        if fn not in _RUN:
            _RUN[fn] = fn(spec)
        return _RUN[fn]  # type: ignore[return-value]
    return cached


@per_run
def hardwares(spec: Cluster) -> list[NodeHardware | None]:
    """nodes.pool_hardware of every pool, in the pools' order (zip it with spec.pools):
    worked out once while run_checks runs, and read as a list, not a call per pool (a dozen
    checks read it; 88,000 pools made that a million calls)."""
    shapes: dict[tuple[object, ...], NodeHardware | None] = {}
    found = []
    for p in spec.pools:
        key = hardware_key(p)
        if key not in shapes:
            shapes[key] = pool_hardware(p)
        found.append(shapes[key])  # one object per shape: `is` tells two pools' hardware alike
    return found


@per_run
def hardware_by_name(spec: Cluster) -> dict[str, NodeHardware | None]:
    """hardwares by pool name (of pools named twice, the last, as {p.name: p} keeps)."""
    return dict(zip((p.name for p in spec.pools), hardwares(spec), strict=True))


@per_run
def pool_names(spec: Cluster) -> frozenset[str]:
    """The names of the pools."""
    return frozenset(p.name for p in spec.pools)


@per_run
def node_prefixes(spec: Cluster) -> list[str]:
    """Every pool's node prefix (Cluster.node_prefix), in the pools' order."""
    default = f"{spec.name}-"
    return [p.node_prefix or default + p.name for p in spec.pools]


def dupes(names: Sequence[T]) -> set[T]:
    if len(names) < 2 or len(set(names)) == len(names):  # the usual cases, without counting
        return set()
    return {n for n, c in Counter(names).items() if c > 1}


def is_aws(spec: Cluster) -> bool:
    return isinstance(spec.target, AwsTarget)


def stack_makes_rds(spec: Cluster) -> bool:
    """stacks/database.py: RDS for an external accounting database on AWS."""
    db = spec.accounting.database
    return is_aws(spec) and spec.accounting.enabled and db.kind == "external"


def head_names(spec: Cluster) -> dict[str, str]:
    """Every host name that is not a pool's node, and what it names: controller, login,
    database and Ceph hosts (as render and the providers name them)."""
    if isinstance(spec.target, StaticTarget):
        backup = spec.target.backup_controller
        return {spec.target.controller.name: "controller", **({backup.name: "backup controller"} if backup else {}),
                **{h.name: "login host" for h in spec.target.login}}
    names = {f"{spec.name}-controller": "controller", f"{spec.name}-db": "database host"}
    if spec.head.backup_controller:
        names[f"{spec.name}-controller-backup"] = "backup controller"
    names.update({name: "login node" for name in login_names(spec)})
    if spec.storage.ceph:
        local = isinstance(spec.target, LocalTarget)
        names.update({ceph_host_name(spec.name, i, local): "Ceph host" for i in range(1, spec.storage.ceph.hosts + 1)})
    return names


def static_hosts(target: StaticTarget) -> list[tuple[str, str, str, StaticHost]]:
    """(path, role, which one, host) of every machine of a static target: the pools' nodes
    first, then the head machines (a machine named twice is reported where it is a head)."""
    hosts = [(f"target.nodes.{pool}[{j}]", "node", f"node {h.name} of pool {pool}", h)
             for pool, members in target.nodes.items() for j, h in enumerate(members)]
    hosts.append(("target.controller", "controller", "the controller", target.controller))
    if target.backup_controller is not None:
        hosts.append(("target.backup_controller", "backup controller", "the backup controller",
                      target.backup_controller))
    hosts += [(f"target.login[{j}]", "login host", f"login host {h.name}", h) for j, h in enumerate(target.login)]
    return hosts


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk finds (one per back edge), each as [a, b, ..., a];
    self-loops are left out. Iterative: a long chain must not hit the recursion limit."""
    found: list[list[str]] = []
    done: set[str] = set()
    for start in graph:
        if start in done:
            continue
        path, todo = [start], [iter(graph.get(start, []))]
        on_path = {start: 0}  # name -> its index in path (a long chain must not cost its length per step)
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                del on_path[path[-1]]
                done.add(path.pop())
                todo.pop()
            elif nxt != path[-1] and nxt not in done:
                if nxt in on_path:
                    found.append([*path[on_path[nxt]:], nxt])
                else:
                    on_path[nxt] = len(path)
                    path.append(nxt)
                    todo.append(iter(graph.get(nxt, [])))
    return found


def parent_cycles(parents: dict[str, str | None]) -> list[list[str]]:
    """The cycles of a graph in which each node has at most one parent, each once, as
    [a, b, ..., a]; self-loops left out. One walk up from each node not yet seen: linear in
    the nodes, where `cycles` keeps an iterator and a path entry per node of a long chain."""
    seen: dict[str, bool] = {}  # node -> is it on the walk being made
    found: list[list[str]] = []
    for start in parents:
        walk: list[str] = []
        node: str | None = start
        while node is not None and node not in seen:
            seen[node] = True
            walk.append(node)
            node = parents.get(node)
        if node is not None and seen[node] and node != walk[-1]:
            found.append([*walk[walk.index(node):], node])
        for name in walk:
            seen[name] = False
    return found


def reaching_on_demand(spec: Cluster) -> set[str]:
    """The pools that are on-demand, or whose fallback chain reaches an on-demand pool:
    one walk backwards from the on-demand pools, linear in the pools and their links."""
    fallen_back_from: dict[str, list[str]] = {}
    for p in spec.pools:
        for f in p.fallback:
            fallen_back_from.setdefault(f, []).append(p.name)
    todo = [p.name for p in spec.pools if p.market is Market.ON_DEMAND]
    if len(todo) == len(spec.pools):
        return set(todo)
    found = set(todo)
    while todo:
        for name in fallen_back_from.get(todo.pop(), []):
            if name not in found:
                found.add(name)
                todo.append(name)
    return found
