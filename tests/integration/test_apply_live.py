"""Issue 26, items 2 and 4: one spec edit applied with `up --local` while jobs run, then the
spec as it was applied again - two rollouts - and `sacct` shows no job lost across both.

The edit adds a pool (`extra`, one static node) and a partition on it (`debug`), grows
cpu-spot, shrinks cpu, shortens ml-cpu's MaxTime below a running job's limit and gives the
static gpu pool more memory (its node's machine is made again). The plan printed first names each; the job on
the cpu node that stays runs on untouched; the job on the gpu node holds the rollout (the
node drained, not yet made again) until it ends, then the node is made again and back in
service; the new partition takes a job on the new node. Going back (`--requeue`) removes the
pool (its node, up, drained first) and the partition and shrinks cpu-spot back, with a job on
the gpu node again: requeued, not waited for, and run again once the node is back.

Jobs that must outlive a step wait for a file on the shared home instead of sleeping a
guessed time: the test ends each when it has seen what it needs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.harness.live import LiveCluster, wait_until
from tests.integration.conftest import ROOT, SPEC, Cluster_
from tests.integration.test_day_two_live import cli, wait_sacct, wait_state

pytestmark = pytest.mark.integration

MAX_TIME = "00:20:00"
"""ml-cpu's MaxTime in the edit: below the running job's 30 minutes."""


def edited_spec(tmp_path: Path) -> Path:
    data = yaml.safe_load(SPEC.read_text())
    pools = {p["name"]: p for p in data["pools"]}
    # static: `up` makes its machine and, going back, drains and removes it while it is up
    data["pools"].append({"name": "extra", "kind": "cpu", "hardware": dict(pools["cpu"]["hardware"]),
                          "min_nodes": 1, "max_nodes": 1, "price_per_hour": 0.096})
    pools["cpu-spot"]["max_nodes"] += 1
    pools["cpu"]["max_nodes"] -= 1
    pools["gpu"]["hardware"]["memory_mb"] *= 2
    data["partitions"].append({"name": "debug", "pools": ["extra"], "max_time": "01:00:00",
                               "default_time": "00:10:00", "allow_groups": ["ml-users"]})
    ml_cpu = next(p for p in data["partitions"] if p["name"] == "ml-cpu")
    ml_cpu["max_time"], ml_cpu["default_time"] = MAX_TIME, "00:10:00"
    path = tmp_path / SPEC.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def until_stopped(live: LiveCluster, tag: str) -> str:
    return f"--wrap 'while [ ! -e /home/{live.user}/.apply-{tag} ]; do sleep 1; done'"


def stop(live: LiveCluster, tag: str) -> None:
    live.on(live.login, f"touch /home/{live.user}/.apply-{tag}")


def started_at(node: str) -> int:
    """When the node's container started (podman), in epoch seconds."""
    out = subprocess.run(["podman", "inspect", node, "--format", "{{.State.StartedAt.Unix}}"], capture_output=True,
                         text=True, check=True).stdout
    return int(out.strip())


def sinfo(live: LiveCluster, node: str) -> tuple[str, str]:
    """The node's state and reason ("" and "" once Slurm has no such node)."""
    out = live.root(f"sinfo -h -N -n {node} -o '%T|%E' 2>/dev/null | head -1 || true").strip()
    state, _, reason = out.partition("|")
    return state, reason


def plan_rows(stdout: str) -> str:
    """The plan `up` printed before anything changed (piped: one row per line)."""
    return stdout.partition("plan for cluster")[2] if "plan for cluster" in stdout else stdout


def has_row(plan: str, kind: str, name: str, change: str) -> bool:
    shown = name.replace(" ", "_")  # plain output: one word a cell
    return re.search(rf"^{re.escape(kind)}\s+{re.escape(shown)}\s+{re.escape(change)}\s", plan, re.M) is not None


def test_one_edit_and_back_with_jobs_in_flight(cluster: Cluster_, tmp_path: Path) -> None:
    live = cluster.live()
    name = cluster.spec.name
    gpu, cpu1 = f"{name}-gpu-01", f"{name}-cpu-01"
    for tag in ("stay", "gpu1", "gpu2"):
        live.on(live.login, f"rm -f /home/{live.user}/.apply-{tag}")
    stay = live.submit(f"-o /dev/null -p ml-cpu -t 30 --mem=100 -n 1 -w {cpu1} {until_stopped(live, 'stay')}")
    held = live.submit(f"-o /dev/null -p ml-gpu -t 10 --mem=100 -n 1 -w {gpu} {until_stopped(live, 'gpu1')}")
    wait_state(live, stay, ("RUNNING",), 120)
    wait_state(live, held, ("RUNNING",), 120)
    stay_start = live.root(f"squeue -h -j {stay} -o %S").strip()
    gpu_machine = started_at(gpu)
    jobs = [stay, held]

    # ---- the edit, applied with jobs running
    restored = False
    try:
        first, drain_wait = apply_edit(live, tmp_path, gpu, held, gpu_machine)
        jobs += check_edit(live, name, gpu, stay, held, stay_start, gpu_machine)
        second = go_back(live, gpu, jobs)
        restored = True
    finally:
        # a failed step must not leave its jobs waiting for their file: the stay job holds
        # cpu-01 for its 30 minutes, and every later test that needs the node waits behind it
        for tag in ("gpu1", "gpu2", "stay"):
            stop(live, tag)
        if not restored:
            cli("up", "--local", str(SPEC), "--no-job", "--no-validate", "--requeue", "--yes", timeout=1200)
    states = wait_sacct(live, jobs, timeout=180)
    assert set(states.values()) == {"COMPLETED"}, states  # no job lost across both rollouts
    print(f"\napply: edit {first:.0f} s (jobs on drained nodes: {drain_wait}), back {second:.0f} s")


def apply_edit(live: LiveCluster, tmp_path: Path, gpu: str, held: str, gpu_machine: int) -> tuple[float, str]:
    """`up --local` of the edit; the gpu node drained and waiting for `held` until the test
    ends it. Its time, and the drain wait it reports."""
    begun = time.monotonic()
    edit = subprocess.Popen([sys.executable, "-m", "slurmforge.cli", "up", "--local", str(edited_spec(tmp_path)),
                             "--no-job", "--no-validate", "--yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        _, reason = wait_until(lambda: next((s for s in [sinfo(live, gpu)] if s[0].startswith("drain")), None),
                                   600, f"{gpu} drained by the rollout", every=1)
        assert reason.startswith("slurmforge rollout: rebuilt"), reason
        time.sleep(5)  # the rollout waits for the job: node not made again, job still running
        assert started_at(gpu) == gpu_machine and live.squeue_state(held) == "RUNNING"
        stop(live, "gpu1")
        out, err = edit.communicate(timeout=1200)
    finally:
        if edit.poll() is None:
            edit.kill()
    first = time.monotonic() - begun
    assert edit.returncode == 0, out[-3000:] + err[-3000:]
    plan = plan_rows(out)
    for kind, what, change in [("pool", "extra", "add"), ("pool", "cpu-spot", "grow"), ("pool", "cpu", "shrink"),
                               ("pool", "gpu", "rebuild"), ("node", gpu, "rebuild"), ("partition", "debug", "add"),
                               ("partition", "ml-cpu", "change"), ("jobs", gpu, "drain"),
                               ("jobs", "partition ml-cpu", "run-past")]:
        assert has_row(plan, kind, what, change), f"the plan printed first lacks {kind} {what} {change}:\n{plan}"
    assert re.search(rf"^jobs\s+{gpu}\s+drain\s.*\b{held}\b", plan, re.M), plan
    waited = re.search(r"drained nodes emptied in (\d+ s)", out)
    assert waited, out[-2000:]
    return first, waited.group(1)


def check_edit(live: LiveCluster, name: str, gpu: str, stay: str, held: str, stay_start: str,
               gpu_machine: int) -> list[str]:
    """The cluster after the edit; the jobs this step submitted."""
    # the job on the rebuilt node ended before its machine was made again; the node is back
    ended = int(live.root(f"SLURM_TIME_FORMAT=%s sacct -n -X -P -j {held} -o End").strip())
    assert live.sacct_states(held)[held] == "COMPLETED"
    assert started_at(gpu) >= ended > gpu_machine, "the gpu node was not made again after its job ended"
    # resumed once its new slurmd registered; a ping slurmctld sent the old machine may still
    # mark it not responding (idle*) for a second after, which the next answer clears
    wait_until(lambda: sinfo(live, gpu)[0] == "idle", 30, f"{gpu} idle", every=1)
    # the job on a node that stays ran on untouched; the rest is as the edit says
    assert live.squeue_state(stay) == "RUNNING" and live.root(f"squeue -h -j {stay} -o %S").strip() == stay_start
    assert f"MaxTime={MAX_TIME}" in live.root("scontrol show partition ml-cpu")
    assert sinfo(live, f"{name}-cpu-spot-03")[0] and not sinfo(live, f"{name}-cpu-04")[0]
    debug = live.submit("-o /dev/null -p debug -t 5 --mem=100 -n 1 --wrap hostname")
    assert wait_sacct(live, [debug], timeout=300)[debug] == "COMPLETED"
    return [debug]


def go_back(live: LiveCluster, gpu: str, jobs: list[str]) -> float:
    """`up --local --requeue` of the spec as it was, a job on the gpu node again; its time."""
    name = live.name
    stay = jobs[0]
    again = live.submit(f"-o /dev/null -p ml-gpu -t 10 --mem=100 -n 1 -w {gpu} {until_stopped(live, 'gpu2')}")
    jobs.append(again)
    wait_state(live, again, ("RUNNING",), 120)
    begun = time.monotonic()
    back = cli("up", "--local", str(SPEC), "--no-job", "--no-validate", "--requeue", "--yes", timeout=1200)
    second = time.monotonic() - begun
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    plan = plan_rows(back.stdout)
    for kind, what, change in [("pool", "extra", "remove"), ("node", f"{name}-extra-01", "remove"),
                               ("partition", "debug", "remove"),
                               ("pool", "cpu-spot", "shrink"), ("pool", "cpu", "grow"), ("node", gpu, "rebuild"),
                               ("jobs", gpu, "requeue")]:
        assert has_row(plan, kind, what, change), f"the plan printed first lacks {kind} {what} {change}:\n{plan}"
    assert f"requeued job(s) {again}" in back.stdout, back.stdout[-2000:]
    wait_state(live, again, ("RUNNING",), 300)  # the requeued job runs again once the node is back
    assert "REQUEUED" in live.root(f"sacct -n -X -D -P -j {again} -o State")
    assert live.squeue_state(stay) == "RUNNING"
    assert not sinfo(live, f"{name}-extra-01")[0] and not sinfo(live, f"{name}-cpu-spot-03")[0]
    assert "debug" not in live.root("sinfo -h -o %R").split()
    return second
