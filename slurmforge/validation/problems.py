"""A pytest plugin of the live-cluster validation, for `slurmforge validate --inventory`:

- every failed or erroring check's whole message, one JSON line per check, into the file
  `--problems` names (pytest's JUnit report cuts long messages short), which the command
  prints (slurmforge.validation.failure_lines);
- where the run is, one JSON line per event on the file descriptor `--progress-fd` names
  (`{"collected": 27}`, `{"check": NAME}` as a check starts, `{"hosts": [done, total],
  "waiting": [...]}` while the hosts are read: `tell`; `{"checked": NAME, "result":
  "passed", "seconds": 1.2}` as it ends), which the command shows as its progress and
  its result. pytest's own output says which check ended only once it has, and nothing while
  the first check's fixture reads every host.
"""

from __future__ import annotations

import io
import json
import os
import threading
from pathlib import Path

import pytest

_target: list[Path] = []
_progress: list[io.TextIOWrapper] = []
_lock = threading.Lock()
_results: dict[str, tuple[str, float]] = {}
"""By check: how it ended so far over its phases (set-up, call, tear-down) and their time."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--problems", default=None, help="write the failed checks' messages here (JSON lines)")
    parser.addoption("--progress-fd", type=int, default=None,
                     help="write where the run is to this file descriptor (JSON lines)")


def pytest_configure(config: pytest.Config) -> None:
    if path := config.getoption("--problems"):
        _target[:] = [Path(path)]
    if (fd := config.getoption("--progress-fd")) is not None:
        os.set_inheritable(fd, False)  # the ssh masters the checks start keep no end of the pipe open
        _progress[:] = [os.fdopen(fd, "w", buffering=1)]


def tell(**event: object) -> None:
    """One progress event to the command running the suite (nothing without --progress-fd;
    the hosts are read from several threads)."""
    with _lock:
        for out in _progress:
            out.write(json.dumps(event) + "\n")


def pytest_collection_finish(session: pytest.Session) -> None:
    tell(collected=len(session.items))


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    tell(check=nodeid.split("::")[-1])


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    result, seconds = _results.pop(nodeid, ("passed", 0.0))
    tell(checked=nodeid.split("::")[-1], result=result, seconds=round(seconds, 3))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    result, seconds = _results.get(report.nodeid, ("passed", 0.0))
    if result == "passed" and not report.passed:  # the first phase that did not pass says how it ended
        result = "skipped" if report.skipped else "failed" if report.when == "call" else "error"
    _results[report.nodeid] = (result, seconds + report.duration)
    if not _target or not report.failed:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1:][0]
    record = {"check": report.nodeid.split("::")[-1], "when": report.when, "message": message}
    with _target[0].open("a") as out:
        out.write(json.dumps(record) + "\n")
