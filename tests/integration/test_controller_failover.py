"""The controller survives (issue 13), on the live local cluster with jobs in flight and
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

import pytest

from slurmforge.local.faults import JobNodes, controller_failover, failover_mid_power_up
from slurmforge.local.live import wait_until
from slurmforge.render import controller_names
from tests.integration.conftest import Cluster_
from tests.integration.test_never_down import sacct_states, submit

pytestmark = pytest.mark.integration

TAKEOVER_BOUND = 30
"""Seconds from the primary's death to the backup taking a submission (docs/controller-ha.md)."""
TWO_NODES = JobNodes("ml-cpu", "dev-cpu-[01-02]", victim="dev-cpu-02")


def test_primary_dies_under_a_job_array_and_nothing_is_lost(cluster: Cluster_) -> None:
    backup = controller_names(cluster.spec)[1]
    result = controller_failover(cluster.live(), backup, TWO_NODES)
    print(f"takeover {result.takeover:.1f} s, handback {result.handback:.1f} s, jobs {result.jobs}")
    assert result.takeover <= TAKEOVER_BOUND
    assert result.led == (True, True), "the scheduler service did not lead on the backup, then on the primary"
    assert len(result.jobs) == 4 + 1 and result.lost == 0, result.jobs


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


def test_a_node_powering_up_when_the_primary_dies_comes_up_under_the_backup(cluster: Cluster_) -> None:
    """The launch was in flight on the primary (its hand-off spool and its service died with
    it): the backup's slurmctld has the node powering up or powers it up again, and the
    backup's service, which now leads, starts its machine; the job runs on that node."""
    backup = controller_names(cluster.spec)[1]
    result = failover_mid_power_up(cluster.live(), backup, "ml-cpu", "dev-cpu-03")
    print(f"{result.node} was {result.at_kill} at the kill; job {result.state} on {result.ran_on} "
          f"{result.seconds:.1f} s later; backup service: {result.backup_lines}")
    assert result.state == "COMPLETED" and result.ran_on == "dev-cpu-03", result
