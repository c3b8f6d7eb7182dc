"""Secret rotation on the live local cluster, with jobs running and submissions going on:

- `slurmforge rotate munge-key --local`: its wall time, and the seconds during which a
  new submission fails - alice submits (`sbatch --wrap true`) in a loop on the login node
  the whole time, every SUBMIT_EVERY s; the window is from the first failed submission to the
  next one that works. Budget 5 s (the worst run).
- `slurmforge rotate db-password --local`: its wall time, and the same window.

Each run has a job running across it (a 90 s sleep); afterwards it must still run, and every
submission that was accepted must show in sacct (none lost). Both secrets stay rotated: a
run leaves the cluster working, with new secrets.

    .venv/bin/python bench/rotate_bench.py [--cluster NAME] [--runs 3] [--quick] [--json]

Exits 1 when a job is lost or (not --quick) the worst failing window is over its budget.
`--quick` (CI: tests/integration/test_bench_quick.py): one run of the database password (the
munge key's rotation with a job across it is tests/integration/test_day_two_live.py's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.local.manage import find_cluster  # noqa: E402

SECRETS = ("munge-key", "db-password")
QUICK_SECRETS = ("db-password",)
"""The quick mode's: the munge key's rotation under a running job is
tests/integration/test_day_two_live.py's, and both take the same path here."""
BUDGET = 5.0
SUBMIT_EVERY = 0.2
USER = "alice"
LOG = "/tmp/rotate-bench-submits"
STOP = "/tmp/rotate-bench-stop"
# one line per submission: start (epoch s, ns precision) rc jobid
LOOP = f"""rm -f {LOG} {STOP}
while [ ! -e {STOP} ]; do
    t=$(date +%s.%N)
    out=$(sbatch --parsable -o /dev/null -t 1 --wrap true 2>&1) && rc=0 || rc=$?
    printf '%s %s %s\\n' "$t" "$rc" "$(echo "${{out%%;*}}" | head -n 1 | tr -d ' ')" >> {LOG}
    sleep {SUBMIT_EVERY}
done
"""


def podman(container: str, *argv: str, user: str | None = None, check: bool = True) -> str:
    cmd = ["podman", "exec", *(["-u", user] if user else []), container, *argv]
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120).stdout


def failing_window(lines: list[str]) -> tuple[float, int, int]:
    """(longest span from a failed submission to the next accepted one, failures, accepted)."""
    window, first_fail, fails, ok = 0.0, None, 0, 0
    for line in lines:
        parts = line.split()
        if len(parts) < 2:
            continue
        t, rc = float(parts[0]), parts[1]
        if rc != "0":
            fails += 1
            first_fail = t if first_fail is None else first_fail
        else:
            ok += 1
            if first_fail is not None:
                window = max(window, t - first_fail)
                first_fail = None
    return window, fails, ok


def lost_jobs(controller: str, ids: list[str], deadline: float = 120) -> list[str]:
    """Accepted jobs sacct does not show as finished within `deadline` s."""
    end = time.monotonic() + deadline
    missing = ids
    while True:
        out = podman(controller, "sacct", "-n", "-X", "-P", "-a", "--format=JobID,State", "-j", ",".join(ids),
                     check=False)
        done = {ln.split("|")[0] for ln in out.splitlines() if "|" in ln and ln.split("|")[1] == "COMPLETED"}
        missing = [i for i in ids if i not in done]
        if not missing or time.monotonic() > end:
            return missing
        time.sleep(3)


def one_run(cluster: str, secret: str) -> dict[str, Any]:
    login, controller = f"{cluster}-login", f"{cluster}-controller"
    long_job = podman(login, "sbatch", "--parsable", "-o", "/dev/null", "-t", "5", "--wrap", "sleep 90",
                      user=USER).strip().split(";")[0]
    for _ in range(60):
        if podman(controller, "squeue", "-h", "-j", long_job, "-o", "%T", check=False).strip() == "RUNNING":
            break
        time.sleep(1)
    loop = subprocess.Popen(["podman", "exec", "-u", USER, login, "bash", "-c", LOOP],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(3)  # submissions before the rotation
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "slurmforge.cli", "rotate", secret, "--yes", "--local", "--cluster",
                           cluster],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          check=False)
    wall = time.monotonic() - start
    time.sleep(3)  # submissions after it
    podman(login, "touch", STOP, user=USER)
    loop.wait(timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"rotate {secret} failed: {proc.stdout}{proc.stderr}")
    lines = podman(login, "cat", LOG).splitlines()
    window, fails, ok = failing_window(lines)
    ids = [ln.split()[2] for ln in lines if len(ln.split()) > 2 and ln.split()[1] == "0"]
    state = podman(controller, "squeue", "-h", "-j", long_job, "-o", "%T", check=False).strip()
    podman(controller, "scancel", long_job, check=False)
    lost = lost_jobs(controller, ids)
    return {"secret": secret, "wall_s": round(wall, 2), "failing_s": round(window, 2), "failed_submits": fails,
            "accepted": ok, "lost": lost, "long_job": state, "said": proc.stdout.strip()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster", default=None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    spec, _ = find_cluster(args.cluster)
    runs = 1 if args.quick else args.runs
    secrets = QUICK_SECRETS if args.quick else SECRETS
    results = [one_run(spec.name, secret) for _ in range(runs) for secret in secrets]
    bad = False
    for secret in secrets:
        mine = [r for r in results if r["secret"] == secret]
        walls, windows = [r["wall_s"] for r in mine], [r["failing_s"] for r in mine]
        print(f"{secret}: wall {statistics.median(walls):.1f} s median ({min(walls):.1f}-{max(walls):.1f}), "
              f"failing submissions {max(windows):.1f} s worst ({', '.join(f'{w:.1f}' for w in windows)}); "
              f"{sum(r['accepted'] for r in mine)} accepted, {sum(len(r['lost']) for r in mine)} lost")
        for r in mine:
            if r["lost"] or r["long_job"] != "RUNNING":
                print(f"  LOST: {r}")
                bad = True
        if not args.quick and max(windows) > BUDGET:
            print(f"  over budget: {max(windows):.1f} s > {BUDGET} s")
            bad = True
    if args.json:
        print(json.dumps(results))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
