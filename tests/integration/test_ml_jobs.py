"""What an ML engineer's jobs get on the live local cluster: PyTorch, Open MPI 5 and
mpi4py as modules of the shared tree (the repository's own definitions in modules/, published
with `slurmforge modules publish`), loaded the cluster's way on any node - a dynamic node born
after the publish too.

Cost: the publish ~40 s the first time in a session (apt downloads ~180 MB from Debian's
mirror, unpacks ~900 MB into the tree), ~3 s when published already; a cold dynamic node ~20 s.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurmforge.service.slurm import SlurmClient
from tests.harness import mljobs
from tests.integration.conftest import ROOT, Cluster_

pytestmark = pytest.mark.integration

OPENMPI = "apps/openmpi/5.0"
MPI4PY = "libs/python/mpi4py/4.0.3-python-3.13"
TORCH = "libs/python/torch/2.6.0-python-3.13"
BORN_LATER = "dev-cpu-03"
"""A node of the cpu pool beyond min_nodes: no machine until a job wants it."""


def publish_ml_modules(cluster: Cluster_) -> None:
    """The ML modules published into the cluster's tree (a no-op when they are)."""
    argv = [sys.executable, "-m", "slurmforge.cli", "modules", "publish", OPENMPI, MPI4PY, TORCH,
            "--inventory", str(cluster.report.inventory)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=900)
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
