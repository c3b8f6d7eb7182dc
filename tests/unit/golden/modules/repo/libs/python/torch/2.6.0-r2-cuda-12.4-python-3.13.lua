-- libs/python/torch/2.6.0-r2-cuda-12.4-python-3.13: written by slurmforge from modules/libs/python/torch/2.6.0-r2-cuda-12.4-python-3.13.yaml (sha256:b6d476bffcea360e4223baa80f7f4badf4268c16d4e9c1710d55597ef03583af).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
PyTorch 2.6.0 as PyPI builds it for Linux: CUDA 12.4, cuDNN 9, NCCL 2.21.5
(lib/python3.13/site-packages/nvidia/nccl/lib/libnccl.so.2 in this module's prefix).
For GPU jobs (--gres=gpu:N): init_process_group("nccl"); on a node without a GPU
torch.cuda.is_available() is False and gloo works as on the CPU build.
Launch as PyTorch documents it: srun with env://, srun torchrun --rdzv-backend=c10d,
or python -m torch.distributed.run from a batch script.
CPU-only jobs load the smaller Debian build, libs/python/torch/2.6.0-r3-python-3.13.
]])

whatis("Name: torch")
whatis("Version: 2.6.0-r2-cuda-12.4-python-3.13")
whatis("Category: Python libraries")
whatis("Description: PyTorch 2.6.0 (PyPI, CUDA 12.4, NCCL 2.21.5 from nvidia-nccl-cu12), for GPU jobs; NCCL on GPUs, gloo on CPUs")

depends_on("apps/python/3.13")

local root = "/opt/software/modules/install/libs/python/torch/2.6.0-r2-cuda-12.4-python-3.13"

prepend_path("PATH", pathJoin(root, "bin"))
prepend_path("PYTHONPATH", pathJoin(root, "lib/python3.13/site-packages"))
