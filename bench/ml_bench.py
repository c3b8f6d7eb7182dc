"""Cluster-aware ML jobs on the running local cluster, measured (issue 25).

1. node health: the health check's own run time on every compute node that runs
   (`slurmforge-health --check`, goal <= 2 s each), and --runs sick nodes: a static node's
   CephFS taken away under a running job that traps USR1; the seconds until slurmd's
   periodic check drains it with a `health:` reason (goal: within one HealthCheckInterval,
   30 s, plus 5 s), until the job is requeued (the service signals it, then requeues it
   after its 30 s evacuation grace) and until the node is in service again on a new machine.

    .venv/bin/python bench/ml_bench.py [--cluster dev] [--runs 3] [--partition ml-cpu] [--quick]

Each run restores what it changed (the sick node is replaced by the service; its job is
cancelled). Exits 1 when a goal is missed, 2 when the cluster cannot be used. `--quick`
(tests/integration/test_bench_quick.py): the check times only; the sick node is
tests/integration/test_node_health.py's (not run twice in the suite).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from slurmforge.errors import SlurmforgeError
from slurmforge.join import HEALTH_CHECK_INTERVAL
from slurmforge.local.faults import repeat, target
from slurmforge.local.live import LiveCluster
from slurmforge.local.sickness import Sickness, check, sick_node
from slurmforge.nodes import node_names

CHECK_GOAL = 2.0
DRAIN_GOAL = HEALTH_CHECK_INTERVAL + 5.0


def check_times(live: LiveCluster, nodes: list[str]) -> bool:
    print(f"{'node':>20} {'health check':>13}  verdict", flush=True)
    ok = True
    for node in nodes:
        verdict = check(live, node)
        ok &= verdict.healthy and verdict.seconds <= CHECK_GOAL
        print(f"{node:>20} {verdict.seconds * 1000:>10.0f} ms  {verdict.output}", flush=True)
    print(f"health check on {len(nodes)} node(s): goal <= {CHECK_GOAL:.0f} s and healthy: {'ok' if ok else 'MISSED'}")
    return ok


def sick_nodes(live: LiveCluster, node: str, partition: str, runs: int) -> bool:
    print(f"\n{'sick node':>9} {'drained after':>14} {'job requeued after':>19} "
          f"{'replaced, in service after':>27}  reason", flush=True)

    def secs(value: float | None) -> str:
        return f"{value:.1f} s" if value is not None else "-"

    def row(s: Sickness) -> str:
        return f"{secs(s.drained):>14} {secs(s.requeued):>19} {secs(s.back):>27}  {s.reason}"

    results = repeat(runs, lambda: sick_node(live, node, "data", partition), row)
    done = [r for r in results if isinstance(r, Sickness)]
    drained = [r.drained for r in done if r.drained is not None]
    backs = [r.back for r in done if r.back is not None and r.replaced]
    ok = (len(done) == runs and len(drained) == runs and max(drained) <= DRAIN_GOAL and len(backs) == runs
          and all(r.requeued is not None for r in done))
    spread = f"median {statistics.median(drained):.1f} s, max {max(drained):.1f} s" if drained else "-"
    back = f"median {statistics.median(backs):.1f} s" if backs else "-"
    print(f"sick node -> drained over {runs} run(s): {spread} (goal <= {DRAIN_GOAL:.0f} s); jobs requeued "
          f"{sum(1 for r in done if r.requeued is not None)}/{runs}; replaced and in service: {back}: "
          f"{'ok' if ok else 'MISSED'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="the local cluster (default: the only one)")
    parser.add_argument("--runs", type=int, default=3, help="sick nodes")
    parser.add_argument("--partition", help="where the jobs run (default: the spec's default partition)")
    parser.add_argument("--quick", action="store_true", help="the health check times only")
    args = parser.parse_args(argv)
    try:
        spec, where, live = target(args.cluster, args.partition)
    except SlurmforgeError as exc:
        print(f"ml_bench: {exc}", file=sys.stderr)
        return 2
    nodes = sorted(live.running_containers() & {n for p in spec.pools for n in node_names(spec, p)})
    ok = check_times(live, nodes)
    if not args.quick:
        ok &= sick_nodes(live, where.victim, where.partition, args.runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
