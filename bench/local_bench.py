"""Local cluster bring-up, measured: cold (debootstrap + image build included), warm
(image cached) and an idempotent re-run, each up to the first job done.

Runs on a cluster of its own (`bench`, subnet 10.89.10.0/24) with images of its own
(namespace slurmforge-bench-<run>), so it never touches a cluster or an image cache
someone is using. Everything it creates is removed at the end.

    .venv/bin/python bench/local_bench.py [--skip-cold]
    .venv/bin/python bench/local_bench.py --quick [--spec examples/local.yaml]
    .venv/bin/python bench/local_bench.py --policy [--runs 3] [--spec examples/local.yaml]
    .venv/bin/python bench/local_bench.py --restart [--runs 3] [--spec examples/local.yaml]

Goals: warm bring-up -> first job done <= 120 s on 2 cores (only head nodes, Ceph hosts and
static nodes are made and rolled out; a dynamic node is made when a job needs it); an
idempotent re-run's rollout <= 1/3 of the first rollout.

`--quick` (tests/integration/test_bench_quick.py) builds nothing: it times one `up` of the
spec's cluster, which must be running already (the integration suite's `dev`), with
nothing changed, and checks that every node was skipped by its recorded rollout digest
and nothing changed. An `up` that converges the cluster runs first, untimed: a static node
the scheduler service made again (it replaced a sick or dead machine) has no rollout mark
yet, and is rolled out once. It refuses a cluster whose
controller is not running rather than bring one up.

`--policy` times, on the spec's running cluster, `--runs` idempotent `up`s and as many
policy-only ones (the preemption exempt time changed back and forth: slurm.conf alone), each
to its end (testinfra's validation and the sample job included), and checks that each policy
`up` rolled out the controllers alone and the new value is in force. Goals: policy-only
`up` <= 45 s, idle `up` <= 14 s (medians). The cluster is left on the spec as given.

`--restart` times, on the spec's running cluster, `--runs` host restarts: every process of every
fixed host killed, conmon first (what a machine's reboot or a restore leaves: podman lists the
containers running, nothing runs), then `up` to its end - testinfra's validation and the sample
job included. Checks that no machine was made again (the same container, its disk kept), the
rollout changed nothing, and no node was drained by its health check (storage came up first).
Goal: <= 120 s (median).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.bringup import fixed_hosts  # noqa: E402
from slurmforge.hosts import controller_name  # noqa: E402
from slurmforge.inventory import read_inventory  # noqa: E402
from slurmforge.local.podman import Podman  # noqa: E402
from slurmforge.local.provider import LocalProvider  # noqa: E402
from slurmforge.local.up import UpReport, up  # noqa: E402
from slurmforge.rollout import Progress  # noqa: E402
from slurmforge.spec import load_spec  # noqa: E402
from slurmforge.state_dirs import SECRETS_ROOT, default_inventory  # noqa: E402
from tests.harness.faults import kill_machines  # noqa: E402

WARM_GOAL_S = 120.0
POLICY_GOAL_S, IDLE_GOAL_S = 45.0, 14.0
RESTART_GOAL_S = 120.0


class Timings:
    def __init__(self) -> None:
        self.phases: list[tuple[str, float]] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        self.phases.append((name, time.monotonic() - started))

    def event(self, progress: Progress) -> None:
        pass

    def note(self, text: str) -> None:
        pass


def bench_spec(directory: Path) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["name"] = "bench"
    data["target"]["subnet"] = "10.89.10.0/24"
    path = directory / "bench.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(spec: Path, namespace: str, label: str) -> tuple[float, UpReport, Timings]:
    timings = Timings()
    started = time.monotonic()
    report = up(spec, timings, run_sample_job=True, image_namespace=namespace)
    total = time.monotonic() - started
    assert report.job_output, f"{label}: the sample job printed nothing"
    print(f"\n{label}: {total:.1f} s to the first job done")
    for name, seconds in timings.phases:
        print(f"  {seconds:7.1f} s  {name}")
    return total, report, timings


def remove_cluster(spec: Path) -> None:
    LocalProvider(load_spec(spec), image="", podman=Podman()).delete()


def cleanup(spec: Path, namespace: str) -> None:
    remove_cluster(spec)
    podman = Podman()
    for kind in ("node", "base"):
        for line in podman.run(["images", "--format", "{{.Repository}}:{{.Tag}}"]).splitlines():
            if line.startswith(f"localhost/{namespace}-{kind}:"):
                podman.run(["rmi", "-f", line], check=False)
    shutil.rmtree(SECRETS_ROOT / "bench", ignore_errors=True)
    shutil.rmtree(default_inventory("bench"), ignore_errors=True)


def quick(spec_path: Path) -> int:
    """One idempotent `up` of the running cluster, after one that converges it: timed, every
    node skipped, nothing changed."""
    spec = load_spec(spec_path)
    if not running(spec_path, "--quick"):
        return 2
    # converged first: a node the scheduler service made again (a static node it replaced)
    # carries no rollout mark yet, and the next `up` rolls it out once - not what is timed
    up(spec_path, Timings(), run_sample_job=False)
    timings = Timings()
    started = time.monotonic()
    report = up(spec_path, timings, run_sample_job=False)
    total = time.monotonic() - started
    for name, seconds in timings.phases:
        print(f"  {seconds:7.1f} s  {name}")
    hosts = len(fixed_hosts(read_inventory(report.inventory)[1]))  # what a rollout reaches
    skipped = report.rollout.skipped_hosts if report.rollout else 0
    changed = report.rollout.total_changed if report.rollout else -1
    ok = skipped == hosts and changed == 0
    print(f"idempotent up of {spec.name}: {total:.1f} s; {skipped} of {hosts} node(s) skipped by their rollout "
          f"digest, changed={changed}: {'ok' if ok else 'NOT IDEMPOTENT'}")
    return 0 if ok else 1


def running(spec_path: Path, mode: str) -> bool:
    spec = load_spec(spec_path)
    controller = Podman().container(controller_name(spec))
    if controller is None or not controller.is_running or not (default_inventory(spec.name) / "cluster.yaml").exists():
        print(f"local_bench {mode}: cluster {spec.name} is not running; it re-times `up` of a running cluster "
              "and never brings one up", file=sys.stderr)
        return False
    return True


def policy(spec_path: Path, runs: int) -> int:
    """Idle and policy-only `up`s of the running cluster, alternating: medians against the goals."""
    import statistics

    from slurmforge.hosts import controller_names

    spec = load_spec(spec_path)
    text = spec_path.read_text()
    old = 'exempt_time: "00:00:10"'
    if old not in text:
        print(f"local_bench --policy: {spec_path} has no {old} to change", file=sys.stderr)
        return 2
    controllers = set(controller_names(spec))
    up(spec_path, Timings(), run_sample_job=True)  # converged first (see quick)
    idle, changed, wrong = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        edited = Path(tmp) / spec_path.name  # the same name: rendered files name their source
        for run_no in range(runs):
            started = time.monotonic()
            up(spec_path, Timings(), run_sample_job=True)
            idle.append(time.monotonic() - started)
            value = f"00:00:{11 + run_no:02d}"
            edited.write_text(text.replace(old, f'exempt_time: "{value}"'))
            started = time.monotonic()
            report = up(edited, Timings(), run_sample_job=True)
            changed.append(time.monotonic() - started)
            hosts = len(fixed_hosts(read_inventory(report.inventory)[1]))
            only = report.rollout is not None and report.rollout.skipped_hosts == hosts - len(controllers)
            in_force = value in Podman().run(["exec", controller_name(spec), "scontrol", "show", "config"])
            print(f"  run {run_no + 1}: idle up {idle[-1]:5.1f} s; policy-only up {changed[-1]:5.1f} s, "
                  f"controllers alone: {only}, in force: {in_force}")
            if not (only and in_force):
                wrong.append(run_no + 1)
            up(spec_path, Timings(), run_sample_job=False)  # back, untimed
    idle_m, changed_m = statistics.median(idle), statistics.median(changed)
    print(f"idle up median {idle_m:.1f} s (goal <= {IDLE_GOAL_S:.0f} s); policy-only up median {changed_m:.1f} s "
          f"(goal <= {POLICY_GOAL_S:.0f} s) over {runs} run(s)")
    return 0 if not wrong and idle_m <= IDLE_GOAL_S and changed_m <= POLICY_GOAL_S else 1


def restart(spec_path: Path, runs: int) -> int:
    """Host restarts of the running cluster, each timed through `up` to the sample job."""
    import statistics

    spec = load_spec(spec_path)
    up(spec_path, Timings(), run_sample_job=False)  # converged first (see quick)
    podman = Podman()
    totals, wrong = [], []
    for run_no in range(runs):
        names = [h.name for h in fixed_hosts(read_inventory(default_inventory(spec.name))[1])]
        ids = {n: podman.run(["inspect", n, "--format", "{{.Id}}"]).strip() for n in names}
        kill_machines(podman, names)
        timings = Timings()
        started = time.monotonic()
        report = up(spec_path, timings, run_sample_job=True)
        totals.append(time.monotonic() - started)
        again = [n for n in names if podman.run(["inspect", n, "--format", "{{.Id}}"]).strip() != ids[n]]
        changed = report.rollout.total_changed if report.rollout else -1
        drained = podman.run(["exec", controller_name(spec), "sinfo", "-h", "-N", "-R", "-o", "%N %E"],
                             check=False).strip()
        health = sorted({line.split()[0] for line in drained.splitlines() if "health:" in line})
        phases = ", ".join(f"{name.split(' (')[0]} {seconds:.1f} s" for name, seconds in timings.phases
                           if seconds >= 1)
        print(f"  run {run_no + 1}: {totals[-1]:5.1f} s to the sample job done ({phases}); made again: "
              f"{', '.join(again) or 'none'}; rollout changed {changed}; "
              f"drained by health: {', '.join(health) or 'none'}")
        if again or changed != 0 or health or not report.job_output:
            wrong.append(run_no + 1)
    median = statistics.median(totals)
    print(f"host restart -> cluster in service (sample job done): median {median:.1f} s, max {max(totals):.1f} s "
          f"over {runs} run(s) (goal <= {RESTART_GOAL_S:.0f} s); runs with a machine made again, a change or a "
          f"health drain: {wrong or 'none'}")
    return 0 if not wrong and median <= RESTART_GOAL_S else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-cold", action="store_true", help="reuse the shared image cache (no image build)")
    parser.add_argument("--quick", action="store_true", help="time an idempotent `up` of the running cluster")
    parser.add_argument("--policy", action="store_true", help="time idle and policy-only `up`s of the running cluster")
    parser.add_argument("--restart", action="store_true",
                        help="time host restarts of the running cluster (every process killed) through `up`")
    parser.add_argument("--runs", type=int, default=3, help="with --policy or --restart: runs of each (3)")
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "local.yaml",
                        help="with --quick, --policy or --restart: the running cluster's spec")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("the local cluster needs root", file=sys.stderr)
        return 2
    if args.quick:
        return quick(args.spec)
    if args.policy:
        return policy(args.spec, args.runs) if running(args.spec, "--policy") else 2
    if args.restart:
        return restart(args.spec, args.runs) if running(args.spec, "--restart") else 2
    namespace = "slurmforge" if args.skip_cold else f"slurmforge-bench-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp:
        spec = bench_spec(Path(tmp))
        try:
            cold = None
            if not args.skip_cold:
                cold, _, _ = run(spec, namespace, "cold (image build included)")
                remove_cluster(spec)
            warm, report, _ = run(spec, namespace, "warm (image cached)")
            first_rollout = report.rollout.seconds if report.rollout else 0.0
            _, report2, _ = run(spec, namespace, "idempotent re-run")
            rerun_rollout = report2.rollout.seconds if report2.rollout else 0.0
            changed = report2.rollout.total_changed if report2.rollout else -1
        finally:
            cleanup(spec, namespace if not args.skip_cold else "no-such-namespace")
    print("\nsummary (2 cores):")
    if cold is not None:
        print(f"  cold bring-up -> first job done : {cold:6.1f} s")
    print(f"  warm bring-up -> first job done : {warm:6.1f} s   (goal <= {WARM_GOAL_S:.0f} s)")
    print(f"  first rollout                   : {first_rollout:6.1f} s")
    print(f"  idempotent re-run rollout       : {rerun_rollout:6.1f} s   "
          f"({rerun_rollout / first_rollout:.2f} of the first; goal <= 0.33), changed={changed}")
    ok = warm <= WARM_GOAL_S and rerun_rollout <= first_rollout / 3 and changed == 0
    print("  goals met" if ok else "  goals NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
