"""How long `slurmforge plan` takes, as a command (a process, start-up included):

- recorded: render_bench's AWS spec of 20,000 nodes as deployed - its rendered configs,
  every node in slurmctld's view (one in ten up, each running a job; as many jobs
  pending), slurmdbd's answers recorded from the local cluster - saved as a plan state,
  and an edit that grows, shrinks and rebuilds pools, shortens a MaxTime under running
  jobs and adds a partition: `slurmforge plan EDIT --state STATE`. Budget 2 s (median).
- live (--live): `slurmforge plan SPEC --local` (or --inventory DIR) against the running
  local cluster: one round trip to its controller. Budget 3 s (median). Read-only.

    .venv/bin/python bench/plan_bench.py [--runs 5] [--live [--spec S] [--inventory DIR]] [--quick]

Exits 1 when a median is over its budget. `--quick` (CI): 200 nodes recorded, one run of
each, no budget; tests/unit/test_bench_quick.py runs it, and with --live
tests/integration/test_bench_quick.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from render_bench import spec_data  # beside this file: the script's directory is on sys.path

from slurmforge.plan import deployed as dep
from slurmforge.plan.engine import node_places
from slurmforge.render import render_all
from slurmforge.slurm.client import Job, NodeState
from slurmforge.spec import parse_spec

ROOT = Path(__file__).resolve().parents[1]
RECORDED_NODES, QUICK_NODES = 20_000, 200
RECORDED_BUDGET, LIVE_BUDGET = 2.0, 3.0
SACCTMGR = ROOT / "tests" / "unit" / "plan_states" / "dev-live.json"
"""slurmdbd's answers, as the local cluster gave them (another cluster's: the plan adds this one)."""


def recorded_state(data: dict[str, Any]) -> dep.Deployed:
    """The cluster of `data` as a rollout left it, busy: one node in ten up with a job, as many
    jobs pending, every job asking for two days."""
    spec = parse_spec(yaml.safe_dump(data, sort_keys=False), "deployed.yaml")
    state = dep.Deployed("bench-controller", yaml.safe_dump(data, sort_keys=False), render_all(spec, "bench.yaml"),
                         "f00d")
    partition_of = {pool: next(p["name"] for p in data["partitions"] if pool in p["pools"]) for pool in
                    (p["name"] for p in data["pools"])}
    nodes, jobs = [], []
    for i, (name, (pool, _)) in enumerate(node_places(spec).items()):
        up = i % 10 == 0
        nodes.append(NodeState(name, "allocated" if up else "idle", frozenset({"CLOUD"} if up else
                                                                              {"CLOUD", "POWERED_DOWN"})))
        if up:
            jobs.append(Job(i + 1, "RUNNING", name, "alice", partition=partition_of[pool], account="research",
                            qos="normal", time_limit=2 * 1440))
            jobs.append(Job(100_000 + i, "PENDING", "", "alice", partition=partition_of[pool], account="research",
                            qos="normal", time_limit=2 * 1440))
    state.nodes, state.jobs, state.partitions = nodes, jobs, []
    state.accounting_answers = dep.load(SACCTMGR).accounting_answers
    return state


def edited(data: dict[str, Any]) -> dict[str, Any]:
    """Grow m6i, shrink r6i, another instance type for cpu-mix (a rebuild), a shorter MaxTime on
    gpu-large, a new partition."""
    new = json.loads(json.dumps(data))
    pools = {p["name"]: p for p in new["pools"]}
    step = max(1, pools["m6i"]["max_nodes"] // 25)
    pools["m6i"]["max_nodes"] += step
    pools["r6i"]["max_nodes"] -= step
    pools["cpu-mix"]["instance_types"] = ["m6i.4xlarge"]
    next(p for p in new["partitions"] if p["name"] == "gpu-large")["max_time"] = "1-00:00:00"
    new["partitions"].append({"name": "debug", "pools": ["c6i"], "max_time": "00:30:00"})
    return new


def timed(argv: list[str], runs: int) -> tuple[list[float], subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    times, done = [], None
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "slurmforge.cli", "plan", *argv, "--format", "json",
                               "--detailed-exitcode"],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=False)
        times.append(time.perf_counter() - started)
        if done.returncode not in (0, 12):
            raise SystemExit(f"plan {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    assert done is not None
    return times, done


def report(label: str, times: list[float], done: subprocess.CompletedProcess[str], budget: float | None) -> bool:
    rows = json.loads(done.stdout)["rows"]
    kinds: dict[str, int] = {}
    for row in rows:
        kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    median = statistics.median(times)
    verdict = "" if budget is None else f" - {'ok' if median <= budget else 'FAIL'}, budget {budget:.0f} s"
    print(f"{label}: best {min(times):.2f} s, median {median:.2f} s of {len(times)}{verdict}; exit "
          f"{done.returncode}, {len(rows)} rows ({', '.join(f'{k} {n}' for k, n in kinds.items())})")
    return budget is None or median <= budget


def recorded(nodes: int, runs: int, budget: float | None) -> bool:
    data = spec_data(nodes)
    with tempfile.TemporaryDirectory(prefix="plan-bench-") as tmp:
        state, spec = Path(tmp) / "state.json", Path(tmp) / "bench.yaml"
        dep.save(recorded_state(data), state)
        spec.write_text(yaml.safe_dump(edited(data), sort_keys=False))
        times, done = timed([str(spec), "--state", str(state)], runs)
        size = state.stat().st_size
    return report(f"{nodes:,} nodes against a recorded state ({size / 1e6:.1f} MB)", times, done, budget)


def live(spec: Path, inventory: Path | None, runs: int, budget: float | None) -> bool:
    where = ["--inventory", str(inventory)] if inventory else ["--local"]
    times, done = timed([str(spec), *where], runs)
    return report(f"live cluster ({' '.join(where)}, {spec.name})", times, done, budget)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_NODES} nodes, one run, no budget")
    parser.add_argument("--live", action="store_true", help="also time a plan of the running local cluster")
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "local.yaml")
    parser.add_argument("--inventory", type=Path, help="reach the live cluster through this inventory")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    ok = recorded(QUICK_NODES if args.quick else RECORDED_NODES, runs, None if args.quick else RECORDED_BUDGET)
    if args.live:
        ok = live(args.spec, args.inventory, runs, None if args.quick else LIVE_BUDGET) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
