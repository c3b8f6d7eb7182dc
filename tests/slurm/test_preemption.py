"""Preemption, proven with the node image's own slurmctld and slurmd: real jobs on one real
node (dev-cpu-01, a slurmd in the judge container), on the config rendered from the spec.

- examples/local.yaml (partition_prio, REQUEUE, exempt_time 10 s): a scavenger job (tier
  0) is requeued for an ml-cpu job (tier 1) that needs its node, no sooner than 10 s after
  it started, and runs again and completes once the ml-cpu job is done;
- the same with SUSPEND,GANG (tests/slurm/specs.py: scavenger suspends, 256 MB per CPU by
  default): the scavenger
  job is suspended at once and resumed when the ml-cpu job ends, then completes;
- Slurm's gang scheduler ignores PreemptExemptTime (what the check exempt_time_takes_effect
  says): a hand-made config with both requeues a job within the exempt time. When a Slurm
  release honours it, this test fails: relax the check.

Only how a job's processes are tracked differs from the rendered config (daemons.py,
SLURMD_OVERRIDE). A requeued batch job waits out the credential lifetime + 1 s (11 s,
render.CRED_EXPIRE) before it may start again; the tests set its start time to now, as an
admin can, and do not wait.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from slurmforge.render import render_all
from slurmforge.spec import load_spec
from tests.slurm.daemons import SlurmInJudge, parse_oneliner, running_slurmctld
from tests.slurm.specs import suspend_spec

ROOT = Path(__file__).resolve().parents[2]
NODE = "dev-cpu-01"
# a job's script: the first run sleeps long enough to be preempted, a requeued run ends at once
RUNS_UNTIL_REQUEUED = 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then exit 0; fi; sleep 300'

pytestmark = [pytest.mark.slurm]


class Cluster1(SlurmInJudge):
    """slurmctld and one slurmd in a judge container."""

    def submit(self, partition: str, script: str, *args: str) -> str:
        return self.slurm("sbatch", "--parsable", "-p", partition, "-w", NODE, "--cpus-per-task=2",
                          "-o", str(self.run.root / "%j.out"), *args, "--wrap", script).strip()

    def job(self, job: str) -> dict[str, str]:
        return parse_oneliner(self.slurm("scontrol", "show", "job", "-o", job))

    def wait(self, job: str, what: str, ok: Callable[[dict[str, str]], bool], timeout: float = 90
             ) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            record = self.job(job)
            if ok(record):
                return record
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job}: no {what} after {timeout:.0f} s: {record}\n{self.log()[-3000:]}")
            time.sleep(0.5)

    def state(self, job: str, state: str, timeout: float = 90) -> dict[str, str]:
        return self.wait(job, state, lambda r: r["JobState"] == state, timeout)


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@pytest.fixture(scope="module")
def requeueing() -> Iterator[Cluster1]:
    spec = load_spec(ROOT / "examples/local.yaml")
    with running_slurmctld(spec, render_all(spec, source="local.yaml"), node=NODE) as (judge, run):
        yield Cluster1(spec, run, judge)


@pytest.fixture(scope="module")
def suspending() -> Iterator[Cluster1]:
    spec = suspend_spec()
    with running_slurmctld(spec, render_all(spec, source="suspend.yaml"), node=NODE) as (judge, run):
        yield Cluster1(spec, run, judge)


def test_local_requeues_a_scavenger_job_after_its_exempt_time(requeueing: Cluster1) -> None:
    c = requeueing
    pre = c.spec.scheduling.preemption
    assert (pre.type, pre.mode, pre.exempt_time) == ("partition_prio", "REQUEUE", "00:00:10")
    low = c.submit("scavenger", RUNS_UNTIL_REQUEUED)
    started = at(c.state(low, "RUNNING")["StartTime"])
    high = c.submit("ml-cpu", "sleep 2")
    c.wait(low, "requeue", lambda r: r["Restarts"] == "1", timeout=90)
    line = re.search(rf"\[([^]]+)\] preempted JobId={low} has been requeued to reclaim resources for JobId={high}",
                     c.log())
    assert line, c.log()[-3000:]
    assert at(line[1]) - started >= 10, f"requeued {at(line[1]) - started:.1f} s after it started"
    c.state(high, "COMPLETED", timeout=60)
    c.slurm("scontrol", "update", f"JobId={low}", "StartTime=now")
    done = c.state(low, "COMPLETED", timeout=60)
    assert done["Partition"] == "scavenger" and done["NodeList"] == NODE


def test_suspend_gang_suspends_at_once_and_resumes_when_the_preemptor_ends(suspending: Cluster1) -> None:
    c = suspending
    # one-second steps: a stopped shell takes no step (a single sleep's clock would run on)
    low = c.submit("scavenger", "for i in 1 2 3 4 5 6 7 8; do sleep 1; done")
    c.state(low, "RUNNING")
    # the preemptor runs 15 s: the low job is SUSPENDED that long, which each poll (an scontrol
    # through the judge's container, seconds under CI's load) must see; 4 s was missed once
    high = c.submit("ml-cpu", "sleep 15")
    c.state(low, "SUSPENDED", timeout=30)
    running = c.state(high, "RUNNING", timeout=30)
    assert running["NodeList"] == NODE
    ended = at(c.state(high, "COMPLETED", timeout=60)["EndTime"])
    c.state(low, "RUNNING", timeout=30)
    done = c.state(low, "COMPLETED", timeout=60)
    # the same run, resumed (never requeued), went on after the preemptor ended
    assert done["Restarts"] == "0" and at(done["EndTime"]) > ended, done


def test_gang_scheduling_ignores_the_exempt_time(suspending: Cluster1) -> None:
    """A job in a REQUEUE partition under SUSPEND,GANG with a 60 s PreemptExemptTime, written
    into slurm.conf by hand (the spec refuses it) and taken with a reconfigure. Runs last
    on this controller (it changes its config)."""
    c = suspending
    conf = c.run.conf.read_text()
    conf = conf.replace("PreemptMode=SUSPEND,GANG", "PreemptMode=SUSPEND,GANG\nPreemptExemptTime=00:01:00")
    conf = re.sub(r"^(PartitionName=scavenger .*)PreemptMode=SUSPEND", r"\1PreemptMode=REQUEUE", conf, flags=re.M)
    c.run.conf.write_text(conf)
    c.slurm("scontrol", "reconfigure")
    deadline = time.monotonic() + 60
    while "REQUEUE" not in c.slurm("scontrol", "show", "partition", "scavenger", "-o"):
        assert time.monotonic() < deadline, "the reconfigure never took the REQUEUE partition"
        time.sleep(0.5)
    low = c.submit("scavenger", RUNS_UNTIL_REQUEUED)
    started = at(c.state(low, "RUNNING")["StartTime"])
    c.submit("ml-cpu", "sleep 2")
    c.wait(low, "requeue", lambda r: r["Restarts"] == "1", timeout=30)
    line = re.search(rf"\[([^]]+)\] preempted JobId={low} has been requeued", c.log())
    assert line, c.log()[-3000:]
    assert at(line[1]) - started < 60, "Slurm honoured PreemptExemptTime under GANG: relax exempt_time_takes_effect"
