"""Runaway job records on the real cluster: slurmdbd holds a job of alice's as running that
slurmctld has never heard of (what a slurmctld killed -9 right after a job started leaves
behind), and the scheduler service closes it by itself - sacct no longer shows it active,
so slurmdbd would let its association go, and its usage stops growing.

The record is made in the accounting database as Slurm itself writes one: a copy of a
finished job of alice's with another job id, running and without an end time.
"""

from __future__ import annotations

import shlex

import pytest

from slurmforge.hosts import controller_names
from slurmforge.service.runaway import RUNAWAY_INTERVAL
from tests.harness.live import wait_until
from tests.integration.conftest import Cluster_
from tests.integration.test_elastic import root

pytestmark = pytest.mark.integration

RUNAWAY_ID_OFFSET = 50_000_000
"""A job id slurmctld will not reach here (its MaxJobId is 67,043,328)."""
LOOP_SECONDS = 10


def sql(cluster: Cluster_, query: str) -> str:
    db = cluster.spec.accounting.database.name
    return root(cluster, f"mysql -N -B {db} -e {shlex.quote(query)}")


@pytest.mark.long
def test_a_runaway_record_is_closed_by_the_service(cluster: Cluster_) -> None:
    live = cluster.live()
    done = live.submit("-p ml-cpu --wrap true")
    wait_until(lambda: live.sacct_states(done).get(done) == "COMPLETED", 60, f"job {done} COMPLETED in sacct")

    table = f"{cluster.spec.name}_job_table"
    columns = [c for c in sql(cluster, f"SELECT column_name FROM information_schema.columns WHERE "
                                       f"table_name = '{table}' ORDER BY ordinal_position").split()
               if c != "job_db_inx"]
    runaway = str(int(done) + RUNAWAY_ID_OFFSET)
    changed = {"id_job": runaway, "state": "1", "time_end": "0", "mod_time": "UNIX_TIMESTAMP()"}  # 1: JOB_RUNNING
    sql(cluster, f"INSERT INTO {table} ({', '.join(f'`{c}`' for c in columns)}) SELECT "
                 f"{', '.join(changed.get(c, f'`{c}`') for c in columns)} FROM {table} WHERE id_job = {done}")
    try:
        assert live.sacct_states(runaway) == {runaway: "RUNNING"}
        assert runaway not in root(cluster, "squeue -h -o %i")

        state = wait_until(lambda: (now := live.sacct_states(runaway)).get(runaway) != "RUNNING" and now,
                           RUNAWAY_INTERVAL + 3 * LOOP_SECONDS, f"the service closing runaway record {runaway}")
        assert state == {runaway: "COMPLETED"}
        start, end = root(cluster, f"sacct -n -X -P -j {runaway} -o Start,End").split("|")
        assert start.strip() == end.strip(), (start, end)  # ended when it began (sacctmgr's rule): no usage from it
        # the leading service closed it: the primary's, or the backup's if that one led
        said = "".join(cluster.run(h, "journalctl -u slurmforge-service --since -5min -o cat").stdout
                       for h in controller_names(cluster.spec))
        assert f"closed runaway job record {runaway}" in said
    finally:
        sql(cluster, f"DELETE FROM {table} WHERE id_job = {runaway}")
