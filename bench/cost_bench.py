"""`slurmforge cost` over 100,000 sacct records: read, price, group, table and CSV.

Generates a month of `sacct -a -X -P` output in the shape the command asks sacct for
(SLURM_TIME_FORMAT=%s): 100,000 allocations of 300 users in 24 accounts over a spec of
four priced pools (spot and on-demand GPU, two CPU pools; 4,000 nodes), single nodes and
node ranges, jobs that started before the month or still run, pending jobs, and jobs of
an unpriced partition. The generator adds up each account's dollars on its own
(billing x seconds inside the period / 36,000,000); the bench fails when the command's
figures differ. Times, median of 3 runs after one warm-up:

    by account        read the file, price and group, the table and the CSV
    by user,pool      the same, grouped by user and pool (node lists expanded)
    process           `python -m slurmforge.cli cost ... --by account --format csv` end to end
                      (interpreter start and imports included), once

    .venv/bin/python bench/cost_bench.py [--records 100000] [--runs 3] [--quick]

Exits 1 when the in-process aggregation takes more than 2 s (median) or a figure is
wrong. `--quick` (CI: tests/unit/test_bench_quick.py) runs 2,000 records once and checks
only the figures.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from slurmforge.billing import billing_weights
from slurmforge.cost import SACCT_FIELDS, Period, Pricing, aggregate, cost_table, read_sacct_file
from slurmforge.spec import Cluster, parse_spec
from slurmforge.tables import Format, render

BUDGET_SECONDS = 2.0
QUICK_RECORDS = 2_000
START = 1_793_500_000.0  # the period: 30 days from here
DAYS = 30

SPEC = """
api_version: slurmforge/v1
name: big
target: {kind: aws, region: us-east-1, key_name: ops}
network:
  public_subnets: [{cidr: 10.0.0.0/24, zone: us-east-1a}]
  private_subnets: [{cidr: 10.0.64.0/18, zone: us-east-1a}, {cidr: 10.0.128.0/18, zone: us-east-1b}]
  admin_cidrs: [203.0.113.0/24]
pools:
  - {name: gpu-spot, kind: gpu, instance_types: [g5.12xlarge], market: spot, max_nodes: 1000, fallback: [gpu],
     weight: 1}
  - {name: gpu, kind: gpu, instance_types: [g5.12xlarge], max_nodes: 1000, weight: 10}
  - {name: cpu, kind: cpu, instance_types: [c6i.8xlarge], max_nodes: 1000}
  - {name: mem, kind: cpu, instance_types: [r6i.8xlarge], max_nodes: 1000, price_per_hour: 1.5}
partitions:
  - {name: gpu, pools: [gpu-spot, gpu]}
  - {name: cpu, pools: [cpu], default: true}
  - {name: mem, pools: [mem]}
accounting:
  accounts: [{name: research}]
storage: {nas: {kind: efs}}
"""


def spec() -> Cluster:
    return parse_spec(SPEC, "bench")


def fixtures(records: int, seed: int = 14) -> tuple[str, dict[str, float]]:
    """sacct -P text and each account's dollars, worked out here on their own."""
    rng = random.Random(seed)
    weights = billing_weights(spec())
    until = START + DAYS * 86400
    users = [f"user{i:03d}" for i in range(300)]
    account_of = {u: f"acct{i % 24:02d}" for i, u in enumerate(users)}
    # (partition, node prefix, GPUs per node); scratch is not in the spec: no prices
    parts = [("gpu", "big-gpu-spot", 4), ("gpu", "big-gpu", 4), ("cpu", "big-cpu", 0), ("mem", "big-mem", 0),
             ("scratch", "big-cpu", 0)]
    lines = ["|".join(SACCT_FIELDS)]
    expected: dict[str, float] = {}
    for job in range(1, records + 1):
        user = rng.choice(users)
        account = account_of[user]
        part, prefix, gpus = rng.choices(parts, (30, 20, 30, 15, 5))[0]
        if rng.random() < 0.03:
            lines.append(f"{job}|{user}|{account}|{part}|None assigned||0|Unknown|PENDING")
            continue
        nodes = rng.choice((1, 1, 1, 2, 4))
        first = rng.randint(1, 1000 - nodes + 1)
        nodelist = f"{prefix}-{first:04d}" if nodes == 1 else f"{prefix}-[{first:04d}-{first + nodes - 1:04d}]"
        used_gpus = rng.choice((1, 2, 4)) * nodes if gpus else 0
        used_cpus = rng.choice((1, 4, 8, 16)) * nodes
        mem_mb = rng.choice((2048, 8192, 32768)) * nodes
        w = weights.get(part)
        billing = 0 if w is None else max(used_cpus * w.cpu, mem_mb * w.mem_per_gb / 1024,
                                          used_gpus * dict(w.gres).get("gpu", 0.0))
        billing_units = int(billing) if w else used_cpus
        tres = f"billing={billing_units},cpu={used_cpus}," + (f"gres/gpu={used_gpus}," if gpus else "") + \
            f"mem={mem_mb}M,node={nodes}"
        start = START + rng.uniform(-2 * 86400, DAYS * 86400)
        elapsed = int(rng.expovariate(1 / 7200))
        state = "RUNNING" if start + elapsed > until else rng.choice(("COMPLETED", "COMPLETED", "FAILED", "TIMEOUT"))
        lines.append(f"{job}|{user}|{account}|{part}|{nodelist}|{tres}|{elapsed}|{int(start)}|{state}")
        seconds = min(int(start) + elapsed, until) - max(int(start), START)
        if seconds > 0 and w is not None:
            expected[account] = expected.get(account, 0.0) + billing_units * seconds / 36_000_000
    return "\n".join(lines) + "\n", expected


def run_once(path: Path, by: tuple[str, ...]) -> tuple[float, dict[tuple[str, ...], float]]:
    started = time.perf_counter()
    report = aggregate(read_sacct_file(path), Pricing(spec()), Period(START, START + DAYS * 86400), by,
                       source=str(path))
    table = cost_table(report)
    render(table, Format.TABLE, 160)
    render(table, Format.CSV)
    seconds = time.perf_counter() - started
    return seconds, {key: totals.dollars for key, totals in report.groups.items()}


def timed(fn: Callable[[], tuple[float, dict[tuple[str, ...], float]]], runs: int) -> tuple[float, dict]:  # type: ignore[type-arg]
    fn()  # warm-up
    results = [fn() for _ in range(runs)]
    return statistics.median(r[0] for r in results), results[-1][1]


def check(expected: dict[str, float], by_account: dict[tuple[str, ...], float],
          by_user_pool: dict[tuple[str, ...], float]) -> list[str]:
    problems = []
    for account, dollars in expected.items():
        got = by_account.get((account,), 0.0)
        if abs(got - dollars) > 1e-6 * max(1.0, dollars):
            problems.append(f"{account}: ${got:.6f}, the generator says ${dollars:.6f}")
    total = sum(expected.values())
    if abs(sum(by_user_pool.values()) - total) > 1e-6 * max(1.0, total):
        problems.append(f"by user,pool: ${sum(by_user_pool.values()):.4f} in all, by account ${total:.4f}")
    if not problems and not total:
        problems.append("no dollars at all")
    return problems


def process_seconds(path: Path) -> float:
    spec_file = path.with_suffix(".yaml")
    spec_file.write_text(SPEC)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    argv = [sys.executable, "-m", "slurmforge.cli", "cost", str(spec_file), "--sacct-file", str(path), "--format",
            "csv", "--since", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(START)),
            "--until", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(START + DAYS * 86400))]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"slurmforge cost failed ({done.returncode}): {done.stderr.strip()}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RECORDS} records, one run, figures only")
    args = parser.parse_args()
    records = QUICK_RECORDS if args.quick else args.records
    text, expected = fixtures(records)
    with tempfile.TemporaryDirectory(prefix="cost-bench-") as tmp:
        path = Path(tmp) / "sacct.txt"
        path.write_text(text)
        runs = 1 if args.quick else args.runs
        account_s, by_account = timed(lambda: run_once(path, ("account",)), runs)
        user_pool_s, by_user_pool = timed(lambda: run_once(path, ("user", "pool")), runs)
        problems = check(expected, by_account, by_user_pool)
        print(f"{records:,} sacct records ({len(text) / 1e6:.1f} MB), {len(by_account)} accounts, "
              f"${sum(by_account.values()):,.2f} in all")
        print(f"by account:   {account_s:.3f} s (median of {runs})")
        print(f"by user,pool: {user_pool_s:.3f} s ({len(by_user_pool)} groups)")
        if not args.quick:
            print(f"process:      {process_seconds(path):.3f} s (`slurmforge cost --sacct-file ... --format csv`)")
    for problem in problems:
        print(f"WRONG: {problem}")
    slow = not args.quick and max(account_s, user_pool_s) > BUDGET_SECONDS
    if slow:
        print(f"SLOW: more than {BUDGET_SECONDS} s")
    return 1 if problems or slow else 0


if __name__ == "__main__":
    sys.exit(main())
