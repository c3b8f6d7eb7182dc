"""A job submission's round trip over Slurm's REST API, on the running local cluster.

As a user on the login node (a token from `scontrol token`), held jobs are submitted with
`POST /slurm/v0.0.42/job/submit` to the login node's slurmrestd, one after the other, each
timed from the request to its answer (the job id); for comparison, as many with
`sbatch --hold` on the same node. Both in turn, after a warm-up. Then every job is
cancelled over HTTP (`DELETE /slurm/v0.0.42/job/<id>`) and none may be left pending.

    .venv/bin/python bench/restd_bench.py [--cluster rest] [--jobs 20] [--quick]

Prints the median and p90 of each. Exits 1 when a submission or cancellation fails, a job is
left pending, or the HTTP median is over 100 ms (a few ms on the local cluster); 2 when the
cluster cannot be used. `--quick` (tests/integration/test_bench_quick.py): 5 of each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.errors import SlurmforgeError  # noqa: E402
from tests.harness.faults import target  # noqa: E402
from tests.harness.live import LiveCluster  # noqa: E402

GOAL_MS = 100.0
QUICK_JOBS = 5
WARMUP = 2
API = "slurm/v0.0.42"

# run by the node image's python3 on the login node as the user: times of each HTTP submit
# and of each sbatch (in turn), the job ids, then the cancellations' HTTP statuses, as JSON
TIMER = r"""
import json, os, pwd, subprocess, sys, time, urllib.request
port, jobs, warmup, partition, api = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
user = pwd.getpwuid(os.getuid()).pw_name
token = subprocess.run(["scontrol", "token", "lifespan=600"], capture_output=True, text=True,
                       check=True).stdout.strip().split("=", 1)[1]
base = f"http://localhost:{port}/{api}"
headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token, "Content-Type": "application/json"}
body = json.dumps({"job": {"name": "restd-bench", "partition": partition, "hold": True,
                           "current_working_directory": os.environ["HOME"], "environment": ["PATH=/usr/bin:/bin"],
                           "script": "#!/bin/bash\ntrue"}}).encode()
def http(method, path, data=None):
    request = urllib.request.Request(base + path, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=60) as answer:
        return answer.status, json.load(answer)
def over_http():
    start = time.perf_counter()
    status, answer = http("POST", "/job/submit", body)
    took = time.perf_counter() - start
    if status != 200 or not answer.get("job_id") or answer.get("errors"):
        sys.exit(f"submit over HTTP failed: {status} {answer.get('errors')}")
    return took, str(answer["job_id"])
def with_sbatch():
    start = time.perf_counter()
    done = subprocess.run(["sbatch", "--hold", "--parsable", "-p", partition, "-J", "restd-bench", "--wrap", "true"],
                          capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"sbatch failed: {done.stderr}")
    return took, done.stdout.strip().split(";")[0]
ids, times = [], {"http": [], "sbatch": []}
for i in range(warmup + jobs):
    for kind, submit in (("http", over_http), ("sbatch", with_sbatch))[:: 1 if i % 2 == 0 else -1]:
        took, job = submit()
        ids.append(job)
        if i >= warmup:
            times[kind].append(took)
cancelled = {job: http("DELETE", f"/job/{job}")[0] for job in ids}
print(json.dumps({"times": times, "ids": ids, "cancelled": cancelled}))
"""


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def run(live: LiveCluster, port: int, partition: str, jobs: int) -> int:
    argv = ["python3", "-c", TIMER, str(port), str(jobs), str(WARMUP), partition, API]
    out = live.podman.exec(live.login, argv, user=live.user, workdir=f"/home/{live.user}", timeout=600).stdout
    result = json.loads(out.strip().splitlines()[-1])
    ids, cancelled = result["ids"], result["cancelled"]
    ms = {kind: [t * 1000 for t in values] for kind, values in result["times"].items()}
    print(f"jobs submitted: {len(ids)} ({jobs} timed of each kind after {WARMUP} warm-up rounds), "
          f"user {live.user}, partition {partition}")
    for kind, label in (("http", "POST /job/submit over HTTP"), ("sbatch", "sbatch --hold, same node")):
        print(f"{label:<30} median {statistics.median(ms[kind]):7.1f} ms   p90 {p90(ms[kind]):7.1f} ms")
    failed = [job for job, status in cancelled.items() if status != 200]
    # squeue lists a cancelled job a while (state CA): only pending or running ones are left
    left = live.on(live.login, f"squeue -h -t PD,R,CG -j {','.join(ids)} -o %i || true").split()
    median = statistics.median(ms["http"])
    ok_median = median <= GOAL_MS
    print(f"cancelled over HTTP: {len(ids) - len(failed)} of {len(ids)}; still pending or running: {len(left)}")
    print(f"HTTP submit median {median:.1f} ms (goal <= {GOAL_MS:.0f} ms): {'ok' if ok_median else 'MISSED'}")
    return 0 if ok_median and not failed and not left else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="the local cluster (default: the only one running)")
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--partition", help="default: the spec's default partition")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS} of each")
    args = parser.parse_args()
    try:
        spec, _, live = target(args.cluster, None)
        partition = args.partition or next(p.name for p in spec.partitions if p.default)
        return run(live, spec.rest_api.port, partition, QUICK_JOBS if args.quick else args.jobs)
    except SlurmforgeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
