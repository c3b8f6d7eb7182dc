"""What the scheduler service's signal and requeue do to a real job, proven with the node
image's own slurmctld and slurmd (one node, dev-cpu-01, a slurmd in the judge container) on
the config rendered from examples/local.yaml:

- the service's signal (SlurmClient.signal, as a spot notice sends it) reaches the batch
  shell itself - training that runs in the script without `srun` hears it - and, through
  srun, the tasks of the job's steps (`scancel --full`);
- a requeued batch job may run again after the credential lifetime the cluster sets plus
  1 s (AuthInfo=cred_expire, render.CRED_EXPIRE), not Slurm's default 121 s.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path

import pytest

from slurmforge.render import CRED_EXPIRE, render_all
from slurmforge.slurm.client import SlurmClient
from slurmforge.spec import load_spec
from tests.slurm.daemons import SlurmInJudge, parse_oneliner, running_slurmctld

ROOT = Path(__file__).resolve().parents[2]
NODE = "dev-cpu-01"

pytestmark = [pytest.mark.slurm]


class OneNode(SlurmInJudge):
    def submit(self, script: str) -> str:
        path = self.run.root / f"job-{time.monotonic_ns()}.sh"
        path.write_text("#!/bin/bash\n" + script)
        return self.slurm("sbatch", "--parsable", "-p", "ml-cpu", "-w", NODE, "-D", str(self.run.root),
                          "-o", str(self.run.root / "%j.out"), str(path)).strip()

    def job(self, job: str) -> dict[str, str]:
        return parse_oneliner(self.slurm("scontrol", "show", "job", "-o", job))

    def wait_for(self, what: str, ok: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {timeout:.0f} s\n{self.log()[-3000:]}")
            time.sleep(0.2)

    def service_client(self) -> SlurmClient:
        """The service's Slurm client, its commands run where this slurmctld is."""
        def runner(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
            return self.judge.run(list(argv), env={"SLURM_CONF": str(self.run.conf)}, timeout=30)
        return SlurmClient(runner)


@pytest.fixture(scope="module")
def node() -> Iterator[OneNode]:
    spec = load_spec(ROOT / "examples/local.yaml")
    with running_slurmctld(spec, render_all(spec, source="local.yaml"), node=NODE) as (judge, run):
        yield OneNode(spec, run, judge)


def test_the_services_signal_reaches_the_batch_shell_and_the_steps(node: OneNode) -> None:
    out = node.run.root / "heard"
    ready = node.run.root / "step-ready"
    step = (f"import signal, sys, time, pathlib\n"
            f"def heard(*_):\n"
            f"    open('{out}', 'a').write('step\\n'); sys.exit(0)\n"
            f"signal.signal(signal.SIGUSR1, heard)\n"
            f"pathlib.Path('{ready}').touch()\n"
            f"time.sleep(120)\n")
    (node.run.root / "step.py").write_text(step)
    job = node.submit(f"trap 'echo shell >> {out}' USR1\n"
                      f"srun -n1 python3 {node.run.root / 'step.py'} &\n"
                      "wait\nwait\n")
    node.wait_for("running step", ready.exists)
    node.service_client().signal([int(job)], "USR1")
    node.wait_for("job end", lambda: node.job(job)["JobState"] in ("COMPLETED", "FAILED"), timeout=30)
    heard = sorted(out.read_text().split()) if out.exists() else []
    assert heard == ["shell", "step"], f"heard by {heard}; job {node.job(job)}"
    assert node.job(job)["JobState"] == "COMPLETED"


def test_a_requeued_job_may_run_again_after_the_clusters_credential_lifetime(node: OneNode) -> None:
    assert CRED_EXPIRE < 120
    job = node.submit('if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then exit 0; fi; sleep 300\n')
    node.wait_for("running job", lambda: node.job(job)["JobState"] == "RUNNING")
    requeued = time.time()
    node.slurm("scontrol", "requeue", job)
    node.wait_for("pending job", lambda: node.job(job)["JobState"] == "PENDING", timeout=30)
    held = datetime.fromisoformat(node.job(job)["EligibleTime"]).timestamp() - requeued
    # Slurm counts in whole seconds: cred_expire + 1 after the requeue
    assert CRED_EXPIRE <= held <= CRED_EXPIRE + 2.5, f"held {held:.1f} s"
    node.wait_for("completion", lambda: node.job(job)["JobState"] == "COMPLETED", timeout=CRED_EXPIRE + 40)
    assert node.job(job)["Restarts"] == "1"
