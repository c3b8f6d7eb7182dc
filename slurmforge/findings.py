"""What `slurmforge validate` found, as tables (slurmforge.tables) for `--format`: a spec's
problems, or a live cluster's checks. Light: `validate SPEC` imports it at start."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from slurmforge.errors import Problem, one_line, shown
from slurmforge.tables import Column, Table

if TYPE_CHECKING:
    from slurmforge.spec import Cluster
    from slurmforge.validation import SuiteRun

PROBLEM_COLUMNS = (Column("field", "Field"), Column("value", "Value", drop=1), Column("problem", "Problem", wrap=True),
                   Column("fix", "Fix", wrap=True, drop=2))
CHECK_COLUMNS = (Column("check", "Check"), Column("result", "Result"),
                 Column("seconds", "Seconds", lambda v: f"{v:.1f}" if isinstance(v, float) else str(v), numeric=True))


def spec_table(spec: Path, parsed: Cluster | None, problems: list[Problem]) -> Table:
    """A spec's problems, one row each (none: it is valid); the cluster it describes."""
    if parsed is not None:
        nodes = sum(p.max_nodes for p in parsed.pools)
        title = (f"{spec}: valid - cluster '{parsed.name}' ({parsed.target.kind}), {len(parsed.pools)} pools, "
                 f"{nodes} nodes at most, {len(parsed.partitions)} partitions")
        meta: dict[str, object] = {"cluster": parsed.name, "spec": str(spec), "valid": True,
                                   "target": str(parsed.target.kind), "pools": len(parsed.pools), "nodes_max": nodes,
                                   "partitions": len(parsed.partitions), "problems": 0}
    else:
        title = f"{spec}: {len(problems)} problem(s)"
        meta = {"cluster": None, "spec": str(spec), "valid": False, "problems": len(problems)}
    rows = [(one_line(p.path, 200) or None, shown(p.value) if p.show_value and p.value is not None else None,
             one_line(p.message), one_line(p.fix) or None) for p in problems]
    return Table(title, PROBLEM_COLUMNS, list(rows), meta=meta)


def checks_table(run: SuiteRun, cluster: str, inventory: Path) -> Table:
    """A live-cluster validation: every check, how it ended, its time; the failed ones'
    problems in the notes (and, for programs, in `problems`)."""
    failed = sum(c.result in ("failed", "error") for c in run.checks)
    title = f"{inventory}: " + ("the live cluster passed every check" if run.ok else
                                f"live-cluster validation failed: {run.summary}")
    return Table(title, CHECK_COLUMNS, [(c.name, c.result, c.seconds) for c in run.checks], notes=list(run.problems),
                 meta={"cluster": cluster, "inventory": str(inventory), "passed": run.ok, "checks": len(run.checks),
                       "failed": failed, "seconds": round(sum(c.seconds for c in run.checks), 3),
                       "problems": list(run.problems)})
