"""Slurm usage as gauges (allocation per pool and account, queue, unavailable nodes) and
the file_sd targets of dynamic nodes, from `sinfo --json` / `squeue --json` shaped input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_service_world import (
    ALLOCATED,
    DOWN_POWERED_DOWN,
    DRAINED,
    DRAINING,
    IDLE,
    NOW,
    POWERED_DOWN,
    POWERING_DOWN,
    POWERING_UP,
    node,
    topo,
)

from slurmforge.service.targets import dynamic_targets, write_targets
from slurmforge.service.topology import topology
from slurmforge.service.usage import Row, usage_rows
from slurmforge.slurm.client import Job, NodeState, Tres, parse_jobs, parse_nodes, parse_tres
from slurmforge.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.unit

# one job record as squeue --json (Slurm 22.05.8, openapi v0.0.38) writes it, trimmed
SQUEUE_JOB = {"account": "research", "job_id": 7, "job_state": "RUNNING", "nodes": "t-spot-[01-02]",
              "partition": "gpu", "state_reason": "None", "submit_time": int(NOW) - 100,
              "eligible_time": int(NOW) - 90, "user_name": "alice",
              "tres_req_str": "cpu=8,mem=2G,node=2,billing=8,gres/gpu=2",
              "tres_alloc_str": "cpu=8,mem=2G,node=2,billing=8,gres/gpu=2"}


def hw(n: NodeState, cpus: int = 4, alloc: int = 0, mem: int = 1000, alloc_mem: int = 0) -> NodeState:
    return replace(n, cpus=cpus, alloc_cpus=alloc, memory_mb=mem, alloc_memory_mb=alloc_mem)


def job(jid: int, state: str, partition: str, nodes: str = "", account: str = "research", reason: str = "",
        eligible: float = NOW - 60, tres: str = "") -> Job:
    return Job(jid, state, nodes, "alice", partition=partition, account=account, reason=reason,
               eligible_at=eligible, tres=tres)


def value(rows: tuple[Row, ...], name: str, **labels: str) -> float:
    found = [v for n, lab, v in rows if n == name and lab == labels]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]


def test_parse_tres_units_and_gpus() -> None:
    assert parse_tres("cpu=4,mem=16G,node=1,billing=4,gres/gpu=2") == Tres(4, 16384, 2)
    assert parse_tres("cpu=1,mem=500M,node=1") == Tres(1, 500, 0)
    assert parse_tres("cpu=2,mem=1T,gres/gpu=1,gres/gpu:a10g=1") == Tres(2, 1024 * 1024, 1)
    assert parse_tres("") == Tres()


def test_parse_jobs_and_nodes_read_the_usage_fields() -> None:
    (parsed,) = parse_jobs(json.dumps({"jobs": [SQUEUE_JOB]}))
    assert (parsed.partition, parsed.account, parsed.eligible_at) == ("gpu", "research", NOW - 90)
    assert parse_tres(parsed.tres) == Tres(8, 2048, 2) and parsed.is_running()
    pending = {**SQUEUE_JOB, "job_state": "PENDING", "tres_alloc_str": "", "eligible_time": 0}
    (waiting,) = parse_jobs(json.dumps({"jobs": [pending]}))
    assert waiting.eligible_at == NOW - 100 and waiting.is_pending() and waiting.tres.startswith("cpu=8")
    (n,) = parse_nodes(json.dumps({"nodes": [{"name": "a", "state": "mixed", "state_flags": [], "cpus": 4,
                                              "alloc_cpus": 2, "real_memory": 1024, "alloc_memory": 100}]}))
    assert (n.cpus, n.alloc_cpus, n.memory_mb, n.alloc_memory_mb) == (4, 2, 1024, 100)


def cluster_rows() -> tuple[Row, ...]:
    nodes = [hw(node("t-spot-01", ALLOCATED), alloc=4, alloc_mem=1000),
             hw(node("t-spot-02", ALLOCATED), alloc=4, alloc_mem=500),
             hw(node("t-spot-03", POWERING_UP)), hw(node("t-spot-04", DRAINED, reason="health: xid")),
             hw(node("t-od-01", IDLE)), hw(node("t-od-02", DRAINING), alloc=2), hw(node("t-od-03", DOWN_POWERED_DOWN)),
             hw(node("t-od-04", POWERED_DOWN)), hw(node("t-cpu-01", POWERED_DOWN)),
             hw(node("t-cpu-02", POWERING_DOWN)), hw(node("t-cpu-03", POWERED_DOWN))]
    jobs = [job(7, "RUNNING", "gpu", "t-spot-[01-02]", tres="cpu=8,mem=1500M,node=2,gres/gpu=2"),
            job(8, "RUNNING", "gpu", "t-od-02", account="vision", tres="cpu=2,mem=100M,node=1"),
            job(9, "PENDING", "gpu", reason="Resources", eligible=NOW - 700),
            job(10, "PENDING", "cpu,gpu", reason="Priority", eligible=NOW - 1200),
            job(11, "PENDING", "cpu", reason="Dependency", eligible=NOW - 9999),
            job(12, "COMPLETING", "cpu", "t-cpu-02")]
    return usage_rows(topo(), nodes, jobs, NOW, cooling={"spot": 2, "od": 1})


def test_pool_allocation_by_state() -> None:
    rows = cluster_rows()
    cpus = {s: value(rows, "slurmforge_pool_cpus", pool="spot", state=s) for s in ("allocated", "idle",
                                                                                     "unavailable", "off")}
    assert cpus == {"allocated": 8, "idle": 0, "unavailable": 8, "off": 0}
    od = {s: value(rows, "slurmforge_pool_cpus", pool="od", state=s) for s in ("allocated", "idle",
                                                                                "unavailable", "off")}
    assert od == {"allocated": 2, "idle": 4, "unavailable": 6, "off": 4}
    assert value(rows, "slurmforge_pool_memory_bytes", pool="spot", state="allocated") == 1500 * 1024 * 1024


def test_jobs_per_partition_and_oldest_wait() -> None:
    rows = cluster_rows()
    assert value(rows, "slurmforge_partition_jobs", partition="gpu", state="running") == 2
    assert value(rows, "slurmforge_partition_jobs", partition="gpu", state="pending") == 2
    # the Dependency job waits for another job, not for nodes: not counted, not the oldest
    assert value(rows, "slurmforge_partition_jobs", partition="cpu", state="pending") == 1
    assert value(rows, "slurmforge_partition_oldest_pending_seconds", partition="gpu") == 1200
    assert value(rows, "slurmforge_partition_oldest_pending_seconds", partition="cpu") == 1200
    assert value(rows, "slurmforge_pool_jobs_pending", pool="spot") == 2
    assert value(rows, "slurmforge_pool_oldest_pending_seconds", pool="cpu") == 1200


def test_allocation_per_account_and_pool() -> None:
    rows = cluster_rows()
    assert value(rows, "slurmforge_account_cpus", account="research", pool="spot") == 8
    assert value(rows, "slurmforge_account_gpus", account="research", pool="spot") == 2
    assert value(rows, "slurmforge_account_memory_bytes", account="vision", pool="od") == 100 * 1024 * 1024
    assert not [r for r in rows if r[0] == "slurmforge_account_cpus" and r[1]["pool"] == "cpu"]


def test_pool_at_max_size_and_links_cooling() -> None:
    rows = cluster_rows()
    # spot: 4 nodes all powered (2 allocated, 1 starting, 1 drained) -> at max; od: 2 off
    assert value(rows, "slurmforge_pool_at_max_size", pool="spot") == 1
    assert value(rows, "slurmforge_pool_at_max_size", pool="od") == 0
    assert value(rows, "slurmforge_pool_links", pool="spot") == 2
    assert value(rows, "slurmforge_pool_links_cooling", pool="spot") == 2
    assert value(rows, "slurmforge_pool_links_cooling", pool="cpu") == 0


def test_only_unavailable_nodes_are_listed() -> None:
    listed = {r[1]["node"]: r[1]["state"] for r in cluster_rows() if r[0] == "slurmforge_node_unavailable"}
    assert listed == {"t-spot-04": "drained", "t-od-02": "draining", "t-od-03": "down"}


def test_dynamic_targets_only_while_powered_and_registered() -> None:
    nodes = [node("t-spot-01", ALLOCATED, address="10.0.16.7"), node("t-spot-02", POWERING_UP),
             node("t-spot-03", POWERED_DOWN), node("t-spot-04", POWERING_DOWN), node("t-od-01", IDLE),
             node("t-od-02", DRAINED), node("t-od-03", DOWN_POWERED_DOWN), node("unknown-01", IDLE)]
    # t-od-01 is static (min_nodes 1): where the inventory holds static nodes (local, machines
    # you own), prometheus.yml lists it, not this file
    groups = dynamic_targets(replace(topo(), static_scraped_by_service=False), nodes)
    assert groups == [
        {"targets": ["t-od-02:9100"], "labels": {"instance": "t-od-02", "pool": "od", "role": "compute"}},
        {"targets": ["10.0.16.7:9100"], "labels": {"instance": "t-spot-01", "pool": "spot", "role": "compute"}}]


def test_static_pool_nodes_are_listed_where_the_inventory_cannot_hold_them() -> None:
    """AWS: the inventory has no pool node (the service launches them), so prometheus.yml
    cannot list a static one; the service's file does, at the address Slurm has now."""
    nodes = [node("t-od-01", IDLE, address="10.0.16.9"), node("t-spot-03", POWERED_DOWN)]
    aws = topo()  # the world's spec is an AWS one
    assert aws.static_scraped_by_service
    assert dynamic_targets(aws, nodes) == [
        {"targets": ["10.0.16.9:9100"], "labels": {"instance": "t-od-01", "pool": "od", "role": "compute"}}]
    assert topology(load_spec(ROOT / "examples" / "pools-aws.yaml")).static_scraped_by_service
    assert not topology(load_spec(ROOT / "examples" / "local.yaml")).static_scraped_by_service


def test_targets_file_written_only_when_changed(tmp_path: Path) -> None:
    path = tmp_path / "sd" / "nodes.json"
    assert write_targets(path, [{"targets": ["a:9100"], "labels": {}}])
    assert json.loads(path.read_text())[0]["targets"] == ["a:9100"] and oct(path.stat().st_mode)[-3:] == "644"
    assert not write_targets(path, [{"targets": ["a:9100"], "labels": {}}])
    assert write_targets(path, [])
    assert json.loads(path.read_text()) == []


def test_metrics_text_prints_each_gauge_once_with_help() -> None:
    from slurmforge.service.snapshot import build_snapshot
    from slurmforge.service.web import metrics_text

    snap = build_snapshot(topo(), [], {}, [], NOW, gauges=cluster_rows())
    text = metrics_text(snap)
    assert text.count("# TYPE slurmforge_pool_cpus gauge") == 1
    assert 'slurmforge_account_gpus{account="research",pool="spot"} 2\n' in text
    assert 'slurmforge_node_unavailable{node="t-spot-04",pool="spot",state="drained"} 1\n' in text
    assert "# TYPE slurmforge_launched_nodes_total counter" in text
    assert type(snap).from_json(snap.to_json()) == snap
