"""Jobs across a slurmctld restart on the running local cluster, measured.

A busy cluster never notices a restart: for each sequence, over --runs runs, every job's delay
beyond the moment it was ready (submitted, and the machine of its node up: its slurmd started;
tests/harness/restarts.py), the worst delay, the jobs Slurm requeued, the refused
submissions and the nodes called failed (a bootstrap failure, a ResumeTimeout).

1. kill: per powered-down node (dev-cpu-03, dev-cpu-04: --nodes) a 2-task array; slurmctld
   killed -9 once their power-up is on disk, `offset` s later, the offsets spread over
   0..--spread s across the runs (before the machines boot, while they register, after the
   tasks started); systemd starts slurmctld again. kill-frozen: slurmctld hangs (SIGSTOP)
   for the offset before the kill, so the takeover meets every power-up in flight and no
   task started (--spread 6: the machines boot meanwhile).
2. failover: a job for a powered-down node; the primary controller's container killed (SIGKILL)
   while the node powers up; the backup takes control, its scheduler service leads; the
   primary is started again and back in control afterwards.
3. rollout: `slurmforge up --local` of the spec with a QoS added on the default partition while
   a job arrives every 2 s (one for a powered-down node at the start and one ~90 s later, after
   Slurm powered it down again), with the live validation; then `up` of the spec as it was.

    .venv/bin/python bench/restart_bench.py [--cluster dev] [--runs 5] [--only kill,failover,rollout]
        [--nodes dev-cpu-03,dev-cpu-04] [--spread 3] [--quick]

Goals: no job late (> 5 s after it was ready), no submission refused, no node called failed, every
job COMPLETED. A kill after a task started may have its start lost from the state file (written
at most every 5 s) and the task started twice: slurmd refuses the copy, Slurm requeues the task
held, the service replaces the node and releases the task, which then waits Slurm's requeue hold
(the credential lifetime + 1 s, 121 s): counted as requeued and reported, not a goal missed.
Exits 1 when a goal is missed, 2 when the cluster cannot be used. `--quick`
(tests/integration/test_bench_quick.py): one kill before the machines boot.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.harness

from slurmforge.errors import SlurmforgeError  # noqa: E402
from slurmforge.hosts import controller_names  # noqa: E402
from slurmforge.rollout import Progress  # noqa: E402
from slurmforge.spec import Cluster  # noqa: E402
from tests.harness.faults import failover_mid_power_up, repeat, target  # noqa: E402
from tests.harness.live import LiveCluster  # noqa: E402
from tests.harness.restarts import NodeWatch, RestartRun, delays, kill_mid_power_up, under_load  # noqa: E402

SEQUENCES = ("kill", "kill-frozen", "failover", "rollout")
STATIC_JOB = "-p {partition} -w {static} -N 1 -n 1 --mem=100M --wrap 'sleep 3'"
DYNAMIC_JOB = "-p {partition} -w {node} -n 1 --mem=100M --wrap 'sleep 3'"


class Quiet:
    """`up`'s phase sink: one line per phase."""

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        print(f"  [up] {name}", flush=True)
        yield

    def event(self, progress: Progress) -> None:
        pass

    def note(self, text: str) -> None:
        pass


def default_partition(spec: Cluster) -> str:
    return next((p.name for p in spec.partitions if p.default), spec.partitions[0].name)


def kills(live: LiveCluster, nodes: list[str], runs: int, spread: float, freeze: bool) -> list[RestartRun | str]:
    offsets = [spread * i / max(runs - 1, 1) for i in range(runs)]
    return repeat(runs, lambda: kill_mid_power_up(live, nodes, offsets.pop(0), freeze=freeze), RestartRun.row)


def failovers(live: LiveCluster, spec: Cluster, node: str, runs: int) -> list[RestartRun | str]:
    backup = controller_names(spec)[1]

    def once() -> RestartRun:
        with NodeWatch(live) as watch:
            result = failover_mid_power_up(live, backup, default_partition(spec), node)
        return RestartRun("failover", tuple(delays(live, [result.job], watch)), (), watch.failed, result.seconds)

    return repeat(runs, once, RestartRun.row)


def rollouts(live: LiveCluster, spec_path: Path, spec: Cluster, static: str, node: str,
             runs: int) -> list[RestartRun | str]:
    from slurmforge.local.up import up
    from slurmforge.validation import validate_inventory

    data = yaml.safe_load(spec_path.read_text())
    data.setdefault("scheduling", {})["qos"] = [*data["scheduling"].get("qos", []), {"name": "bench-fair"}]
    data["partitions"][0]["qos"] = "bench-fair"
    changed = Path("/tmp") / f"restart-bench-{spec.name}.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    partition = default_partition(spec)
    dynamic = DYNAMIC_JOB.format(partition=partition, node=node)
    jobs = [dynamic, *[STATIC_JOB.format(partition=partition, static=static)] * 44, dynamic]

    def once() -> RestartRun:
        try:
            return under_load(live, "rollout", lambda: up(changed, Quiet(), run_sample_job=False,
                                                          validate=validate_inventory), jobs)
        finally:
            up(spec_path, Quiet(), run_sample_job=False)

    return repeat(runs, once, RestartRun.row)


def summary(name: str, results: list[RestartRun | str], requeue_ok: bool = True) -> bool:
    """Prints the sequence's figures; whether it met its goals (a requeue misses one only
    where `requeue_ok` is False: a hung slurmctld's takeover recovers its power-ups)."""
    done = [r for r in results if isinstance(r, RestartRun)]
    if not done:
        print(f"{name}: no run finished")
        return False
    delays_ = [j.delay for r in done for j in r.jobs]
    late = sum(len(r.late) for r in done)
    requeued = sum(len(r.requeued) for r in done)
    refused = sum(len(r.refused) for r in done)
    failed = sum(len(r.failed) for r in done)
    lost = sum(len(r.lost) for r in done)
    print(f"{name}: {len(done)}/{len(results)} run(s), {len(delays_)} job(s): late {late} (goal 0), worst delay "
          f"{max(delays_, default=0):.0f} s, median {statistics.median(delays_) if delays_ else 0:.0f} s; refused "
          f"{refused} (goal 0); nodes called failed {failed} (goal 0); not COMPLETED {lost} (goal 0); requeued "
          f"{requeued}", flush=True)
    return len(done) == len(results) and not (late or refused or failed or lost or (requeued and not requeue_ok))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="the local cluster (default: the only one)")
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "local.yaml",
                        help="its spec (the rollout changes a copy of it, then rolls it out again)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default=",".join(SEQUENCES), help="which sequences, comma-separated")
    parser.add_argument("--nodes", default="dev-cpu-03,dev-cpu-04", help="powered-down nodes the jobs wait for")
    parser.add_argument("--static", default="dev-cpu-[01-02]", help="where the rollout's steady jobs run")
    parser.add_argument("--spread", type=float, default=3.0, help="kill offsets after the power-up, 0..this")
    parser.add_argument("--quick", action="store_true", help="one kill after a hang while the machines boot")
    args = parser.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    freeze = args.quick or "kill-frozen" in only
    if args.quick:
        only, args.runs, args.spread = ["kill"], 1, 6.0
    try:
        spec, _, live = target(args.cluster, None)
    except SlurmforgeError as exc:
        print(f"restart_bench: {exc}", file=sys.stderr)
        return 2
    nodes = args.nodes.split(",")
    print(f"cluster {spec.name}: {args.runs} run(s) of {', '.join(only)}; jobs of {live.user}\n", flush=True)
    ok = True
    if "kill" in only or "kill-frozen" in only:
        what = "hung, then killed -9" if freeze else "kill -9"
        ok &= summary(f"slurmctld {what} during a power-up", kills(live, nodes, args.runs, args.spread, freeze),
                      requeue_ok=not freeze)
    if "failover" in only:
        ok &= summary("failover during a power-up", failovers(live, spec, nodes[0], args.runs))
    if "rollout" in only:
        ok &= summary("rollout under load", rollouts(live, args.spec, spec, args.static, nodes[0], args.runs))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
