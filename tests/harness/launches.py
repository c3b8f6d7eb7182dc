"""PyTorch's documented multi-node launch paths and an MPI program the user compiles, as batch
scripts a user writes from the upstream docs (tests/integration/upstream_jobs/: train.py knows
nothing of Slurm or libuv), submitted on a live local cluster after `module load`, and how long
each took from submission until every rank had initialised. Used by
tests/integration/test_ml_jobs.py and bench/ml_bench.py (its launch part).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from tests.harness import mljobs
from tests.harness.live import LiveCluster

UPSTREAM = Path(__file__).resolve().parents[1] / "integration" / "upstream_jobs"
DIR = "upstream"
TORCH = "libs/python/torch/2.6.0-r3-python-3.13"
OPENMPI = "apps/openmpi/5.0-r2"
HEAD = 'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'

PYTORCH: dict[str, tuple[str, str, int]] = {
    # name: (sbatch options, what the batch script runs, ranks); the DDP tutorial's env://
    "srun env://": ("-N 2 --ntasks-per-node=1",
                    f"{HEAD}\nexport MASTER_ADDR=$head MASTER_PORT=29500 WORLD_SIZE=$SLURM_NTASKS\n"
                    "srun bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID exec python train.py'", 2),
    # torchrun's "multinode training" form under srun: one agent a node, the c10d rendezvous
    "srun torchrun c10d 1/node": ("-N 2 --ntasks-per-node=1",
                                  f"{HEAD}\nsrun torchrun --nnodes=$SLURM_NNODES --nproc-per-node=1 "
                                  "--rdzv-id=$SLURM_JOB_ID --rdzv-backend=c10d --rdzv-endpoint=$head:29411 train.py",
                                  2),
    "srun torchrun c10d 2/node": ("-N 2 --ntasks-per-node=1 --cpus-per-task=2",
                                  f"{HEAD}\nsrun torchrun --nnodes=$SLURM_NNODES --nproc-per-node=2 "
                                  "--rdzv-id=$SLURM_JOB_ID --rdzv-backend=c10d --rdzv-endpoint=$head:29411 train.py",
                                  4),
    # torch.distributed.run from the batch script itself: the standalone single-node form
    "sbatch torch.distributed.run": ("-N 1 --ntasks=1 --cpus-per-task=2",
                                     "python -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=2 "
                                     "train.py", 2),
}


@dataclass(frozen=True)
class Launch:
    job: str
    ok: bool
    """every rank initialised (gloo) and got the allreduce's sum; the job completed"""
    seconds: float | None
    """submission to the last rank's `initialised` line"""
    hosts: int
    output: str


def copy(live: LiveCluster) -> str:
    """upstream_jobs/ into the user's ~/upstream; that directory."""
    return mljobs.copy_jobs(live, UPSTREAM, DIR)


def script(body: str, modules: str = TORCH) -> str:
    return f"#!/bin/bash\nmodule load {modules}\n{body}\n"


def submit(live: LiveCluster, options: str, body: str, modules: str = TORCH,
           timeout: int = 300) -> tuple[str, float, str]:
    """`sbatch --wait` of the script in ~/upstream; (job id, submission time, its output)."""
    began = time.time()  # the containers share this machine's clock
    done = live.podman.exec(live.login, ["bash", "-lc", f"cd ~/{DIR} && sbatch --wait --parsable -o launch-%j.out "
                                         f"{options} <<'EOF'\n{script(body, modules)}EOF"],
                            user=live.user, timeout=timeout, check=False)
    job = done.stdout.strip().split(";")[0]
    out = live.podman.exec(live.login, ["bash", "-c", f"cat ~/{DIR}/launch-{job}.out"], user=live.user,
                           check=False).stdout
    return job, began, out if done.returncode == 0 else f"sbatch exit {done.returncode}: {done.stderr}\n{out}"


# train.py's lines; found anywhere in the output, not line by line: the processes torchrun
# starts share one stdout and unbuffered writes of two ranks can land on one line
INITIALISED = re.compile(r"initialised (\d+) (\d+) (\S+) (\w+) (\d+\.\d{3})")
ALLREDUCED = re.compile(r"allreduce (\d+) (\d+)")


def initialised(out: str, world: int) -> dict[int, tuple[str, float]]:
    """Ranks that initialised gloo in a world of `world` and got the allreduce's sum: (host, when)."""
    up = {int(rank): (host, float(at)) for rank, size, host, backend, at in INITIALISED.findall(out)
          if size == str(world) and backend == "gloo"}
    total = str(world * (world + 1) // 2)
    summed = {int(rank) for rank, value in ALLREDUCED.findall(out) if value == total}
    return {rank: where for rank, where in up.items() if rank in summed}


# PyTorch 2.6 on Python 3.13 (both Debian 13's), rarely (seen twice: once in CI's judge, once
# on the live cluster; in none of 117 launches in a row here, idle or loaded): a rank that has
# initialised, allreduced and destroyed its process group aborts as its interpreter exits -
# "terminate called without an active exception", SIGABRT. A C++ thread that needs the GIL
# once finalisation has begun is ended by Python < 3.14 with pthread_exit
# (PyThread_exit_thread), whose unwinding through a noexcept frame terminates the process.
# Upstream's, not the cluster's: the work is done when it happens; torchrun then reports the
# rank failed and its other agents wait out their exit barrier (300 s). A launch whose ranks
# all did their work and whose only fault is that abort is run once more, and says so.
EXIT_RACE = "terminate called without an active exception"


def exit_race(out: str, world: int) -> bool:
    """Every rank of `out` did its work and one aborted as it exited (above)."""
    return EXIT_RACE in out and set(initialised(out, world)) == set(range(world))


def pytorch(live: LiveCluster, name: str) -> Launch:
    options, body, world = PYTORCH[name]
    job, began, out = submit(live, options, body)
    if exit_race(out, world):
        first = job
        job, began, out = submit(live, options, body)
        out = f"(job {first}: every rank did its work, then one aborted as it exited; run again)\n{out}"
    up = initialised(out, world)
    ok = set(up) == set(range(world)) and "sbatch exit" not in out
    seconds = max(t for _, t in up.values()) - began if ok else None
    return Launch(job, ok, seconds, len({h for h, _ in up.values()}), out)


MPI: dict[str, tuple[str, str]] = {
    "srun --mpi=pmix": ("-N 2 --ntasks-per-node=2", "srun --mpi=pmix ./allreduce"),
    "mpirun in the allocation": ("-N 2 --ntasks-per-node=2", "mpirun ./allreduce"),
}


def compile_mpi(live: LiveCluster) -> str:
    """`mpicc` of upstream_jobs/allreduce.c on the login node with the Open MPI module; its output."""
    done = live.podman.exec(live.login, ["bash", "-lc", f"cd ~/{DIR} && module load {OPENMPI} && "
                                         "mpicc -O2 -o allreduce allreduce.c 2>&1 && echo compiled"],
                            user=live.user, timeout=120, check=False)
    return done.stdout + done.stderr


def mpi(live: LiveCluster, name: str) -> Launch:
    options, body = MPI[name]
    job, _, out = submit(live, options, body, OPENMPI)
    ok = "mpi allreduce ok: 4 ranks on 2 nodes, sum 10" in out
    return Launch(job, ok, None, 2 if ok else 0, out)
