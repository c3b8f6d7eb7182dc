"""Controller failover on the running local cluster, measured (the controller survives).

1. failover, --cycles times: the primary controller's container killed (SIGKILL) under a
   running 4-task job array; timed: until the backup accepts a submission (takeover), and,
   once the primary's container is started again, until its slurmctld is in control
   (handback); counted: every job of the cycle (array tasks, the job submitted to the
   backup) COMPLETED in sacct, and where the scheduler service led;
2. slurmctld kill -9, --cycles times: the primary's slurmctld SIGKILLed; timed until it
   answers `scontrol ping` again (systemd's restart drop-in).

    .venv/bin/python bench/failover_bench.py [--cluster dev] [--cycles 10] [--partition ml-cpu] [--quick]

Needs a cluster with head.backup_controller (examples/local.yaml has one). Goals: takeover
median and max <= 30 s, 0 jobs and 0 accounting records lost, slurmctld back <= 10 s.
Exits 1 when a goal is missed, 2 when the cluster cannot be used. `--quick`
(tests/integration/test_controller_failover.py): two failovers, the second right after the
first's handback (a backup that held control must be able to take it again: the case the
first 10-cycle run found broken), and one slurmctld kill.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.harness

from slurmforge.errors import SlurmforgeError  # noqa: E402
from slurmforge.hosts import controller_names  # noqa: E402
from tests.harness.faults import Failover, JobNodes, controller_failover, repeat, target  # noqa: E402
from tests.harness.live import LiveCluster, wait_until  # noqa: E402

TAKEOVER_GOAL = 30.0
RESTART_GOAL = 10.0


def failovers(live: LiveCluster, backup: str, where: JobNodes, cycles: int) -> list[Failover | str]:
    print(f"{'cycle':>5} {'takeover s':>11} {'handback s':>11} {'jobs COMPLETED':>15} {'service led':>20}", flush=True)

    def row(f: Failover) -> str:
        led = f"backup{'+' if f.led[0] else '-'} primary{'+' if f.led[1] else '-'}"
        return (f"{f.takeover:11.1f} {f.handback:11.1f} {len(f.jobs) - f.lost:>13}/{len(f.jobs)} {led:>20}"
                + (f"  jobs: {f.jobs}" if f.lost else ""))

    return repeat(cycles, lambda: controller_failover(live, backup, where), row)


def restarts(live: LiveCluster, cycles: int) -> list[float]:
    out = []
    print(f"\n{'kill -9':>7} {'slurmctld answers after':>24}", flush=True)
    for cycle in range(1, cycles + 1):
        pid = live.root("systemctl show -p MainPID --value slurmctld").strip()
        live.root(f"kill -9 {pid}")
        killed = time.monotonic()
        wait_until(lambda: "is UP" in live.root("scontrol ping || true").split("\n")[0], 60,
                   "slurmctld answering", every=0.2)
        out.append(time.monotonic() - killed)
        print(f"{cycle:>7} {out[-1]:22.1f} s", flush=True)
        wait_until(lambda: live.root("systemctl is-active slurmctld || true").strip() == "active", 30, "active")
    return out


def verdict(results: list[Failover | str], back: list[float]) -> bool:
    done = [f for f in results if isinstance(f, Failover)]
    takeovers = [f.takeover for f in done]
    lost, jobs = sum(f.lost for f in done), sum(len(f.jobs) for f in done)
    ok_takeover = bool(done) and len(done) == len(results) and max(takeovers) <= TAKEOVER_GOAL
    ok_jobs = bool(done) and lost == 0 and all(all(f.led) for f in done)
    ok_back = bool(back) and max(back) <= RESTART_GOAL
    if takeovers:
        handbacks = [f.handback for f in done]
        print(f"\nprimary lost -> backup takes submissions over {len(done)} cycle(s): median "
              f"{statistics.median(takeovers):.1f} s, max {max(takeovers):.1f} s (goal <= {TAKEOVER_GOAL:.0f} s): "
              f"{'ok' if ok_takeover else 'MISSED'}")
        print(f"primary started -> in control again: median {statistics.median(handbacks):.1f} s, "
              f"max {max(handbacks):.1f} s")
    print(f"jobs and accounting records lost: {lost} of {jobs} (goal 0): {'ok' if ok_jobs else 'MISSED'}")
    if back:
        print(f"slurmctld kill -9 -> answering over {len(back)} run(s): median {statistics.median(back):.1f} s, "
              f"max {max(back):.1f} s (goal <= {RESTART_GOAL:.0f} s): {'ok' if ok_back else 'MISSED'}")
    return ok_takeover and ok_jobs and ok_back


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", help="the local cluster (default: the only one)")
    parser.add_argument("--cycles", type=int, default=10, help="failovers, and slurmctld kills")
    parser.add_argument("--partition", help="where the jobs run (default: the spec's default partition)")
    parser.add_argument("--quick", action="store_true", help="two failovers, one slurmctld kill")
    args = parser.parse_args(argv)
    failover_cycles, kills = (2, 1) if args.quick else (args.cycles, args.cycles)
    try:
        spec, where, live = target(args.cluster, args.partition)
        names = controller_names(spec)
        if len(names) < 2:
            raise SlurmforgeError(f"cluster {spec.name} has no backup controller: set head.backup_controller: true "
                                  "and run `slurmforge up --local` again")
    except SlurmforgeError as exc:
        print(f"failover_bench: {exc}", file=sys.stderr)
        return 2
    print(f"cluster {spec.name}: primary {names[0]}, backup {names[1]}; jobs of {live.user} on {where.nodes} "
          f"({where.partition}); {failover_cycles} failover(s), then {kills} slurmctld kill(s)\n", flush=True)
    results = failovers(live, names[1], where, failover_cycles)
    back = restarts(live, kills)
    return 0 if verdict(results, back) else 1


if __name__ == "__main__":
    sys.exit(main())
