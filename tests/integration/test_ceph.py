"""Issue 7, Ceph: a real Ceph (mon, mgr, 3 OSDs on BlueStore files, MDS) on the local
cluster, CephFS mounted with ceph-fuse on every Slurm node. A file a job writes on one
node is read by a job on another; stopping one OSD while a job writes loses nothing
written before the fault and the mount keeps working."""

from __future__ import annotations

import hashlib
import textwrap
import time

import pytest

from slurmforge.hosts import HostRole
from slurmforge.inventory import read_inventory
from slurmforge.local.podman import Podman
from tests.harness.ceph_probe import CephProbe
from tests.harness.faults import in_service_first
from tests.integration.conftest import Cluster_

pytestmark = pytest.mark.integration

WRITER = textwrap.dedent('''
    import os, sys, time
    path, count, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for i in range(count):
        os.write(fd, f"{i:06d} {time.time():.3f}\\n".encode())
        os.fsync(fd)  # on the OSDs before the next record
        time.sleep(pause)
    os.close(fd)
    print(f"wrote {count}")
''')


@pytest.fixture(scope="module")
def ceph(cluster: Cluster_) -> tuple[Cluster_, CephProbe, list[str]]:
    """The cluster, a probe on its first Ceph host, and two static compute nodes."""
    if cluster.spec.storage.ceph is None:
        pytest.skip("the spec has no storage.ceph")
    _, hosts = read_inventory(cluster.report.inventory)
    storage = [h.name for h in hosts if h.role is HostRole.CEPH]
    nodes = [h.name for h in hosts if h.role is HostRole.COMPUTE and not h.dynamic]
    assert storage and len(nodes) >= 2, "the Ceph tests need a Ceph host and two static compute nodes"
    probe = CephProbe(Podman(), storage[0])
    state, _ = probe.wait("is_clean", timeout=300)
    print(f"ceph before the tests: {state}")
    return cluster, probe, nodes[:2]


def data_dir(cluster: Cluster_, user: str = "alice") -> str:
    return f"{cluster.spec.storage.ceph.mount.rstrip('/')}/{user}"  # type: ignore[union-attr]


def sha256_on(cluster: Cluster_, node: str, path: str) -> str:
    res = cluster.login(f"srun -A research -w {node} sha256sum {path}")
    assert res.returncode == 0, res.stderr
    return res.stdout.split()[0]


def test_a_file_written_by_a_job_on_one_node_is_read_by_a_job_on_another(ceph: tuple[Cluster_, CephProbe,
                                                                                     list[str]]) -> None:
    cluster, _, (first, second) = ceph
    path = f"{data_dir(cluster)}/crossnode-{time.time_ns()}.bin"
    res = cluster.login(f"srun -A research -w {first} bash -c 'head -c 8M /dev/urandom > {path} && sha256sum {path}'")
    assert res.returncode == 0, res.stderr
    written = res.stdout.split()[0]
    assert sha256_on(cluster, second, path) == written
    cluster.login(f"rm -f {path}")


def job_state(cluster: Cluster_, job: str) -> str:
    res = cluster.login(f"sacct -j {job} -X -n -P -o State,ExitCode")
    return res.stdout.strip().splitlines()[0] if res.stdout.strip() else "PENDING|"


def read_records(cluster: Cluster_, node: str, path: str) -> list[str]:
    """The complete lines of the file as another node sees them."""
    res = cluster.run(node, f"cat {path}", user="alice")
    assert res.returncode == 0, res.stderr
    return [line for line in res.stdout.split("\n")[:-1]]


def test_stopping_an_osd_while_a_job_writes_loses_nothing(ceph: tuple[Cluster_, CephProbe, list[str]]) -> None:
    cluster, probe, (first, second) = ceph
    count, pause = 500, 0.05
    path = f"{data_dir(cluster)}/fault-{time.time_ns()}.log"
    cluster.login(f"cat > ceph_writer.py <<'EOF'\n{WRITER}EOF")
    res = cluster.login(f"sbatch --parsable -A research -w {first} -o ceph-writer-%j.out "
                        f"--wrap 'python3 ceph_writer.py {path} {count} {pause}'")
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]

    deadline = time.monotonic() + 180
    before: list[str] = []
    while len(before) < 100:  # records on the OSDs (fsync'd), seen from another node
        assert time.monotonic() < deadline, f"the writer job {job} wrote {len(before)} records in 180 s"
        time.sleep(1)
        before = read_records(cluster, second, path) if cluster.run(second, f"test -e {path}").returncode == 0 else []
    victim = 0
    probe.osd_service(victim, "stop")
    fault_at = time.time()
    try:
        state, noticed = probe.wait("is_degraded", timeout=120)
        state, seconds = probe.wait("is_serving", timeout=120)
        print(f"osd.{victim} stopped after record {len(before) - 1}; degraded after {noticed:.1f} s, every PG "
              f"active after {noticed + seconds:.1f} s: {state}")
        assert state.osds_up == state.osds - 1

        deadline = time.monotonic() + 300
        while (status := job_state(cluster, job)).split("|")[0] in ("PENDING", "RUNNING", "COMPLETING"):
            assert time.monotonic() < deadline, f"the writer job {job} is still {status} 300 s after the fault"
            time.sleep(2)
        assert status == "COMPLETED|0:0", f"the writer job ended {status}"

        after = read_records(cluster, second, path)
        assert after[:len(before)] == before, "a record written before the fault changed or is gone"
        assert [int(line.split()[0]) for line in after] == list(range(count)), "records missing or out of order"
        assert any(float(line.split()[1]) > fault_at for line in after), "nothing was written while the OSD was down"

        probe_path = f"{data_dir(cluster)}/degraded-{time.time_ns()}.bin"
        res = cluster.login(f"srun -A research -w {second} bash -c "
                            f"'head -c 1M /dev/urandom > {probe_path} && sha256sum {probe_path}'")
        assert res.returncode == 0, res.stderr
        assert sha256_on(cluster, first, probe_path) == res.stdout.split()[0], "the degraded mount lost a write"
        cluster.login(f"rm -f {probe_path}")
    finally:
        probe.osd_service(victim, "start")
        state, recovery = probe.wait("is_clean", timeout=600)
        print(f"osd.{victim} started again: active+clean after {recovery:.1f} s ({state})")
    health = probe.ceph("health").strip()
    assert not health.startswith("HEALTH_ERR"), health
    digest = hashlib.sha256("\n".join(after).encode()).hexdigest()[:12]
    print(f"{len(after)} records intact (sha256 {digest}), {len(before)} of them written before the fault")
    cluster.login(f"rm -f {path}")


@pytest.mark.long
def test_ceph_comes_back_by_itself_after_its_host_restarts(ceph: tuple[Cluster_, CephProbe, list[str]]) -> None:
    """A power cycle of the Ceph host, no rollout: the daemons start at boot from their
    persisted data, a node that kept its mount reads on, and a node whose mount went
    away mounts again at first access (the fstab automount). The nodes whose health checks
    drained them while CephFS was away (a storage outage, not sick machines) are all back
    in service by themselves, on the same machines: none was replaced."""
    cluster, probe, (first, second) = ceph
    live = cluster.live()
    fixed = set(cluster.rolled_out_hosts())
    compute = [h.name for h in read_inventory(cluster.report.inventory)[1]
               if h.role is HostRole.COMPUTE and h.name in fixed]
    machines = {n: (c.id if (c := live.podman.container(n)) else "") for n in compute}
    path = f"{data_dir(cluster)}/restart-{time.time_ns()}.bin"
    res = cluster.login(f"srun -A research -w {first} bash -c 'head -c 4M /dev/urandom > {path} && sha256sum {path}'")
    assert res.returncode == 0, res.stderr
    written = res.stdout.split()[0]
    podman = Podman()
    started = time.monotonic()
    podman.run(["stop", "-t", "30", probe.host])
    try:  # lazy: a FUSE unmount waits for the MDS, which is down
        umount = cluster.run(second, f"umount -l {cluster.spec.storage.ceph.mount}")  # type: ignore[union-attr]
        assert umount.returncode == 0, umount.stderr
    finally:
        podman.run(["start", probe.host])
    state, _ = probe.wait("is_clean", timeout=300)
    print(f"{probe.host} restarted: Ceph active+clean {time.monotonic() - started:.1f} s after the stop ({state})")
    assert sha256_on(cluster, first, path) == written
    # the unmounted node mounts again at its next access; an access while the restarted
    # monitors still hand out the old maps fails (ceph-fuse: no MDS) and the next one mounts
    deadline, tries, got = time.monotonic() + 90, 0, None
    while time.monotonic() < deadline:
        tries += 1
        res = cluster.run(second, f"sha256sum {path}", user="alice")
        if res.returncode == 0 and res.stdout.split():
            got = res.stdout.split()[0]
            break
        time.sleep(2)
    print(f"{second}: mounted again at access {tries}")
    assert got == written, res.stderr
    cluster.login(f"rm -f {path}")
    in_service_first(live, ",".join(compute), limit=150)
    replaced = [n for n in compute if (c := live.podman.container(n)) is None or c.id != machines[n]]
    assert not replaced, f"replaced during the Ceph outage: {replaced}"
