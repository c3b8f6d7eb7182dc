"""Controller outages and dead node machines on the running local cluster, measured.

Issue 16: a controller outage or a dead machine never takes the cluster down.

1. controller outage, --runs times: slurmctld stopped in the controller for --outage
   seconds under a running 2-node job and a pending one (eligible halfway through); counted:
   the cluster's machines that stopped or vanished meanwhile (`podman ps -a --filter
   label=slurmforge.cluster=NAME`), the scheduler service's log lines that terminate
   machines (`journalctl -u slurmforge-service`), whether it said on /metrics that it held
   back, and how both jobs ended in sacct;
2. dead node, --runs times: one node's container killed (`podman kill`) under a running
   2-node `--requeue` job; the seconds until the job leaves RUNNING (and whether it was
   requeued), until the node is in service again on a machine the scheduler service
   started by itself (static nodes are kept alive; nobody starts the container), and
   (not with --quick) until the requeued job, 30 s long, is COMPLETED in sacct on the
   replacement: Slurm holds a requeued batch job back for the credential lifetime plus 1 s
   (121 s by default), so that figure is >= 2.5 min by Slurm's design.

    .venv/bin/python bench/never_down_bench.py [--cluster dev] [--outage 300] [--runs 5]
        [--partition ml-cpu] [--quick]

The jobs run as the spec's first user, submitted on the login node, on the first two static
nodes of the partition (default: the spec's default partition); the second one dies. Each
fault restores what it changed, also when it fails (tests/harness/faults.py, shared with
tests/integration/test_never_down.py). Goals: 0 machines terminated over all outages, the
service saying it held back (log and /metrics) and every job COMPLETED; a dead node's job
leaves RUNNING within 60 s and is requeued, the node's new machine registers within 60 s,
and a job that fits only that node, submitted right after the kill, runs there within 60 s
of the kill (the node is not held: only the dead machine's jobs are kept off it for
STALE_RPC_WINDOW after its DOWN). Exits 1 when a goal is missed, 2 when the cluster cannot be used. `--quick`
(tests/integration/test_bench_quick.py, the integration suite's outage and dead-node test):
one 90 s outage and one dead node.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.harness

from slurmforge.errors import SlurmforgeError  # noqa: E402
from tests.harness.faults import DeadNode, JobNodes, Outage, controller_outage, dead_node, repeat, target  # noqa: E402
from tests.harness.live import LiveCluster  # noqa: E402

DEAD_NODE_GOAL = 60.0
DEAD_NODE_LIMIT = 180.0
"""How long a dead node's job is watched (past the goal, to measure a miss)."""
REPLACED_GOAL = 60.0
"""A static node's machine killed -> the service's replacement registered (its slurmd up),
and -> the first job running on it (it takes jobs as soon as it registered)."""
QUICK_OUTAGE = 90
"""Nine service loops, three times the service's stability window (3 loops over >= 20 s):
long enough that a repair the service wrongly wanted would have been confirmed."""


def outages(live: LiveCluster, where: JobNodes, seconds: float, runs: int) -> list[Outage | str]:
    """One result a run, or why the run failed."""
    print(f"{'run':>5} {'seconds':>8} {'machines stopped':>17} {'terminate lines':>16} {'held back':>10} "
          f"{'jobs COMPLETED':>15}", flush=True)

    def row(o: Outage) -> str:
        return (f"{o.seconds:8.1f} {len(o.stopped):>17} {len(o.terminations):>16} "
                f"{'yes' if o.holding else 'no':>10} {o.jobs_completed:>13}/{len(o.jobs)}"
                + (f"  stopped: {', '.join(o.stopped)}" if o.stopped else "")
                + (f"  jobs: {o.jobs}" if o.jobs_completed < len(o.jobs) else "")
                + "".join(f"\n       {line}" for line in o.terminations))

    return repeat(runs, lambda: controller_outage(live, seconds, where), row)


def dead_nodes(live: LiveCluster, where: JobNodes, runs: int, finish: bool) -> list[DeadNode | str]:
    print(f"\n{'dead node':>5} {'job left RUNNING after':>23}  {'then':>14}  {'slurmd registered after':>23}"
          f"  {'first job on it after':>21}" + (f"  {'job COMPLETED after':>20}" if finish else ""), flush=True)

    def row(d: DeadNode) -> str:
        took = f"{d.seconds:.1f} s" if d.seconds is not None else f"> {DEAD_NODE_LIMIT:.0f} s"
        joined = f"{d.joined:.1f} s" if d.joined is not None else f"> {DEAD_NODE_LIMIT:.0f} s"
        first = f"{d.first_job:.1f} s" if d.first_job is not None else f"> {DEAD_NODE_LIMIT:.0f} s"
        done = f"{d.completed:.1f} s" if d.completed is not None else "not COMPLETED"
        return (f"{took:>23}  {d.after or 'unknown':>14}  {joined:>23}  {first:>21}"
                + (f"  {done:>20}" if finish else ""))

    return repeat(runs, lambda: dead_node(live, where, limit=DEAD_NODE_LIMIT, finish=finish, probe=True), row)


def verdict(outage_results: list[Outage | str], dead_results: list[DeadNode | str], finish: bool) -> bool:
    """Prints the goals; True when all are met."""
    done = [o for o in outage_results if isinstance(o, Outage)]
    terminated = sum(o.machines_terminated for o in done)
    completed, jobs = sum(o.jobs_completed for o in done), sum(len(o.jobs) for o in done)
    failed = len(outage_results) - len(done) + sum(1 for d in dead_results if isinstance(d, str))
    times = [d.seconds for d in dead_results if isinstance(d, DeadNode)]
    measured = [t for t in times if t is not None]
    held = sum(1 for o in done if o.holding and "holding" in o.log)
    ok_outage = terminated == 0 and completed == jobs and held == len(done) and len(done) == len(outage_results)
    requeued = sum(1 for d in dead_results if isinstance(d, DeadNode) and d.requeued)
    ok_dead = bool(times) and len(measured) == len(times) and max(measured) <= DEAD_NODE_GOAL and requeued == len(times)
    print(f"\nmachines terminated over {len(done)} outage(s): {terminated} (goal 0); the service said it held back "
          f"{held}/{len(done)}; jobs COMPLETED {completed}/{jobs}: {'ok' if ok_outage else 'MISSED'}")
    spread = f"median {statistics.median(measured):.1f} s, max {max(measured):.1f} s" if measured else "-"
    if len(measured) < len(times):
        spread += f", {len(times) - len(measured)} still RUNNING after {DEAD_NODE_LIMIT:.0f} s"
    print(f"dead node -> job leaves RUNNING over {len(times)} run(s): {spread} (goal <= {DEAD_NODE_GOAL:.0f} s), "
          f"requeued {requeued}/{len(times)}: {'ok' if ok_dead else 'MISSED'}")
    deads = [d for d in dead_results if isinstance(d, DeadNode)]
    joins = [d.joined for d in deads if d.joined is not None]
    firsts = [d.first_job for d in deads if d.first_job is not None]
    ok_back = (bool(deads) and len(joins) == len(firsts) == len(deads) and max(joins) <= REPLACED_GOAL
               and max(firsts) <= REPLACED_GOAL)
    spread = f"median {statistics.median(joins):.1f} s, max {max(joins):.1f} s" if joins else "-"
    print(f"dead static node -> a new machine from the service, its slurmd registered, over {len(deads)} run(s): "
          f"{spread} (goal <= {REPLACED_GOAL:.0f} s)")
    spread = f"median {statistics.median(firsts):.1f} s, max {max(firsts):.1f} s" if firsts else "-"
    print(f"  -> the first job running on it (submitted at the kill, fits only that node): {spread} "
          f"(goal <= {REPLACED_GOAL:.0f} s): {'ok' if ok_back else 'MISSED'}")
    ok_done = True
    if finish:
        done_after = [d.completed for d in dead_results if isinstance(d, DeadNode)]
        finished = [c for c in done_after if c is not None]
        ok_done = bool(done_after) and len(finished) == len(done_after)
        spread = f"median {statistics.median(finished):.1f} s, max {max(finished):.1f} s" if finished else "-"
        print(f"dead static node -> its requeued job COMPLETED on the replacement, {len(finished)}/{len(done_after)}: "
              f"{spread} after the kill (Slurm's 121 s requeue hold included): {'ok' if ok_done else 'MISSED'}")
    if failed:
        print(f"{failed} run(s) failed before measuring (see above)")
    return ok_outage and ok_dead and ok_back and ok_done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="the local cluster (default: the only one)")
    parser.add_argument("--outage", type=float, default=300, help="seconds slurmctld stays stopped")
    parser.add_argument("--runs", type=int, default=5, help="outages, and dead nodes")
    parser.add_argument("--partition", help="where the jobs run (default: the spec's default partition)")
    parser.add_argument("--quick", action="store_true", help=f"one {QUICK_OUTAGE} s outage and one dead node")
    args = parser.parse_args(argv)
    if args.quick:
        args.outage, args.runs = QUICK_OUTAGE, 1
    try:
        spec, where, live = target(args.cluster, args.partition)
    except SlurmforgeError as exc:
        print(f"never_down_bench: {exc}", file=sys.stderr)
        return 2
    print(f"cluster {spec.name}: jobs of {live.user} on {where.nodes} ({where.partition}); {args.runs} outage(s) "
          f"of {args.outage:.0f} s, then {args.runs} dead {where.victim}\n", flush=True)
    outage_results = outages(live, where, args.outage, args.runs)
    dead_results = dead_nodes(live, where, args.runs, finish=not args.quick)
    return 0 if verdict(outage_results, dead_results, finish=not args.quick) else 1


if __name__ == "__main__":
    sys.exit(main())
