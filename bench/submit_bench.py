"""What default-pool routing costs a submission: `sbatch` latency with and without the
job_submit/lua script, against the node image's own slurmctld.

Two slurmctld run side by side in one judge container (tests/judge.py) on the config
rendered from examples/local.yaml: one as rendered (JobSubmitPlugins=lua and
job_submit.lua), one without the JobSubmitPlugins line. Inside the container, a GPU job
that names no partition (`sbatch --hold --gres=gpu:1 --wrap true`, the path through the
whole script: it reads every TRES field and sets the partition) is submitted to each in
turn, alternating which goes first, after a warm-up:

    client   sbatch's wall time (fork, munge credential, RPC, answer), median and p90
    server   slurmctld's own time for the submit RPC (`usec=` in its log), median

Then the outcome: every routed job is in ml-gpu, every other in ml-cpu (Slurm's default).

    .venv/bin/python bench/submit_bench.py [--jobs 200] [--quick]

Exits 1 when routing adds more than 5 ms to the median client time, or when
the outcome is wrong. `--quick` submits 20 jobs to each and checks only the outcome (CI:
tests/slurm/test_bench_quick.py).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.render import render_all  # noqa: E402
from slurmforge.spec import load_spec  # noqa: E402
from tests.judge import Judge, node_image  # noqa: E402
from tests.slurm.daemons import RunDir, running_slurmctld  # noqa: E402

BUDGET_MS = 5.0
QUICK_JOBS = 20
WARMUP = 5
SUBMIT = ["sbatch", "--hold", "--parsable", "--gres=gpu:1", "--wrap", "true"]

# run by the node image's python3 inside the judge: wall time of each sbatch, the two
# controllers in turn (who goes first alternates), as JSON
TIMER = r"""
import json, os, subprocess, sys, time
confs, jobs, warmup, submit = sys.argv[1:3], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
def once(conf):
    start = time.perf_counter()
    done = subprocess.run(submit, env={**os.environ, "SLURM_CONF": conf}, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"sbatch failed: {done.stderr}")
    return took, done.stdout.strip()
for i in range(warmup):
    for conf in confs:
        once(conf)
times = {conf: [] for conf in confs}
ids = {conf: [] for conf in confs}
for i in range(jobs):
    for conf in (confs if i % 2 == 0 else confs[::-1]):
        took, job = once(conf)
        times[conf].append(took)
        ids[conf].append(job)
print(json.dumps({"times": times, "ids": ids}))
"""


def without_plugin(slurm_conf: str) -> str:
    return "".join(line for line in slurm_conf.splitlines(keepends=True) if not line.startswith("JobSubmitPlugins="))


def rpc_usec(run: RunDir, jobs: set[str]) -> list[int]:
    """slurmctld's time for each of these jobs' submit RPC (its log: `JobId=N ... usec=U`)."""
    found = re.finditer(r"_slurm_rpc_submit_batch_job: JobId=(\d+) .*usec=(\d+)", run.ctld_log.read_text())
    return [int(m[2]) for m in found if m[1] in jobs]


def partitions(judge: Judge, run: RunDir) -> dict[str, str]:
    out = judge.run(["squeue", "-h", "-o", "%i %P"], env={"SLURM_CONF": str(run.conf)}, check=True).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200, help="submissions to each slurmctld")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS} jobs; check the outcome only")
    args = parser.parse_args()
    jobs = QUICK_JOBS if args.quick else args.jobs

    spec = load_spec(ROOT / "examples" / "local.yaml")
    rendered = render_all(spec, source="local.yaml")
    plain = rendered | {"slurm.conf": without_plugin(rendered["slurm.conf"])}
    judge = Judge(node_image(), prefix="slurmforge-bench")
    try:
        with ExitStack() as stack:
            _, routed = stack.enter_context(running_slurmctld(spec, rendered, judge))
            _, default = stack.enter_context(running_slurmctld(spec, plain, judge))
            script = routed.root / "timer.py"
            script.write_text(TIMER)
            argv = ["python3", str(script), str(routed.conf), str(default.conf), str(jobs), str(WARMUP), *SUBMIT]
            answer = json.loads(judge.run(argv, timeout=60 + jobs, check=True).stdout)
            where = {str(routed.conf): partitions(judge, routed), str(default.conf): partitions(judge, default)}
            usec = {str(r.conf): rpc_usec(r, set(answer["ids"][str(r.conf)])) for r in (routed, default)}
    finally:
        judge.remove()

    rows = {"with lua": str(routed.conf), "without": str(default.conf)}
    print(f"sbatch --hold --gres=gpu:1 (no partition), {jobs} submissions to each slurmctld, alternating")
    print(f"{'':10}{'client median':>15}{'client p90':>12}{'server median':>15}")
    medians = {}
    for label, conf in rows.items():
        ms = [t * 1000 for t in answer["times"][conf]]
        medians[label] = statistics.median(ms)
        server = statistics.median(usec[conf]) / 1000 if usec[conf] else float("nan")
        print(f"{label:10}{medians[label]:>12.1f} ms{p90(ms):>9.1f} ms{server:>12.2f} ms")
    added = medians["with lua"] - medians["without"]
    print(f"routing adds {added:+.1f} ms to the median submission (budget {BUDGET_MS:.0f} ms)")

    wrong = [f"{job} in {where[rows['with lua']].get(job)}" for job in answer["ids"][rows["with lua"]]
             if where[rows["with lua"]].get(job) != "ml-gpu"]
    wrong += [f"{job} (no plugin) in {where[rows['without']].get(job)}" for job in answer["ids"][rows["without"]]
              if where[rows["without"]].get(job) != "ml-cpu"]
    if wrong:
        print(f"FAIL: {len(wrong)} job(s) not where they belong: {', '.join(wrong[:5])}")
        return 1
    print(f"outcome: {jobs} routed jobs in ml-gpu, {jobs} others in ml-cpu")
    fast = args.quick or added <= BUDGET_MS  # --quick: the machine's speed is not judged
    if not fast:
        print(f"FAIL: routing adds {added:.1f} ms, more than {BUDGET_MS:.0f} ms")
    return 0 if fast else 1


if __name__ == "__main__":
    sys.exit(main())
