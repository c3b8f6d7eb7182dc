"""Patch day's numbers on the live local cluster: wall time, per-step time, the longest any
submission waited, jobs requeued (docs/upgrade.md, "Patch day").

The whole upgrade is the user's: the cluster's spec with a new `images.refresh` label (so the
node image is built again from the release's current packages), rolled by `slurmforge upgrade
SPEC --local NAME --yes` while a 2-node job runs across it and a job is submitted from the
login node every few seconds.

    sudo .venv/bin/python bench/upgrade_bench.py --cluster dev [--requeue]   # the whole upgrade under load
    sudo .venv/bin/python bench/upgrade_bench.py --quick --cluster dev       # the plan only (changes nothing)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SUBMIT_EVERY = 3.0


def slurmforge(*argv: str, timeout: float = 7200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmforge.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, check=False)


def login(name: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", "-u", "alice", "-w", "/home/alice", name, "bash", "-lc", command],
                          capture_output=True, text=True, timeout=600, check=False)


def submit_loop(login_node: str, stop: threading.Event, waits: list[float], ids: list[str],
                refused: list[str]) -> None:
    while not stop.is_set():
        began = time.monotonic()
        done = login(login_node, "sbatch --parsable -A research -t 5 --wrap 'sleep 5'")
        waits.append(time.monotonic() - began)
        (ids if done.returncode == 0 else refused).append((done.stdout or done.stderr).strip().split(";")[0])
        stop.wait(SUBMIT_EVERY)


def refreshed_spec(cluster: str, out: Path) -> Path:
    from slurmforge.inventory import SPEC_COPY
    from slurmforge.state_dirs import inventories_root

    data = yaml.safe_load((inventories_root() / cluster / SPEC_COPY).read_text())
    data["images"] = {**(data.get("images") or {}), "refresh": f"bench-{time.strftime('%Y%m%dT%H%M%S')}"}
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the plan only, against the live cluster")
    parser.add_argument("--cluster", default="dev")
    parser.add_argument("--requeue", action="store_true", help="upgrade with --requeue")
    args = parser.parse_args()
    began = time.monotonic()
    if args.quick:
        done = slurmforge("upgrade", "--local", args.cluster, "--plan", timeout=3600)
        print(done.stdout + done.stderr)
        print(f"plan: {time.monotonic() - began:.1f} s", file=sys.stderr)
        return done.returncode
    node = f"{args.cluster}-login"
    spanning = login(node, "sbatch --parsable -A research -N 2 -t 30 --wrap 'srun sleep 600'").stdout.strip()
    stop, waits, ids, refused = threading.Event(), [], [], []  # type: ignore[var-annotated]
    loader = threading.Thread(target=submit_loop, args=(node, stop, waits, ids, refused), daemon=True)
    with tempfile.TemporaryDirectory(prefix="slurmforge-upgrade-bench-") as tmp:
        spec = refreshed_spec(args.cluster, Path(tmp) / "cluster.yaml")
        loader.start()
        try:
            done = slurmforge("upgrade", str(spec), "--local", args.cluster, "--yes",
                              *(["--requeue"] if args.requeue else []))
        finally:
            stop.set()
            loader.join(timeout=600)
    wall = time.monotonic() - began
    print(done.stdout + done.stderr)
    jobs = ",".join([spanning, *ids])
    sacct = subprocess.run(["podman", "exec", f"{args.cluster}-controller", "sacct", "-X", "-n", "-P", "-j", jobs,
                            "--format=JobID,State"], capture_output=True, text=True, check=False).stdout
    states = dict(line.split("|", 1) for line in sacct.split() if "|" in line)
    lost = {j: s for j, s in states.items() if s not in ("COMPLETED", "RUNNING", "PENDING", "REQUEUED")}
    steps = re.findall(r"^([a-z ]+:\S+): (\d+) s$", done.stdout, re.M)
    requeued = re.search(r"requeued job\(s\) ([\d, ]+)", done.stdout)
    print(f"wall time {wall:.0f} s; submissions {len(waits)}, refused {len(refused)}, longest wait "
          f"{max(waits, default=0):.1f} s; jobs requeued {len(requeued[1].split(',')) if requeued else 0}; "
          f"jobs in sacct {len(states)}, lost {len(lost)} {lost or ''}")
    for key, seconds in steps:
        print(f"  {key}: {seconds} s")
    return done.returncode or int(bool(refused or lost))


if __name__ == "__main__":
    sys.exit(main())
