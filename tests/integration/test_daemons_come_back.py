"""Daemons come back by themselves (the restart drop-ins of roles/common): each is killed
with SIGKILL while a job runs, and the cluster answers again without anyone logging in;
the job completes and `sacct` has it."""

from __future__ import annotations

import time

import pytest

from slurmforge.contract import JOIN_UNIT
from slurmforge.hosts import controller_name
from slurmforge.node.kit import kit_dir
from slurmforge.render import state_save_location
from tests.integration.conftest import Cluster_
from tests.integration.test_elastic import root, wait_until
from tests.integration.test_never_down import sacct_states, submit

pytestmark = pytest.mark.integration

CTLD_BACK_BOUND = 10
"""slurmctld kill -9 -> answering again (RestartSec=2 plus its start-up)."""
JOIN_RETRY_BOUND = 15 + 10
"""The node kit back -> the join unit's next try has joined (RestartSec=15 plus the join)."""


def kill_9(cluster: Cluster_, node: str, unit: str) -> float:
    """SIGKILL the unit's main process; seconds until systemd has it active again."""
    pid = cluster.run(node, f"systemctl show -p MainPID --value {unit}").stdout.strip()
    assert pid and pid != "0", f"{unit} is not running on {node}"
    cluster.run(node, f"kill -9 {pid}")
    killed = time.monotonic()
    wait_until(lambda: cluster.run(node, f"systemctl show -p MainPID --value {unit}").stdout.strip() not in ("0", pid)
               and cluster.run(node, f"systemctl is-active {unit}").stdout.strip() == "active", 60,
               f"{unit} back on {node}", every=0.2)
    return time.monotonic() - killed


def test_slurmctld_killed_is_back_within_seconds_and_the_job_survives(cluster: Cluster_) -> None:
    controller = controller_name(cluster.spec)
    job = submit(cluster, "-p ml-cpu -w dev-cpu-01 -o back-%j.out --wrap 'sleep 20'")
    wait_until(lambda: root(cluster, f"squeue -h -j {job} -o %T").strip() == "RUNNING", 60, "the job running")
    # slurmctld saves job state a few seconds after a change; a SIGKILL before that loses
    # what it had not written (Slurm's own limit): kill once the running job is on disk
    state = f"{state_save_location(cluster.spec)}/job_state"
    running_at = float(root(cluster, "date +%s.%N"))
    wait_until(lambda: float(root(cluster, f"stat -c %.9Y {state}")) > running_at, 30, "the job's state saved")
    pid = cluster.run(controller, "systemctl show -p MainPID --value slurmctld").stdout.strip()
    cluster.run(controller, f"kill -9 {pid}")
    killed = time.monotonic()
    wait_until(lambda: "is UP" in cluster.run(controller, "scontrol ping").stdout, 60, "slurmctld answering",
               every=0.2)
    seconds = time.monotonic() - killed
    print(f"slurmctld kill -9 -> answering in {seconds:.1f} s")
    assert seconds <= CTLD_BACK_BOUND
    wait_until(lambda: sacct_states(cluster, job).get(job) == "COMPLETED", 120, "the job COMPLETED")


@pytest.mark.parametrize(("role", "unit"), [("controller", "slurmdbd"), ("controller", "mariadb"),
                                            ("controller", "munge"), ("compute", "slurmd"), ("compute", "munge")])
def test_a_killed_daemon_comes_back(cluster: Cluster_, role: str, unit: str) -> None:
    node = controller_name(cluster.spec) if role == "controller" else "dev-cpu-01"
    seconds = kill_9(cluster, node, unit)
    print(f"{unit} on {node}: back in {seconds:.1f} s")
    job = submit(cluster, "-p ml-cpu -w dev-cpu-01 -o back-%j.out --wrap hostname")
    wait_until(lambda: sacct_states(cluster, job).get(job) == "COMPLETED", 120, f"a job after {unit} came back")


def test_a_join_that_found_no_node_kit_tries_again_until_it_joins(cluster: Cluster_) -> None:
    """A static node booting before its cluster is ready (a whole cluster made at once: no
    node kit on the NAS until the rollout publishes it) is not left failed until its next
    boot: its join unit tries again every 15 s and joins once the kit is there, without
    touching the job running on the node."""
    node, unit = "dev-cpu-02", JOIN_UNIT
    job = submit(cluster, f"-p ml-cpu -w {node} -o back-%j.out --wrap 'sleep 30'")
    wait_until(lambda: root(cluster, f"squeue -h -j {job} -o %T").strip() == "RUNNING", 60, "the job running")
    kit = kit_dir(cluster.spec)

    def show(prop: str) -> str:
        return cluster.run(node, f"systemctl show -P {prop} {unit}").stdout.strip()

    hide = cluster.run(node, f"mkdir -p /run/no-kit && mount --bind /run/no-kit {kit}")
    assert hide.returncode == 0, hide.stderr
    try:
        restarts = int(show("NRestarts"))
        cluster.run(node, f"systemctl restart --no-block {unit}")
        wait_until(lambda: int(show("NRestarts")) > restarts, 60, f"{unit} failing without a kit and trying again")
        assert show("ActiveState") == "activating", show("ActiveState")  # not failed: waiting to try again
        assert "no node kit" in cluster.run(node, f"journalctl -u {unit} -n 20 -o cat").stdout
    finally:
        cluster.run(node, f"umount {kit}")
    shown = time.monotonic()
    wait_until(lambda: show("ActiveState") == "active" and show("Result") == "success", 60, f"{unit} joined")
    print(f"joined {time.monotonic() - shown:.1f} s after the kit was back")
    assert time.monotonic() - shown <= JOIN_RETRY_BOUND
    assert "joined in" in cluster.run(node, f"journalctl -u {unit} -n 5 -o cat").stdout
    assert cluster.run(node, "systemctl is-system-running").stdout.strip() == "running"
    wait_until(lambda: sacct_states(cluster, job).get(job) == "COMPLETED", 120, "the job COMPLETED")
