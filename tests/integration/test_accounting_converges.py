"""Issue 14, items 4-6 (budgets), on the live local cluster: the rollout makes slurmdbd's QoS,
accounts and users equal to the spec and Slurm enforces what it applied.

1. A spec with a capped QoS (MaxWall, GPUs per user), an account under another with a
   GPU-hour budget, and a new account: `up` applies each (listed in its result) and real
   jobs meet them: over MaxWall or the QoS's GPUs in one job, refused with Slurm's reason;
   a second GPU job over the user's limit, and a job that would overspend the budget,
   pending with Slurm's reason.
2. The spec changes again: limits and fair share updated, an account and an association
   removed; an account whose user has a (held) job is kept, and the rollout says so.
3. The suite's spec back: everything the test added is gone (the QoS in the pass after the
   controller play).

Each rollout is `up` of a spec file in a temp dir, as an admin runs it; the suite's spec is
rolled out again at the end whatever happened.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmforge.local.up import UpReport, up
from tests.harness.live import wait_until
from tests.integration.conftest import SPEC, Cluster_, QuietPhases
from tests.integration.test_elastic import root

pytestmark = pytest.mark.integration


def up_with(data: dict[str, Any] | None, tmp_path: Path) -> list[str]:
    """`up` of a changed spec (None: the suite's own file, byte for byte, so the next test
    finds the cluster exactly as the suite left it); what its accounting passes reported."""
    changed = SPEC
    if data is not None:
        changed = tmp_path / SPEC.name
        changed.write_text(yaml.safe_dump(data, sort_keys=False))
    report: UpReport = up(changed, QuietPhases(), run_sample_job=False)
    assert report.rollout is not None
    print("\n".join(f"accounting: {line}" for line in report.rollout.accounting))
    return report.rollout.accounting


def limited(max_wall: str, gpus: int, fairshare: int, accounts: list[dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    data["scheduling"]["priority"] = {"decay_half_life": "0"}  # budgets count usage since the month began
    data["scheduling"]["qos"] = [{"name": "capped", "priority": 10, "max_wall": max_wall, "max_gpus_per_user": gpus}]
    data["accounting"]["enforce"] = ["associations", "limits", "qos", "safe"]
    data["accounting"]["accounts"] = [{"name": "research", "description": "default project",
                                       "fairshare": fairshare}, *accounts]
    return data


def sacctmgr(cluster: Cluster_, *args: str) -> set[str]:
    return set(root(cluster, f"sacctmgr -n -P show {' '.join(args)}").split())


def reason(cluster: Cluster_, job: str, want: str) -> str:
    wait_until(lambda: root(cluster, f"squeue -h -j {job} -o %r").strip() == want, 60, f"job {job} pending: {want}")
    return want


def refused(cluster: Cluster_, args: str) -> str:
    res = cluster.login(f"sbatch --parsable {args} --wrap 'sleep 300'")
    assert res.returncode != 0, f"sbatch {args} was accepted: {res.stdout}"
    return res.stderr


ACTIVE = {"PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING"}


def cancel_and_forget(cluster: Cluster_, user: str) -> None:
    """The user's jobs cancelled, and slurmdbd told (it refuses to remove an account with active jobs)."""
    root(cluster, f"scancel -u {user}")
    wait_until(lambda: not ACTIVE & set(root(cluster, f"sacct -n -X -P -u {user} -S now-1hour -o State").split()),
               60, f"{user}'s jobs ended in sacct")


def test_accounting_converges_and_slurm_enforces_it(cluster: Cluster_, tmp_path: Path) -> None:
    first = limited("00:30:00", 1, 5, [{"name": "vision", "parent": "research", "budget": {"gpu_hours": 0.5}},
                                      {"name": "temp"}])
    users = {u["name"]: u for u in first["users"]}
    users["alice"]["accounts"] = ["research", "vision"]
    users["bob"]["accounts"] = ["research", "temp"]
    try:
        lines = up_with(first, tmp_path)
        assert {"add qos capped: Description=capped Priority=10 Flags=DenyOnLimit MaxWall=30 "
                "MaxTRESPerUser=gres/gpu=1",
                "modify account research on dev: Fairshare=5",
                "add account vision: Cluster=dev Description=vision Organization=none Fairshare=1 Parent=research "
                "GrpTRESMins=gres/gpu=30",
                "add user alice: Account=vision Cluster=dev",
                "add user bob: Account=temp Cluster=dev"} <= set(lines), lines
        assert "capped|00:30:00|gres/gpu=1" in sacctmgr(cluster, "qos", "format=name,maxwall,maxtrespu")

        # one job over the QoS's limits: refused with Slurm's reason
        assert "QOSMaxWallDurationPerJobLimit" in refused(cluster, "--qos=capped -p ml-cpu --time=60")
        assert "QOSMaxGRESPerUser" in refused(cluster, "--qos=capped -p ml-gpu --gres=gpu:2 --time=10")
        # a second GPU job over alice's one GPU in the QoS: pending with the reason
        live = cluster.live()
        held = live.submit("--qos=capped -p ml-gpu --gres=gpu:1 --time=10 --wrap 'sleep 300'")
        wait_until(lambda: live.squeue_state(held) == "RUNNING", 120, "the first capped GPU job running")
        second = live.submit("--qos=capped -p ml-gpu --gres=gpu:1 --time=10 --wrap 'sleep 300'")
        assert reason(cluster, second, "QOSMaxGRESPerUser")
        # vision's budget: 30 GPU-minutes; an hour on one GPU would overspend it (enforce safe)
        over = live.submit("-A vision -p ml-gpu --gres=gpu:1 --time=60 --wrap 'sleep 300'")
        assert reason(cluster, over, "AssocGrpGRESMinutes")
        cancel_and_forget(cluster, "alice")

        # updated and removed; bob's held job in temp keeps temp
        bobs = cluster.live(user="bob").submit("--hold -A temp -p ml-cpu --wrap true")
        second_spec = limited("00:45:00", 2, 7, [])
        second_spec["users"] = yaml.safe_load(SPEC.read_text())["users"]
        lines = up_with(second_spec, tmp_path)
        assert {"modify qos capped: MaxWall=45 MaxTRESPerUser=gres/gpu=2",
                "modify account research on dev: Fairshare=7",
                "remove user alice from account vision",
                "remove account vision",
                "kept user bob in account temp: active jobs there (removed by a rollout after they end)",
                "kept account temp: active jobs (removed by a rollout after they end)"} <= set(lines), lines
        assocs = sacctmgr(cluster, "assoc", "where", "cluster=dev", "format=account,user,share")
        assert "research||7" in assocs and "temp|bob|1" in assocs
        assert not any(a.startswith("vision|") for a in assocs), assocs
        assert "capped|00:45:00|gres/gpu=2" in sacctmgr(cluster, "qos", "format=name,maxwall,maxtrespu")
        assert root(cluster, f"squeue -h -j {bobs} -o %T").strip() == "PENDING"  # left alone
    finally:
        try:
            cancel_and_forget(cluster, "alice")
            cancel_and_forget(cluster, "bob")
        finally:  # the suite's spec back even when a job would not end: the next tests need it
            started = time.monotonic()
            lines = up_with(None, tmp_path)
            print(f"restored in {time.monotonic() - started:.0f} s")
    assert "remove qos capped" in lines and "remove account temp" in lines, lines
    assert "capped" not in sacctmgr(cluster, "qos", "format=name")
    assocs = sacctmgr(cluster, "assoc", "where", "cluster=dev", "format=account,user,share")
    assert "research||1" in assocs and not any(a.startswith(("temp|", "vision|")) for a in assocs), assocs
