"""Two specs of one cluster, A and its successor B, that exercise every accounting change
(tests/slurm/test_accounting_converges.py runs them against a real slurmdbd; the unit tests
plan from the sacctmgr output A left there, tests/unit/sacctmgr_24.11/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from slurmforge.spec import Cluster, validate_data

ROOT = Path(__file__).resolve().parents[1]
USERS = {"alice": 3001, "bob": 3002, "eve": 3003, "dave": 3004}
"""The spec users' uids (the judge container makes them, so that they can submit jobs)."""


def base() -> dict[str, Any]:
    """examples/local.yaml with every node a CLOUD node (allocated without slurmd), no
    Ceph, no AllowGroups (the judge's users are in no group), fair share
    over usage since the period began (budgets need it), and safe limits: a job starts
    only if it can finish within its account's budget. No QoS, accounts or users."""
    data: dict[str, Any] = yaml.safe_load((ROOT / "examples/local.yaml").read_text())
    data["name"] = "acct"
    for pool in data["pools"]:
        pool["min_nodes"] = 0
    data["pools"][1]["max_nodes"] = 2
    for part in data["partitions"]:
        part.pop("allow_groups", None)
    data["storage"].pop("ceph")
    data.pop("head", None)  # one controller (the judge runs one slurmctld)
    data["scheduling"] |= {"priority": {"decay_half_life": "0"}}
    data["accounting"] = {"enforce": ["associations", "limits", "qos", "safe"]}
    data["groups"], data["users"] = [], []
    return data


def data_a() -> dict[str, Any]:
    data = base()
    data["scheduling"]["preemption"] = {"type": "qos"}
    data["scheduling"]["qos"] = [
        {"name": "high", "priority": 100, "preempt": ["low"], "description": "Urgent work"},
        {"name": "low", "priority": 1, "max_wall": "02:00:00", "max_gpus_per_user": 2},
        {"name": "scratch", "priority": 5}]
    data["accounting"]["accounts"] = [
        {"name": "research", "fairshare": 10, "description": "Research Lab", "organization": "Science"},
        {"name": "ml", "parent": "research", "budget": {"gpu_hours": 1}},
        {"name": "vision", "budget": {"billing_hours": 100}},
        {"name": "gone"}]
    data["users"] = [
        {"name": "alice", "uid": 3001, "accounts": ["research", "ml"], "default_account": "ml"},
        {"name": "bob", "uid": 3002, "accounts": ["research", "vision", "gone"], "default_account": "research"},
        {"name": "eve", "uid": 3003, "accounts": ["gone"], "default_account": "gone"}]
    return data


def spec_a() -> Cluster:
    return validate_data(data_a(), "a")


def data_b() -> dict[str, Any]:
    """A's successor: changed priorities, limits, fair share, parents, budgets and default
    accounts; a QoS, an account and users gone; an account and a user new."""
    data = base()
    data["scheduling"]["preemption"] = {"type": "qos"}
    data["scheduling"]["qos"] = [
        {"name": "high", "priority": 200, "preempt": ["low"], "description": "Urgent work"},
        {"name": "low", "priority": 1, "max_wall": "00:30:00", "max_gpus_per_user": 1}]
    data["accounting"]["accounts"] = [
        {"name": "research", "fairshare": 20, "description": "Research Lab", "organization": "Science"},
        {"name": "ml", "parent": "research", "budget": {"gpu_hours": 1}},
        {"name": "vision", "parent": "ml", "budget": {"gpu_hours": 2}},
        {"name": "physics"}]
    data["users"] = [
        {"name": "alice", "uid": 3001, "accounts": ["research", "ml"], "default_account": "research"},
        {"name": "bob", "uid": 3002, "accounts": ["research"]},
        {"name": "dave", "uid": 3004, "accounts": ["physics"]}]
    return data


def spec_b() -> Cluster:
    return validate_data(data_b(), "b")


B_FROM_A = [
    "modify qos low: MaxWall=30 MaxTRESPerUser=gres/gpu=1",
    "modify qos high: Priority=200",
    "modify account root on acct: QOS=high,low,normal (every account may use every QoS)",
    "modify account research on acct: Fairshare=20",
    "modify account vision on acct: Parent=ml GrpTRESMins=billing=-1,gres/gpu=120",
    "add account physics: Cluster=acct Description=physics Organization=none Fairshare=1",
    "modify user alice: DefaultAccount=research",
    "add user dave: Account=physics Cluster=acct DefaultAccount=physics",
    "remove user bob from account gone",
    "remove user bob from account vision",
    "remove qos scratch"]
"""What converging from A (as the judge's slurmdbd has it) to B changes, in this order:
QoS (preempted before preempting), the QoS every account may use, accounts parents first,
users, then removals (eve's pending job keeps her and account gone)."""
