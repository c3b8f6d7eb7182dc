"""A controller outage or a spec change never takes the cluster down (issue 16), on the live
local cluster, each with jobs in flight and counted in `sacct`:

- slurmctld stopped: the scheduler service holds (says so on /metrics), no machine stops;
  the running job finishes, the pending one starts when slurmctld is back;
- a policy change (a partition with a new QoS, preemption on) applied with `up` while a
  2-node job runs: slurmctld takes it live (scontrol reconfigure), sbatch keeps answering,
  the job completes, the policy is in force;
- a config Slurm refuses at load time (injected into the rendered slurm.conf, which the
  validator never sees): the rollout fails with Slurm's reason, slurmctld keeps running on
  the old config, /etc/slurm holds the old file, the next `up` converges;
- a node machine killed under a running job: the job leaves RUNNING within the bound.

Each test restores what it changed (the spec, the rendered files, the killed node).
SLURMFORGE_OUTAGE_SECONDS sets the outage (default 90 s: nine service loops, three times
the service's stability window; bench/never_down_bench.py runs 5-minute outages).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from slurmforge.render import controller_name
from slurmforge.service.main import DEFAULT_PORT
from tests.integration.conftest import SPEC, Cluster_, QuietPhases
from tests.integration.test_elastic import container_running, root, wait_until

pytestmark = pytest.mark.integration

OUTAGE_SECONDS = int(os.environ.get("SLURMFORGE_OUTAGE_SECONDS", "90"))
DEAD_NODE_BOUND = 60
"""Seconds from a node's machine dying to its job leaving RUNNING (docs/service.md)."""
STATIC = ("dev-cpu-01", "dev-cpu-02", "dev-gpu-01")


def sacct_states(cluster: Cluster_, *jobs: str) -> dict[str, str]:
    out = root(cluster, f"sacct -n -X -P -j {','.join(jobs)} -o JobID,State")
    return dict(line.split("|", 1) for line in out.split())


def submit(cluster: Cluster_, args: str) -> str:
    res = cluster.login(f"sbatch --parsable {args}")
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def squeue_state(cluster: Cluster_, job: str) -> str:
    return root(cluster, f"squeue -h -j {job} -o %T 2>/dev/null || true").strip()


def metrics(cluster: Cluster_) -> str:
    address = cluster.run(controller_name(cluster.spec), "hostname -i").stdout.split()[0]
    with urllib.request.urlopen(f"http://{address}:{DEFAULT_PORT}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def up_with(cluster: Cluster_, spec_text: str, tmp_path: Path) -> None:
    """`up` of a changed spec (same cluster, same name), as an admin runs it."""
    from slurmforge.local.up import up

    changed = tmp_path / SPEC.name
    changed.write_text(spec_text)
    up(changed, QuietPhases(), run_sample_job=False)


def test_a_controller_outage_terminates_nothing(cluster: Cluster_) -> None:
    controller = controller_name(cluster.spec)
    running = submit(cluster, f"-N 2 -p ml-cpu -w dev-cpu-[01-02] -o nd-%j.out --wrap 'sleep {OUTAGE_SECONDS + 20}'")
    wait_until(lambda: squeue_state(cluster, running) == "RUNNING", 60, "the 2-node job running")
    before = {n: container_running(n) for n in STATIC}
    assert all(before.values()), before
    since = root(cluster, "date '+%Y-%m-%d %H:%M:%S'").strip()
    cluster.run(controller, "systemctl stop slurmctld")
    try:
        deadline = time.monotonic() + OUTAGE_SECONDS
        held = False
        while time.monotonic() < deadline:
            assert all(container_running(n) for n in STATIC), "a machine was stopped during the outage"
            held = held or 'slurmforge_service_holding{reason="slurm-view"} 1' in metrics(cluster)
            time.sleep(5)
        assert held, "the service never said it was holding back while slurmctld was down"
        log = cluster.run(controller, f"journalctl -u slurmforge-service --no-pager --since '{since}'").stdout
        assert "terminate" not in log and "holding" in log, log[-2000:]
    finally:
        cluster.run(controller, "systemctl start slurmctld")
    wait_until(lambda: cluster.run(controller, "scontrol ping").stdout.count("UP") > 0, 60, "slurmctld back")
    pending = submit(cluster, "-p ml-cpu -o nd-%j.out --wrap 'hostname'")
    wait_until(lambda: set(sacct_states(cluster, running, pending).values()) == {"COMPLETED"},
               OUTAGE_SECONDS + 120, "both jobs COMPLETED")
    assert all(container_running(n) for n in STATIC)


def policy_spec() -> str:
    data = yaml.safe_load(SPEC.read_text())
    data["scheduling"]["qos"] = [{"name": "gpu-small", "priority": 100}, {"name": "urgent", "priority": 1000}]
    data["scheduling"]["preemption"] = {"type": "partition_prio", "mode": "REQUEUE"}
    data["partitions"][1]["qos"] = "gpu-small"
    data["partitions"].append({"name": "ml-urgent", "pools": ["cpu"], "priority_tier": 10, "qos": "urgent",
                               "allow_groups": ["ml-users"]})
    return yaml.safe_dump(data, sort_keys=False)


class SbatchProbe:
    """Submits `sbatch --test-only` every 0.5 s from the login node; counts the seconds
    during which it failed."""

    def __init__(self, cluster: Cluster_) -> None:
        self.cluster, self.failed_at, self.tries = cluster, [], 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            res = self.cluster.login("sbatch --test-only -p ml-cpu --wrap true", timeout=20)
            self.tries += 1
            if res.returncode != 0:
                self.failed_at.append(started)
            self._stop.wait(0.5)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(timeout=30)
        return (max(self.failed_at) - min(self.failed_at) + 0.5) if self.failed_at else 0.0


def test_a_policy_change_is_applied_live(cluster: Cluster_, tmp_path: Path) -> None:
    job = submit(cluster, "-N 2 -p ml-cpu -w dev-cpu-[01-02] -o nd-%j.out --wrap 'sleep 1800'")
    try:
        wait_until(lambda: squeue_state(cluster, job) == "RUNNING", 60, "the 2-node job running")
        since = root(cluster, "date '+%Y-%m-%d %H:%M:%S'").strip()
        probe = SbatchProbe(cluster)
        try:
            up_with(cluster, policy_spec(), tmp_path)
        finally:
            failing = probe.stop()
        print(f"policy change: sbatch failed for {failing:.1f} s over {probe.tries} probes")
        assert failing <= 5, f"sbatch failed for {failing:.1f} s"
        assert sacct_states(cluster, job)[job] == "RUNNING"  # undisturbed (never requeued, never failed)
        # applied by reconfigure (a new slurmctld process takes over), never by stopping the unit
        stops = root(cluster, f"journalctl -u slurmctld --no-pager -q --since '{since}' | grep -c Stopp || true")
        assert stops.strip() == "0", root(cluster, f"journalctl -u slurmctld --no-pager --since '{since}'")
        partition = root(cluster, "scontrol show partition ml-urgent -o")
        assert "QoS=urgent" in partition and "PriorityTier=10" in partition, partition
        assert "QoS=gpu-small" in root(cluster, "scontrol show partition ml-gpu -o")
        assert "preempt/partition_prio" in root(cluster, "scontrol show config | grep ^PreemptType")
    finally:
        root(cluster, f"scancel {job}")
        up_with(cluster, SPEC.read_text(), tmp_path)  # back to the suite's spec
    assert "ml-urgent" not in root(cluster, "sinfo -h -o %P")


def test_a_config_slurm_refuses_keeps_the_old_one_running(cluster: Cluster_, tmp_path: Path) -> None:
    rendered = cluster.report.inventory / "rendered" / "slurm.conf"
    good = rendered.read_text()
    job = submit(cluster, "-p ml-cpu -w dev-cpu-01 -o nd-%j.out --wrap 'sleep 60'")
    # a partition over nodes no NodeName line defines: slurmctld refuses to load it
    rendered.write_text(good + "PartitionName=broken Nodes=dev-nosuch-[1-2] State=UP\n")
    try:
        res = subprocess.run([str(Path(sys.executable).parent / "slurmforge"), "rollout", "--inventory",
                              str(cluster.report.inventory)], capture_output=True, text=True, timeout=900)
    finally:
        rendered.write_text(good)
    said = res.stdout + res.stderr
    assert res.returncode == 4, said
    assert "slurmctld refused the new config and keeps running on the previous one" in said, said
    assert "dev-nosuch" in said or "broken" in said, said  # Slurm's own reason
    assert "Traceback" not in said
    assert "is UP" in root(cluster, "scontrol ping")
    assert "broken" not in root(cluster, "cat /etc/slurm/slurm.conf")  # the old file is back
    assert "broken" not in root(cluster, "sinfo -h -o %P")
    wait_until(lambda: sacct_states(cluster, job).get(job) == "COMPLETED", 120, "the job COMPLETED")
    # the next up converges without --full-rollout: the failed rollout unmarked the controller
    up_with(cluster, SPEC.read_text(), tmp_path)
    assert root(cluster, "cat /etc/slurm/slurm.conf").strip() == good.strip()


def test_a_dead_node_machine_releases_its_job_within_the_bound(cluster: Cluster_) -> None:
    job = submit(cluster, "-N 2 -p ml-cpu -w dev-cpu-[01-02] -o nd-%j.out --requeue --wrap 'sleep 600'")
    wait_until(lambda: squeue_state(cluster, job) == "RUNNING", 60, "the 2-node job running")
    try:
        subprocess.run(["podman", "kill", "dev-cpu-02"], check=True, capture_output=True)
        killed = time.monotonic()
        wait_until(lambda: squeue_state(cluster, job) != "RUNNING", DEAD_NODE_BOUND, "the job leaving RUNNING",
                   every=1)
        print(f"dead node -> job left RUNNING in {time.monotonic() - killed:.1f} s "
              f"(now {squeue_state(cluster, job) or 'gone'})")
    finally:
        root(cluster, f"scancel {job}")
        subprocess.run(["podman", "start", "dev-cpu-02"], capture_output=True)
    wait_until(lambda: root(cluster, "sinfo -h -N -n dev-cpu-02 -o %T").strip() in ("idle", "mixed", "allocated"),
               180, "dev-cpu-02 back in service")
