"""Patch day's numbers on the live local cluster: wall time, per-step time, the longest any
submission waited, jobs requeued (docs/upgrade.md, "Patch day").

    sudo .venv/bin/python bench/upgrade_bench.py --cluster dev [--requeue]   # the whole upgrade under load
    sudo .venv/bin/python bench/upgrade_bench.py --quick --cluster dev       # the plan only (changes nothing)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBMIT_EVERY = 3.0


def slurmforge(*argv: str, timeout: float = 7200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmforge.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, check=False)


def submit_loop(login: str, stop: threading.Event, waits: list[float]) -> None:
    while not stop.is_set():
        began = time.monotonic()
        subprocess.run(["podman", "exec", "-u", "alice", login, "sbatch", "-A", "research", "-t", "5", "--wrap",
                        "sleep 5"], capture_output=True, text=True, timeout=600, check=False)
        waits.append(time.monotonic() - began)
        stop.wait(SUBMIT_EVERY)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the plan only, against the live cluster")
    parser.add_argument("--cluster", default="dev")
    parser.add_argument("--requeue", action="store_true", help="upgrade with --requeue")
    args = parser.parse_args()
    began = time.monotonic()
    if args.quick:
        done = slurmforge("upgrade", "--local", args.cluster, "--plan", timeout=3600)
        print(done.stdout)
        print(f"plan: {time.monotonic() - began:.1f} s", file=sys.stderr)
        return done.returncode
    stop, waits = threading.Event(), []  # type: ignore[var-annotated]
    loader = threading.Thread(target=submit_loop, args=(f"{args.cluster}-login", stop, waits), daemon=True)
    loader.start()
    try:
        done = slurmforge("upgrade", "--local", args.cluster, "--yes", *(["--requeue"] if args.requeue else []))
    finally:
        stop.set()
        loader.join(timeout=600)
    print(done.stdout)
    steps = re.findall(r"^(\S+): (\d+) s$", done.stdout, re.M)
    requeued = re.search(r"requeued job\(s\) ([\d, ]+)", done.stdout)
    print(f"wall time {time.monotonic() - began:.0f} s; longest submission wait {max(waits, default=0):.1f} s; "
          f"jobs requeued {len(requeued[1].split(',')) if requeued else 0}")
    for key, seconds in steps:
        print(f"  {key}: {seconds} s")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
