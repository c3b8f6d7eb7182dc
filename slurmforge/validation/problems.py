"""A pytest plugin of the live-cluster validation: every failed or erroring check's whole
message, one JSON line per check, into the file `--problems` names (pytest's JUnit report
cuts long messages short). `slurmforge validate --inventory` prints them
(slurmforge.validation.failure_lines)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

_target: list[Path] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--problems", default=None, help="write the failed checks' messages here (JSON lines)")


def pytest_configure(config: pytest.Config) -> None:
    if path := config.getoption("--problems"):
        _target[:] = [Path(path)]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _target or not report.failed:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1:][0]
    record = {"check": report.nodeid.split("::")[-1], "when": report.when, "message": message}
    with _target[0].open("a") as out:
        out.write(json.dumps(record) + "\n")
