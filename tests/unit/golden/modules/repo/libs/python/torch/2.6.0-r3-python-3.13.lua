-- libs/python/torch/2.6.0-r3-python-3.13: written by slurmforge from modules/libs/python/torch/2.6.0-r3-python-3.13.yaml (sha256:a7fe02a968a424101caae74b9fe3e1cb1252599cfdd38132b03360bad70f5d11).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
PyTorch 2.6.0 from Debian 13, built for CPUs: torch.distributed with the gloo and MPI backends
(no CUDA, no NCCL: GPU jobs load libs/python/torch/2.6.0-r2-cuda-12.4-python-3.13).
Multi-node launches work as PyTorch documents them, unchanged:
  srun python train.py            init_process_group("gloo") with MASTER_ADDR, MASTER_PORT,
                                  RANK, WORLD_SIZE (env://) from the job's environment
  srun torchrun --nnodes=$SLURM_NNODES --nproc-per-node=N --rdzv-backend=c10d \
       --rdzv-endpoint=<first node>:29400 train.py
  python -m torch.distributed.run ...   the same, from a batch script
Debian's build has no libuv: the module sets USE_LIBUV=0 and ships a small shim
(slurmforge_tcpstore, loaded by PyTorch's extension autoloading) so that the stores
torchrun creates use the classic TCPStore; nothing in a script needs to change.
]])

whatis("Name: torch")
whatis("Version: 2.6.0-r3-python-3.13")
whatis("Category: Python libraries")
whatis("Description: PyTorch 2.6.0 (Debian 13, CPU), torch.distributed with gloo and MPI; env://, torchrun and torch.distributed.run work as documented")

depends_on("apps/python/3.13")
depends_on("apps/openmpi/5.0-r2")

local root = "/opt/software/modules/install/libs/python/torch/2.6.0-r3-python-3.13"

prepend_path("PATH", pathJoin(root, "usr/bin"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "usr/lib/x86_64-linux-gnu"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "usr/lib"))
prepend_path("PYTHONPATH", pathJoin(root, "usr/lib/python3/dist-packages"))
setenv("USE_LIBUV", "0")
