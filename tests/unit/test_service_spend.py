"""Spend this month for the pool page: sacct read through the Slurm client, priced like
`slurmforge cost`, refreshed every few minutes off the loop; a failure is said, not hidden."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from slurmforge.cost import SACCT_FIELDS, Period, month_start
from slurmforge.service.spend import SpendTracker
from slurmforge.slurm.client import SlurmClient
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_795_500_000.0


def records(hours: float) -> list[str]:
    return ["|".join(SACCT_FIELDS),
            f"1|ann|research|ml-gpu|dev-gpu-01|billing=20000,cpu=2,gres/gpu=2,mem=1G,node=1|{int(hours * 3600)}|"
            f"{int(NOW - 86400)}|COMPLETED"]


class Reader:
    def __init__(self, hours: float = 3) -> None:
        self.hours, self.calls, self.fail = hours, 0, False

    def __call__(self, period: Period, now: float) -> Iterable[str]:
        self.calls += 1
        assert period == Period(month_start(now), now)
        if self.fail:
            raise RuntimeError("slurmdbd is down")
        return records(self.hours)


def test_refreshed_every_interval_and_failures_keep_the_months_figures() -> None:
    spec, reader = load_spec(ROOT / "examples/local.yaml"), Reader()
    tracker = SpendTracker(reader, interval=300, background=False)
    spend = tracker.update(spec, NOW)
    assert spend is not None and spend.pools == {"gpu": pytest.approx(6.0)} and spend.error == ""
    assert spend.since == month_start(NOW) and spend.at == NOW
    reader.hours = 4
    assert tracker.update(spec, NOW + 100) is spend and reader.calls == 1  # not due yet
    reader.fail = True
    failed = tracker.update(spec, NOW + 300)
    assert failed is not None and failed.pools == {"gpu": pytest.approx(6.0)} and "slurmdbd is down" in failed.error
    reader.fail = False
    again = tracker.update(spec, NOW + 600)
    assert again is not None and again.pools == {"gpu": pytest.approx(8.0)} and again.error == ""


def test_in_the_background_the_loop_does_not_wait() -> None:
    spec = load_spec(ROOT / "examples/local.yaml")
    started, release = threading.Event(), threading.Event()

    def slow(period: Period, now: float) -> Iterable[str]:
        started.set()
        release.wait(10)
        return records(1)

    tracker = SpendTracker(slow, interval=300)
    assert tracker.update(spec, NOW) is None and started.wait(10)  # the first figures are not in yet
    release.set()
    assert tracker._running is not None
    tracker._running.join(10)
    latest = tracker.update(spec, NOW + 1)
    assert latest is not None and latest.pools == {"gpu": pytest.approx(2.0)}


def test_no_prices_no_sacct() -> None:
    tracker = SpendTracker(Reader(), background=False)
    assert tracker.update(load_spec(ROOT / "examples/lab.yaml"), NOW) is None


def test_the_slurm_client_runs_sacct_with_epoch_times() -> None:
    seen: list[list[str]] = []

    def runner(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        seen.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "out", "")

    client = SlurmClient(runner, bin_dir="/usr/bin")
    assert client.sacct(["sacct", "-a"], {"SLURM_TIME_FORMAT": "%s"}) == "out"
    assert seen == [["env", "SLURM_TIME_FORMAT=%s", "/usr/bin/sacct", "-a"]]
