"""Cold start on the running local cluster (`slurmforge up --local examples/local.yaml`):

1. resume hand-off: the installed `slurmforge-resume` run in the controller as slurmctld
   runs it (user slurm, a SLURM_RESUME_FILE), from start to return;
2. powered-down node -> job running: sbatch to a powered-down node until the job is
   RUNNING (past CONFIGURING), once per powered-down node (up to --runs). A powered-down
   node has no container: the service makes a fresh one from the node image, which joins
   with the join program at boot. Each run also prints the join share the service's
   `joined` event gives (the machine's launch -> its slurmd started, Slurm's whole seconds);
3. capacity failover: with the first link told to fail, from the failed launch to the
   launch on the fallback link (the service's events) and sbatch -> RUNNING.

    .venv/bin/python bench/coldstart_bench.py [--cluster dev] [--runs 3] [--quick]

Nodes stay up after a run until the pool's idle time passes; a node that is not powered
down is skipped (the bench waits up to --wait seconds for one).

`--quick` (tests/integration/test_bench_quick.py, well under a minute): 3 hand-offs and one
cold start (no capacity failover), then the node is powered down again (`scontrol update
state=power_down`, awaited until Slurm shows it powered down and its container gone),
so the cluster is left as it was. Exits 1 when no node is powered down within --wait
(default 60 s with --quick), the service reports no join for the node's new machine, or a
step fails.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.harness

from slurmforge.contract import FAIL_POOLS_FILE  # noqa: E402
from slurmforge.errors import SlurmforgeError  # noqa: E402
from slurmforge.hosts import HostRole, controller_name  # noqa: E402
from slurmforge.local.manage import find_cluster  # noqa: E402
from slurmforge.render import RESUME_PROGRAM  # noqa: E402
from slurmforge.service.main import DEFAULT_PORT  # noqa: E402
from tests.harness.live import LiveCluster, node_state_command  # noqa: E402

FAIL_POOLS = FAIL_POOLS_FILE
QUICK_HANDOFFS = 3
POWER_DOWN_WAIT = 120
JOIN_EVENT_WAIT = 25
"""The service reports a join in the loop after the node registered (every 10 s, or at once
on a hand-off)."""
JOIN_SHARE = re.compile(r"machine started -> slurmd started ([0-9.]+) s")
"""Slurm's power-save thread, the service's loop (10 s) and SuspendTimeout (20 s locally)."""
HANDOFF_SCRIPT = (
    "d=$(mktemp -d) && chown slurm $d && echo '{\"jobs\":[{\"job_id\":1,\"nodes\":\"%s\"}],\"all_nodes\":\"%s\"}'"
    " > $d/resume.json && for i in $(seq %d); do s=$(date +%%s.%%N); "
    "runuser -u slurm -- env SLURMFORGE_SPOOL=$d SLURM_RESUME_FILE=$d/resume.json %s %s; "
    "e=$(date +%%s.%%N); echo $s $e; done; rm -rf $d"
)


class Bench:
    def __init__(self, cluster: str | None) -> None:
        self.spec, hosts = find_cluster(cluster)
        self.ctl = controller_name(self.spec)
        self.login = next(h.name for h in hosts if h.role is HostRole.LOGIN)
        address = next(h.address for h in hosts if h.role is HostRole.CONTROLLER)
        self.url = f"http://{address}:{DEFAULT_PORT}/pools.json"
        self.user = self.spec.users[0].name
        self.dynamic: dict[str, str] = {h.name: h.pool or "" for h in hosts if h.dynamic}
        self.live = LiveCluster.of(self.spec, hosts)

    def sh(self, node: str, command: str, user: str | None = None, timeout: int = 60) -> str:
        argv = ["podman", "exec", *(["-u", user, "-w", f"/home/{user}"] if user else []), node,
                "timeout", str(timeout), "bash", "-c", command]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 15)
        if res.returncode != 0:
            raise SystemExit(f"{command[:60]} on {node}: {(res.stderr or res.stdout).strip()}")
        return res.stdout

    def state(self, node: str) -> str:
        return self.sh(self.ctl, node_state_command(node)).strip()

    def job_state(self, job: str) -> str:
        return self.sh(self.ctl, f"squeue -h -j {job} -o %T; sacct -n -X -P -j {job} -o State | head -1").strip()

    def events(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.url, timeout=10) as res:
            return list(json.loads(res.read())["events"])

    def handoff(self, runs: int) -> list[float]:
        node = next(iter(self.dynamic))
        out = self.sh(self.ctl, HANDOFF_SCRIPT % (node, node, runs, RESUME_PROGRAM, node))
        return [float(e) - float(s) for s, e in (line.split() for line in out.splitlines() if line.strip())]

    def powered_down(self, pools: set[str], wait: float) -> str | None:
        deadline = time.monotonic() + wait
        while True:
            for node, pool in sorted(self.dynamic.items()):
                if pool in pools and self.state(node).endswith("~"):
                    return node
            if time.monotonic() > deadline:
                return None
            time.sleep(2)

    def cold_start(self, node: str) -> tuple[float, str]:
        """sbatch -> RUNNING, polled in the controller every 50 ms; the seconds and the job."""
        started = time.monotonic()
        job = self.sh(self.login, f"sbatch --parsable -w {node} -o /dev/null --wrap 'sleep 1'",
                      user=self.user).strip().split(";")[0]
        self.sh(self.ctl, f"until squeue -h -j {job} -o %T | grep -qx RUNNING || "
                          f"sacct -n -X -P -j {job} -o State | grep -q COMPLETED; do sleep 0.05; done",
                timeout=120)
        return time.monotonic() - started, job

    def join_share(self, node: str, since: float) -> float | None:
        """The join share of `node`'s machine launched after `since` (wall clock), from the
        service's `joined` event; None when there is none within JOIN_EVENT_WAIT."""
        deadline = time.monotonic() + JOIN_EVENT_WAIT
        while True:
            for event in self.events():
                found = JOIN_SHARE.search(event["detail"])
                if event["kind"] == "joined" and event["at"] >= since and event["detail"].startswith(f"{node} ") \
                        and found:
                    return float(found[1])
            if time.monotonic() > deadline:
                return None
            time.sleep(1)

    def power_down(self, node: str, job: str) -> None:
        """The node back in power save, as before the cold start: its job ended first."""
        self.sh(self.ctl, f"scancel {job} 2>/dev/null; until sacct -n -X -P -j {job} -o State | "
                          "grep -qE 'COMPLETED|CANCELLED|FAILED'; do sleep 0.5; done", timeout=60)
        self.live.power_down(node, POWER_DOWN_WAIT)


def quick(bench: Bench, wait: float) -> int:
    """A few hand-offs and one cold start; the node is powered down again."""
    hand = bench.handoff(QUICK_HANDOFFS)
    print(f"resume hand-off ({len(hand)} runs): median {statistics.median(hand):.3f} s, max {max(hand):.3f} s")
    node = bench.powered_down(set(bench.dynamic.values()), wait)
    if node is None:
        print(f"coldstart_bench --quick: no powered-down node within {wait:.0f} s", file=sys.stderr)
        return 1
    since = time.time()
    seconds, job = bench.cold_start(node)
    print(f"{node} powered down -> job {job} RUNNING in {seconds:.1f} s")
    share = bench.join_share(node, since)
    print(f"{node} join share: {_seconds(share)}")
    started = time.monotonic()
    bench.power_down(node, job)
    print(f"{node} powered down again in {time.monotonic() - started:.1f} s")
    return 0 if len(hand) == QUICK_HANDOFFS and share is not None else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--wait", type=float, help="seconds to wait for a powered-down node (240; --quick 60)")
    parser.add_argument("--quick", action="store_true", help="3 hand-offs, one cold start, the node powered down again")
    args = parser.parse_args(argv)
    try:
        bench = Bench(args.cluster)
    except SlurmforgeError as exc:
        print(f"coldstart_bench: {exc}", file=sys.stderr)
        return 2
    if args.quick:
        try:
            return quick(bench, args.wait or 60)
        except SlurmforgeError as exc:
            print(f"coldstart_bench: {exc}", file=sys.stderr)
            return 1
    args.wait = args.wait or 240
    hand = bench.handoff(20)
    print(f"resume hand-off (slurmforge-resume as user slurm, 20 runs): median {statistics.median(hand):.3f} s, "
          f"max {max(hand):.3f} s")

    fallback_pools = {p.name for p in bench.spec.pools if p.fallback}
    node = bench.powered_down(fallback_pools, args.wait)
    if node is None:
        print("capacity failover: no powered-down node in a pool with a fallback; skipped")
    else:
        pool = bench.dynamic[node]
        bench.sh(bench.ctl, f"echo {pool} > {FAIL_POOLS}")
        try:
            since = time.time()
            seconds, _ = bench.cold_start(node)
        finally:
            bench.sh(bench.ctl, f"rm -f {FAIL_POOLS}")
        recent = [e for e in bench.events() if e["at"] >= since - 1]
        failed = next((e["at"] for e in recent if e["kind"] == "launch-failed"), None)
        launched = next((e for e in recent if e["kind"] == "launch" and e["link"] != pool), None)
        gap = f"{launched['at'] - failed:.2f} s" if failed and launched else "?"
        print(f"capacity failover on {node}: launch failed on {pool} -> launched on "
              f"{launched['link'] if launched else '?'} after {gap}; sbatch -> RUNNING {seconds:.1f} s")

    times, shares = [], []
    for run in range(args.runs):
        node = bench.powered_down(set(bench.dynamic.values()), args.wait)
        if node is None:
            print(f"run {run + 1}: no powered-down node within {args.wait:.0f} s; stopping")
            break
        since = time.time()
        times.append(bench.cold_start(node)[0])
        share = bench.join_share(node, since)
        shares += [share] if share is not None else []
        print(f"run {run + 1}: {node} powered down -> job RUNNING in {times[-1]:.1f} s, join share {_seconds(share)}")
    if times:
        print(f"cold start over {len(times)} run(s): median {statistics.median(times):.1f} s, max {max(times):.1f} s")
    if shares:
        print(f"join share over {len(shares)} run(s): median {statistics.median(shares):.1f} s, "
              f"max {max(shares):.1f} s")
    return 0


def _seconds(value: float | None) -> str:
    return "no joined event" if value is None else f"machine started -> slurmd started {value:.1f} s"


if __name__ == "__main__":
    sys.exit(main())
