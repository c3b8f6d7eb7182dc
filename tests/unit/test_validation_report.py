"""`slurmforge validate --inventory` names every problem a failed check found, one line
each, whole (pytest's JUnit report cuts long messages; no line cut to the terminal's width)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurmforge.validation import failure_lines

pytestmark = pytest.mark.unit

CHECKS = '''
def test_nodes():
    wrong = ["dev-cpu-03: Slurm state found DOWN+NOT_RESPONDING, wanted in service or in power save",
             "dev-gpu-01: hardware found 2 CPUs, 2048 MB, no gres, wanted 2 CPUs, 2048 MB, gpu:2"]
    assert not wrong, "\\n".join(wrong)

def test_same_host_down():
    assert not ["dev-cpu-03: Slurm state found DOWN+NOT_RESPONDING, wanted in service or in power save"], \\
        "dev-cpu-03: Slurm state found DOWN+NOT_RESPONDING, wanted in service or in power save"

class Unreachable(AssertionError):
    pass

def test_gone():
    raise Unreachable("dev-cpu-02: the checks' commands did not run (rc 125: no such container)")

def test_also_gone():
    raise Unreachable("dev-cpu-02: the checks' commands did not run (rc 125: no such container)")

def test_many():
    wrong = [f"dev-cpu-{i:02}: munged found not running, wanted running" for i in range(40)]
    assert not wrong, "\\n".join(wrong)

def test_broken():
    {}["no-such-key"]

def test_plain():
    assert 1 == 2

def test_fine():
    pass
'''


def test_every_problem_line_of_every_failed_check(tmp_path: Path) -> None:
    (tmp_path / "test_live.py").write_text(CHECKS)
    report = tmp_path / "problems.jsonl"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                    "-p", "slurmforge.validation.problems", f"--problems={report}", str(tmp_path / "test_live.py")],
                   capture_output=True, timeout=120, check=False, cwd=tmp_path)
    assert failure_lines(report.read_text()) == [
        "dev-cpu-03: Slurm state found DOWN+NOT_RESPONDING, wanted in service or in power save",
        "dev-gpu-01: hardware found 2 CPUs, 2048 MB, no gres, wanted 2 CPUs, 2048 MB, gpu:2",
        "dev-cpu-02: the checks' commands did not run (rc 125: no such container)",
        *(f"dev-cpu-{i:02}: munged found not running, wanted running" for i in range(40)),
        "test_broken: KeyError: 'no-such-key'",
        "test_plain: assert 1 == 2"]
