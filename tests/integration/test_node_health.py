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
from tests.harness.sickness import broken, check, sick_node, storage_outage
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
