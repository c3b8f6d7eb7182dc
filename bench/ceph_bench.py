"""Ceph on the local cluster, measured: the Ceph play of a rollout that makes Ceph from
nothing (monitor, manager, 3 OSDs, MDS, pools, CephFS), and the recovery after one OSD
stops while data is written (stop -> I/O active again -> OSD started -> active+clean).

    .venv/bin/python bench/ceph_bench.py SPEC [--fresh] [--mb 64] [--quick]

SPEC is a local spec with storage.ceph (e.g. examples/local.yaml or a copy with its own
name and subnet). `--fresh` removes the cluster's Ceph host containers and their data
first, so `up` makes Ceph anew (the cluster's keys stay; Slurm nodes stay up). Without
it, `up` converges an existing cluster and only the recovery is measured. `--quick`
(tests/integration/test_bench_quick.py) runs no `up`: only the recovery, with 8 MiB, on
the running cluster. The stopped OSD is started again and the data removed, also when a
step fails. Exits 1 when the fault's step fails or a wait times out, 2 when SPEC has no
Ceph or its cluster is not up (--quick).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.errors import SlurmforgeError  # noqa: E402
from slurmforge.hosts import Host, HostRole  # noqa: E402
from slurmforge.inventory import read_inventory  # noqa: E402
from slurmforge.local.podman import Podman  # noqa: E402
from slurmforge.local.provider import LocalProvider  # noqa: E402
from slurmforge.local.up import CEPH_PLAY, up  # noqa: E402
from slurmforge.rollout import Progress  # noqa: E402
from slurmforge.spec import Cluster, load_spec  # noqa: E402
from slurmforge.state_dirs import default_inventory  # noqa: E402
from tests.harness.ceph_probe import CephProbe  # noqa: E402

MB, QUICK_MB = 64, 8


class Phases:
    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        print(f"  {name}: {time.monotonic() - started:.1f} s", flush=True)

    def event(self, progress: Progress) -> None:
        pass

    def note(self, text: str) -> None:
        print(f"  {text}", flush=True)


def remove_ceph(spec_path: Path, podman: Podman) -> None:
    """Ceph hosts and their data go; the Slurm nodes let go of the old mount (the rollout
    mounts the new file system)."""
    spec = load_spec(spec_path)
    assert spec.storage.ceph is not None, f"{spec_path} has no storage.ceph"
    provider = LocalProvider(spec, image="", podman=podman)
    for host in provider.hosts():
        info = podman.container(host.name)
        if host.role is not HostRole.CEPH and info is not None and info.is_running:
            podman.exec(host.name, ["umount", "-l", spec.storage.ceph.mount], check=False)
    for name in provider.ceph_names():
        podman.remove_container(name)
        shutil.rmtree(provider.ceph_data(name), ignore_errors=True)
    print(f"removed {len(provider.ceph_names())} Ceph host(s) of {spec.name} and their data")


@dataclass
class Recovery:
    noticed: float = 0.0
    """osd.0 stopped -> Ceph reports it degraded."""
    serving: float = 0.0
    """osd.0 stopped -> every placement group active (degraded)."""
    recovery: float = 0.0
    """osd.0 started -> active+clean."""
    health: str = ""


def osd_fault(podman: Podman, spec: Cluster, hosts: list[Host], mb: int) -> Recovery:
    """osd.0 stopped while data is written, then started; started again and the data removed
    whatever fails."""
    assert spec.storage.ceph is not None
    storage = next(h.name for h in hosts if h.role is HostRole.CEPH)
    node = next(h.name for h in hosts if h.role is HostRole.COMPUTE and not h.dynamic)
    probe = CephProbe(podman, storage)
    probe.wait("is_clean")
    path = f"{spec.storage.ceph.mount.rstrip('/')}/.ceph-bench-{time.time_ns()}"
    result, stopped = Recovery(), False
    try:
        podman.exec(node, ["dd", "if=/dev/urandom", f"of={path}", "bs=1M", f"count={mb}", "conv=fsync"], timeout=300)
        probe.osd_service(0, "stop")
        stopped = True
        _, result.noticed = probe.wait("is_degraded", timeout=300, interval=0.5)
        _, serving = probe.wait("is_serving", timeout=300, interval=0.5)
        result.serving = serving + result.noticed
        podman.exec(node, ["dd", "if=/dev/urandom", f"of={path}.degraded", "bs=1M", f"count={mb}", "conv=fsync"],
                    timeout=300)
        probe.osd_service(0, "start")
        stopped = False
        state, result.recovery = probe.wait("is_clean", timeout=900, interval=0.5)
        result.health = state.health
    finally:
        if stopped:
            probe.osd_service(0, "start")
        podman.exec(node, ["rm", "-f", path, f"{path}.degraded"], check=False)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("--fresh", action="store_true", help="make Ceph anew (removes its containers and data)")
    parser.add_argument("--mb", type=int, help=f"data written before the fault (default {MB}, --quick {QUICK_MB})")
    parser.add_argument("--quick", action="store_true", help="only the OSD fault, on the running cluster, no `up`")
    args = parser.parse_args(argv)
    mb = args.mb or (QUICK_MB if args.quick else MB)
    spec = load_spec(args.spec)
    if spec.storage.ceph is None:
        print(f"ceph_bench: {args.spec} has no storage.ceph", file=sys.stderr)
        return 2
    podman = Podman()
    total = ceph_play = None
    if args.quick:
        if args.fresh or not (default_inventory(spec.name) / "cluster.yaml").exists():
            print(f"ceph_bench: --quick measures the running cluster {spec.name} as it is (no --fresh, no `up`): "
                  "bring it up first", file=sys.stderr)
            return 2
        inventory = default_inventory(spec.name)
    else:
        if args.fresh:
            remove_ceph(args.spec, podman)
        started = time.monotonic()
        report = up(args.spec, Phases(), run_sample_job=False, full_rollout=args.fresh)  # nodes remount
        total = time.monotonic() - started
        plays = report.rollout.plays if report.rollout else {}
        ceph_play = next((s for p, s in plays.items() if p.startswith(CEPH_PLAY)), None)
        inventory = report.inventory
    _, hosts = read_inventory(inventory)
    try:
        r = osd_fault(podman, spec, hosts, mb)
    except SlurmforgeError as exc:
        print(f"ceph_bench: {exc}", file=sys.stderr)
        return 1

    print(f"\nCeph bench on {spec.name} ({spec.storage.ceph.osd_count} OSDs, replication "
          f"{spec.storage.ceph.replication}, load average {Path('/proc/loadavg').read_text().split()[0]})")
    if total is not None:
        print(f"  up total                                    {total:6.1f} s")
        print(f"  Ceph play of the rollout                    {ceph_play:6.1f} s" if ceph_play is not None else
              "  Ceph play of the rollout                       - (nothing to roll out: use --fresh)")
    print(f"  osd.0 stopped -> Ceph reports it degraded   {r.noticed:6.1f} s")
    print(f"  osd.0 stopped -> every PG active (degraded) {r.serving:6.1f} s")
    print(f"  osd.0 started ({mb} MiB written degraded) -> active+clean {r.recovery:6.1f} s  ({r.health})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
