"""`slurmforge report`: a one-page utilization report from Prometheus' data on the
controller (its HTTP API, `query_range`): allocation per pool over time, GPUs in use,
queue wait per partition, node states. Writes report.html and one PNG per plot.

    slurmforge report --inventory /var/lib/slurmforge/inventories/dev --since 24h --out report/

Plots use matplotlib's Agg backend (no display); matplotlib is the `report` extra.
"""

from __future__ import annotations

import html
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from slurmforge.errors import SlurmforgeError
from slurmforge.tables import Column, Table, iso_moment

DURATION_RE = re.compile(r"^(\d+)([smhdw])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_POINTS = 300


class ReportError(SlurmforgeError):
    """Prometheus cannot be reached, has no data, or the report cannot be written."""

    exit_code = 9


class DurationError(ReportError):
    exit_code = 2


def parse_duration(text: str) -> int:
    match = DURATION_RE.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise DurationError(f"--since {text!r}: not a duration; use e.g. 30m, 24h, 7d")
    return int(match.group(1)) * UNITS[match.group(2)]


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    times: list[float]
    values: list[float]


class Prometheus:
    """The few calls of Prometheus' HTTP API the report needs."""

    def __init__(self, url: str, timeout: float = 20.0) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout

    def query_range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        params = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": f"{step:g}"})
        data = self._get(f"/api/v1/query_range?{params}")
        if data.get("status") != "success":
            raise ReportError(f"Prometheus at {self.url} refused {query!r}: {data.get('error', 'no reason given')}")
        return [Series(dict(r.get("metric", {})), [float(t) for t, _ in r["values"]],
                       [float(v) for _, v in r["values"]]) for r in data["data"]["result"]]

    def _get(self, path: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=self.timeout) as resp:
                return dict(json.load(resp))
        except urllib.error.HTTPError as exc:  # Prometheus answers 400/422 with a JSON error
            try:
                return dict(json.load(exc))
            except ValueError:
                raise ReportError(f"Prometheus at {self.url} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ReportError(f"Prometheus at {self.url} is unreachable: {reason}") from None
        except ValueError:
            raise ReportError(f"{self.url} did not answer with Prometheus' JSON") from None


@dataclass(frozen=True)
class Plot:
    name: str
    title: str
    ylabel: str
    query: str
    label: str
    """The label that names each line."""
    stacked: bool = False
    scale: float = 1.0


PLOTS = (
    Plot("allocation", "CPU allocation per pool (% of the pool's usable CPUs)", "% allocated",
         '100 * sum by (pool) (slurmforge_pool_cpus{state="allocated"}) / '
         'clamp_min(sum by (pool) (slurmforge_pool_cpus{state=~"allocated|idle"}), 1)', "pool"),
    Plot("gpus", "GPUs in use per pool", "GPUs", 'sum by (pool) (slurmforge_pool_gpus{state="used"})', "pool"),
    Plot("queue_wait", "Queue wait per partition (oldest job waiting for nodes)", "minutes",
         "max by (partition) (slurmforge_partition_oldest_pending_seconds)", "partition", scale=1 / 60),
    Plot("pending", "Jobs waiting for nodes per partition", "jobs",
         'sum by (partition) (slurmforge_partition_jobs{state="pending"})', "partition"),
    Plot("node_states", "Nodes by state (all pools)", "nodes",
         "sum by (state) (slurmforge_pool_nodes) > 0", "state", stacked=True),
)


@dataclass
class Report:
    out_dir: Path
    start: float
    end: float
    cluster: str
    images: list[tuple[Plot, Path, list[Series]]] = field(default_factory=list)

    @property
    def html_path(self) -> Path:
        return self.out_dir / "report.html"


def step_for(seconds: float) -> float:
    return max(15.0, round(seconds / MAX_POINTS))


def make_report(prometheus: Prometheus, cluster: str, since: int, out_dir: Path,
                clock: Callable[[], float] = time.time) -> Report:
    end = clock()
    start, step = end - since, step_for(since)
    report = Report(out_dir, start, end, cluster)
    data = [(plot, prometheus.query_range(plot.query, start, end, step)) for plot in PLOTS]
    if not any(series for _, series in data):
        raise ReportError(f"Prometheus at {prometheus.url} has no slurmforge data in the last "
                          f"{_human(since)} (is the scheduler service scraped? `slurmforge validate --inventory`)")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for plot, series in data:
            path = out_dir / f"{plot.name}.png"
            draw(plot, series, start, end, path)
            report.images.append((plot, path, series))
        report.html_path.write_text(render_html(report))
    except OSError as exc:
        raise ReportError(f"cannot write the report to {out_dir}: {exc.strerror or exc}") from None
    return report


def draw(plot: Plot, series: Sequence[Series], start: float, end: float, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        raise ReportError("matplotlib is missing: pip install 'slurmforge[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    gap = 2 * step_for(end - start)
    fig, ax = plt.subplots(figsize=(9, 2.8), dpi=100)
    try:
        ordered = sorted(series, key=lambda s: s.labels.get(plot.label, ""))
        names = [s.labels.get(plot.label, "?") for s in ordered]
        if plot.stacked and ordered:
            times = sorted({t for s in ordered for t in s.times})
            by_time = [dict(zip(s.times, s.values, strict=True)) for s in ordered]
            x, rows = _broken(times, [[d.get(t, 0.0) for d in by_time] for t in times], gap)
            ax.stackplot(x, *zip(*rows, strict=True), labels=names, alpha=0.85)
        for s, name in [] if plot.stacked else zip(ordered, names, strict=True):
            x, rows = _broken(s.times, [[v * plot.scale] for v in s.values], gap)
            ax.plot(x, [r[0] for r in rows], label=name, linewidth=1.6)
        if not ordered:
            ax.text(0.5, 0.5, "no data in this period", ha="center", va="center", transform=ax.transAxes,
                    color="#888")
        ax.set_xlim(_day(start), _day(end))
        ax.set_ylim(bottom=0)
        ax.set_title(plot.title, loc="left", fontsize=11)
        ax.set_ylabel(plot.ylabel)
        ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=8, tz=UTC))  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_formatter(mdates.DateFormatter(  # type: ignore[no-untyped-call]
            "%H:%M" if end - start <= 86400 else "%m-%d %H:%M", tz=UTC))
        ax.grid(alpha=0.3)
        if ordered:
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)


def _broken(times: Sequence[float], rows: Sequence[list[float]], gap: float) -> tuple[list[float], list[list[float]]]:
    """Plot coordinates with a NaN row wherever samples are further apart than `gap`:
    a time without data is drawn as a gap, not as a line across it."""
    x: list[float] = []
    out: list[list[float]] = []
    for i, (t, row) in enumerate(zip(times, rows, strict=True)):
        if i and t - times[i - 1] > gap:
            x.append(_day(t - gap / 2))
            out.append([math.nan] * len(row))
        x.append(_day(t))
        out.append(row)
    return x, out


def _day(timestamp: float) -> float:
    """matplotlib's date numbers: days since 1970-01-01 UTC."""
    return timestamp / 86400.0


def lines_of(plot: Plot, series: Sequence[Series]) -> list[tuple[str, float, float, int]]:
    """Every line of a plot with data: its name, mean and peak in the plot's unit, samples."""
    return [(s.labels.get(plot.label, "?"), sum(s.values) / len(s.values) * plot.scale, max(s.values) * plot.scale,
             len(s.values)) for s in sorted(series, key=lambda s: s.labels.get(plot.label, "")) if s.values]


def _summary(plot: Plot, series: Sequence[Series]) -> str:
    return "; ".join(f"{html.escape(name)}: mean {mean:.1f}, peak {peak:.1f}"
                     for name, mean, peak, _ in lines_of(plot, series)) or "no data"


REPORT_COLUMNS = (Column("plot", "Plot"), Column("series", "Series"), Column("unit", "Unit"),
                  Column("mean", "Mean", lambda v: f"{v:,.1f}", numeric=True),
                  Column("peak", "Peak", lambda v: f"{v:,.1f}", numeric=True),
                  Column("samples", "Samples", numeric=True, drop=1))
"""`report --format`: one row per line of a plot; each plot has its own unit (its y axis)."""


def report_table(report: Report, url: str) -> Table:
    """What the report drew, as numbers: every line of every plot, its mean and peak over the
    period, in the plot's unit; where the files are."""
    table = Table(f"{report.cluster}: utilization, {iso_moment(report.start)} to {iso_moment(report.end)}",
                  REPORT_COLUMNS, notes=[f"wrote {report.html_path} ({len(report.images)} plots) from {url}"],
                  meta={"cluster": report.cluster,
                        "period": {"since": iso_moment(report.start), "until": iso_moment(report.end)},
                        "html": str(report.html_path), "plots": len(report.images), "prometheus": url})
    for plot, _, series in report.images:
        table.rows += [(plot.name, name, plot.ylabel, mean, peak, samples)
                       for name, mean, peak, samples in lines_of(plot, series)]
    return table


def render_html(report: Report) -> str:
    when = " to ".join(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t)) for t in (report.start, report.end))
    sections = "\n".join(
        f'<section><img src="{path.name}" alt="{html.escape(plot.title)}">'
        f'<p>{html.escape(plot.ylabel)} &mdash; {_summary(plot, series)}</p></section>'
        for plot, path, series in report.images)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(report.cluster)}: utilization</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:1em auto;color:#222}}
img{{width:100%}}section p{{margin:0 0 1.2em;font-size:.85em;color:#555}}</style></head>
<body><h1>{html.escape(report.cluster)}: utilization</h1><p>{when}</p>
{sections}
</body></html>
"""


def _human(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
