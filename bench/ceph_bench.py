"""Ceph on the local cluster, measured: the Ceph play of a rollout that makes Ceph from
nothing (monitor, manager, 3 OSDs, MDS, pools, CephFS), and the recovery after one OSD
stops while data is written (stop -> I/O active again -> OSD started -> active+clean).

    .venv/bin/python bench/ceph_bench.py SPEC [--fresh] [--mb 64]

SPEC is a local spec with storage.ceph (e.g. examples/local.yaml or a copy with its own
name and subnet). `--fresh` removes the cluster's Ceph host containers and their data
first, so `up` makes Ceph anew (the cluster's keys stay; Slurm nodes stay up). Without
it, `up` converges an existing cluster and only the recovery is measured.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.inventory import read_inventory  # noqa: E402
from slurmforge.local.ceph import CephProbe  # noqa: E402
from slurmforge.local.podman import Podman  # noqa: E402
from slurmforge.local.up import CEPH_PLAY, up  # noqa: E402
from slurmforge.providers.base import HostRole  # noqa: E402
from slurmforge.providers.local import LocalProvider  # noqa: E402
from slurmforge.rollout import Progress  # noqa: E402
from slurmforge.spec import load_spec  # noqa: E402


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("--fresh", action="store_true", help="make Ceph anew (removes its containers and data)")
    parser.add_argument("--mb", type=int, default=64, help="data written before the fault")
    args = parser.parse_args()
    podman = Podman()
    if args.fresh:
        remove_ceph(args.spec, podman)
    started = time.monotonic()
    report = up(args.spec, Phases(), run_sample_job=False, full_rollout=args.fresh)  # nodes remount
    total = time.monotonic() - started
    plays = report.rollout.plays if report.rollout else {}
    ceph_play = next((s for p, s in plays.items() if p.startswith(CEPH_PLAY)), None)

    _, hosts = read_inventory(report.inventory)
    storage = next(h.name for h in hosts if h.role is HostRole.CEPH)
    node = next(h.name for h in hosts if h.role is HostRole.COMPUTE and not h.dynamic)
    spec = load_spec(args.spec)
    assert spec.storage.ceph is not None
    probe = CephProbe(podman, storage)
    probe.wait("is_clean")
    path = f"{spec.storage.ceph.mount.rstrip('/')}/.ceph-bench-{time.time_ns()}"
    podman.exec(node, ["dd", "if=/dev/urandom", f"of={path}", "bs=1M", f"count={args.mb}", "conv=fsync"],
                timeout=300)
    probe.osd_service(0, "stop")
    _, noticed = probe.wait("is_degraded", timeout=300, interval=0.5)
    _, serving = probe.wait("is_serving", timeout=300, interval=0.5)
    serving += noticed
    podman.exec(node, ["dd", "if=/dev/urandom", f"of={path}.degraded", "bs=1M", f"count={args.mb}",
                       "conv=fsync"], timeout=300)
    probe.osd_service(0, "start")
    state, recovery = probe.wait("is_clean", timeout=900, interval=0.5)
    podman.exec(node, ["rm", "-f", path, f"{path}.degraded"])

    print(f"\nCeph bench on {spec.name} ({spec.storage.ceph.osd_count} OSDs, replication "
          f"{spec.storage.ceph.replication}, load average {Path('/proc/loadavg').read_text().split()[0]})")
    print(f"  up total                                    {total:6.1f} s")
    print(f"  Ceph play of the rollout                    {ceph_play:6.1f} s" if ceph_play is not None else
          "  Ceph play of the rollout                       - (nothing to roll out: use --fresh)")
    print(f"  osd.0 stopped -> Ceph reports it degraded   {noticed:6.1f} s")
    print(f"  osd.0 stopped -> every PG active (degraded) {serving:6.1f} s")
    print(f"  osd.0 started ({args.mb} MiB written degraded) -> active+clean {recovery:6.1f} s  ({state.health})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
