"""Patch day's plan on the live local cluster (seconds; the whole roll is test_upgrade.py's,
long): `slurmforge upgrade --local NAME --plan` names every step in Slurm's order and what
Debian's archive holds newer than the image - apt's own answer from a throwaway container of
it - and changes nothing: the inventory, every host's image record. A spec that changes more
than `images` is refused in one line before anything is built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slurmforge.image import RECORD
from slurmforge.inventory import SPEC_COPY, VARS_FILE
from tests.integration.conftest import ROOT, Cluster_

pytestmark = pytest.mark.integration

ORDER = ("image", "backups", "slurmdbd", "backup_controller", "primary_controller", "login", "ceph_host",
         "static_nodes", "dynamic_nodes")
"""Slurm's order, as the plan's plain table names the steps."""


def upgrade(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmforge.cli", "upgrade", *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=900, check=False)


def test_the_plan_names_every_step_and_debians_answer_and_changes_nothing(cluster: Cluster_) -> None:
    inventory = cluster.report.inventory
    kept = {path: (inventory / path).read_text() for path in (SPEC_COPY, VARS_FILE)}
    hosts = cluster.rolled_out_hosts()
    records = {name: cluster.run(name, f"cat {RECORD}").stdout for name in hosts}
    done = upgrade("--local", cluster.spec.name, "--plan")
    assert done.returncode == 0, done.stdout + done.stderr
    kinds = [line.split()[1].removesuffix("_(done)") for line in done.stdout.splitlines()
             if line.split() and line.split()[0].isdigit()]  # plain when piped: spaces within a cell are _
    order = [k for k in ORDER if k in kinds]
    assert kinds == sorted(kinds, key=ORDER.index) and {"image", "slurmdbd", "primary_controller", "login"} <= set(
        order), done.stdout
    archive = [line for line in done.stdout.splitlines() if line.startswith("node image ")]
    assert len(archive) == 1 and ("nothing newer" in archive[0] or "newer package(s)" in archive[0]), done.stdout
    assert {path: (inventory / path).read_text() for path in kept} == kept
    assert {name: cluster.run(name, f"cat {RECORD}").stdout for name in hosts} == records


def test_a_spec_that_changes_more_than_images_is_refused_in_one_line(cluster: Cluster_, tmp_path: Path) -> None:
    data = yaml.safe_load((cluster.report.inventory / SPEC_COPY).read_text())
    data["images"] = {**(data.get("images") or {}), "refresh": "2026-11-29"}
    data["pools"][0]["max_nodes"] += 1
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(data))
    done = upgrade(str(spec), "--local", cluster.spec.name, "--plan")
    said = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode != 0 and len(said) == 1 and "Traceback" not in done.stderr, said
    assert "changes more than images (pools)" in said[0] and "slurmforge up --local" in said[0]
