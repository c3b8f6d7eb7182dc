"""The benches that need the node image's slurmctld (a judge container, no cluster) keep
working: each one's quick mode runs here. Those that need nothing run in
tests/unit/test_bench_quick.py, those that need the live cluster in
tests/integration/test_bench_quick.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm]

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("bench", ["submit_bench.py"])
def test_bench_quick_mode_passes(bench: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    proc = subprocess.run([sys.executable, str(BENCH / bench), "--quick"], capture_output=True, text=True,
                          timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "routed jobs in ml-gpu" in proc.stdout, proc.stdout
