"""The job templates of examples/jobs/ run on a live local cluster, and what their logs say:
copied into the user's home as an engineer would, submitted from the login node, and the
training's own step log (rank 0's steps.log on CephFS) read back. Used by
tests/integration/test_ml_jobs.py, tests/integration/test_training_survives.py and bench/ml_bench.py.
"""

from __future__ import annotations

import base64
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.harness.live import LiveCluster, wait_until

JOBS = Path(__file__).resolve().parents[2] / "examples" / "jobs"
STEP_LOG = "/data/{user}/runs/{job}/steps.log"


def copy_jobs(live: LiveCluster, source: Path = JOBS, into: str = "jobs") -> str:
    """examples/jobs/ (or `source`'s files) into the user's ~/jobs (~/`into`); that directory."""
    for path in sorted(p for p in source.iterdir() if p.is_file()):
        text = base64.b64encode(path.read_bytes()).decode()
        write = f"mkdir -p ~/{into} && echo {text} | base64 -d > ~/{into}/{path.name}"
        live.podman.exec(live.login, ["bash", "-c", write], user=live.user, timeout=60)
    return f"/home/{live.user}/{into}"


def submit(live: LiveCluster, args: str, env: str = "") -> str:
    """`sbatch --parsable ARGS` in ~/jobs as the user; the job id."""
    out = live.podman.exec(live.login, ["bash", "-lc", f"cd ~/jobs && {env} sbatch --parsable {args}"],
                           user=live.user, workdir=f"/home/{live.user}", timeout=60).stdout
    return out.strip().split(";")[0]


@dataclass(frozen=True)
class Line:
    kind: str
    """start, step, checkpoint, done"""
    step: int
    host: str
    at: float
    rate: float = 0.0
    """samples/s of the step (step lines)"""


def steps(live: LiveCluster, job: str) -> list[Line]:
    """The training's step log (rank 0's): `<kind> <step> <host> <unix time> [samples/s ...]`."""
    text = live.on(live.login, f"cat {STEP_LOG.format(user=live.user, job=job)} 2>/dev/null || true")
    lines = []
    for row in (line.split() for line in text.splitlines()):
        if len(row) >= 4 and row[1].isdigit():
            lines.append(Line(row[0], int(row[1]), row[2], float(row[3]),
                              float(row[4]) if row[0] == "step" and len(row) > 4 else 0.0))
    return lines


def wait_for_step(live: LiveCluster, job: str, step: int, timeout: float = 300) -> None:
    wait_until(lambda: any(line.kind == "step" and line.step >= step for line in steps(live, job)), timeout,
               f"job {job} past step {step}", every=1)


def runs(live: LiveCluster, job: str) -> list[str]:
    """Every run of the job in sacct (-D: a requeued run is a record of its own), oldest first."""
    return live.root(f"sacct -n -X -D -P -j {job} -o State,NodeList").split()


def completed(live: LiveCluster, job: str, timeout: float = 600) -> None:
    wait_until(lambda: live.sacct_states(job).get(job) == "COMPLETED", timeout, f"job {job} COMPLETED", every=2)


def samples_per_second(lines: list[Line], skip: int = 5) -> float:
    """The median rate over the steps, the first `skip` (warm-up) left out."""
    rates = [line.rate for line in lines if line.kind == "step" and line.step > skip]
    return statistics.median(rates) if rates else 0.0


def ran_twice(lines: list[Line]) -> list[int]:
    """Steps trained more than once (a resumed run going over what the last checkpoint lacked)."""
    seen: dict[int, int] = {}
    for line in lines:
        if line.kind == "step":
            seen[line.step] = seen.get(line.step, 0) + 1
    return sorted(step for step, count in seen.items() if count > 1)


@dataclass(frozen=True)
class Resumed:
    """A training job interrupted on purpose, and how it came back."""

    job: str
    fault: str
    """"notice" (a spot interruption notice for its machine) or "kill" (its container killed)."""
    seconds: float | None
    """From the fault to the resumed run's start line (its checkpoint loaded); None: never."""
    resumed_at_step: int
    last_checkpoint: int
    """The last checkpoint the first run wrote before it stopped."""
    twice: list[int]
    """Steps trained twice."""
    runs: list[str]
    """sacct -D: `State|NodeList` of every run, oldest first."""
    finished: bool
    """The training reached its target step ("done" in the log) and the job COMPLETED."""
    link: str
    """The capacity link (pool) of the machine the last run finished on."""


def spot_nodes_off(live: LiveCluster, partition: str = "ml-spot") -> None:
    """Every node of the spot partition powered down, so that the next job's machine is
    launched on the spot link (a node left up from an earlier job may run on its fallback)."""
    for node in live.root(f"sinfo -h -N -p {partition} -o %N").split():
        live.power_down(node)


def link_of(live: LiveCluster, node: str) -> str:
    """The link the node's current machine was launched on (its container's label)."""
    from slurmforge.hosts import TAG_LINK

    info = live.podman.container(node)
    return info.labels.get(TAG_LINK, "") if info else ""


def interrupted(live: LiveCluster, fault: str, submit_args: str, act: Callable[[str], None], target: int = 150,
                after_step: int = 20, checkpoint_every: int = 10, timeout: float = 600) -> Resumed:
    """A ddp_train.sbatch job (0.2 s a step) past `after_step`, then `act(job)` (the fault),
    then awaited to the end."""
    job = submit(live, f"{submit_args} ddp_train.sbatch {target}",
                 env=f"DDP_ARGS='--step-seconds 0.2 --checkpoint-every {checkpoint_every}'")
    try:
        wait_for_step(live, job, after_step, timeout=300)
        began = time.time()
        act(job)
        resumed = wait_until(lambda: [line for line in steps(live, job) if line.kind == "start"][1:], timeout,
                             f"job {job} resumed", every=1)
        completed(live, job, timeout=timeout)
    finally:
        live.root(f"scancel {job} 2>/dev/null || true")
    log = steps(live, job)
    first = next(i for i, line in enumerate(log) if line.kind == "start" and i > 0)
    checkpoints = [line.step for line in log[:first] if line.kind == "checkpoint"]
    done = log[-1].kind == "done" and log[-1].step == target and live.sacct_states(job).get(job) == "COMPLETED"
    return Resumed(job, fault, resumed[0].at - began, resumed[0].step, max(checkpoints, default=0), ran_twice(log),
                   runs(live, job), done, link_of(live, log[-1].host))
