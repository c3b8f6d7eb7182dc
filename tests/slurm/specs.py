"""Variants of examples/local.yaml for the judge's slurmctld: policies the example itself
does not roll out (one cluster has one preemption type and mode)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from slurmforge.spec import Cluster, validate_data

ROOT = Path(__file__).resolve().parents[2]


def local_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "examples/local.yaml").read_text())
    return data


def suspend_spec() -> Cluster:
    """local.yaml with partition tiers that suspend (gang scheduling) and one that requeues,
    and the default memory per CPU suspending needs."""
    data = local_data()
    next(p for p in data["partitions"] if p["name"] == "scavenger")["preempt_mode"] = "SUSPEND"
    data["partitions"].append({"name": "requeue", "pools": ["cpu"], "priority_tier": 0, "preempt_mode": "REQUEUE"})
    data["scheduling"] |= {"preemption": {"type": "partition_prio", "mode": "SUSPEND,GANG"},
                           "default_mem_per_cpu_mb": 256}
    return validate_data(data, "suspend")


def qos_spec() -> Cluster:
    """local.yaml with QoS preemption (the QoS themselves live in slurmdbd, not run here)."""
    data = local_data()
    data["scheduling"] |= {"preemption": {"type": "qos", "mode": "REQUEUE", "exempt_time": "00:01:00"},
                           "qos": [{"name": "urgent", "priority": 100, "preempt": ["normal"]}]}
    return validate_data(data, "qos")
