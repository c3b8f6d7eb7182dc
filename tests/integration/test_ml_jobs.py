"""What an ML engineer's jobs get on the live local cluster (issue 25): PyTorch, Open MPI 5 and
mpi4py as modules of the shared tree (the repository's own definitions in modules/, published
with `slurmforge modules publish`), loaded the cluster's way on any node - a dynamic node born
after the publish too.

Cost: the publish ~40 s the first time in a session (apt downloads ~180 MB from Debian's
mirror, unpacks ~900 MB into the tree), ~3 s when published already; a cold dynamic node ~20 s.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT, Cluster_

pytestmark = pytest.mark.integration

OPENMPI = "apps/openmpi/5.0"
MPI4PY = "libs/python/mpi4py/4.0.3-python-3.13"
TORCH = "libs/python/torch/2.6.0-python-3.13"
BORN_LATER = "dev-cpu-03"
"""A node of the cpu pool beyond min_nodes: no machine until a job wants it."""


@pytest.fixture(scope="module")
def modules(cluster: Cluster_) -> Path:
    """The ML modules published into the cluster's tree (a no-op when they are)."""
    argv = [sys.executable, "-m", "slurmforge.cli", "modules", "publish", OPENMPI, MPI4PY, TORCH,
            "--inventory", str(cluster.report.inventory)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
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

