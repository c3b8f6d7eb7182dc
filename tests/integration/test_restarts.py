"""A busy cluster never notices a restart (tests/harness/restarts.py): with jobs in flight
and arriving, a slurmctld killed -9 while nodes power up, and a rollout (`up` with a policy
change, its live validation included) strand no job - each one starts as soon as the machine
of its node is up, no submission is refused, no node is called failed, and sacct has every
job COMPLETED. The failover during a power-up is in test_controller_failover.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurmforge.validation import validate_inventory
from tests.harness.restarts import RestartRun, kill_mid_power_up, under_load
from tests.integration.conftest import SPEC, Cluster_, QuietPhases

pytestmark = pytest.mark.integration

DYNAMIC = ["dev-cpu-03", "dev-cpu-04"]
STATIC_JOB = "-p ml-cpu -w dev-cpu-[01-02] -N 1 -n 1 --mem=100M --wrap 'sleep 3'"
"""Fits beside the others: 2 CPUs and 1 GiB a node, 1 CPU and 100 MB a job, one every 2 s."""


def assert_nothing_stranded(run: RestartRun) -> None:
    print(run.row())
    for job in run.jobs:
        print(f"  {job.job} {job.state} on {job.nodes}: started {job.delay:.0f} s after it was ready")
    assert run.jobs, "no job ran"
    assert not run.refused, run.refused
    assert not run.lost, [j.job for j in run.lost]
    assert not run.late, [(j.job, j.nodes, j.delay) for j in run.late]
    assert not run.failed, run.failed
    assert not run.requeued, [(j.job, j.requeued) for j in run.requeued]


def test_slurmctld_killed_while_nodes_power_up_strands_no_job(cluster: Cluster_) -> None:
    """Two powered-down nodes power up for two job arrays; slurmctld hangs (SIGSTOP) the
    moment their machines are made, while they boot and their slurmds knock, then
    dies (kill -9) and systemd starts it again: the takeover meets both power-ups in flight,
    recovered as powering up (the slurmds' registrations lost) or as not yet allocated
    (powered up again after the machines booted). Before, the new slurmctld waited for such
    nodes until ResumeTimeout (600 s), or until their slurmds' retries got through.
    (Killed without the hang, after a node registered and a task started, slurmctld may have
    saved the registration but not the start - its state save writes jobs, then nodes, at
    most every 5 s - and starts the task again: bench/restart_bench.py measures that.)"""
    assert_nothing_stranded(kill_mid_power_up(cluster.live(), DYNAMIC, offset=6.0, freeze=True))


def qos_on_a_partition() -> str:
    data = yaml.safe_load(SPEC.read_text())
    data["scheduling"]["qos"] = [{"name": "cpu-fair", "priority": 10}]
    data["partitions"][0]["qos"] = "cpu-fair"
    return yaml.safe_dump(data, sort_keys=False)


def test_a_rollout_under_load_strands_no_job_and_validates(cluster: Cluster_, tmp_path: Path) -> None:
    """`up` with a QoS on a partition while a job arrives every 2 s - most on the static
    nodes, one for a powered-down node at the start and one ~90 s later, after Slurm powered
    it down again (60 s idle + SuspendTimeout) - so that nodes power down and up while the
    rollout reconfigures slurmctld and the service keeps running. `up` validates the busy
    cluster and exits without an error."""
    from slurmforge.local.up import up

    changed = tmp_path / SPEC.name
    changed.write_text(qos_on_a_partition())
    dynamic = "-p ml-cpu -w dev-cpu-03 -n 1 --mem=100M --wrap 'sleep 3'"
    jobs = [dynamic, *[STATIC_JOB] * 44, dynamic]
    try:
        run = under_load(cluster.live(), "rollout",
                         lambda: up(changed, QuietPhases(), run_sample_job=False, validate=validate_inventory), jobs)
    finally:
        up(SPEC, QuietPhases(), run_sample_job=False)  # back to the suite's spec
    assert_nothing_stranded(run)
