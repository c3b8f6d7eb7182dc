"""How long `slurmforge` takes to answer, start-up included: each case is the real command
in a new process, as a person types it.

Cases, each at most 0.3 s wall (the median of the runs):

- `slurmforge --help`;
- `slurmforge validate examples/local.yaml` (the spec's models, YAML, every check);
- `slurmforge modules --help` and `slurmforge cost --help` (a sub-app's and a command's help).

Reported per case: wall seconds (median and fastest of the runs), CPU seconds (user +
system, the median: what the load of other processes does not change) and how many
modules the process imported; and the bare interpreter's start, for scale. Bytecode is
cached as an installed package has it (pip compiles at install): one warm-up run first,
into a pycache directory of the bench's own (PYTHONPYCACHEPREFIX), so the tree stays clean.

    .venv/bin/python bench/startup_bench.py [--quick] [--runs N]

`--quick` (CI: tests/unit/test_bench_quick.py) runs each case 3 times and checks only
what does not depend on the machine: every command succeeds and says what it should.
Exits 1 when a case misses its budget (or, with --quick, its outcome).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 0.3


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    says: str
    """What the command's stdout must hold."""


CASES = (
    Case("slurmforge --help", ("--help",), "validate"),
    Case("slurmforge validate examples/local.yaml", ("validate", "examples/local.yaml"), "valid - cluster 'dev'"),
    Case("slurmforge modules --help", ("modules", "--help"), "publish"),
    Case("slurmforge cost --help", ("cost", "--help"), "--format"),
)
PROBE = ("import sys, runpy, atexit, os\n"
         "atexit.register(lambda: os.write(int(os.environ['SF_BENCH_FD']), str(len(sys.modules)).encode()))\n"
         "sys.argv = ['slurmforge', *sys.argv[1:]]\n"
         "runpy.run_module('slurmforge.cli', run_name='__main__')\n")


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    modules: int
    stdout: str


def run(argv: list[str], env: dict[str, str], count_modules: bool = False) -> Run:
    """One process: wall and CPU seconds; with count_modules, run through a probe that
    reports how many modules it imported (a little slower: not timed)."""
    read, write = os.pipe() if count_modules else (-1, -1)
    if count_modules:
        argv = [sys.executable, "-c", PROBE, *argv[3:]]
        env = {**env, "SF_BENCH_FD": str(write)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False,
                          pass_fds=(write,) if count_modules else ())
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    modules = 0
    if count_modules:
        os.close(write)
        modules = int(os.read(read, 64) or b"0")
        os.close(read)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu, modules, done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 runs each; check outcomes, not times")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    failed = False
    results = {}
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as pycache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env |= {"PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": pycache, "COLUMNS": "80"}
        bare = [run([sys.executable, "-c", "pass"], env) for _ in range(runs)]
        print(f"python -c pass: {statistics.median(r.wall for r in bare):.3f} s wall (median of {runs})")
        for case in CASES:
            argv = [sys.executable, "-m", "slurmforge.cli", *case.argv]
            run(argv, env)  # warm-up: bytecode into the bench's pycache
            timed = [run(argv, env) for _ in range(runs)]
            modules = run(argv, env, count_modules=True).modules
            wall = statistics.median(r.wall for r in timed)
            cpu = statistics.median(r.cpu for r in timed)
            said = all(case.says in r.stdout for r in timed)
            over = not args.quick and wall > BUDGET
            failed |= over or not said
            results[case.name] = {"wall_median": round(wall, 4), "wall_min": round(min(r.wall for r in timed), 4),
                                  "cpu_median": round(cpu, 4), "modules": modules}
            verdict = "" if not (over or not said) else (
                f"  OVER the budget of {BUDGET} s" if over else f"  did not say {case.says!r}")
            print(f"{case.name:42} {wall:.3f} s wall (fastest {min(r.wall for r in timed):.3f}), "
                  f"{cpu:.3f} s CPU, {modules} modules{verdict}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
