"""A busy cluster never notices a restart (tests/harness/restarts.py): with jobs in flight
and arriving, a slurmctld killed -9 while nodes power up, and a rollout (`up` with a policy
change, its live validation included) strand no job - each one starts as soon as the machine
of its node is up, no submission is refused, no node is called failed, and sacct has every
job COMPLETED. The failover during a power-up is in test_controller_failover.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmforge.validation import validate_inventory
from tests.harness.restarts import RestartRun, under_load
from tests.integration.conftest import ROOT, SPEC, Cluster_, QuietPhases
from tests.integration.test_elastic import root
from tests.integration.test_policy import RUNS_UNTIL_REQUEUED, at, cancel, job, sbatch, state, wait_job

pytestmark = pytest.mark.integration

DYNAMIC = ["dev-cpu-03", "dev-cpu-04"]
PREEMPT_NODE = "dev-cpu-01"
STATIC_JOB = "-p ml-cpu -w dev-cpu-[01-02] -N 1 -n 1 --mem=100M --wrap 'sleep 3'"
"""Fits beside the others: 2 CPUs and 1 GiB a node, 1 CPU and 100 MB a job, one every 2 s."""


def assert_nothing_stranded(run: RestartRun) -> None:
    print(run.row())
    for ran in run.jobs:
        print(f"  {ran.job} {ran.state} on {ran.nodes}: started {ran.delay:.0f} s after it was ready")
    assert run.jobs, "no job ran"
    assert not run.refused, run.refused
    assert not run.lost, [j.job for j in run.lost]
    assert not run.late, [(j.job, j.nodes, j.delay) for j in run.late]
    assert not run.failed, run.failed
    assert not run.requeued, [(j.job, j.requeued) for j in run.requeued]


@pytest.mark.long
def test_slurmctld_killed_while_nodes_power_up_strands_no_job(cluster: Cluster_) -> None:
    """bench/restart_bench.py's quick mode is this test (one run serves both; the bench
    suite's list leaves it out). Two powered-down nodes power up for two job arrays;
    slurmctld hangs (SIGSTOP) the moment their machines are made, while they boot and their
    slurmds knock, then dies (kill -9) and systemd starts it again: the takeover meets both
    power-ups in flight, recovered as powering up (the slurmds' registrations lost) or as not
    yet allocated (powered up again after the machines booted). The bench exits 0 only when
    every task ran as soon as its node's machine was up, none was refused, requeued or left
    short of COMPLETED, and no node was called failed. Before, the new slurmctld waited for
    such nodes until ResumeTimeout (600 s), or until their slurmds' retries got through.
    (Killed without the hang, after a node registered and a task started, slurmctld may have
    saved the registration but not the start - its state save writes jobs, then nodes, at
    most every 5 s - and starts the task again: the bench's full mode measures that.)"""
    argv = [sys.executable, str(ROOT / "bench" / "restart_bench.py"), "--quick", "--cluster", cluster.spec.name,
            "--nodes", ",".join(DYNAMIC)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "late 0 (goal 0)" in proc.stdout and "not COMPLETED 0 (goal 0); requeued 0" in proc.stdout, proc.stdout


def policy_spec() -> str:
    """The suite's spec with a policy change: QoS on two partitions, a new partition,
    preemption by QoS (urgent preempts normal, every job's default)."""
    data = yaml.safe_load(SPEC.read_text())
    data["scheduling"]["qos"] = [{"name": "gpu-small", "priority": 100},
                                 {"name": "urgent", "priority": 1000, "preempt": ["normal"]}]
    # the example preempts by partition tier: by QoS is the change (requeue: a suspended job
    # would keep its GPUs, and the spec refuses SUSPEND by QoS beside a GPU pool)
    data["scheduling"]["preemption"] = {"type": "qos", "mode": "REQUEUE", "exempt_time": "00:00:05"}
    data["partitions"][1]["qos"] = "gpu-small"
    data["partitions"].append({"name": "ml-urgent", "pools": ["cpu"], "priority_tier": 10, "qos": "urgent",
                               "allow_groups": ["ml-users"]})
    return yaml.safe_dump(data, sort_keys=False)


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


def current_hosts(cluster: Cluster_) -> list[str]:
    """The hosts whose last rollout is this checkout's rollout of the suite's spec (the mark
    `up` compares): the ones a controllers-only change must skip."""
    from slurmforge.bringup import fixed_hosts, rollout_mark
    from slurmforge.inventory import read_inventory
    from slurmforge.rollout import rollout_digests, stale_parts

    hosts = {h.name: h for h in fixed_hosts(read_inventory(cluster.report.inventory)[1])}
    digests = rollout_digests(cluster.report.inventory, hosts.values())
    stale = stale_parts(hosts, digests, lambda name: rollout_mark(hosts[name]))
    return [name for name in hosts if name not in stale]


def test_a_policy_change_rolled_out_under_load_strands_no_job_and_is_in_force(cluster: Cluster_,
                                                                               tmp_path: Path) -> None:
    """`up` of a policy change (QoS on two partitions, a new partition, preemption by QoS
    instead of partition tier) while a job arrives every 2 s - most on the static nodes, one for a
    powered-down node at the start and one ~90 s later, after Slurm powered it down again
    (60 s idle + SuspendTimeout) - so that nodes power down and up while the rollout
    reconfigures slurmctld and the service keeps running. No submission is refused, every
    job starts in time and is COMPLETED, `up` validates the busy cluster; slurmctld took the
    change live (a reconfigure, never a stop of its unit), and so did the login node's
    clients (sackd's configless copy, its unit never restarted), and an urgent-QoS job
    preempts a normal one. Back to the suite's spec afterwards, the partition is gone and
    partition tiers preempt again."""
    from slurmforge.hosts import controller_names
    from slurmforge.local.up import UpReport, up

    changed = tmp_path / SPEC.name
    changed.write_text(policy_spec())
    dynamic = "-p ml-cpu -w dev-cpu-03 -n 1 --mem=100M --wrap 'sleep 3'"
    jobs = [dynamic, *[STATIC_JOB] * 44, dynamic]
    live = cluster.live()
    since = live.root("date '+%Y-%m-%d %H:%M:%S'").strip()
    sackd = login_sackd_since(cluster)
    current = current_hosts(cluster)  # a static node a test before replaced has no mark yet: rolled out
    try:
        reports: list[UpReport] = []
        run = under_load(live, "rollout", lambda: reports.append(
            up(changed, QuietPhases(), run_sample_job=False, validate=validate_inventory)), jobs)
        assert_nothing_stranded(run)
        # a policy change costs what it changes: the controllers' rollout, no task anywhere else
        [rollout] = [r.rollout for r in reports]
        assert rollout is not None and set(rollout.changed) <= set(controller_names(cluster.spec)), rollout
        assert rollout.skipped_hosts == len(set(current) - set(controller_names(cluster.spec))), (current, rollout)
        # applied by reconfigure (a new slurmctld process takes over), never by stopping the unit
        stops = live.root(f"journalctl -u slurmctld --no-pager -q --since '{since}' | grep -c Stopp || true")
        assert stops.strip() == "0", live.root(f"journalctl -u slurmctld --no-pager --since '{since}'")
        partition = live.root("scontrol show partition ml-urgent -o")
        assert "QoS=urgent" in partition and "PriorityTier=10" in partition, partition
        assert "QoS=gpu-small" in live.root("scontrol show partition ml-gpu -o")
        assert "preempt/qos" in live.root("scontrol show config | grep ^PreemptType")
        assert "00:00:05" in live.root("scontrol show config | grep ^PreemptExemptTime")
        # the login node's clients got the new config from slurmctld through sackd's
        # registration (pushed on reconfigure: sackd execs a new process in the unit, as
        # slurmctld does), not by a restart of the unit or a file of the rollout
        assert "PartitionName=ml-urgent" in login_config(cluster)
        assert login_sackd_since(cluster) == sackd
        urgent_preempts_normal(cluster)
    finally:
        up(SPEC, QuietPhases(), run_sample_job=False)  # back to the suite's spec
    assert "ml-urgent" not in live.root("sinfo -h -o %P")
    assert "ml-urgent" not in login_config(cluster)
    assert "preempt/partition_prio" in live.root("scontrol show config | grep ^PreemptType")


def urgent_preempts_normal(cluster: Cluster_) -> None:
    """QoS preemption in force: alice's normal-QoS job on a node, then bob's job made urgent
    by an admin (`scontrol update QOS=urgent` while held: the spec cannot yet say which users
    may use a QoS, and Slurm lets a user submit only with their association's QoS) on the
    same node and partition - the QoS decides, not the partition. alice's job is requeued
    (not before the exempt time), bob's runs, alice's completes after it."""
    low = high = ""
    try:
        low = sbatch(cluster, f"-p ml-cpu -w {PREEMPT_NODE} -c 2 -o /dev/null --wrap '{RUNS_UNTIL_REQUEUED}'")
        started = at(state(cluster, low, "RUNNING")["StartTime"])
        assert job(cluster, low)["QOS"] == "normal"
        high = sbatch(cluster, f"--hold -p ml-cpu -w {PREEMPT_NODE} -c 2 -o /dev/null --wrap 'sleep 4'", user="bob")
        root(cluster, f"scontrol update JobId={high} QOS=urgent && scontrol release {high}")
        wait_job(cluster, low, "requeued", lambda r: r.get("Restarts") == "1", timeout=90)
        ran = state(cluster, high, "COMPLETED", timeout=90)
        assert at(ran["StartTime"]) - started >= 5, (started, ran)
        root(cluster, f"scontrol update JobId={low} StartTime=now")
        done = state(cluster, low, "COMPLETED", timeout=90)
        assert at(done["EndTime"]) >= at(ran["EndTime"]), done
        runs = root(cluster, f"sacct -n -X -D -P -j {low} -o State").split()
        assert runs[-1] == "COMPLETED" and {"PREEMPTED", "REQUEUED"} & set(runs[:-1]), runs
    finally:
        cancel(cluster, low, high)
