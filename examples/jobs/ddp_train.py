"""Data-parallel training across nodes (torch.distributed, DistributedDataParallel), the way a
Slurm job does it: one task a node started by `srun`, the rendezvous from Slurm's environment,
data read from CephFS, checkpoints written there, resumed after a requeue, and a checkpoint
written when Slurm or the cluster signals the job (USR1) before it stops.

    srun python ddp_train.py --steps 200 --checkpoint-every 20 --data /data/$USER/ddp-data.pt \
        --dir /data/$USER/runs/$SLURM_JOB_ID

Backend: NCCL when the job got GPUs (a CUDA build of PyTorch), gloo on CPUs. Rank 0 logs to
<dir>/steps.log, a line each: `start STEP HOST TIME world=N restart=N`, `step STEP HOST TIME
SAMPLES/S LOSS`, `checkpoint STEP HOST TIME`, `done STEP HOST TIME` (TIME: Unix seconds), so a
resumed run shows where and when it picked up.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

STOP = False


STOPPED = 75
"""Exit status of a run that stopped on a signal after its checkpoint: requeue it (EX_TEMPFAIL)."""


def on_signal(signum: int, _frame: object) -> None:
    """USR1 (the cluster's notice, `#SBATCH --signal=...`), TERM (a cancel or requeue): stop
    at the next step boundary, after a checkpoint."""
    global STOP
    STOP = True
    print(f"{socket.gethostname()} rank {os.environ.get('SLURM_PROCID')}: {signal.Signals(signum).name}, "
          "stopping after the next checkpoint", file=sys.stderr, flush=True)


def rendezvous() -> tuple[int, int, int]:
    """rank, world size, local rank from Slurm's task environment; the first node of the
    allocation is the store (MASTER_ADDR), on a port derived from the job id."""
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    local = int(os.environ["SLURM_LOCALID"])
    if "MASTER_ADDR" not in os.environ:
        hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                               capture_output=True, text=True, check=True).stdout.split()
        os.environ["MASTER_ADDR"] = hosts[0]
    os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ["SLURM_JOB_ID"]) % 10000))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local)
    dist.init_process_group(backend, rank=rank, world_size=world)
    return rank, world, local


def dataset(path: Path, samples: int, features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The training data on CephFS: made once (a linear target with noise), then read."""
    if dist.get_rank() == 0 and not path.exists():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(samples, features, generator=g)
        y = x @ torch.randn(features, 1, generator=g) + 0.01 * torch.randn(samples, 1, generator=g)
        tmp = path.with_suffix(".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"x": x, "y": y}, tmp)
        tmp.rename(path)
    dist.barrier()
    data = torch.load(path)
    return data["x"], data["y"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256, help="samples per rank and step")
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--samples", type=int, default=65536)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step (a slower model)")
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGUSR1, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    torch.set_num_threads(int(os.environ.get("SLURM_CPUS_PER_TASK", "1")))
    rank, world, local = rendezvous()
    device = torch.device("cuda", local) if torch.cuda.is_available() else torch.device("cpu")
    x, y = dataset(args.data, args.samples, args.features)
    model = nn.Sequential(nn.Linear(args.features, 512), nn.ReLU(), nn.Linear(512, 1)).to(device)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    args.dir.mkdir(parents=True, exist_ok=True)
    checkpoint = args.dir / "checkpoint.pt"
    step = 0
    if checkpoint.exists():  # a requeued run: go on from the last checkpoint
        state = torch.load(checkpoint, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    log = (args.dir / "steps.log").open("a") if rank == 0 else None
    host = socket.gethostname()
    if log:
        print(f"start {step} {host} {time.time():.3f} world={world} "
              f"restart={os.environ.get('SLURM_RESTART_COUNT', '0')}", file=log, flush=True)
    g = torch.Generator().manual_seed(rank)
    stop = torch.zeros(1, device=device)
    while step < args.steps:
        began = time.perf_counter()
        index = torch.randint(0, x.shape[0], (args.batch,), generator=g)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(ddp(x[index].to(device)), y[index].to(device))
        loss.backward()
        optimizer.step()
        step += 1
        time.sleep(args.step_seconds)
        rate = args.batch * world / (time.perf_counter() - began)
        if log:
            print(f"step {step} {host} {time.time():.3f} {rate:.0f} {loss.item():.4f}", file=log, flush=True)
        stop.fill_(1.0 if STOP else 0.0)
        dist.all_reduce(stop)  # every rank stops at the same step when any was told to
        if step % args.checkpoint_every == 0 or step == args.steps or stop.item():
            if rank == 0:
                tmp = checkpoint.with_suffix(".tmp")
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)
                tmp.rename(checkpoint)  # a crash mid-write leaves the last whole checkpoint
                print(f"checkpoint {step} {host} {time.time():.3f}", file=log, flush=True)
            dist.barrier()
        if stop.item():
            break
    if log and step >= args.steps:
        print(f"done {step} {host} {time.time():.3f}", file=log, flush=True)
        (args.dir / "done").touch()
    dist.destroy_process_group()
    return 0 if step >= args.steps else STOPPED


if __name__ == "__main__":
    raise SystemExit(main())
