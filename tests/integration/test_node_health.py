"""Node health on the live local cluster: every compute node runs the health check
(slurm.conf's HealthCheckProgram, the join program by another name), fast; it sees each way a
node is broken on purpose; and a node broken under a running job is drained with a `health:`
reason, its job signalled and requeued, and the node replaced by the scheduler service and in
service again.

Cost: ~5 s for the checks by hand; the sick node ~2 min (the drain waits for the next check,
HealthCheckInterval 30 s; the job's evacuation grace 30 s; a repair waits for 3 loops over
20 s; a fresh container joins in ~20 s).
"""

from __future__ import annotations

import pytest

from slurmforge.contract import HEALTH_PROGRAM
from slurmforge.render import HEALTH_CHECK_INTERVAL
from tests.harness.sickness import broken, check, gpu_lost, sick_node, storage_outage
from tests.integration.conftest import Cluster_

pytestmark = pytest.mark.integration

CPU, GPU = "dev-cpu-01", "dev-gpu-01"


def test_slurmd_runs_the_health_check_on_every_node(cluster: Cluster_) -> None:
    config = cluster.live().root("scontrol show config")
    assert f"HealthCheckProgram      = {HEALTH_PROGRAM}" in config
    assert f"HealthCheckInterval     = {HEALTH_CHECK_INTERVAL} sec" in config
    for node in (CPU, "dev-cpu-02", GPU):
        verdict = check(cluster.live(), node)
        assert verdict.healthy, verdict.output
        assert verdict.seconds <= 2.0, verdict.output


@pytest.mark.parametrize(("node", "how", "says"), [
    (CPU, "data", "/data not mounted"),
    (CPU, "scratch", "scratch /scratch 100% full"),
    (GPU, "gpu", "GPU device /dev/nvidia1 missing"),
])
def test_the_check_sees_each_sickness(cluster: Cluster_, node: str, how: str, says: str) -> None:
    live = cluster.live()
    with broken(live, node, how):
        verdict = check(live, node)
    assert not verdict.healthy and says in verdict.output, verdict.output
    assert verdict.seconds <= 2.0, verdict.output
    assert check(live, node).healthy


@pytest.mark.long
def test_a_node_that_loses_its_storage_is_drained_its_job_requeued_and_the_node_replaced(cluster: Cluster_) -> None:
    sick = sick_node(cluster.live(), "dev-cpu-02", "data", partition="ml-cpu")
    assert sick.drained is not None and sick.drained <= HEALTH_CHECK_INTERVAL + 5, sick
    assert sick.reason.startswith("health: /data not mounted"), sick
    assert sick.requeued is not None, sick
    assert sick.back is not None and sick.replaced, sick


@pytest.mark.long
def test_a_storage_outage_on_several_nodes_replaces_none_and_ends_by_itself(cluster: Cluster_) -> None:
    """CephFS gone from two nodes at once is the storage's outage, not two bad machines: both
    are drained (no new job starts there), neither is replaced, the running job is left
    alone; once the mount answers, each node's health check lifts its own drain."""
    outage = storage_outage(cluster.live(), (CPU, "dev-cpu-02"), partition="ml-cpu")
    print(f"both drained {outage.drained} s after the break; back in service {outage.back} s after the repair")
    assert outage.drained is not None and outage.drained <= HEALTH_CHECK_INTERVAL + 5, outage
    assert outage.replaced == (), outage
    assert (outage.job_state, outage.job_restarts) == ("RUNNING", 0), outage
    assert outage.back is not None and outage.back <= HEALTH_CHECK_INTERVAL + 10, outage


@pytest.mark.long
def test_a_gpu_node_that_loses_a_device_is_replaced_and_its_gpu_job_completes_on_the_new_machine(
        cluster: Cluster_) -> None:
    """Issue 41: `rm /dev/nvidia1` under a GPU job on the static GPU node. The health check drains
    it, the job is requeued once, the service replaces the machine - which joins with its GPU
    devices, made by the join program's gpus step (before, the new machine's slurmd stopped on
    `fatal: can't stat gres.conf file /dev/nvidia0` for ever) - and the job completes there."""
    lost = gpu_lost(cluster.live(), GPU)
    assert lost.drained is not None and lost.drained <= HEALTH_CHECK_INTERVAL + 10, lost
    assert lost.new_machine is not None and lost.running_again is not None and lost.back is not None, lost
    assert lost.restarts == 1 and lost.final_state == "COMPLETED", lost
    assert lost.output.startswith("gpus=") and lost.output.endswith(f"on {GPU}"), lost
    assert "gpu:fakegpu:2" in lost.gres or "gpu:2" in lost.gres, lost


@pytest.mark.long
def test_a_replaced_gpu_node_is_the_node_the_rollout_made(cluster: Cluster_) -> None:
    """What a machine the service made has, against a compute node the rollout made (runs after
    the replacement above): the same packages, enabled units, device files per GPU, slurmd's own
    view of the hardware and Slurm's Gres, pool kind by pool kind (CPU: dev-cpu-02, replaced
    by test_a_node_that_loses_its_storage_...; against dev-cpu-01)."""
    live = cluster.live()

    def facts(node: str) -> dict[str, str]:
        return {
            "packages": live.on(node, "dpkg-query -W -f '${Package} ${Version}\\n' | sort | sha256sum"),
            "units": live.on(node, "systemctl list-unit-files --state=enabled --no-legend | awk '{print $1}' | sort"),
            "devices": live.on(node, "ls -l /dev/nvidia* 2>/dev/null | awk '{print $1, $5, $6, $NF}' | sort || true"),
            "slurmd -C": live.on(node, "slurmd -C | head -n 1 | sed 's/NodeName=[^ ]* //; s/ UpTime=.*//'"),
            "gres": live.root(f"scontrol show node {node} -o | grep -o 'Gres=[^ ]*'"),
        }

    gpu = facts(GPU)
    assert "195, 0" in gpu["devices"] and "195, 1" in gpu["devices"], gpu
    # the GPU node is the only one of its pool: compared with what its pool's spec makes it
    assert "Gres=gpu" in gpu["slurmd -C"] or gpu["gres"].startswith("Gres=gpu"), gpu
    assert facts("dev-cpu-01") == facts("dev-cpu-02")
    for key in ("packages", "units"):
        assert gpu[key] == facts("dev-cpu-01")[key], key
