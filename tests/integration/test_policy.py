"""Issue 14's proof on the live local cluster (examples/local.yaml): scheduling policy that
really happens, with real users' jobs.

- default pools: a GPU job that names no partition lands in ml-gpu and runs on the GPU
  node (sbatch, srun, salloc); any other in ml-cpu;
- fair share: alice and bob contend for the full ml-gpu partition; whoever used less starts
  first, whatever the order they submitted in, and sshare and sprio say why;
- preemption by partition tier (the example's own: REQUEUE, exempt_time 10 s): a
  scavenger job is requeued for an ml-cpu job that needs its node, no sooner than 10 s
  after it started, and completes afterwards;
- preemption by QoS is tests/integration/test_restarts.py's: its policy change, rolled out
  under load, makes QoS preemption the cluster's, and a normal-QoS job is then requeued for
  an urgent-QoS job on the same partition.

Jobs are pinned to one node (-w) and take all its CPUs, so that they contend; each test
cancels what it submitted. A requeued batch job waits out Slurm's credential lifetime
(120 s) before it may start again: the tests set its start time to now, as an admin can.
The same mechanics run in CI against the judge's slurmctld and slurmd
(tests/slurm/test_preemption.py, tests/slurm/test_job_routing.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

import pytest

from slurmforge.render import SLURMCTLD_LOG
from tests.harness.live import wait_until
from tests.integration.conftest import Cluster_
from tests.integration.test_elastic import root
from tests.slurm.daemons import parse_oneliner

pytestmark = pytest.mark.integration

NODE = "dev-cpu-01"
# the first run sleeps long enough to be preempted; a requeued run ends at once
RUNS_UNTIL_REQUEUED = 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then exit 0; fi; sleep 300'


def login(cluster: Cluster_, command: str, user: str = "alice", timeout: int = 120) -> str:
    res = cluster.login(command, user=user, timeout=timeout)
    assert res.returncode == 0, f"{user}: {command}: {res.stderr or res.stdout}"
    return res.stdout


def sbatch(cluster: Cluster_, args: str, user: str = "alice") -> str:
    return login(cluster, f"sbatch --parsable {args}", user).strip().split(";")[0]


def job(cluster: Cluster_, job_id: str) -> dict[str, str]:
    """`scontrol show job -o` as key -> value."""
    return parse_oneliner(root(cluster, f"scontrol show job -o {job_id}").strip())


def wait_job(cluster: Cluster_, job_id: str, what: str, ok: Callable[[dict[str, str]], bool],
             timeout: float = 90) -> dict[str, str]:
    def check() -> dict[str, str]:
        record = job(cluster, job_id)
        return record if ok(record) else {}

    return wait_until(check, timeout, f"job {job_id}: {what}", every=0.5)


def state(cluster: Cluster_, job_id: str, want: str, timeout: float = 90) -> dict[str, str]:
    return wait_job(cluster, job_id, want, lambda r: r.get("JobState") == want, timeout)


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def cancel(cluster: Cluster_, *jobs: str) -> None:
    root(cluster, f"scancel {' '.join(j for j in jobs if j)} 2>/dev/null || true")


# --------------------------------------------------------------------------- default pools


def test_jobs_that_name_no_partition_go_to_the_default_pools(cluster: Cluster_) -> None:
    where = "echo $SLURM_JOB_PARTITION $(hostname)"
    job_id = sbatch(cluster, f"--wait --gres=gpu:1 -o route-%j.out --wrap '{where}'")
    assert login(cluster, f"cat route-{job_id}.out").split() == ["ml-gpu", "dev-gpu-01"]
    assert login(cluster, f"srun --gpus=1 bash -c '{where}'").split() == ["ml-gpu", "dev-gpu-01"]
    assert login(cluster, f"salloc --gpus-per-node=1 srun bash -c '{where}'").split() == ["ml-gpu", "dev-gpu-01"]
    partition, host = login(cluster, f"srun bash -c '{where}'").split()
    assert partition == "ml-cpu" and host.startswith("dev-cpu"), host
    # a job that names its partition is left alone
    assert login(cluster, f"srun -p scavenger bash -c '{where}'").split()[0] == "scavenger"


# --------------------------------------------------------------------------- fair share


def shares(cluster: Cluster_) -> dict[str, tuple[float, float]]:
    """user -> (RawUsage, FairShare factor) in the research account."""
    out = root(cluster, "sshare -h -P -a -A research -o User,RawUsage,FairShare")
    rows = (line.split("|") for line in out.splitlines())
    return {r[0]: (float(r[1] or 0), float(r[2] or 0)) for r in rows if len(r) == 3 and r[0]}


def test_the_user_who_used_less_runs_first(cluster: Cluster_) -> None:
    """ml-gpu is one node: a root job fills it, the heavier user submits first, the
    lighter one second; when the node frees, the lighter one starts."""
    calc = cluster.spec.scheduling.priority.calc_period
    assert calc is not None, "examples/local.yaml recomputes fair share every minute"
    use = shares(cluster)
    if use["alice"][0] == use["bob"][0]:  # a new cluster: give alice some usage
        login(cluster, "sbatch --wait -p ml-gpu -c 2 -o /dev/null --wrap 'sleep 5'")
    heavy, light = sorted(("alice", "bob"), key=lambda u: shares(cluster)[u][0], reverse=True)
    # usage counts at once; the fair share factor follows at the next calculation
    wait_until(lambda: shares(cluster)[light][1] > shares(cluster)[heavy][1], 150,
               f"sshare: {light}'s fair share above {heavy}'s", every=2)
    blocker = heavy_job = light_job = ""
    try:
        blocker = root(cluster, "sbatch --parsable -p ml-gpu -c 2 -o /dev/null --wrap 'sleep 600'").strip()
        state(cluster, blocker, "RUNNING")
        heavy_job = sbatch(cluster, "-p ml-gpu -c 2 -o /dev/null --wrap 'sleep 3'", user=heavy)
        light_job = sbatch(cluster, "-p ml-gpu -c 2 -o /dev/null --wrap 'sleep 3'", user=light)
        prio = {}  # user -> (priority, its fair share part)
        for line in root(cluster, "sprio -h -o '%i|%u|%Y|%F'").splitlines():
            job_id, user, priority, fairshare = (field.strip() for field in line.split("|"))
            if job_id in (heavy_job, light_job):
                prio[user] = (float(priority), float(fairshare))
        assert prio[light][1] > prio[heavy][1] and prio[light][0] > prio[heavy][0], (prio, shares(cluster))
        cancel(cluster, blocker)
        light_done = state(cluster, light_job, "COMPLETED", timeout=120)
        heavy_done = state(cluster, heavy_job, "COMPLETED", timeout=120)
        assert at(light_done["StartTime"]) < at(heavy_done["StartTime"]), (light_done, heavy_done)
    finally:
        cancel(cluster, blocker, heavy_job, light_job)


# --------------------------------------------------------------------------- preemption


def test_a_scavenger_job_is_requeued_after_its_exempt_time_and_completes(cluster: Cluster_) -> None:
    pre = cluster.spec.scheduling.preemption
    assert (pre.type, pre.mode, pre.exempt_time) == ("partition_prio", "REQUEUE", "00:00:10")
    low = high = ""
    try:
        low = sbatch(cluster, f"-p scavenger -w {NODE} -c 2 -o /dev/null --wrap '{RUNS_UNTIL_REQUEUED}'")
        started = at(state(cluster, low, "RUNNING")["StartTime"])
        high = sbatch(cluster, f"-p ml-cpu -w {NODE} -c 2 -o /dev/null --wrap 'sleep 2'", user="bob")
        wait_job(cluster, low, "requeued", lambda r: r.get("Restarts") == "1", timeout=90)
        said = root(cluster, f"grep -a 'preempted JobId={low} has been requeued' {SLURMCTLD_LOG} | tail -1")
        when = re.match(r"\[([^]]+)\]", said)
        assert when and f"for JobId={high}" in said, said
        assert at(when[1]) - started >= 10, f"requeued {at(when[1]) - started:.1f} s after it started"
        state(cluster, high, "COMPLETED", timeout=60)
        root(cluster, f"scontrol update JobId={low} StartTime=now")
        assert state(cluster, low, "COMPLETED", timeout=90)["Partition"] == "scavenger"
        runs = root(cluster, f"sacct -n -X -D -P -j {low} -o State").split()
        assert runs[-1] == "COMPLETED" and {"PREEMPTED", "REQUEUED"} & set(runs[:-1]), runs
    finally:
        cancel(cluster, low, high)
