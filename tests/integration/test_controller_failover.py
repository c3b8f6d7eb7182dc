"""The controller survives, on the live local cluster with jobs in flight and
counted in `sacct`: examples/local.yaml runs a backup controller (dev-controller-backup).

- the primary's container killed (SIGKILL) under a running job array: the backup takes
  control within the bound, a job submitted meanwhile runs, the array's tasks finish; the
  backup's scheduler service takes the lead;
- the primary's container started again: it takes control back, its service leads again,
  and every job of the cycle is COMPLETED in sacct (slurmdbd lives on the primary: the
  backup's slurmctld queued the records and they arrived);
- slurmdbd stopped while jobs finish: every record is in sacct once it is back;
- the primary killed while a node powers up for a job (its launch in flight): the backup's
  slurmctld and scheduler service bring the node up and the job runs there.

The primary's container is started again whatever happens.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from slurmforge.hosts import controller_names
from tests.harness.faults import JobNodes, failover_mid_power_up
from tests.harness.live import wait_until
from tests.harness.restarts import NodeWatch, delays
from tests.integration.conftest import ROOT, Cluster_
from tests.integration.test_never_down import sacct_states, submit

pytestmark = pytest.mark.integration

TAKEOVER_BOUND = 30
"""Seconds from the primary's death to the backup taking a submission (docs/controller-ha.md)."""
TWO_NODES = JobNodes("ml-cpu", "dev-cpu-[01-02]", victim="dev-cpu-02")


def test_primary_dies_under_a_job_array_and_nothing_is_lost(cluster: Cluster_) -> None:
    """bench/failover_bench.py with one cycle (faults.controller_failover, then one slurmctld
    kill -9): it exits 0 only when the backup took submissions within the bound, both
    services led in turn, no job of the cycle (the 4-task array and the job submitted to the
    backup) is missing from sacct's COMPLETED, and slurmctld answered again within 10 s of its
    kill. The bench's quick mode - two cycles, the second right after the first's handback: a
    backup that held control once must take it again (Slurm 24.11 forgets the cluster's ID on
    taking control; the backup's standby restart, roles/slurm_controller, is what makes that
    pass) - runs in `./dev.sh test-all` (tests/integration/test_bench_quick.py)."""
    argv = [sys.executable, str(ROOT / "bench" / "failover_bench.py"), "--cycles", "1", "--cluster",
            cluster.spec.name, "--partition", TWO_NODES.partition]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1200, cwd=ROOT, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"(goal <= {TAKEOVER_BOUND} s): ok" in proc.stdout, proc.stdout
    assert "over 1 cycle(s)" in proc.stdout, proc.stdout
    assert "lost: 0 of 5 (goal 0): ok" in proc.stdout, proc.stdout


@pytest.mark.long
def test_records_made_while_slurmdbd_is_down_reach_sacct(cluster: Cluster_) -> None:
    primary = controller_names(cluster.spec)[0]
    cluster.run(primary, "systemctl stop slurmdbd")
    try:
        jobs = [submit(cluster, "-p ml-cpu -o dbd-%j.out --wrap 'sleep 2'") for _ in range(3)]
        wait_until(lambda: not cluster.run(primary, f"squeue -h -j {','.join(jobs)} -o %i").stdout.strip(), 90,
                   "the jobs done while slurmdbd is down", every=1)
    finally:
        cluster.run(primary, "systemctl start slurmdbd")
    wait_until(lambda: set(sacct_states(cluster, *jobs).values()) == {"COMPLETED"} and
               len(sacct_states(cluster, *jobs)) == len(jobs), 120, "every record in sacct", every=2)


@pytest.mark.long
def test_a_node_powering_up_when_the_primary_dies_comes_up_under_the_backup(cluster: Cluster_) -> None:
    """The launch was in flight on the primary (its hand-off spool and its service died with
    it): the backup's slurmctld has the node powering up or powers it up again, and the
    backup's service, which now leads, starts its machine; the job runs on that node."""
    backup = controller_names(cluster.spec)[1]
    live = cluster.live()
    with NodeWatch(live) as watch:
        result = failover_mid_power_up(live, backup, "ml-cpu", "dev-cpu-03")
    (job,) = delays(live, [result.job], watch)
    print(f"{result.node} was {result.at_kill} at the kill; job {result.state} on {result.ran_on} "
          f"{result.seconds:.1f} s later, {job.delay:.0f} s after its node's machine was up; backup service: "
          f"{result.backup_lines}")
    assert result.state == "COMPLETED" and result.ran_on == "dev-cpu-03", result
    # as soon as its node was up (restarts.py: a takeover's machine that booted before it is
    # replaced, never waited for until ResumeTimeout), and no node called failed
    assert not job.late and not watch.failed, (job, watch.failed)
