"""Default pools, proven with the node image's own slurmctld: jobs submitted with sbatch,
srun and salloc, naming no partition, land where the spec says (examples/local.yaml: a GPU
job in ml-gpu, any other in ml-cpu), and a job naming a partition stays there.

slurmctld runs on the rendered config and job_submit.lua in a judge container, as in
test_slurmctld_reads_render.py. No slurmd runs there, so every job is submitted held
(--hold): job_submit runs when the job is created, and squeue shows the partition it got.
srun and salloc wait for their allocation: they run in the background until the job is
cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmforge.render import render_all
from slurmforge.spec import load_spec
from tests.slurm.daemons import SlurmInJudge, running_slurmctld

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slurm]


class Controller(SlurmInJudge):
    def partition_of(self, name: str, timeout: float = 20) -> str:
        """The partition of the job called `name`, once it exists."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.slurm("squeue", "-h", "-n", name, "-o", "%P").split()
            if found:
                return found[0]
            time.sleep(0.2)
        raise AssertionError(f"no job {name} after {timeout} s")


@pytest.fixture(scope="module")
def controller() -> Iterator[Controller]:
    spec = load_spec(ROOT / "examples/local.yaml")
    try:
        with running_slurmctld(spec, render_all(spec, source="local.yaml")) as (judge, run):
            yield Controller(spec, run, judge)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


# (how the job asks, where it must land); local.yaml: default_gpu_pool gpu (ml-gpu),
# default_cpu_pool cpu (ml-cpu, also Slurm's default partition), scavenger over cpu
SBATCH_CASES = {
    "gres": ("--gres=gpu:1", "ml-gpu"),
    "gres-typed": ("--gres=gpu:fakegpu:2", "ml-gpu"),
    "gpus": ("--gpus=1", "ml-gpu"),
    "gpus-typed": ("--gpus=fakegpu:1", "ml-gpu"),
    "gpus-per-node": ("--gpus-per-node=1", "ml-gpu"),
    "gpus-per-task": ("--gpus-per-task=1 --ntasks=1", "ml-gpu"),
    "gpus-per-socket": ("--gpus-per-socket=1 --sockets-per-node=1", "ml-gpu"),
    "tres-per-task": ("--tres-per-task=gres/gpu:1 --ntasks=1", "ml-gpu"),
    "cpus-per-gpu": ("--cpus-per-gpu=2 --gpus=1", "ml-gpu"),
    "no-gpu": ("", "ml-cpu"),
    "cpus": ("--cpus-per-task=2", "ml-cpu"),
    "zero-gpus": ("--gres=gpu:0", "ml-cpu"),
    "named-cpu-with-gpus": ("--partition=ml-cpu --gres=gpu:1", "ml-cpu"),
    "named-gpu-without-gpus": ("--partition=ml-gpu", "ml-gpu"),
    "named-scavenger": ("-p scavenger --gpus=1", "scavenger"),
}


@pytest.mark.parametrize("case", sorted(SBATCH_CASES))
def test_sbatch_lands_where_the_spec_says(controller: Controller, case: str) -> None:
    args, want = SBATCH_CASES[case]
    controller.slurm("sbatch", "--hold", f"--job-name=sb-{case}", *args.split(), "--wrap", "true")
    assert controller.partition_of(f"sb-{case}") == want, controller.log()[-3000:]


@pytest.mark.parametrize(("tool", "args", "want"), [
    ("srun", "--gres=gpu:1", "ml-gpu"),
    ("srun", "", "ml-cpu"),
    ("srun", "-p scavenger --gpus=1", "scavenger"),
    ("salloc", "--gpus-per-node=1", "ml-gpu"),
    ("salloc", "", "ml-cpu"),
], ids=["srun-gpu", "srun-cpu", "srun-named", "salloc-gpu", "salloc-cpu"])
def test_srun_and_salloc_land_where_the_spec_says(controller: Controller, tool: str, args: str, want: str) -> None:
    """Both wait for their allocation, which a held job never gets: they run in the
    background, and cancelling the job ends them."""
    name = f"{tool}-{want}-{len(args)}"
    command = [tool, "--hold", f"--job-name={name}", *args.split()]
    command += ["--no-shell"] if tool == "salloc" else ["true"]
    output = controller.run.root / f"{name}.out"
    controller.judge.spawn(["env", f"SLURM_CONF={controller.run.conf}", *command], output)
    try:
        assert controller.partition_of(name) == want, output.read_text(errors="replace")
    finally:
        controller.slurm("scancel", "-n", name)


def test_a_held_job_is_routed_once_and_then_left_alone(controller: Controller) -> None:
    """job_submit_modify leaves changes to a job as the user makes them."""
    controller.slurm("sbatch", "--hold", "--job-name=moved", "--wrap", "true")
    assert controller.partition_of("moved") == "ml-cpu"
    job = controller.slurm("squeue", "-h", "-n", "moved", "-o", "%i").strip()
    env = {"SLURM_CONF": str(controller.run.conf)}
    # slurmctld here answers a partition change now and then with EAGAIN ("Resource
    # temporarily unavailable"): its nodes never registered; Slurm's own retry is the user's
    for _ in range(10):
        done = controller.judge.run(["scontrol", "update", f"JobId={job}", "Partition=ml-gpu"], env=env)
        if done.returncode == 0 or "temporarily unavailable" not in done.stderr:
            break
        time.sleep(0.5)
    assert done.returncode == 0, done.stderr
    assert controller.partition_of("moved") == "ml-gpu"
