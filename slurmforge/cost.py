"""`slurmforge cost`: what the cluster's jobs cost over a period, per user, account,
partition or pool, from Slurm's accounting (`sacct`), in the same money Slurm bills.

A job's `billing` TRES is its cost per hour in hundredths of a cent (slurmforge.billing:
TRESBillingWeights from the catalog's prices), so its spend over a period is

    billing x seconds it ran inside the period / 10,000 / 3,600   dollars,

the figure fair share accrues and a `GrpTRESMins=billing=N` budget counts. Jobs of a
partition without prices (pools with explicit hardware and no `price_per_hour`) are
counted in jobs, CPU-hours and GPU-hours but not in dollars, and the report says so.
A job spread over nodes of several pools is split evenly over its nodes.

The records are one `sacct -P` output (header line first), read here from a file or
from the controller through the inventory (`sacct_argv`): allocations only (-X), every
user (-a), times as epoch seconds (SLURM_TIME_FORMAT=%s) and the window relative to the
controller's clock (`now-Nseconds`), so neither side's time zone matters.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from slurmforge.billing import BILLING_UNITS_PER_DOLLAR, billing_weights, pool_price
from slurmforge.errors import Problem, SlurmforgeError, SpecError
from slurmforge.hostlists import expand
from slurmforge.spec.models import Cluster
from slurmforge.spec.nodes import node_names
from slurmforge.tables import Column, Row, Table, Value, count, iso_moment, money

GROUPS = ("user", "account", "partition", "pool")
SACCT_FIELDS = ("JobID", "User", "Account", "Partition", "NodeList", "AllocTRES", "ElapsedRaw", "Start", "State")
SACCT_ENV = {"SLURM_TIME_FORMAT": "%s"}
DURATION_RE = re.compile(r"^(\d+)([mhdw])$")
DURATION_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DAY = 86400
OTHER = "(other)"
PLOT_SERIES = 8
"""A plot shows the groups that cost most, the rest as one '(other)' series."""


class CostError(SlurmforgeError):
    """sacct could not be run or its output read."""

    exit_code = 10


class CostInputError(SpecError):
    """Bad options: every problem, one line each (exit 2)."""


# --------------------------------------------------------------------------- the period


@dataclass(frozen=True)
class Period:
    since: float
    until: float

    def label(self) -> str:
        fmt = "%Y-%m-%d %H:%M"
        return (f"{time.strftime(fmt, time.localtime(self.since))} to "
                f"{time.strftime(fmt, time.localtime(self.until))} ({time.strftime('%Z')})")


def month_start(now: float) -> float:
    """00:00 local time on the first day of now's month."""
    day = datetime.fromtimestamp(now).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp()


def parse_when(text: str, now: float) -> float:
    """A point in time: YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] (local time), `now`, or a
    duration back from now (30m, 24h, 7d, 2w). ValueError otherwise."""
    text = text.strip()
    if text == "now":
        return now
    match = DURATION_RE.match(text)
    if match:
        return now - int(match.group(1)) * DURATION_UNITS[match.group(2)]
    if not re.match(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}(:\d{2})?)?$", text):
        raise ValueError(text)
    return datetime.fromisoformat(text).timestamp()


def parse_period(since: str | None, until: str | None, now: float) -> tuple[Period | None, list[Problem]]:
    """The period the options name (default: this month so far), or the problems."""
    problems: list[Problem] = []
    fix = "use YYYY-MM-DD, YYYY-MM-DDTHH:MM, now, or a duration back from now such as 24h, 7d, 2w"
    start, end = month_start(now), now
    for name, text in (("--since", since), ("--until", until)):
        if text is None:
            continue
        try:
            value = parse_when(text, now)
        except ValueError:
            problems.append(Problem(name, "not a date or duration", fix, text))
            continue
        if name == "--since":
            start = value
        else:
            end = value
    if not problems and end <= start:
        problems.append(Problem("--until", "is not after --since", "give a later --until or an earlier --since",
                                until if until is not None else "now"))
    if not problems and start > now:
        problems.append(Problem("--since", "is in the future", "give a time before now", since))
    return (None if problems else Period(start, min(end, now))), problems


def parse_groups(text: str) -> tuple[tuple[str, ...], list[Problem]]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in GROUPS]
    if bad or not names:
        return (), [Problem("--by", f"not a grouping: {', '.join(bad) or '(empty)'}",
                            f"use {', '.join(GROUPS)}, or several with commas (user,account)", text)]
    return tuple(dict.fromkeys(names)), []


@dataclass(frozen=True)
class Options:
    by: tuple[str, ...]
    period: Period


def read_options(by: str, since: str | None, until: str | None, inventory: Path | None, sacct_file: Path | None,
                 now: float) -> Options:
    """The command's options, or CostInputError with every problem."""
    groups, problems = parse_groups(by)
    period, when = parse_period(since, until, now)
    problems += when
    if (inventory is None) == (sacct_file is None):
        problems.append(Problem("--inventory/--sacct-file", "name exactly one source of jobs",
                                "--inventory DIR (a cluster's inventory) runs sacct on its controller; "
                                "--sacct-file FILE reads saved sacct output"))
    if problems or period is None:
        raise CostInputError(problems, "slurmforge cost")
    return Options(groups, period)


def sacct_argv(period: Period, now: float) -> list[str]:
    """sacct over the period, relative to the clock of the machine that runs it."""
    ago_start = max(int(now - period.since), 0)
    ago_end = max(int(now - period.until), 0)
    return ["sacct", "-a", "-X", "-P", f"--format={','.join(SACCT_FIELDS)}",
            "-S", f"now-{ago_start}seconds", "-E", f"now-{ago_end}seconds" if ago_end else "now"]


# --------------------------------------------------------------------------- pricing


class Pricing:
    """What the spec says about money: which partitions bill dollars, which pool each
    node is in. A job list repeats a handful of node lists and TRES strings: each is
    worked out once."""

    def __init__(self, spec: Cluster) -> None:
        self.priced = frozenset(billing_weights(spec))
        self.node_pool = {name: pool.name for pool in spec.pools for name in node_names(spec, pool)}
        self.prices = {pool.name: pool_price(pool) for pool in spec.pools}
        self._nodes: dict[str, tuple[tuple[str, float], ...]] = {}

    def pools_of(self, nodelist: str) -> tuple[tuple[str, float], ...]:
        """(pool, share of the job) for a sacct NodeList; ('(none)', 1) for nodes the spec
        does not name (a pool removed since)."""
        found = self._nodes.get(nodelist)
        if found is None and "[" not in nodelist and "," not in nodelist and nodelist in self.node_pool:
            found = self._nodes[nodelist] = ((self.node_pool[nodelist], 1.0),)
        if found is None:
            try:
                names = expand(nodelist) if nodelist and not nodelist.startswith("None") else []
            except ValueError:  # not a hostlist: counted, under no pool
                names = ["(none)"]
            counts: dict[str, int] = {}
            for name in names:
                pool = self.node_pool.get(name, "(none)")
                counts[pool] = counts.get(pool, 0) + 1
            found = tuple((pool, n / len(names)) for pool, n in counts.items())
            self._nodes[nodelist] = found
        return found


@dataclass
class Totals:
    jobs: float = 0.0
    """Jobs (a job split over pools counts its share in each)."""
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0
    billing_seconds: float = 0.0
    """billing units x seconds of the jobs of priced partitions"""
    unpriced_jobs: float = 0.0

    @property
    def dollars(self) -> float:
        return self.billing_seconds / BILLING_UNITS_PER_DOLLAR / 3600

    def add(self, other: Totals) -> None:
        self.jobs += other.jobs
        self.cpu_seconds += other.cpu_seconds
        self.gpu_seconds += other.gpu_seconds
        self.billing_seconds += other.billing_seconds
        self.unpriced_jobs += other.unpriced_jobs


@dataclass
class CostReport:
    period: Period
    by: tuple[str, ...]
    groups: dict[tuple[str, ...], Totals]
    records: int = 0
    unpriced_partitions: set[str] = field(default_factory=set)
    daily: dict[tuple[str, ...], dict[int, float]] | None = None
    """group -> UTC day (epoch // 86400) -> dollars (when asked for: the plot)"""
    notes: list[str] = field(default_factory=list)
    """Where the prices came from (price_notes), for the table's caption."""

    def rows(self) -> list[tuple[tuple[str, ...], Totals]]:
        """Groups by spend, then CPU-hours, then name."""
        return sorted(self.groups.items(), key=lambda kv: (-kv[1].dollars, -kv[1].cpu_seconds, kv[0]))

    def total(self) -> Totals:
        total = Totals()
        for totals in self.groups.values():
            total.add(totals)
        return total


_TRES_CACHE: dict[str, tuple[float, float, float]] = {}


def tres_values(alloc: str) -> tuple[float, float, float]:
    """(billing, cpus, gpus) of an AllocTRES string such as
    `billing=960,cpu=2,gres/gpu=1,mem=1G,node=1` (typed GPUs repeat the untyped total)."""
    found = _TRES_CACHE.get(alloc)
    if found is None:
        billing = cpus = gpus = 0.0
        for item in alloc.split(","):
            key, _, value = item.partition("=")
            if key == "billing":
                billing = _float(value)
            elif key == "cpu":
                cpus = _float(value)
            elif key == "gres/gpu":
                gpus = _float(value)
        found = _TRES_CACHE[alloc] = (billing, cpus, gpus)
        if len(_TRES_CACHE) > 100_000:
            _TRES_CACHE.clear()
    return found


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def _start(text: str) -> float | None:
    """sacct's Start: epoch seconds (SLURM_TIME_FORMAT=%s), or its default local ISO
    form; None when the job never started (Unknown, None)."""
    if text.isdigit():
        value = int(text)
        return float(value) if value else None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def aggregate(lines: Iterable[str], pricing: Pricing, period: Period, by: Sequence[str],
              daily: bool = False, source: str = "sacct") -> CostReport:
    """Spend per group over the period from `sacct -P` lines (the header first)."""
    it = iter(lines)
    header = next(it, "").rstrip("\n").split("|")
    missing = [f for f in SACCT_FIELDS if f not in header]
    if missing:
        raise CostError(f"{source}: no {', '.join(missing)} column(s) in its header; make it with "
                        f"`sacct -a -X -P --format={','.join(SACCT_FIELDS)} -S ... -E ...`")
    col = {name: header.index(name) for name in SACCT_FIELDS}
    i_user, i_account, i_part, i_nodes = col["User"], col["Account"], col["Partition"], col["NodeList"]
    i_tres, i_elapsed, i_start = col["AllocTRES"], col["ElapsedRaw"], col["Start"]
    width = len(header)
    since, until = period.since, period.until
    by_pool = "pool" in by
    report = CostReport(period, tuple(by), {}, daily={} if daily else None)
    groups, priced = report.groups, pricing.priced
    for line in it:
        fields = line.rstrip("\n").split("|")
        if len(fields) != width:
            if line.strip():
                raise CostError(f"{source}: a line with {len(fields)} fields, the header has {width}: "
                                f"{line.strip()[:120]!r}")
            continue
        report.records += 1
        start = _start(fields[i_start])
        if start is None:
            continue
        elapsed = fields[i_elapsed]
        end = start + (int(elapsed) if elapsed.isdigit() else 0)
        seconds = min(end, until) - max(start, since)
        if seconds <= 0:
            continue
        billing, cpus, gpus = tres_values(fields[i_tres])
        partition = fields[i_part]
        paid = partition in priced
        if not paid:
            report.unpriced_partitions.add(partition)
        base = {"user": fields[i_user], "account": fields[i_account], "partition": partition}
        shares = pricing.pools_of(fields[i_nodes]) if by_pool else (("", 1.0),)
        for pool, share in shares:
            base["pool"] = pool
            key = tuple(base[g] for g in by)
            totals = groups.get(key)
            if totals is None:
                totals = groups[key] = Totals()
            totals.jobs += share
            totals.cpu_seconds += cpus * seconds * share
            totals.gpu_seconds += gpus * seconds * share
            if paid:
                totals.billing_seconds += billing * seconds * share
            else:
                totals.unpriced_jobs += share
            if report.daily is not None and paid:
                _spread(report.daily.setdefault(key, {}), max(start, since), min(end, until),
                        billing * share / BILLING_UNITS_PER_DOLLAR / 3600)
    return report


def _spread(days: dict[int, float], start: float, end: float, dollars_per_second: float) -> None:
    day = int(start // DAY)
    while start < end:
        stop = min(end, (day + 1) * DAY)
        days[day] = days.get(day, 0.0) + (stop - start) * dollars_per_second
        start, day = stop, day + 1


def read_sacct_file(path: Path) -> Iterator[str]:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            yield from handle
    except OSError as exc:
        raise CostError(f"cannot read {path}: {exc.strerror}") from None


# --------------------------------------------------------------------------- output


TOP_ROWS = 40
"""The `table` format shows the groups that cost most; the rest as one row (the other
formats show every group)."""
SPLIT_NOTE = ("Jobs: a job on nodes of several pools counts in each pool by its share of the nodes "
              "(0.5 + 0.5), hence fractions")


def _hours(value: Value) -> str:
    return f"{value:,.1f}" if isinstance(value, float) else str(value)


def _share(value: Value) -> str:
    return f"{value:.1f}%" if isinstance(value, float) else str(value)


def cost_table(report: CostReport, top: int = TOP_ROWS, cluster: str | None = None) -> Table:
    """The report as a table: a row per group by spend (the `table` format: the `top`
    groups (0: all), the rest as one row, a total row, where the prices came from)."""
    columns = [*(Column(name, name.capitalize()) for name in report.by),
               Column("jobs", "Jobs", count, numeric=True),
               Column("cpu_hours", "CPU-hours", _hours, numeric=True, drop=1),
               Column("gpu_hours", "GPU-hours", _hours, numeric=True, drop=2),
               Column("spend_usd", "Spend (USD)", money, numeric=True, scope="table"),
               Column("share", "Share", _share, numeric=True, drop=3, scope="table"),
               Column("spend_usd", "Spend (USD)", scope="data"),
               Column("unpriced_jobs", "Unpriced jobs", scope="data")]
    total = report.total()

    def row(key: Sequence[str], t: Totals) -> Row:
        share = 100 * t.dollars / total.dollars if total.dollars else None
        spend = t.dollars if t.jobs > t.unpriced_jobs else None
        return (*key, _round(t.jobs), t.cpu_seconds / 3600, t.gpu_seconds / 3600, spend, share, t.dollars,
                _round(t.unpriced_jobs))

    rows = report.rows()
    table = Table(f"Spend by {', '.join(report.by)}", columns, [row(tuple(k or "" for k in key), t) for key, t in rows],
                  limit=max(top, 0), meta={
                      "cluster": cluster,
                      "period": {"since": iso_moment(report.period.since), "until": iso_moment(report.period.until)},
                      "by": list(report.by), "sacct_records": report.records,
                      "total_spend_usd": round(total.dollars, 4), "total_jobs": _round(total.jobs)})
    if 0 < top < len(rows):
        rest = Totals()
        for _, totals in rows[top:]:
            rest.add(totals)
        table.footer.append(row((f"({len(rows) - top:,} more)", *([""] * (len(report.by) - 1))), rest))
        table.notes.append(f"({len(rows) - top:,} more): the groups that cost least, in one row; --top 0 shows "
                           "each (--format plain, csv and json always do)")
    table.footer.append(row(("Total", *([""] * (len(report.by) - 1))), total))
    if "pool" in report.by:
        table.notes.append(SPLIT_NOTE)
    table.notes.append(f"{report.records:,} sacct records; {report.period.label()}")
    table.notes += [f"prices: {note}" for note in report.notes]
    if report.unpriced_partitions:
        table.notes.append(f"not in dollars (no prices): jobs of {', '.join(sorted(report.unpriced_partitions))}")
    return table


def _round(jobs: float) -> int | float:
    """A count of jobs: whole when it is (fractions add up to 0.9999...)."""
    jobs = round(jobs, 4)
    return int(jobs) if jobs.is_integer() else jobs


def price_notes(spec: Cluster) -> list[str]:
    """Where each pool's price comes from, one line per distinct source."""
    notes: dict[str, list[str]] = {}
    for pool in spec.pools:
        cost = pool_price(pool)
        if cost is None:
            notes.setdefault("no price (explicit hardware without price_per_hour): not in dollars", []).append(
                pool.name)
        elif cost.source == "spec":
            notes.setdefault("price_per_hour in the spec", []).append(f"{pool.name} ${cost.dollars_per_hour:g}/h")
        else:
            kind = "spot ESTIMATE" if cost.estimate else "on-demand"
            notes.setdefault(f"catalog {kind}, {cost.region}, {cost.date}", []).append(
                f"{pool.name} ({cost.instance_type}) ${cost.dollars_per_hour:g}/h")
    return [f"{what}: {', '.join(pools)}" for what, pools in notes.items()]


def plot(report: CostReport, path: Path, title: str) -> Path:
    """Spend per day (UTC days), stacked by group: the groups that cost most, the rest
    as '(other)'. Needs matplotlib (the `report` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CostError("--plot needs matplotlib: pip install 'slurmforge[report]'") from None
    daily = report.daily or {}
    ranked = [key for key, _ in report.rows() if key in daily]
    shown = ranked[:PLOT_SERIES]
    series: dict[str, dict[int, float]] = {" / ".join(k) or "all": daily[k] for k in shown}
    rest: dict[int, float] = {}
    for key in ranked[PLOT_SERIES:]:
        for day, value in daily[key].items():
            rest[day] = rest.get(day, 0.0) + value
    if rest:
        series[OTHER] = rest
    first, last = int(report.period.since // DAY), math.ceil(report.period.until / DAY) - 1
    days = list(range(first, max(last, first) + 1))
    labels = [(datetime(1970, 1, 1) + timedelta(days=d)).strftime("%m-%d") for d in days]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(days) + 3), 4.5), dpi=110)
    bottom = [0.0] * len(days)
    for name, values in series.items():
        heights = [values.get(d, 0.0) for d in days]
        ax.bar(labels, heights, bottom=bottom, label=name)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_ylabel("US dollars per day (UTC days)")
    ax.set_title(title, fontsize=10)
    if series:
        ax.legend(fontsize=8, loc="upper left")
    else:
        ax.text(0.5, 0.5, "no priced jobs in this period", ha="center", va="center", transform=ax.transAxes)
    ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    fig.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    except OSError as exc:
        raise CostError(f"cannot write {path}: {exc.strerror}") from None
    finally:
        plt.close(fig)
    return path


def pool_spend(report: CostReport) -> Mapping[str, float]:
    """pool -> dollars, from a report grouped by pool alone."""
    return {key[0]: totals.dollars for key, totals in report.groups.items()}


# --------------------------------------------------------------------------- the live cluster


def sacct_on_controller(inventory: Path, period: Period, now: float) -> tuple[Cluster, list[str]]:
    """The inventory's spec and `sacct_argv`'s output, run as root on its controller
    (podman exec on the local target, ssh with the inventory's connection otherwise)."""
    from slurmforge.hosts import HostRole
    from slurmforge.inventory import read_inventory
    from slurmforge.remote.node import executor_for

    spec, hosts = read_inventory(inventory)
    controller = next((h for h in hosts if h.role is HostRole.CONTROLLER), None)
    if controller is None:
        raise CostError(f"{inventory}: no controller in the inventory")
    done = executor_for(controller).run(sacct_argv(period, now), env=SACCT_ENV, timeout=300)
    if not done.ok:
        raise CostError(f"sacct failed on {controller.name}: {done.reason()}")
    return spec, done.stdout.splitlines()
