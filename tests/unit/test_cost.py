"""`slurmforge cost`: sacct records -> spend per user, account, partition, pool over a
period; options refused with one line each; table, CSV and plot."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from slurmforge.cli import app
from slurmforge.cost import (
    SACCT_ENV,
    SACCT_FIELDS,
    CostError,
    CostInputError,
    Period,
    Pricing,
    aggregate,
    cost_table,
    month_start,
    parse_when,
    read_options,
    sacct_argv,
    tres_values,
)
from slurmforge.spec import load_spec, validate_data
from slurmforge.tables import Format, render

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "examples/local.yaml"
T0 = 1_790_000_000.0  # a Tuesday in September 2026
HEADER = "|".join(SACCT_FIELDS)


def line(job: int, user: str, account: str, partition: str, nodes: str, tres: str, elapsed: int,
         start: float | str, state: str = "COMPLETED") -> str:
    start_text = start if isinstance(start, str) else str(int(start))
    return f"{job}|{user}|{account}|{partition}|{nodes}|{tres}|{elapsed}|{start_text}|{state}"


# local.yaml's prices: cpu nodes $0.096/h (960 units, 2 CPUs), the gpu node $2/h (20,000, 2 GPUs)
RECORDS = [
    HEADER,
    # a whole cpu node for an hour: $0.096
    line(1, "alice", "research", "ml-cpu", "dev-cpu-01", "billing=960,cpu=2,mem=1G,node=1", 3600, T0),
    # one GPU of two for half an hour: $1/h x 0.5 = $0.50
    line(2, "bob", "research", "ml-gpu", "dev-gpu-01", "billing=10000,cpu=1,gres/gpu=1,mem=512M,node=1", 1800, T0),
    # two nodes of two pools for 10 minutes: $0.032, half to each pool
    line(3, "eve", "vision", "ml-cpu", "dev-cpu-04,dev-cpu-fallback-01", "billing=1920,cpu=4,mem=2G,node=2",
         600, T0 + 100),
    # pending: never started, costs nothing
    line(4, "eve", "vision", "ml-cpu", "None assigned", "", 0, "Unknown", "PENDING"),
    # started before the period: only the part inside counts (1 h of 2)
    line(5, "alice", "vision", "ml-cpu", "dev-cpu-02", "billing=960,cpu=2,mem=1G,node=1", 7200, T0 - 3600),
    # still running at the end of the period: cut there
    line(6, "bob", "research", "ml-gpu", "dev-gpu-01", "billing=20000,cpu=2,gres/gpu=2,mem=1G,node=1",
         10 * 3600, T0 + 3600, "RUNNING"),
]
PERIOD = Period(T0, T0 + 2 * 3600)


def report(by: tuple[str, ...], lines: list[str] | None = None, spec_path: Path = LOCAL, daily: bool = False):  # type: ignore[no-untyped-def]
    return aggregate(lines or RECORDS, Pricing(load_spec(spec_path)), PERIOD, by, daily=daily)


def dollars(rep, *key: str) -> float:  # type: ignore[no-untyped-def]
    return float(rep.groups[tuple(key)].dollars)


def test_spend_per_account_user_partition_and_pool() -> None:
    by_account = report(("account",))
    # research: 0.096 + 0.50 + job 6 for 1 h of its 10 at $2/h = 2.596
    assert dollars(by_account, "research") == pytest.approx(0.096 + 0.5 + 2.0)
    # vision: job 3 ($0.192/h for 10 min) + job 5 (1 h at $0.096)
    assert dollars(by_account, "vision") == pytest.approx(0.192 / 6 + 0.096)
    assert by_account.records == 6 and by_account.total().jobs == 5
    by_user = report(("user",))
    assert dollars(by_user, "bob") == pytest.approx(2.5)
    by_pool = report(("pool",))
    assert dollars(by_pool, "gpu") == pytest.approx(2.5)
    assert dollars(by_pool, "cpu-fallback") == pytest.approx(0.192 / 12)
    assert by_pool.groups[("cpu-fallback",)].jobs == pytest.approx(0.5)
    both = report(("partition", "user"))
    assert dollars(both, "ml-cpu", "alice") == pytest.approx(0.192)
    # CPU- and GPU-hours inside the period
    assert by_user.groups[("bob",)].gpu_seconds == pytest.approx(1800 + 2 * 3600)
    assert by_user.groups[("alice",)].cpu_seconds == pytest.approx(2 * 3600 + 2 * 3600)
    # rows: dearest first
    assert [k for k, _ in by_user.rows()] == [("bob",), ("alice",), ("eve",)]


def test_jobs_of_unpriced_partitions_count_but_not_in_dollars() -> None:
    data = yaml.safe_load(LOCAL.read_text())
    del data["pools"][1]["price_per_hour"]  # the gpu pool: ml-gpu has no prices now
    spec = validate_data(data, "local")
    rep = aggregate(RECORDS, Pricing(spec), PERIOD, ("user",))
    assert rep.unpriced_partitions == {"ml-gpu"}
    assert dollars(rep, "bob") == 0 and rep.groups[("bob",)].unpriced_jobs == 2
    assert rep.groups[("bob",)].gpu_seconds > 0


def test_iso_times_header_order_and_typed_gpus() -> None:
    """A file made with sacct's default time format (local ISO), columns in another order."""
    fields = list(reversed(SACCT_FIELDS))
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(T0))
    values = {"JobID": "7", "User": "ann", "Account": "research", "Partition": "ml-gpu", "NodeList": "dev-gpu-01",
              "AllocTRES": "billing=20000,cpu=2,gres/gpu:fakegpu=2,gres/gpu=2,mem=1G,node=1", "ElapsedRaw": "3600",
              "Start": start, "State": "COMPLETED"}
    lines = ["|".join(fields), "|".join(values[f] for f in fields)]
    rep = report(("user",), lines)
    assert dollars(rep, "ann") == pytest.approx(2.0)
    assert rep.groups[("ann",)].gpu_seconds == 2 * 3600
    assert tres_values("billing=5,cpu=1,gres/gpu:a10g=3,gres/gpu=3") == (5, 1, 3)


def test_broken_input_is_one_line() -> None:
    with pytest.raises(CostError, match=r"no AllocTRES, ElapsedRaw column\(s\)"):
        report(("user",), ["JobID|User|Account|Partition|NodeList|Start|State", "1|a|b|c|d|e|f"])
    with pytest.raises(CostError, match="a line with 3 fields, the header has 9"):
        report(("user",), [HEADER, "1|2|3"])


def test_daily_spread_for_the_plot() -> None:
    rep = report(("account",), daily=True)
    assert rep.daily is not None
    assert sum(sum(days.values()) for days in rep.daily.values()) == pytest.approx(rep.total().dollars)


def test_options_every_problem_at_once() -> None:
    now = T0
    with pytest.raises(CostInputError) as info:
        read_options("gpu,user", "2026-13-01", "soon", None, None, now)
    lines = [p.line() for p in info.value.problems]
    assert len(lines) == 4, lines
    assert lines[0].startswith("--by: not a grouping: gpu")
    assert lines[1].startswith("--since: not a date or duration (got '2026-13-01')")
    assert lines[2].startswith("--until: not a date or duration (got 'soon')")
    assert lines[3].startswith("--inventory/--sacct-file: name exactly one source of jobs")
    with pytest.raises(CostInputError, match="1 problem"):
        read_options("user", "1d", "2d", None, Path("f"), now)  # until before since
    good = read_options("user,pool", "7d", None, None, Path("f"), now)
    assert good.by == ("user", "pool") and good.period == Period(now - 7 * 86400, now)
    default = read_options("account", None, None, Path("inv"), None, now)
    assert default.period.since == month_start(now) and default.period.until == now
    assert parse_when("2026-09-01", now) == time.mktime((2026, 9, 1, 0, 0, 0, 0, 0, -1))


def test_sacct_argv_is_relative_to_the_controllers_clock() -> None:
    argv = sacct_argv(Period(T0 - 3600, T0 - 60), T0)
    assert argv[:4] == ["sacct", "-a", "-X", "-P"]
    assert argv[argv.index("-S") + 1] == "now-3600seconds" and argv[argv.index("-E") + 1] == "now-60seconds"
    assert sacct_argv(Period(T0 - 10, T0), T0)[-1] == "now"
    assert SACCT_ENV == {"SLURM_TIME_FORMAT": "%s"}


def test_csv() -> None:
    rows = list(csv.reader(io.StringIO(render(cost_table(report(("account", "pool"))), Format.CSV))))
    assert rows[0] == ["account", "pool", "jobs", "cpu_hours", "gpu_hours", "spend_usd", "unpriced_jobs"]
    research_gpu = next(r for r in rows if r[:2] == ["research", "gpu"])
    assert float(research_gpu[5]) == pytest.approx(2.5)


def test_cli_table_csv_plot_and_errors(tmp_path: Path) -> None:
    now = time.time()
    sacct = tmp_path / "sacct.txt"
    start = now - 3600
    sacct.write_text("\n".join([
        HEADER,
        line(1, "alice", "research", "ml-cpu", "dev-cpu-01", "billing=960,cpu=2,mem=1G,node=1", 1800, start),
        line(2, "bob", "research", "ml-gpu", "dev-gpu-01", "billing=20000,cpu=2,gres/gpu=2,mem=1G,node=1", 900,
             start)]) + "\n")
    runner = CliRunner()
    res = runner.invoke(app, ["cost", str(LOCAL), "--sacct-file", str(sacct), "--by", "user", "--since", "1d",
                              "--format", "table"])
    assert res.exit_code == 0, res.output
    assert "bob" in res.output and "$0.50" in res.output and "$0.05" in res.output and "$0.55" in res.output
    assert "price_per_hour in the spec" in res.output
    res = runner.invoke(app, ["cost", str(LOCAL), "--sacct-file", str(sacct), "--format", "csv", "--plot",
                              str(tmp_path / "out" / "cost.png")])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0].startswith("account,jobs,")
    png = tmp_path / "out" / "cost.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = runner.invoke(app, ["cost", str(LOCAL), "--sacct-file", str(sacct), "--by", "gpus", "--since", "yesterday"])
    assert res.exit_code == 2
    assert [ln for ln in res.output.splitlines() if ln.startswith("error")] == [
        "error slurmforge cost: --by: not a grouping: gpus (got 'gpus'); fix: use user, account, partition, pool, "
        "or several with commas (user,account)",
        "error slurmforge cost: --since: not a date or duration (got 'yesterday'); fix: use YYYY-MM-DD, "
        "YYYY-MM-DDTHH:MM, now, or a duration back from now such as 24h, 7d, 2w"]
    res = runner.invoke(app, ["cost", str(LOCAL), "--sacct-file", str(tmp_path / "missing.txt")])
    assert res.exit_code == 10 and "cannot read" in res.output
    res = runner.invoke(app, ["cost", "--inventory", str(tmp_path)])
    assert res.exit_code == 14 and "not a slurmforge inventory" in res.output
    res = runner.invoke(app, ["cost", str(LOCAL), "--inventory", str(tmp_path)])  # SPEC prices saved output only
    assert res.exit_code == 2 and "a cluster's jobs are priced by its own spec" in res.output
    res = runner.invoke(app, ["cost", "--format", "json", "--sacct-file", str(sacct), str(LOCAL)])
    shown = json.loads(res.stdout)
    assert shown["cluster"] == "dev" and set(shown["period"]) == {"since", "until"}
    assert shown["total_spend_usd"] == pytest.approx(sum(r["spend_usd"] for r in shown["rows"]))


def test_real_sacct_output_of_slurm_24_11() -> None:
    """sacct -a -X -P as 24.11.5 wrote it for four jobs on the local example's GPU node
    (tests/slurm/test_billing.py: slurmdbd, slurmctld and slurmd in the node image)."""
    lines = (Path(__file__).parent / "slurm_json/sacct-24.11.5.txt").read_text().splitlines()
    starts = [int(line.split("|")[7]) for line in lines[1:]]
    period = Period(min(starts) - 60, max(starts) + 60)
    rep = aggregate(lines, Pricing(load_spec(LOCAL)), period, ("account", "pool"))
    totals = rep.groups[("research", "gpu")]
    # billing 10,000 + 20,000 + 15,000 + 20,000 for 2 s each ($1/h is 10,000)
    assert totals.jobs == 4 and totals.dollars == pytest.approx(65_000 * 2 / 36_000_000)
    assert totals.gpu_seconds == 3 * 2 and totals.cpu_seconds == 6 * 2
