"""A controller outage or a spec change never takes the cluster down (issue 16), on the live
local cluster, each with jobs in flight and counted in `sacct`:

- slurmctld stopped: the scheduler service holds (says so on /metrics), no machine stops;
  the running job finishes, the pending one starts when slurmctld is back;
- a policy change (a partition with a new QoS, a longer preemption exempt time) applied
  with `up` while a 2-node job runs: slurmctld takes it live (scontrol reconfigure), sbatch
  keeps answering, the job completes, the policy is in force;
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
from pathlib import Path

import pytest
import yaml

from slurmforge.local.faults import JobNodes, controller_outage, dead_node
from slurmforge.local.live import wait_until
from tests.integration.conftest import SPEC, Cluster_, QuietPhases
from tests.integration.test_elastic import root

pytestmark = pytest.mark.integration

OUTAGE_SECONDS = int(os.environ.get("SLURMFORGE_OUTAGE_SECONDS", "90"))
DEAD_NODE_BOUND = 60
REPLACED_BOUND = 180
"""Seconds from a static node's death to its replacement in service (issue 12's goal is 60 s;
the bound leaves room for a loaded CI machine: bench/never_down_bench.py measures it)."""
"""Seconds from a node's machine dying to its job leaving RUNNING (docs/service.md)."""
TWO_NODES = JobNodes("ml-cpu", "dev-cpu-[01-02]", victim="dev-cpu-02")


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


def test_a_controller_outage_terminates_nothing(cluster: Cluster_) -> None:
    """The pending job, submitted before the outage, becomes eligible halfway through it."""
    outage = controller_outage(cluster.live(), OUTAGE_SECONDS, TWO_NODES)
    assert not outage.stopped, f"machines stopped during the outage: {outage.stopped}"
    assert not outage.terminations, outage.terminations
    assert outage.holding, "the service never said it was holding back while slurmctld was down"
    assert "holding" in outage.log, outage.log[-2000:]
    assert set(outage.jobs.values()) == {"COMPLETED"}, outage.jobs


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


def test_a_dead_static_node_is_replaced_by_the_service_and_its_job_requeued(cluster: Cluster_) -> None:
    """Issue 12's static nodes kept alive: the victim (a static node of ml-cpu) is killed
    under a running --requeue job; the job leaves RUNNING for the queue (requeued), and the
    scheduler service, with nobody running `up` or starting anything, gives the node a
    machine again and it is back in service."""
    dead = dead_node(cluster.live(), TWO_NODES, limit=DEAD_NODE_BOUND, back_limit=REPLACED_BOUND)
    print(f"dead node -> job left RUNNING in {dead.seconds} s (now {dead.after or 'gone'}); "
          f"node back in service on a machine the service started after {dead.back} s")
    assert dead.seconds is not None, f"job {dead.job} still RUNNING {DEAD_NODE_BOUND} s after its node died"
    assert dead.requeued, f"job {dead.job} was not requeued (it was {dead.after or 'gone'} after leaving RUNNING)"
    assert dead.back is not None, f"{TWO_NODES.victim} not back in service {REPLACED_BOUND} s after its machine died"
