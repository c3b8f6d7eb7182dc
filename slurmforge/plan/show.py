"""The plan as a table (slurmforge.tables): readable at 80 columns, one row per line when
piped, JSON for programs. Every format has every row; `cause` and `jobs` are for programs
(the table marks a row that does not come from the spec instead)."""

from __future__ import annotations

from slurmforge.hostlists import HostlistError, expand
from slurmforge.plan.engine import CLUSTER, DRIFT, ClusterPlan
from slurmforge.tables import Column, Table

MARKS = {DRIFT: "*", CLUSTER: "!"}
NAME_CHARS = 24
"""The table format shows a longer hostlist as its count."""
COLUMNS = (
    Column("kind", "What", scope="data"),
    Column("what", "What", scope="table"),
    Column("name", "Name", scope="data"),
    Column("shown", "Name", scope="table"),
    Column("change", "Change"),
    Column("cause", "Cause", scope="data"),
    Column("jobs", "Jobs", scope="data"),
    Column("detail", "Detail", wrap=True),
)


def plan_table(plan: ClusterPlan) -> Table:
    changes = len([r for r in plan.rows if r.kind not in ("daemon", "jobs")])
    jobs = len({j for r in plan.rows if r.kind == "jobs" for j in r.jobs})
    title = f"plan for cluster {plan.cluster}: " + (
        f"{changes} change(s)" + (f", {jobs} job(s) affected" if jobs else "") if plan.changed else "no changes")
    table = Table(title, COLUMNS, meta={"cluster": plan.cluster, "changed": plan.changed, "changes": changes,
                                        "jobs_affected": jobs, "controller": plan.controller})
    for row in plan.rows:
        table.rows.append((row.kind, row.kind + MARKS.get(row.cause, ""), row.name, short_name(row.name), row.change,
                           row.cause, ",".join(map(str, row.jobs)) or None, row.detail))
    causes = {r.cause for r in plan.rows}
    if DRIFT in causes:
        table.notes.append("* not from the spec: the deployed file differs from what this slurmforge makes of the "
                           "deployed spec (another slurmforge version, or an edit by hand); the rollout writes it")
    if CLUSTER in causes:
        table.notes.append("! not from the spec: Slurm or slurmdbd differs from the deployed files (scontrol "
                           "update, sacctmgr by hand); applying puts the spec's value back")
    table.notes += [f"note: {w}" for w in plan.warnings]
    table.notes.append(f"deployed state read from {plan.controller}")
    return table


def short_name(name: str) -> str:
    """`name`, or for a long hostlist (scattered nodes) how many nodes it names: every other
    format has the list in full."""
    if len(name) <= NAME_CHARS:
        return name
    try:
        return f"{len(expand(name)):,} nodes"
    except HostlistError:
        return name
