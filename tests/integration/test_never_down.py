"""A controller outage or a spec change never takes the cluster down, on the live
local cluster, each with jobs in flight and counted in `sacct`:

- a policy change (a partition with a new QoS, a longer preemption exempt time) applied
  with `up` while a 2-node job runs: slurmctld takes it live (scontrol reconfigure), sbatch
  keeps answering, the job completes, the policy is in force;
- a config Slurm refuses at load time (injected into the rendered slurm.conf, which the
  validator never sees): the rollout fails with Slurm's reason, slurmctld keeps running on
  the old config, /etc/slurm holds the old file, the next `up` converges.

The outage (slurmctld stopped 90 s under a running and a pending job: the service holds and
says so, no machine stops, both jobs COMPLETED) and the dead static node (its machine killed
under a running job: the job is requeued, the service replaces the machine) are
bench/never_down_bench.py's quick mode, which tests/integration/test_bench_quick.py runs and
whose verdict asserts each of those; they are not run twice.

Each test restores what it changed (the spec, the rendered files).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.harness.live import wait_until
from tests.integration.conftest import SPEC, Cluster_, QuietPhases
from tests.integration.test_elastic import root

pytestmark = pytest.mark.integration


def sacct_states(cluster: Cluster_, *jobs: str) -> dict[str, str]:
    return cluster.live().sacct_states(*jobs)


def submit(cluster: Cluster_, args: str) -> str:
    return cluster.live().submit(args)


def squeue_state(cluster: Cluster_, job: str) -> str:
    return cluster.live().squeue_state(job)


def up_with(cluster: Cluster_, spec_text: str, tmp_path: Path) -> None:
    """`up` of a changed spec (same cluster, same name), as an admin runs it."""
    from slurmforge.local.up import up

    changed = tmp_path / SPEC.name
    changed.write_text(spec_text)
    up(changed, QuietPhases(), run_sample_job=False)


def policy_spec() -> str:
    data = yaml.safe_load(SPEC.read_text())
    data["scheduling"]["qos"] = [{"name": "gpu-small", "priority": 100}, {"name": "urgent", "priority": 1000}]
    # the example preempts by partition tier already: a longer exempt time is the change
    data["scheduling"]["preemption"] = {"type": "partition_prio", "mode": "REQUEUE", "exempt_time": "00:01:00"}
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
        sackd = login_sackd_since(cluster)
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
        assert "00:01:00" in root(cluster, "scontrol show config | grep ^PreemptExemptTime")
        # the login node's clients got the new config from slurmctld through sackd's
        # registration (pushed on reconfigure: sackd execs a new process in the unit, as
        # slurmctld does), not by a restart of the unit or a file of the rollout
        assert "PartitionName=ml-urgent" in login_config(cluster)
        assert login_sackd_since(cluster) == sackd
    finally:
        root(cluster, f"scancel {job}")
        up_with(cluster, SPEC.read_text(), tmp_path)  # back to the suite's spec
    assert "ml-urgent" not in root(cluster, "sinfo -h -o %P")
    assert "ml-urgent" not in login_config(cluster)


def login_config(cluster: Cluster_) -> str:
    """The slurm.conf the login node's client commands read (sackd's configless copy)."""
    res = cluster.run(cluster.report.login, "cat /run/slurm/conf/slurm.conf")
    assert res.returncode == 0, res.stderr
    return res.stdout


def login_sackd_since(cluster: Cluster_) -> str:
    """When the login node's sackd unit last became active (a reconfigure keeps it active)."""
    since = cluster.run(cluster.report.login, "systemctl show -p ActiveEnterTimestamp --value sackd").stdout.strip()
    assert since and cluster.run(cluster.report.login, "systemctl is-active sackd").stdout.strip() == "active", \
        "sackd is not running on the login node"
    return since


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
