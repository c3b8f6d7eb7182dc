"""What an ML engineer's jobs get on the live local cluster: PyTorch, Open MPI 5 and
mpi4py as modules of the shared tree (the repository's own definitions in modules/, published
with `slurmforge modules publish`), loaded the cluster's way on any node - a dynamic node born
after the publish too.

Cost: the publish ~40 s the first time in a session (apt downloads ~180 MB from Debian's
mirror, unpacks ~900 MB into the tree), ~3 s when published already; a cold dynamic node ~20 s.
"""

from __future__ import annotations

import posixpath
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurmforge.slurm.client import SlurmClient
from tests.harness import launches, mljobs
from tests.harness.live import pip_cert_args
from tests.integration.conftest import ROOT, Cluster_

pytestmark = pytest.mark.integration

OPENMPI = "apps/openmpi/5.0-r2"
MPI4PY = "libs/python/mpi4py/4.0.3-r2-python-3.13"
TORCH = "libs/python/torch/2.6.0-r3-python-3.13"
TORCH_CUDA = "libs/python/torch/2.6.0-r2-cuda-12.4-python-3.13"
GPU_NODE = "dev-gpu-01"
BORN_LATER = "dev-cpu-03"
"""A node of the cpu pool beyond min_nodes: no machine until a job wants it."""


def publish_ml_modules(cluster: Cluster_, names: Sequence[str] = (OPENMPI, MPI4PY, TORCH), timeout: int = 900) -> None:
    """The ML modules published into the cluster's tree (a no-op when they are)."""
    argv = [sys.executable, "-m", "slurmforge.cli", "modules", "publish", *names,
            "--inventory", str(cluster.report.inventory), *pip_cert_args()]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def modules(cluster: Cluster_) -> Path:
    publish_ml_modules(cluster)
    return Path(cluster.report.inventory)


def test_a_node_born_after_the_publish_loads_torch_and_mpi4py(cluster: Cluster_, modules: Path) -> None:
    live = cluster.live()
    live.power_down(BORN_LATER)
    job = ("#!/bin/bash\nmodule load libs/python/torch libs/python/mpi4py\nmodule -t list 2>&1\n"
           "python -c 'import torch, torch.distributed as d, mpi4py; "
           "print(torch.__version__, d.is_gloo_available(), mpi4py.__version__)'\n")
    done = cluster.login(f"sbatch --wait --parsable -p ml-cpu -w {BORN_LATER} -o born-%j.out <<'EOF'\n{job}EOF",
                         timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = cluster.login(f"cat born-{done.stdout.strip().split(';')[0]}.out").stdout
    assert all(m in out for m in (OPENMPI, TORCH, MPI4PY)), out
    assert "2.6.0+debian True 4.0.3" in out, out


def test_nothing_of_it_is_in_the_node_image(cluster: Cluster_, modules: Path) -> None:
    done = cluster.run("dev-cpu-01", "python3 -c 'import torch' 2>&1; command -v ompi_info || echo no-ompi")
    assert "No module named 'torch'" in done.stdout and "no-ompi" in done.stdout, done.stdout



# --------------------------------------------------------------------------- the job templates


@pytest.fixture(scope="module")
def jobs(cluster: Cluster_, modules: Path) -> str:
    """examples/jobs/ in alice's home, as she would copy it."""
    return mljobs.copy_jobs(cluster.live())


def test_mpi_allreduce_over_srun_pmix_with_mpi4py(cluster: Cluster_, jobs: str) -> None:
    done = cluster.login(f"cd {jobs} && sbatch --wait --parsable mpi_allreduce.sbatch", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = cluster.login(f"cat {jobs}/mpi-allreduce-{done.stdout.strip().split(';')[0]}.out").stdout
    assert "allreduce ok: 4 ranks on 2 nodes" in out and "sum 10" in out and "Open MPI v5.0" in out, out


def test_ddp_checkpoints_on_the_services_signal_requeues_itself_and_resumes(cluster: Cluster_, jobs: str) -> None:
    """Two nodes of DDP (gloo); the whole job signalled as the scheduler service signals it
    (SlurmClient.signal: scancel --full); every rank stops at one step, rank 0 checkpoints to
    CephFS, the script requeues the job, which resumes from that step and finishes."""
    live = cluster.live()
    job = mljobs.submit(live, "ddp_train.sbatch 100", env="DDP_ARGS='--step-seconds 0.2 --checkpoint-every 10'")
    mljobs.wait_for_step(live, job, 25, timeout=240)

    def in_controller(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", "exec", live.controller, *argv], capture_output=True, text=True, timeout=60)

    SlurmClient(in_controller).signal([int(job)])
    mljobs.completed(live, job, timeout=300)
    assert [r.split("|")[0] for r in mljobs.runs(live, job)] == ["REQUEUED", "COMPLETED"]
    log = mljobs.steps(live, job)
    starts = [line.step for line in log if line.kind == "start"]
    checkpoints = [line.step for line in log if line.kind == "checkpoint"]
    assert starts[0] == 0 and len(starts) == 2 and starts[1] in checkpoints and starts[1] >= 25, log
    assert mljobs.ran_twice(log) == [], log  # resumed where it stopped
    assert sorted({line.step for line in log if line.kind == "step"}) == list(range(1, 101)), log
    assert (log[-1].kind, log[-1].step) == ("done", 100), log


# --------------------------------------------------------------------------- upstream's own scripts


@pytest.fixture(scope="module")
def upstream(cluster: Cluster_, modules: Path) -> str:
    """tests/integration/upstream_jobs/ in alice's home: scripts written from PyTorch's and Open
    MPI's documentation, which know nothing of the cluster."""
    return launches.copy(cluster.live())


# `./dev.sh test` runs one launch across nodes of each kind - srun env:// and torchrun's c10d
# rendezvous (one agent a node) - and srun --mpi=pmix; the other forms, which start the same
# ranks another way (2 processes a node, a single-node torch.distributed.run, mpirun inside the
# allocation), run in `./dev.sh test-all`
LONG_FORMS = {"srun torchrun c10d 2/node", "sbatch torch.distributed.run", "mpirun in the allocation"}


def forms(names: list[str]) -> list[object]:
    return [pytest.param(name, marks=pytest.mark.long) if name in LONG_FORMS else name for name in names]


@pytest.mark.parametrize("name", forms(list(launches.PYTORCH)))
def test_pytorchs_documented_launch_paths_run_the_upstream_script_unmodified(
        cluster: Cluster_, upstream: str, name: str) -> None:
    """srun with env:// on 2 nodes, srun torchrun with the c10d rendezvous (1 and 2 processes a
    node), torch.distributed.run in the batch script: every rank initialises gloo and allreduces."""
    launch = launches.pytorch(cluster.live(), name)
    assert launch.ok, launch.output
    assert launch.hosts == (1 if name.startswith("sbatch") else 2), launch.output


@pytest.mark.parametrize("name", forms(list(launches.MPI)))
def test_a_users_mpi_program_compiled_with_mpicc_runs(cluster: Cluster_, upstream: str, name: str) -> None:
    """A C allreduce compiled with the module's mpicc, started by srun --mpi=pmix across 2 nodes and
    by mpirun inside the allocation (Open MPI's PRRTE starts its daemons through Slurm)."""
    live = cluster.live()
    built = launches.compile_mpi(live)
    assert "compiled" in built, built
    launch = launches.mpi(live, name)
    assert launch.ok, launch.output


GPU_CHECK = """import torch
available = torch.cuda.is_available()
print("available", available, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))
try:
    torch.cuda.init()  # what a script that asks for a device meets: torch's own reason
    print("reason none")
except RuntimeError as exc:
    print("reason", str(exc).replace(chr(10), " "))
print("numpy", torch.arange(4).numpy().sum())  # NumPy is in the module, as in the CPU build
print("lib", torch.__path__[0] + "/lib/libtorch_cuda.so")
"""


@pytest.mark.long
def test_the_gpu_pools_cuda_build_resolves_its_libraries_and_nccl_and_says_why_no_gpu(cluster: Cluster_) -> None:
    """The CUDA build (PyPI's wheels, ~2.6 GB to download the first time) on the GPU node, which
    has device files but no NVIDIA driver here: every library of libtorch_cuda.so resolves, NCCL
    is the module's own nvidia-nccl-cu12, is_available() is False with torch's reason, and
    NumPy works as on the CPU build. What needs a real GPU: docs/twin.md."""
    publish_ml_modules(cluster, [TORCH_CUDA], timeout=2400)
    done = cluster.run(GPU_NODE, f"module load {TORCH_CUDA} && python - <<'EOF'\n{GPU_CHECK}EOF", user="alice",
                       timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert out["available"].split()[:5] == ["False", "cuda", "12.4", "nccl", "2.21.5"], done.stdout
    assert "NVIDIA driver" in out["reason"], done.stdout
    assert out["numpy"] == "6", done.stdout
    ldd = cluster.run(GPU_NODE, f"module load {TORCH_CUDA} && ldd {out['lib']}", user="alice").stdout
    assert "not found" not in ldd, ldd
    nccl = [posixpath.normpath(line.split("=>")[1].split()[0]) for line in ldd.splitlines() if "libnccl.so.2" in line]
    named = f"/install/{TORCH_CUDA}/lib/python3.13/site-packages/nvidia/nccl/lib/libnccl.so.2"  # the module's help
    assert nccl and nccl[0].endswith(named), ldd
