"""How long Slurm's ResumeProgram call takes: from starting `slurmforge-resume` with a
500-node hostlist and a SLURM_RESUME_FILE (100 jobs) to its exit, as slurmctld would run
it. Two hostlists: a compact range and a worst case where no two nodes are adjacent.
Then the daemon side: picking the spool file up into SQLite.

    .venv/bin/python bench/resume_handoff_bench.py [--runs 20] [--quick]

Exits 1 when the median or the slowest run takes 1 s or more, or when the hand-off is
wrong: a call that does not leave exactly one spool file, or a request in SQLite that does
not name the call's 500 resume nodes. `--quick` (CI: tests/unit/test_bench_quick.py) makes
2 calls per hostlist and checks only the outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurmforge.hostlists import compress, expand
from slurmforge.service import handoff
from slurmforge.service.state import Store

BUDGET_SECONDS = 1.0
NODES = 500
QUICK_RUNS = 2


def program() -> list[str]:
    """The installed console script if there is one (what slurm.conf names), else the
    same entry point through this interpreter."""
    script = Path(sys.executable).parent / "slurmforge-resume"
    if script.exists():
        return [str(script)]
    code = "import sys; from slurmforge.service.handoff import resume_main; sys.exit(resume_main())"
    return [sys.executable, "-c", code]


def resume_file(nodes: list[str], jobs: int = 100) -> str:
    per_job = len(nodes) // jobs
    entries = [{"job_id": 1000 + j, "nodes": compress(nodes[j * per_job:(j + 1) * per_job])} for j in range(jobs)]
    return json.dumps({"jobs": entries, "all_nodes": compress(nodes)})


def time_calls(argv: list[str], hostlist: str, runs: int, spool: Path, resume: Path) -> list[float]:
    env = os.environ | {handoff.SPOOL_ENV: str(spool), "SLURM_RESUME_FILE": str(resume)}
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([*argv, hostlist], env=env, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"resume program failed: {done.stderr}")
    return times


def report(label: str, times: list[float]) -> float:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    print(f"{label:<34} median {statistics.median(times) * 1000:6.1f} ms   p95 {p95 * 1000:6.1f} ms   "
          f"max {max(times) * 1000:6.1f} ms")
    return max(statistics.median(times), max(times))


def outcome_problems(store: Store, added: int, calls: int) -> list[str]:
    """What is wrong with the hand-off, whatever the machine's speed."""
    problems = []
    if added != calls:
        problems.append(f"{calls} call(s) left {added} spool file(s) recorded in SQLite")
    requests = store.open_requests()
    sizes = sorted({len(expand(r.nodes)) for r in requests})
    if sizes != [NODES]:
        problems.append(f"the recorded requests name {sizes} node(s), not {NODES}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS} calls per hostlist, outcome only (CI)")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = QUICK_RUNS
    work = Path(tempfile.mkdtemp(prefix="sf-handoff-"))
    try:
        spool = work / "spool"
        spool.mkdir()
        compact = [f"big-gpu-{i:04d}" for i in range(1, NODES + 1)]
        scattered = [f"big-gpu-{i:04d}" for i in range(1, 2 * NODES, 2)]
        cmd = program()
        print(f"program: {' '.join(cmd)}")
        worst = 0.0
        for label, nodes in (("compact hostlist", compact), ("scattered hostlist", scattered)):
            hostlist = compress(nodes)
            resume = work / f"resume-{label.split()[0]}.json"
            resume.write_text(resume_file(nodes))
            print(f"{label}: {len(nodes)} nodes, argument {len(hostlist)} chars, "
                  f"SLURM_RESUME_FILE {resume.stat().st_size} bytes")
            worst = max(worst, report(f"  {label} -> exit", time_calls(cmd, hostlist, args.runs, spool, resume)))
        files = handoff.pending(spool)
        store = Store(work / "state.db")
        start = time.perf_counter()
        added = store.add_handoffs(item for _, item in files)
        for path, _ in files:
            path.unlink()
        took = time.perf_counter() - start
        print(f"daemon picks up {len(files)} spool files ({NODES} nodes each) into SQLite: {took * 1000:.0f} ms "
              f"({took / max(len(files), 1) * 1000:.1f} ms each)")
        problems = outcome_problems(store, added, 2 * args.runs)
        for problem in problems:
            print(f"WRONG OUTCOME: {problem}")
        fast = args.quick or worst < BUDGET_SECONDS  # --quick: the machine's speed is not judged
        print(f"resume hand-off: worst of median/max {worst * 1000:.0f} ms "
              f"(budget < {BUDGET_SECONDS:.0f} s): {'ok' if fast else 'TOO SLOW'}")
        return 0 if fast and not problems else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
