"""What monitoring costs: the service's share per loop at 20,000 nodes, and, against a live
cluster's Prometheus, scrape durations and `slurmforge report` time.

Per loop (fixtures of bench/reconcile_bench.py: 20,000 nodes in 4 pools, plus a `squeue
--json` document in Slurm 22.05's shape: 3,000 running jobs of 1-8 nodes, 5,000 pending;
both counts scale with --nodes),
median of 5 runs after one warm-up:

    parse_jobs   squeue JSON text -> Job list (now read every loop)
    usage        the Slurm usage gauges (allocation per pool/account, queue, unavailable nodes)
    targets      the file_sd groups of powered dynamic nodes
    total        the three above: what monitoring adds to a loop
    snapshot     the pool snapshot (nodes, and jobs per pool for the page): built every loop
    metrics      /metrics rendered from the snapshot (what every scrape costs)

    .venv/bin/python bench/monitoring_bench.py [--nodes 20000] [--runs 5] [--quick]
        [--inventory /var/lib/slurmforge/inventories/<cluster> [--prometheus http://<controller>:9090]]

With --inventory, the live part runs too (Prometheus defaults to the controller's, port
9090). Exits 1 when parse_jobs + usage + targets exceed 1 s (median): the reconcile
loop's budget is 2 s and reconcile itself takes up to 1.6 s on these machines; or when the
outcome is wrong: jobs lost in parsing, a pool without its gauges on /metrics, no powered
dynamic node to scrape; live, a Prometheus that scrapes nothing or has no data to report.
`--quick` runs 400 nodes once and checks only the outcome (CI:
tests/unit/test_bench_quick.py); with --inventory, one report (the last hour)
(tests/integration/test_bench_quick.py).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from reconcile_bench import NOW, fixtures

from slurmforge.errors import SlurmforgeError
from slurmforge.hostlists import compress
from slurmforge.service.snapshot import build_snapshot
from slurmforge.service.targets import dynamic_targets
from slurmforge.service.topology import Topology
from slurmforge.service.usage import usage_rows
from slurmforge.service.web import metrics_text
from slurmforge.slurm.client import parse_jobs, parse_nodes

BUDGET_SECONDS = 1.0
QUICK_NODES = 400


def job_counts(nodes: int) -> tuple[int, int]:
    """Running and pending jobs: 3,000 and 5,000 at 20,000 nodes."""
    return nodes * 3 // 20, nodes // 4


def squeue_json(topo: Topology, running: int = 3000, pending: int = 5000, seed: int = 7) -> str:
    rng = random.Random(seed)
    names = list(topo.nodes)
    accounts = [f"team{i:02d}" for i in range(20)]
    partitions = list(topo.partitions)
    jobs: list[dict[str, Any]] = []
    for i in range(running):
        width = rng.choice((1, 1, 1, 2, 4, 8))
        start = rng.randrange(0, len(names) - width)
        nodes = compress(names[start:start + width])
        jobs.append({"job_id": i + 1, "job_state": "RUNNING", "nodes": nodes, "user_name": "u",
                     "partition": rng.choice(partitions), "account": rng.choice(accounts), "state_reason": "None",
                     "submit_time": int(NOW) - 900, "eligible_time": int(NOW) - 900,
                     "tres_alloc_str": f"cpu={8 * width},mem={32 * width}G,node={width},billing={8 * width},"
                                       f"gres/gpu={4 * width}"})
    for i in range(pending):
        jobs.append({"job_id": running + i + 1, "job_state": "PENDING", "nodes": "", "user_name": "u",
                     "partition": rng.choice(partitions), "account": rng.choice(accounts),
                     "state_reason": rng.choice(("Resources", "Priority", "Dependency")),
                     "submit_time": int(NOW) - rng.randrange(60, 7200), "eligible_time": 0,
                     "tres_req_str": "cpu=8,mem=32G,node=1,billing=8,gres/gpu=4"})
    return json.dumps({"meta": {}, "errors": [], "jobs": jobs})


def one_loop(topo: Topology, sinfo: str, squeue: str) -> dict[str, Any]:
    nodes = parse_nodes(sinfo)
    t0 = time.perf_counter()
    jobs = parse_jobs(squeue)
    t1 = time.perf_counter()
    gauges = usage_rows(topo, nodes, jobs, NOW, {"gpu-spot": 1})
    t2 = time.perf_counter()
    groups = dynamic_targets(topo, nodes)
    t3 = time.perf_counter()
    snap = build_snapshot(topo, nodes, {}, [], NOW, gauges=gauges, jobs=jobs)
    t4 = time.perf_counter()
    text = metrics_text(snap)  # per scrape, not per loop
    t5 = time.perf_counter()
    return {"parse_jobs": t1 - t0, "usage": t2 - t1, "targets": t3 - t2, "snapshot": t4 - t3, "metrics": t5 - t4,
            "total": t3 - t0,
            "bytes": len(text), "samples": sum(1 for line in text.splitlines() if not line.startswith("#")),
            "jobs": len(jobs), "groups": len(groups), "text": text}


def outcome_problems(topo: Topology, loop: dict[str, Any], jobs: int) -> list[str]:
    """What is wrong with one loop's outcome, whatever the machine's speed."""
    problems = []
    if loop["jobs"] != jobs:
        problems.append(f"squeue's {jobs} jobs parsed as {loop['jobs']}")
    lines = loop["text"].splitlines()
    for pool in topo.pools:
        if not any(line.startswith(f'slurmforge_pool_jobs_pending{{pool="{pool}"}}') for line in lines):
            problems.append(f"pool {pool} has no slurmforge_pool_jobs_pending on /metrics")
    if not loop["groups"]:
        problems.append("no powered dynamic node to scrape")
    return problems


def live(prometheus: str, inventory: Path, quick: bool) -> list[str]:
    """Scrape durations and report times; what is wrong with them."""
    from slurmforge.inventory import read_inventory
    from slurmforge.report import Prometheus, make_report

    query = "scrape_duration_seconds"
    with urllib.request.urlopen(f"{prometheus}/api/v1/query?query={query}", timeout=10) as resp:
        result = json.load(resp)["data"]["result"]
    by_job: dict[str, list[float]] = {}
    for r in result:
        by_job.setdefault(r["metric"]["job"], []).append(float(r["value"][1]))
    for job, values in sorted(by_job.items()):
        print(f"scrape {job:>10}: {len(values)} targets, max {max(values) * 1000:.1f} ms, "
              f"median {statistics.median(values) * 1000:.1f} ms")
    spec, _ = read_inventory(inventory)
    problems = [] if by_job else [f"Prometheus at {prometheus} scrapes no target"]
    with tempfile.TemporaryDirectory() as out:
        for since in (3600,) if quick else (3600, 86400):
            t = time.perf_counter()
            try:
                report = make_report(Prometheus(prometheus), spec.name, since, Path(out))
            except SlurmforgeError as exc:
                problems.append(f"report --since {since // 3600}h: {exc}")
                continue
            print(f"report --since {since // 3600}h: {time.perf_counter() - t:.2f} s, {len(report.images)} plot(s)")
    return problems


def controller_prometheus(inventory: Path) -> str:
    from slurmforge.contract import PROMETHEUS_PORT
    from slurmforge.inventory import read_inventory
    from slurmforge.monitoring import controller_address

    return f"http://{controller_address(read_inventory(inventory)[1])}:{PROMETHEUS_PORT}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--prometheus", help="a live Prometheus (default: the inventory's controller, port 9090)")
    parser.add_argument("--inventory", type=Path, help="the live cluster's inventory: run the live part too")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_NODES} nodes, one run, outcome only (CI)")
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.runs = QUICK_NODES, 1
    topo, sinfo, _, _ = fixtures(args.nodes)
    running, pending = job_counts(args.nodes)
    squeue = squeue_json(topo, running, pending)
    print(f"fixtures: {len(topo.nodes)} nodes, squeue JSON {len(squeue) / 1e6:.1f} MB")
    one_loop(topo, sinfo, squeue)
    runs = [one_loop(topo, sinfo, squeue) for _ in range(args.runs)]
    for key in ("parse_jobs", "usage", "targets", "total", "snapshot", "metrics"):
        values = [r[key] for r in runs]
        print(f"{key:>10}: median {statistics.median(values) * 1000:7.1f} ms   best {min(values) * 1000:7.1f} ms")
    print(f"/metrics: {runs[0]['bytes'] / 1e3:.0f} kB, {runs[0]['samples']:.0f} samples")
    median = statistics.median(r["total"] for r in runs)
    fast = args.quick or median <= BUDGET_SECONDS  # --quick: the machine's speed is not judged
    print(f"monitoring share of one loop over {len(topo.nodes)} nodes: {median:.3f} s "
          f"(budget {BUDGET_SECONDS:.0f} s): {'ok' if fast else 'TOO SLOW'}")
    problems = outcome_problems(topo, runs[-1], running + pending)
    if args.inventory:
        problems += live((args.prometheus or controller_prometheus(args.inventory)).rstrip("/"), args.inventory,
                         args.quick)
    for problem in problems:
        print(f"WRONG OUTCOME: {problem}")
    return 0 if fast and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
