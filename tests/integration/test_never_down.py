"""A controller outage or a spec change never takes the cluster down, on the live
local cluster, each with jobs in flight and counted in `sacct`:

- a config Slurm refuses at load time (injected into the rendered slurm.conf, which the
  validator never sees): the rollout fails with Slurm's reason, slurmctld keeps running on
  the old config, /etc/slurm holds the old file, the next `up` converges.

A policy change applied live under load is tests/integration/test_restarts.py's rollout
test (one rollout serves both: the jobs in flight, and the policy in force after).

A replaced static node (its machine killed under a 2-node job, a job for it alone submitted
at once) takes that job within 60 s while the requeued job completes: the last test.

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
from pathlib import Path

import pytest

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


@pytest.mark.long
def test_a_config_slurm_refuses_keeps_the_old_one_running(cluster: Cluster_, tmp_path: Path) -> None:
    rendered = cluster.report.inventory / "rendered" / "slurm.conf"
    good = rendered.read_text()
    job = submit(cluster, "-p ml-cpu -w dev-cpu-01 -o nd-%j.out --wrap 'sleep 60'")
    # a partition over nodes no NodeName line defines: slurmctld refuses to load it
    rendered.write_text(good + "PartitionName=broken Nodes=dev-nosuch-[1-2] State=UP\n")
    try:
        res = subprocess.run([str(Path(sys.executable).parent / "slurmforge"), "rollout", "--yes", "--inventory",
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


def test_a_replaced_static_node_takes_jobs_at_once_and_the_dead_machines_job_is_not_killed(cluster: Cluster_) -> None:
    """Issue 36: a static node's machine killed under a 2-node `--requeue` job, and at once a
    job that fits only that node submitted. The node takes that job as soon as its new
    slurmd registered (within 60 s of the kill), while the requeued job - kept off the node
    for the window in which an RPC retried for its dead machine may reach the new one
    (service.respond.STALE_RPC_WINDOW) - runs again and COMPLETES: no stale RPC ended it."""
    from slurmforge.inventory import read_inventory
    from tests.harness.faults import JobNodes, dead_node

    live = cluster.live()
    where = JobNodes.of(cluster.spec, read_inventory(cluster.report.inventory)[1], None)
    dead = dead_node(live, where, finish=True, probe=True)
    print(f"[replaced] {dead}", flush=True)
    assert dead.requeued, dead
    assert dead.first_job is not None and dead.first_job <= 60, dead
    assert dead.completed is not None, dead  # its next run was not ended by a stale RPC
    runs = live.root(f"sacct -n -X -D -P -j {dead.job} -o State").split()
    assert runs[-1] == "COMPLETED" and "CANCELLED" not in " ".join(runs) and "FAILED" not in runs, runs
