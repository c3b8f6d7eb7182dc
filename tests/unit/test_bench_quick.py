"""The benchmarks keep working: the quick modes of those that need no cluster run here (a
check that makes a bench's generated spec invalid fails this test, not the next person who
runs the bench); those of the live benches run in tests/integration/test_bench_quick.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

BENCH = Path(__file__).resolve().parents[2] / "bench"


SELF_CONTAINED = ["render_bench.py", "validate_bench.py", "reconcile_bench.py", "fanout_bench.py",
                  "resume_handoff_bench.py", "monitoring_bench.py", "cost_bench.py", "image_bench.py",
                  "startup_bench.py", "plan_bench.py", "preflight_bench.py"]


def run_bench(bench: str, flag: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}  # this tree's package, whatever the venv installed
    return subprocess.run([sys.executable, str(BENCH / bench), flag], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


@pytest.mark.parametrize("bench", SELF_CONTAINED)
def test_bench_quick_mode_passes(bench: str) -> None:
    proc = run_bench(bench, "--quick", 300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("bench", sorted(p.name for p in BENCH.glob("*_bench.py")))
def test_every_bench_starts_and_has_a_quick_mode(bench: str) -> None:
    """Every bench imports what it uses and offers --quick (the live ones' quick modes run in
    the integration suite, some only in `./dev.sh test-all`)."""
    proc = run_bench(bench, "--help", 60)
    assert proc.returncode == 0 and "--quick" in proc.stdout, proc.stdout + proc.stderr
