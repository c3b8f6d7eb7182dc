"""Training that survives the cluster's interruptions, end to end on the live local cluster,
with examples/jobs/ddp_train.sbatch (150 steps of 0.2 s, a checkpoint every 10):

- a spot interruption: the local provider delivers a notice for the machine of the job's
  node in the spot-like pool (cpu-spot); the scheduler service drains the node, signals the
  whole job and cools the spot link; the training checkpoints and requeues itself; the job
  starts again on a machine of the on-demand fallback link (cpu-fallback) and resumes from
  the checkpoint;
- a dead node: the container of a static node under a 2-node training is killed; Slurm
  requeues the job once the service has set the node DOWN, the job resumes from its last
  periodic checkpoint on healthy nodes, and the service replaces the dead node's machine.

Proof, each: the training reaches its 150 steps, no step is trained twice beyond one
checkpoint interval, `sacct -D` shows the one job requeued once, and it finished where it
should. The times (notice -> resumed, kill -> resumed) are bench/ml_bench.py's numbers.

Cost: ~2 min each (the job's 30 s of training, the requeue hold, a fresh container).
"""

from __future__ import annotations

import pytest

from slurmforge.contract import INTERRUPT_FILE
from tests.harness import mljobs
from tests.harness.live import IN_SERVICE, wait_until
from tests.integration.conftest import Cluster_

pytestmark = pytest.mark.integration

CHECKPOINT_EVERY = 10


@pytest.fixture(scope="module")
def jobs(cluster: Cluster_) -> str:
    from tests.integration.test_ml_jobs import publish_ml_modules

    publish_ml_modules(cluster)
    return mljobs.copy_jobs(cluster.live())


@pytest.mark.long
def test_a_spot_notice_moves_the_training_to_the_fallback_link(cluster: Cluster_, jobs: str) -> None:
    live = cluster.live()

    def notice(job: str) -> None:
        node = live.root(f"squeue -h -j {job} -o %N").strip()
        assert mljobs.link_of(live, node) == "cpu-spot", node
        live.root(f"echo {node} >> {INTERRUPT_FILE}")

    mljobs.spot_nodes_off(live)
    r = mljobs.interrupted(live, "notice", "-p ml-spot -N 1", notice, checkpoint_every=CHECKPOINT_EVERY)
    print(f"[spot] notice -> resumed {r.seconds:.1f} s at step {r.resumed_at_step}; runs {r.runs}", flush=True)
    assert r.finished, r
    assert [run.split("|")[0] for run in r.runs] == ["REQUEUED", "COMPLETED"], r
    assert r.resumed_at_step == r.last_checkpoint and len(r.twice) <= CHECKPOINT_EVERY, r
    assert r.link == "cpu-fallback", r
    assert r.seconds is not None and r.seconds <= 90, r


def test_a_dead_node_under_training_is_requeued_resumed_and_replaced(cluster: Cluster_, jobs: str) -> None:
    live = cluster.live()
    killed: list[str] = []

    def kill(job: str) -> None:
        """The job's second node (rank 1's; the batch script runs on the first)."""
        victim = live.root(f"scontrol show hostnames $(squeue -h -j {job} -o %N) | tail -n 1").strip()
        live.podman.run(["kill", victim])
        killed.append(victim)

    r = mljobs.interrupted(live, "kill", "-p ml-cpu -N 2", kill, checkpoint_every=CHECKPOINT_EVERY)
    victim = killed[0]
    print(f"[kill] kill -> resumed {r.seconds:.1f} s at step {r.resumed_at_step}; runs {r.runs}", flush=True)
    assert r.finished, r
    assert [run.split("|")[0] for run in r.runs] == ["NODE_FAIL", "COMPLETED"] or \
        [run.split("|")[0] for run in r.runs] == ["REQUEUED", "COMPLETED"], r
    assert r.resumed_at_step == r.last_checkpoint and len(r.twice) <= CHECKPOINT_EVERY, r
    if victim in ("dev-cpu-01", "dev-cpu-02"):  # a static node: the service gives it a new machine
        wait_until(lambda: victim in live.running_containers() and live.slurm_state(victim) in IN_SERVICE, 240,
                   f"{victim} replaced", every=2)
