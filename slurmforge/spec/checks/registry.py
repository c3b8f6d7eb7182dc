"""The check registry and the small helpers several checks share."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

from slurmforge.errors import Problem
from slurmforge.spec.models import AwsTarget, Cluster, Market, Pool, StaticTarget

Check = Callable[[Cluster], Iterator[Problem]]
CHECKS: list[Check] = []


def check(fn: Check) -> Check:
    """Register a check. Its docstring is the rule (docs/spec.md lists them)."""
    CHECKS.append(fn)
    return fn


def run_checks(spec: Cluster) -> list[Problem]:
    problems: list[Problem] = []
    for fn in CHECKS:
        problems.extend(fn(spec))
    return problems


def dupes(names: list[str]) -> set[str]:
    return {n for n, c in Counter(names).items() if c > 1}


def is_aws(spec: Cluster) -> bool:
    return isinstance(spec.target, AwsTarget)


def head_names(spec: Cluster) -> set[str]:
    """Host names of the controller, login and database nodes (as render names them)."""
    if isinstance(spec.target, StaticTarget):
        return {spec.target.controller.name, *(h.name for h in spec.target.login)}
    count = spec.head.login_count
    logins = [f"{spec.name}-login"] if count == 1 else [f"{spec.name}-login-{i}" for i in range(1, count + 1)]
    controllers = [f"{spec.name}-controller", f"{spec.name}-controller-backup"][:1 + spec.head.backup_controller]
    return {*controllers, f"{spec.name}-db", *logins}


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk finds (one per back edge), each as [a, b, ..., a];
    self-loops are left out. Iterative: a long chain must not hit the recursion limit."""
    found: list[list[str]] = []
    done: set[str] = set()
    for start in graph:
        if start in done:
            continue
        path, todo = [start], [iter(graph.get(start, []))]
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                done.add(path.pop())
                todo.pop()
            elif nxt != path[-1] and nxt not in done:
                if nxt in path:
                    found.append([*path[path.index(nxt):], nxt])
                else:
                    path.append(nxt)
                    todo.append(iter(graph.get(nxt, [])))
    return found


def reaches_on_demand(spec: Cluster, pool: Pool) -> bool:
    """Is the pool on-demand, or does its fallback chain reach an on-demand pool?"""
    pools = {p.name: p for p in spec.pools}
    todo, seen = [pool.name], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in pools:
            continue
        seen.add(name)
        if pools[name].market is Market.ON_DEMAND:
            return True
        todo.extend(pools[name].fallback)
    return False
