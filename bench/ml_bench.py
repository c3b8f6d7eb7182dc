"""Cluster-aware ML jobs on the running local cluster, measured.

1. node health: the health check's own run time on every compute node that runs
   (`slurmforge-health --check`, goal <= 2 s each), and --runs sick nodes: a static node's
   CephFS taken away under a running job that traps USR1; the seconds until slurmd's
   periodic check drains it with a `health:` reason (goal: within one HealthCheckInterval,
   30 s, plus 5 s), until the job is requeued (the service signals it, then requeues it
   after its 30 s evacuation grace) and until the node is in service again on a new machine.

2. DDP scaling: examples/jobs/ddp_train.sbatch (gloo) on 1, 2 and 3 CPU nodes of the
   partition, --steps each; samples/s (the median step after 5 of warm-up) and the scaling
   efficiency (samples/s on N nodes / N x on 1). The local nodes are containers sharing this
   machine's 2 cores: more nodes add no compute, so the efficiency falls as 1/N at best;
   what it shows is that the job spans the nodes (world size N, one rank a node) and that
   the allreduce between containers costs what it costs. Needs the ML modules published
   (`slurmforge modules publish libs/python/torch/2.6.0-r3-python-3.13 ...`).

3. spot interruption, --runs times: a 1-node ddp_train.sbatch on the spot-like pool
   (partition ml-spot) past step 20, then a notice for its machine (the local provider's
   interrupt file); seconds from the notice to the resumed run's first line (its checkpoint
   loaded), goal <= 60 s (median); the training reaches its steps, no step twice beyond a
   checkpoint interval, the job finishes on a machine of the fallback link, requeued once;
4. dead node, --runs times: a 2-node ddp_train.sbatch, its second node's container killed
   past step 20; seconds from the kill to the resumed run, goal <= 90 s (median); the same
   proof.

5. launch paths, --runs times each: tests/integration/upstream_jobs/train.py (written as
   PyTorch's docs write it) started the documented ways after `module load
   libs/python/torch/2.6.0-r3-python-3.13` - srun with env:// on 2 nodes, srun torchrun with the
   c10d rendezvous (1 and 2 processes a node), torch.distributed.run in the batch script;
   seconds from `sbatch` to the last rank's process group initialised (median, min, max). Needs
   the ML modules published, as the DDP part does.

    .venv/bin/python bench/ml_bench.py [--cluster dev] [--runs 3] [--partition ml-cpu] [--steps 60]
        [--only health,ddp,spot,kill,launch] [--quick]

Each run restores what it changed (the sick node is replaced by the service; its job is
cancelled). Exits 1 when a goal is missed, 2 when the cluster cannot be used. `--quick`
(tests/integration/test_bench_quick.py): the check times only; the sick node is
tests/integration/test_node_health.py's and the DDP jobs tests/integration/test_ml_jobs.py's
(not run twice in the suite); `--only launch --quick` runs each launch path once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.harness

from slurmforge.contract import INTERRUPT_FILE  # noqa: E402
from slurmforge.errors import SlurmforgeError  # noqa: E402
from slurmforge.render import HEALTH_CHECK_INTERVAL  # noqa: E402
from slurmforge.spec.nodes import node_names  # noqa: E402
from tests.harness import launches, mljobs  # noqa: E402
from tests.harness.faults import repeat, target  # noqa: E402
from tests.harness.live import IN_SERVICE, LiveCluster, wait_until  # noqa: E402
from tests.harness.sickness import Sickness, check, sick_node  # noqa: E402

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


def ddp_scaling(live: LiveCluster, partition: str, steps: int, sizes: tuple[int, ...] = (1, 2, 3)) -> bool:
    print(f"\n{'DDP nodes':>9} {'samples/s':>10} {'efficiency':>11}  nodes", flush=True)
    mljobs.copy_jobs(live)
    rates: dict[int, float] = {}
    for n in sizes:
        job = mljobs.submit(live, f"-N {n} -p {partition} ddp_train.sbatch {steps}",
                            env="DDP_ARGS='--checkpoint-every 100000'")
        try:
            mljobs.completed(live, job, timeout=600)
        except SlurmforgeError as exc:
            print(f"{n:>9} failed: {exc}", flush=True)
            continue
        log = mljobs.steps(live, job)
        rates[n] = mljobs.samples_per_second(log)
        efficiency = rates[n] / (n * rates[1]) if rates.get(1) else float("nan")
        hosts = sorted({line.host for line in log if line.kind == "start"})
        print(f"{n:>9} {rates[n]:>10.0f} {efficiency:>10.0%}  {live.root(f'sacct -n -X -j {job} -o NodeList').strip()}"
              f" (rank 0 on {', '.join(hosts)})", flush=True)
    ok = len(rates) == len(sizes) and all(r > 0 for r in rates.values())
    print(f"DDP on {', '.join(map(str, sizes))} nodes: {'ok' if ok else 'MISSED'} (every size ran to its end)")
    return ok


NOTICE_GOAL, KILL_GOAL = 60.0, 90.0
CHECKPOINT_EVERY = 10


def resumed(live: LiveCluster, fault: str, runs: int, partition: str) -> bool:
    """Spot notices or killed nodes under training, `runs` times; the goals."""
    goal = NOTICE_GOAL if fault == "notice" else KILL_GOAL
    print(f"\n{fault:>6} {'-> resumed':>11} {'at step':>8} {'last ckpt':>10} {'twice':>6} {'link':>13}  runs",
          flush=True)
    mljobs.copy_jobs(live)

    def notice(job: str) -> None:
        node = live.root(f"squeue -h -j {job} -o %N").strip()
        live.root(f"echo {node} >> {INTERRUPT_FILE}")

    def kill(job: str) -> None:
        victim = live.root(f"scontrol show hostnames $(squeue -h -j {job} -o %N) | tail -n 1").strip()
        live.podman.run(["kill", victim])

    def once() -> mljobs.Resumed:
        if fault == "notice":
            mljobs.spot_nodes_off(live)
            return mljobs.interrupted(live, fault, "-p ml-spot -N 1", notice, checkpoint_every=CHECKPOINT_EVERY)
        r = mljobs.interrupted(live, fault, f"-p {partition} -N 2", kill, checkpoint_every=CHECKPOINT_EVERY)
        wait_until(lambda: not any(s not in IN_SERVICE for s in (live.slurm_state("dev-cpu-01"),
                                                                  live.slurm_state("dev-cpu-02"))),
                   300, "the killed node replaced", every=2)
        return r

    def row(r: mljobs.Resumed) -> str:
        took = f"{r.seconds:.1f} s" if r.seconds is not None else "-"
        return (f"{took:>11} {r.resumed_at_step:>8} {r.last_checkpoint:>10} {len(r.twice):>6} {r.link:>13}  "
                f"{' '.join(r.runs)}")

    results = [r for r in repeat(runs, once, row) if isinstance(r, mljobs.Resumed)]
    times = [r.seconds for r in results if r.seconds is not None]
    proof = all(r.finished and len(r.twice) <= CHECKPOINT_EVERY and len(r.runs) == 2 for r in results) and (
        fault != "notice" or all(r.link != "cpu-spot" for r in results))
    ok = len(times) == runs and statistics.median(times) <= goal and proof
    spread = f"median {statistics.median(times):.1f} s, max {max(times):.1f} s" if times else "-"
    print(f"{fault} -> training resumed over {runs} run(s): {spread} (goal <= {goal:.0f} s); every run "
          f"{'reached its steps, requeued once, no step twice beyond a checkpoint interval' if proof else 'NOT proven'}"
          f": {'ok' if ok else 'MISSED'}")
    return ok


def launch_paths(live: LiveCluster, runs: int) -> bool:
    print(f"\n{'launch path':>28} {'submit -> all ranks initialised':>32}  runs", flush=True)
    launches.copy(live)
    ok = True
    for name in launches.PYTORCH:
        done = [launches.pytorch(live, name) for _ in range(runs)]
        times = [d.seconds for d in done if d.ok and d.seconds is not None]
        ok &= len(times) == runs
        spread = (f"median {statistics.median(times):.1f} s ({min(times):.1f}-{max(times):.1f})" if times else "-")
        print(f"{name:>28} {spread:>32}  {len(times)}/{runs} ok, jobs {' '.join(d.job for d in done)}", flush=True)
        for d in done:
            if not d.ok:
                print(d.output[-2000:], flush=True)
    print(f"launch paths: {'ok' if ok else 'MISSED'} (every rank of every run initialised and allreduced)")
    return ok


ALL_PARTS = "health,ddp,spot,kill,launch"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="the local cluster (default: the only one)")
    parser.add_argument("--runs", type=int, default=3, help="sick nodes")
    parser.add_argument("--partition", help="where the jobs run (default: the spec's default partition)")
    parser.add_argument("--steps", type=int, default=60, help="DDP steps per run")
    parser.add_argument("--only", default=ALL_PARTS, help="which parts: health, ddp, spot, kill, launch")
    parser.add_argument("--quick", action="store_true",
                        help="the health check times only (with --only launch: each launch path once)")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    try:
        spec, where, live = target(args.cluster, args.partition)
    except SlurmforgeError as exc:
        print(f"ml_bench: {exc}", file=sys.stderr)
        return 2
    # nodes in service with a machine (not one on its way to power save: its container goes)
    nodes = sorted(n for n in live.running_containers() & {n for p in spec.pools for n in node_names(spec, p)}
                   if live.slurm_state(n) in IN_SERVICE)
    ok = check_times(live, nodes)
    if not args.quick and "health" in parts:
        ok &= sick_nodes(live, where.victim, where.partition, args.runs)
    if not args.quick and "ddp" in parts:
        ok &= ddp_scaling(live, where.partition, args.steps)
    if not args.quick and "spot" in parts:
        ok &= resumed(live, "notice", args.runs, where.partition)
    if not args.quick and "kill" in parts:
        ok &= resumed(live, "kill", args.runs, where.partition)
    if "launch" in parts and not (args.quick and args.only == ALL_PARTS):
        ok &= launch_paths(live, 1 if args.quick else args.runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
