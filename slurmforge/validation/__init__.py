"""`slurmforge validate --inventory DIR`: the live-cluster checks - the testinfra suite in
this package (conftest.py, test_*.py) - against any inventory (local or AWS).

The suite runs in its own pytest process, from a scratch directory with this directory as
pytest's root and no configuration of the user's (or of a clone) read, writing nothing
beside the installed package (no cache, no bytecode)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmforge.errors import ValidationFailed
from slurmforge.package_data import require, validation_suite
from slurmforge.progress import Progress

EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?:AssertionError|Unreachable): ")
"""How pytest's report begins a failed assertion's message (the checks' own lines follow)."""
MAX_LINES = 40
"""Problems named in the error, at most; the rest are counted."""


@dataclass
class Check:
    """One check of a run: its name, how it ended (passed, failed, error, skipped) and its time."""

    name: str
    result: str
    seconds: float


@dataclass
class SuiteRun:
    """What a run of the suite found: every check, and the problems of those that failed."""

    checks: list[Check] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    summary: str = ""
    """pytest's last line (`1 failed, 26 passed in 40.12s`)."""
    ok: bool = True

    def error(self) -> ValidationFailed:
        shown = self.problems[:MAX_LINES] + (
            [f"... and {len(self.problems) - MAX_LINES} more"] if len(self.problems) > MAX_LINES else [])
        return ValidationFailed("\n  ".join([f"live-cluster validation failed: {self.summary}", *shown]))


CURRENT_IMAGE = "--current-image"
"""The suite's option naming the inputs digest every running host's image should have
(slurmforge.upgrade_start.current_image, which the command line works out: the suite stands
below the targets)."""


def image_args(digest: str | None) -> list[str]:
    """The suite's arguments for the cluster's current image (none: that check is skipped)."""
    return [f"{CURRENT_IMAGE}={digest}"] if digest else []


def validate_inventory(inventory: Path, extra: list[str] | None = None,
                       on_progress: Callable[[Progress], None] | None = None) -> None:
    """Run the suite (run_checks); raise ValidationFailed naming every problem the failed
    checks found, one line each."""
    run = run_checks(inventory, extra, on_progress)
    if not run.ok:
        raise run.error()


def run_checks(inventory: Path, extra: list[str] | None = None,
               on_progress: Callable[[Progress], None] | None = None) -> SuiteRun:
    """Run the suite: every check with its result and the problems the failed ones found
    (a check's assertion message holds one problem per line). on_progress hears where the
    run is (the check running, the hosts still being read) as it goes."""
    if not (inventory / "hosts.yml").exists():
        raise ValidationFailed(f"{inventory} is not a slurmforge inventory (no hosts.yml)")
    require("testinfra", "deploy", "the live-cluster validation")
    with tempfile.TemporaryDirectory(prefix="slurmforge-validate-") as tmp:
        problems = Path(tmp) / "problems.jsonl"
        suite = validation_suite()
        config = Path(tmp) / "pytest.ini"
        config.write_text("[pytest]\n")
        cmd = [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider", "--no-header",
               "-p", "slurmforge.validation.problems", f"--problems={problems}",
               "-c", str(config), f"--rootdir={suite}", f"--inventory={inventory.resolve()}", *(extra or [])]
        returncode, stdout, checks = _run_suite(cmd, Path(tmp), on_progress or (lambda progress: None))
        run = SuiteRun(checks, ok=returncode == 0)
        if not run.ok:
            run.summary = (stdout.strip().splitlines() or ["?"])[-1].strip("= ")
            run.problems = failure_lines(problems.read_text()) if problems.exists() else []
    return run


def _run_suite(cmd: list[str], cwd: Path, on_progress: Callable[[Progress], None]) -> tuple[int, str, list[Check]]:
    """pytest's exit code, its whole output and every check's result; each of the suite's
    progress events (problems.tell) passed on as it comes, as where the run is."""
    read, write = os.pipe()
    with tempfile.TemporaryFile("w+") as output:
        try:
            proc = subprocess.Popen([*cmd, f"--progress-fd={write}"], stdout=output, stderr=subprocess.STDOUT,
                                    text=True, cwd=cwd, pass_fds=(write,),
                                    env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"})
        finally:
            os.close(write)
        progress, checks = Progress(), []
        with os.fdopen(read) as events:
            for line in events:  # ends when pytest does
                event = json.loads(line)
                if "checked" in event:
                    checks.append(Check(event["checked"], event["result"], event["seconds"]))
                else:
                    _advance(progress, event)
                    on_progress(progress)
        code = proc.wait()
        output.seek(0)
        return code, output.read(), checks


def _advance(progress: Progress, event: dict[str, Any]) -> None:
    """The run's progress after one of the suite's events (problems.tell)."""
    if "collected" in event:
        progress.tasks_total = event["collected"]
    elif "check" in event:
        progress.task, progress.host = event["check"], ""
        progress.tasks_done += 1
    elif "hosts" in event:
        done, total = event["hosts"]
        waiting = ", ".join(event["waiting"][:3]) + (", ..." if len(event["waiting"]) > 3 else "")
        progress.host = f"reading the hosts: {done}/{total} answered" + (f", waiting for {waiting}" if waiting else "")


def failure_lines(records: str) -> list[str]:
    """Every problem the failed or erroring checks found (problems.py's JSON lines), once
    each, in their order: a check's own lines (`<host>: <what> found <x>, wanted <y>`, one
    problem a line) as they are; an assertion without a message, or an error in a check's
    set-up, as `<check>: <pytest's first line>`."""
    out: list[str] = []
    for record in map(json.loads, records.splitlines()):
        message = EXCEPTION.sub("", record["message"] or "?", count=1)
        problems = []
        for line in message.splitlines():
            if line.startswith("assert "):
                break
            if line.strip():
                problems.append(line.strip())
        if not problems or not EXCEPTION.match(record["message"] or ""):
            problems = [f"{record['check']}: {(problems or message.splitlines() or ['?'])[0]}"]
        out += [p for p in problems if p not in out]
    return out
