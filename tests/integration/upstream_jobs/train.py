"""A training script written the way PyTorch's documentation writes one (the DDP tutorial and
"Multinode training" with torchrun), not the way slurmforge's templates do: nothing in it knows
about Slurm, libuv or the cluster. The tests run it unmodified under srun (env://), torchrun and
torch.distributed.run: all of them hand it RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT in the environment, and init_process_group reads them (env://, the default).

Prints `initialised RANK WORLD HOST BACKEND UNIX-TIME` once the process group exists and
`allreduce RANK SUM` after one DDP step's allreduce: the tests and bench/ml_bench.py read them.
"""

import os
import socket
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        device = torch.device("cuda", local_rank)
    else:
        dist.init_process_group("gloo")
        device = torch.device("cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"initialised {rank} {world} {socket.gethostname()} {dist.get_backend()} {time.time():.3f}", flush=True)

    model = DDP(nn.Linear(10, 1).to(device), device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = model(torch.randn(20, 10, device=device)).sum()
    loss.backward()
    optimizer.step()

    total = torch.tensor([rank + 1.0], device=device)
    dist.all_reduce(total)
    print(f"allreduce {rank} {int(total.item())}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
