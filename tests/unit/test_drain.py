"""Safe apply (slurmforge.drain): which jobs hold drained nodes, when they are requeued, when
the wait gives up, when a rebuilt node is resumed - and that the scheduler service leaves a
rollout's drain alone."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence

import pytest

from slurmforge.drain import (
    REBUILD,
    REMOVE,
    ROLLOUT_REASON,
    Drain,
    JobPolicy,
    decide,
    drain,
    finish,
    jobs_on,
    registered_since,
)
from slurmforge.errors import ProvisionError
from slurmforge.slurm.client import Job, NodeState, SlurmClient
from slurmforge.slurm.reasons import held_by_admin, is_recoverable

pytestmark = pytest.mark.unit


def job(i: int, nodes: str, state: str = "RUNNING") -> Job:
    return Job(i, state, nodes)


def test_only_jobs_holding_a_drained_node_count() -> None:
    jobs = [job(1, "dev-gpu-01"), job(2, "dev-cpu-[01-02]"), job(3, "", "PENDING"), job(4, "dev-cpu-03", "COMPLETED"),
            job(5, "dev-gpu-01", "COMPLETING")]
    assert jobs_on(jobs, ["dev-gpu-01", "dev-cpu-02"]) == [1, 2, 5]


def test_by_default_the_rollout_waits_without_bound() -> None:
    d = decide([job(1, "n-01")], ["n-01"], JobPolicy(), waited=10_000)
    assert d.holding == [1] and d.requeue == [] and not d.timed_out and not d.done
    assert decide([job(1, "n-02")], ["n-01"], JobPolicy(), waited=0).done


def test_a_drain_timeout_gives_up_once_reached() -> None:
    policy = JobPolicy(timeout=60)
    assert not decide([job(1, "n-01")], ["n-01"], policy, waited=59).timed_out
    assert decide([job(1, "n-01")], ["n-01"], policy, waited=60).timed_out


def test_requeue_asks_once_per_job_and_waits_for_what_slurm_refused() -> None:
    policy = JobPolicy(requeue=True, timeout=30)
    jobs = [job(1, "n-01"), job(2, "n-01", "COMPLETING")]
    first = decide(jobs, ["n-01"], policy, waited=0)
    assert first.requeue == [1]  # a completing job cannot be requeued: it is ending anyway
    later = decide(jobs, ["n-01"], policy, waited=40, asked=[1])
    assert later.requeue == [] and later.timed_out  # job 1 refused (still running): waited for, within the bound


def test_the_plan_says_what_the_policy_does() -> None:
    assert "waits for their jobs to end (as long as they run" in JobPolicy().words()
    assert "up to 90 s" in JobPolicy(timeout=90).words()
    assert "requeues their jobs" in JobPolicy(requeue=True).words()


def test_the_service_leaves_a_rollout_drain_alone() -> None:
    """The service resets or replaces nodes drained with its own reason; a rollout's drain is
    maintenance to it, so it neither replaces the emptied node nor powers it down."""
    node = NodeState("n-01", "idle", frozenset({"DRAIN"}), reason=f"{ROLLOUT_REASON} rebuilt (RealMemory)")
    assert held_by_admin(node) and not is_recoverable(node.reason)


def test_a_rebuilt_node_is_back_only_when_a_new_slurmd_registered() -> None:
    old = NodeState("n-01", "idle", frozenset({"DRAIN"}), slurmd_started_at=100)
    new = NodeState("n-01", "idle", frozenset({"DRAIN"}), slurmd_started_at=200)
    silent = NodeState("n-01", "idle", frozenset({"DRAIN", "NOT_RESPONDING"}), slurmd_started_at=200)
    assert not registered_since(old, since=150) and registered_since(new, since=150)
    assert not registered_since(silent, since=150)


class Slurm:
    """Answers the commands drain/finish send as slurmctld would, from the jobs and nodes set
    here; records every command."""

    def __init__(self, jobs: list[dict[str, object]], nodes: list[dict[str, object]] | None = None) -> None:
        self.jobs, self.nodes, self.sent = jobs, nodes or [], []  # type: ignore[var-annotated]
        self.refuse: set[str] = set()

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.sent.append(list(argv))
        out, rc, err = "", 0, ""
        if argv[:2] == ["squeue", "--json"]:
            out = json.dumps({"jobs": self.jobs, "errors": [], "warnings": []})
        elif argv[:3] == ["scontrol", "show", "nodes"]:
            out = json.dumps({"nodes": self.nodes, "errors": [], "warnings": []})
        elif argv[:2] == ["scontrol", "requeue"]:
            if argv[2] in self.refuse:
                rc, err = 1, "Requested operation is presently disabled"
            else:
                self.jobs = [j for j in self.jobs if str(j["job_id"]) != argv[2]]
        return subprocess.CompletedProcess(list(argv), rc, out, err)


def squeue_job(i: int, nodes: str) -> dict[str, object]:
    return {"job_id": i, "job_state": ["RUNNING"], "nodes": nodes}


def test_drain_then_wait_until_the_jobs_end() -> None:
    slurm = Slurm([squeue_job(7, "dev-gpu-01"), squeue_job(8, "dev-cpu-01")])
    clock = iter(range(0, 1000, 5))
    ticks = []

    def sleep(_: float) -> None:
        ticks.append(1)
        if len(ticks) == 3:  # job 7 ends after three polls
            slurm.jobs = [j for j in slurm.jobs if j["job_id"] != 7]

    done = drain(SlurmClient(slurm), [Drain(("dev-gpu-01",), "rebuilt (RealMemory 1024 -> 2048)", REBUILD)],
                 JobPolicy(), lambda _: None, clock=lambda: float(next(clock)), sleep=sleep)
    assert slurm.sent[0] == ["scontrol", "update", "nodename=dev-gpu-01", "state=drain",
                             "reason=slurmforge rollout: rebuilt (RealMemory 1024 -> 2048)"]
    assert not any(c[:2] == ["scontrol", "requeue"] for c in slurm.sent)
    assert len(ticks) == 3 and done.nodes == ["dev-gpu-01"] and done.seconds > 0


def test_requeue_requeues_and_waits_for_a_refused_job_until_the_bound() -> None:
    slurm = Slurm([squeue_job(7, "dev-cpu-03"), squeue_job(9, "dev-cpu-03")])
    slurm.refuse = {"9"}
    clock = iter(range(0, 1000, 10))
    said: list[str] = []
    with pytest.raises(ProvisionError, match=r"jobs 9 still run on the drained node\(s\) dev-cpu-03 after 30 s"):
        drain(SlurmClient(slurm), [Drain(("dev-cpu-03",), "leaves Slurm", REMOVE)], JobPolicy(requeue=True, timeout=30),
              said.append, clock=lambda: float(next(clock)), sleep=lambda _: None)
    assert [c for c in slurm.sent if c[1] == "requeue"] == [["scontrol", "requeue", "7"], ["scontrol", "requeue", "9"]]
    assert any("job 9 cannot be requeued" in s for s in said)


def test_finish_resumes_rebuilt_static_nodes_it_drained_and_powers_down_dynamic_ones() -> None:
    slurm = Slurm([], nodes=[
        {"name": "dev-gpu-01", "state": ["IDLE", "DRAIN"], "reason": f"{ROLLOUT_REASON} rebuilt",
         "slurmd_start_time": 500},
        {"name": "dev-cpu-01", "state": ["IDLE", "DRAIN"], "reason": "disk swap (admin)", "slurmd_start_time": 500}])
    drains = [Drain(("dev-gpu-01", "dev-cpu-01"), "rebuilt", REBUILD), Drain(("dev-cpu-03",), "rebuilt", REBUILD, True)]
    resumed = finish(SlurmClient(slurm), drains, since=400, say=lambda _: None, sleep=lambda _: None)
    assert resumed == ["dev-gpu-01"]  # an admin's drain stays
    updates = [c for c in slurm.sent if c[:2] == ["scontrol", "update"]]
    assert updates == [["scontrol", "update", "nodename=dev-cpu-03", "state=power_down_force",
                        "reason=slurmforge rollout: powered down to start on its new hardware"],
                       ["scontrol", "update", "nodename=dev-gpu-01", "state=resume"]]


def test_finish_gives_up_on_a_node_whose_new_slurmd_never_registers() -> None:
    slurm = Slurm([], nodes=[{"name": "dev-gpu-01", "state": ["IDLE", "DRAIN"], "reason": f"{ROLLOUT_REASON} x",
                              "slurmd_start_time": 100}])
    clock = iter(range(0, 10_000, 50))
    with pytest.raises(ProvisionError, match="did not register within 300 s"):
        finish(SlurmClient(slurm), [Drain(("dev-gpu-01",), "rebuilt", REBUILD)], since=400, say=lambda _: None,
               clock=lambda: float(next(clock)), sleep=lambda _: None)
