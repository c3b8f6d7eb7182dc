"""`slurmforge validate --inventory DIR`: the testinfra suite in tests/infra against
any inventory (local or AWS)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from slurmforge.errors import ValidationFailed

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "tests" / "infra"


def validate_inventory(inventory: Path, extra: list[str] | None = None) -> None:
    """Run the suite; raise ValidationFailed naming the failed checks."""
    if not (inventory / "hosts.yml").exists():
        raise ValidationFailed(f"{inventory} is not a slurmforge inventory (no hosts.yml)")
    cmd = [sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider", "--no-header",
           "-o", "addopts=", f"--inventory={inventory.resolve()}", *(extra or [])]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if res.returncode != 0:
        failed = [line for line in res.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        summary = res.stdout.strip().splitlines()[-1:] or ["?"]
        detail = "; ".join(f.split(" - ")[0].split("::")[-1] for f in failed[:6])
        raise ValidationFailed(f"live-cluster validation failed: {summary[0]} - {detail}")
