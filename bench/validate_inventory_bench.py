"""How long `slurmforge validate --inventory DIR` takes on a running cluster: the whole
live-cluster suite as a user runs it (`python -m slurmforge.cli validate --inventory DIR`,
a process of its own), wall time, the median of the runs, with the machine's load average
beside it (on a shared machine the load, not the suite, can be most of the time).

    .venv/bin/python bench/validate_inventory_bench.py --inventory /var/lib/slurmforge/inventories/dev
        [--runs 5] [--quick]

Each run reports its wall time, its exit code, and CPU seconds of the process and its
children (what the load of other processes does not change). Exits 1 when a run fails (the
cluster is not healthy: the failing checks' lines are printed) or, without --quick, when
the median exceeds 15 s. `--quick` (CI: tests/integration/test_bench_quick.py) runs once and
checks only the outcome: the suite passes and its CLI says so.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BUDGET_SECONDS = 15.0
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    wall: float
    cpu: float
    rc: int
    output: str
    load: float


def one_run(inventory: Path) -> Run:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "slurmforge.cli", "validate", "--inventory", str(inventory)],
                          capture_output=True, text=True, cwd=ROOT, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu, proc.returncode, (proc.stdout + proc.stderr).strip(), os.getloadavg()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", type=Path, required=True, help="the running cluster's inventory")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one run, outcome only (CI)")
    args = parser.parse_args(argv)
    runs = []
    for i in range(1 if args.quick else args.runs):
        load = os.getloadavg()[0]
        run = one_run(args.inventory)
        runs.append(run)
        print(f"run {i + 1}: {run.wall:6.2f} s wall, {run.cpu:5.2f} s CPU, exit {run.rc}, "
              f"load {load:.1f} -> {run.load:.1f} (on {os.cpu_count()} CPUs)")
    failed = [r for r in runs if r.rc != 0 or "passed every check" not in r.output]
    for run in failed[:1]:
        print(run.output)
    median = statistics.median(r.wall for r in runs)
    print(f"validate --inventory {args.inventory}: median {median:.2f} s wall of {len(runs)} run(s), "
          f"best {min(r.wall for r in runs):.2f} s, budget {BUDGET_SECONDS:.0f} s")
    fast = args.quick or median <= BUDGET_SECONDS  # --quick: the machine's speed is not judged
    return 0 if fast and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
