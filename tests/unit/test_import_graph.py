"""The package's imports run one way: no module imports itself back through others, and no
import runs up the layers below; the same holds folder by folder (a sub-package of
slurmforge/ is one room, a top-level module its own; a folder stands on the highest layer
any of its modules is on).

The layers, top first (a module may import its own layer and those under it):

- face: the command line.
- targets: a target's code (slurmforge/local, slurmforge/aws, a cluster's status from its
  inventory): it drives the operations.
- operations: what acts on a cluster - the scheduler service, the plan, the live-cluster
  validation, bring-up, rollout, cost, the Lmod publisher's commands and its build node
  (it reads the inventory).
- cluster: what is made of a spec - checks, inventory, rendered configs, the join program,
  the node image, Lmod modulefiles, secrets.
- base: the spec's models, host names, errors, the contract with the roles, the service's
  provider interface, the Slurm client, running a command on one machine (remote/), tables,
  the package's own files, where state lives.

Imports made only for type checking (`if TYPE_CHECKING:`) do not run and are not counted.
One import runs up: the spec package hands on its loader (which runs the checks) on first
use, so that importing the models alone loads nothing above them. A target's provider is
built by the target's kind (provider.build_provider loads `slurmforge.<kind>.provider`), so
neither the service nor the interface imports a target.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "slurmforge"

LAYERS: list[tuple[str, list[str]]] = [
    ("face", ["slurmforge.cli", "slurmforge.__main__"]),
    ("targets", ["slurmforge.local", "slurmforge.aws", "slurmforge.cluster_status", "slurmforge.upgrade_start"]),
    ("operations", ["slurmforge.service", "slurmforge.plan", "slurmforge.validation", "slurmforge.bringup",
                    "slurmforge.rollout", "slurmforge.ui", "slurmforge.cost", "slurmforge.report",
                    "slurmforge.lmod.cli", "slurmforge.lmod.node", "slurmforge.fleet", "slurmforge.rotate",
                    "slurmforge.drain", "slurmforge.upgrade"]),
    ("cluster", ["slurmforge.spec.checks", "slurmforge.spec.loader", "slurmforge.inventory", "slurmforge.node",
                 "slurmforge.render", "slurmforge.monitoring", "slurmforge.ceph", "slurmforge.accounting",
                 "slurmforge.image", "slurmforge.image_variant", "slurmforge.takeover", "slurmforge.secrets",
                 "slurmforge.lmod", "slurmforge.spec.routing", "slurmforge.billing", "slurmforge.spec.nodes"]),
    ("base", ["slurmforge.spec", "slurmforge.hosts", "slurmforge.errors", "slurmforge.contract",
              "slurmforge.distro", "slurmforge.instance_types", "slurmforge.provider", "slurmforge.package_data",
              "slurmforge.templating", "slurmforge.tables", "slurmforge.console", "slurmforge.connection",
              "slurmforge.hostlists", "slurmforge.state_dirs", "slurmforge.wheel", "slurmforge.remote",
              "slurmforge.target", "slurmforge.confirm", "slurmforge.progress", "slurmforge.slurm",
              "slurmforge.image_record", "slurmforge"]),
]
UPWARD = {("slurmforge.spec", "slurmforge.spec.loader")}
"""Imports allowed to run up, each for the reason the module's docstring gives."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in (ROOT / PACKAGE).rglob("*.py")}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """Line numbers of the statements under `if TYPE_CHECKING:`."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def imports(source: str, known: set[str]) -> set[str]:
    """The package's modules that `source` imports when it runs (at the top or inside a
    function): `from a.b import c` is a.b.c when that is a module, else a.b."""
    def resolve(name: str) -> str:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    tree = ast.parse(source)
    skip = _type_checking_only(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {resolve(a.name) for a in node.names if a.name.split(".")[0] == PACKAGE}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == PACKAGE:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else resolve(node.module))
    return found - {""}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path.read_text(), set(known)) - {name} for name, path in known.items()}


def layer(module: str) -> int:
    """The module's layer, 0 the top: the longest prefix listed names it."""
    best = max(((len(prefix), i) for i, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), default=None)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def upward(edges: dict[str, set[str]]) -> list[str]:
    return sorted(f"{src} ({LAYERS[layer(src)][0]}) -> {dst} ({LAYERS[layer(dst)][0]})"
                  for src, targets in edges.items() for dst in targets
                  if layer(dst) < layer(src) and (src, dst) not in UPWARD)


def folder(module: str) -> str:
    """The room a module is in: its sub-package of slurmforge/, or itself at the top."""
    return ".".join(module.split(".")[:2])


def folders(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The folder graph: an arrow between two rooms for every import between their modules."""
    rooms: dict[str, set[str]] = {folder(m): set() for m in edges}
    for src, targets in edges.items():
        rooms[folder(src)] |= {folder(dst) for dst in targets} - {folder(src)}
    return rooms


def folder_upward(edges: dict[str, set[str]]) -> list[str]:
    """Imports from a folder to one standing on a higher layer (a folder's layer: its highest module's)."""
    top: dict[str, int] = {}
    for module in edges:
        top[folder(module)] = min(top.get(folder(module), len(LAYERS)), layer(module))
    return sorted(f"{src} -> {dst}" for src, targets in edges.items() for dst in targets
                  if (src, dst) not in UPWARD and top[folder(dst)] < top[folder(src)])


def test_no_module_imports_itself_back() -> None:
    assert cycles(graph()) == []


def test_no_import_runs_up_the_layers() -> None:
    assert upward(graph()) == []


def test_no_folder_imports_itself_back() -> None:
    assert cycles(folders(graph())) == []


def test_no_import_runs_up_to_a_higher_folder() -> None:
    assert folder_upward(graph()) == []


def test_every_exception_is_still_needed() -> None:
    edges = graph()
    assert [pair for pair in UPWARD if pair[1] not in edges.get(pair[0], set())] == []


def test_the_package_imports_no_test_code() -> None:
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        named = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        named |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {m for m in named if m.split(".")[0] == "tests"}, name


def test_the_checks_find_a_cycle_and_an_upward_import() -> None:
    """The two imports the package had before: secrets and inventory in a loop, and a
    module of the base importing the service."""
    edges = {"slurmforge.secrets": {"slurmforge.inventory"}, "slurmforge.inventory": {"slurmforge.secrets"},
             "slurmforge.hosts": {"slurmforge.service.main"}}
    assert cycles(edges) == [["slurmforge.inventory", "slurmforge.secrets"]]
    assert upward(edges) == ["slurmforge.hosts (base) -> slurmforge.service.main (operations)"]
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from slurmforge.spec import Cluster\n" \
             "def f():\n    from slurmforge.render import render_all\n"
    assert imports(source, {"slurmforge.spec", "slurmforge.render"}) == {"slurmforge.render"}


def test_the_folder_checks_find_a_cycle_and_an_upward_import() -> None:
    """What the package had before: remote/ holding both the executor every operation
    uses and a target's status (a loop through local/), and join.py importing lmod/."""
    edges = {"slurmforge.remote.cluster": {"slurmforge.local.up"}, "slurmforge.local.up": {"slurmforge.bringup"},
             "slurmforge.bringup": {"slurmforge.remote.executor"}, "slurmforge.remote.executor": set(),
             "slurmforge.node.program": {"slurmforge.lmod.tools"}, "slurmforge.lmod.cli": set(),
             "slurmforge.lmod.tools": set()}
    assert cycles(edges) == []
    assert cycles(folders(edges)) == [["slurmforge.bringup", "slurmforge.local", "slurmforge.remote"]]
    assert folder_upward(edges) == ["slurmforge.node.program -> slurmforge.lmod.tools",
                                    "slurmforge.remote.cluster -> slurmforge.local.up"]
