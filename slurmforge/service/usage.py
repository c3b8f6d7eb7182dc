"""What the cluster is doing, as Prometheus gauges: allocation per pool and per account,
jobs per partition, how long the oldest job has waited, which nodes are out of service.

Built once per loop from the `scontrol show nodes --json` nodes and `squeue --json` jobs the daemon
already read (no second exporter, no extra Slurm call beyond the one squeue), and stored in
the snapshot as plain rows `(metric, labels, value)` that /metrics prints.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurmforge.service.snapshot import display_state
from slurmforge.service.topology import Topology
from slurmforge.slurm.client import Job, NodeState, parse_tres

Row = tuple[str, dict[str, str], float]

MIB = 1024 * 1024

NOT_WAITING_FOR_NODES = frozenset({
    "Dependency", "DependencyNeverSatisfied", "JobHeldUser", "JobHeldAdmin", "BeginTime", "Reservation",
    "PartitionDown", "PartitionInactive", "AssocGrpJobsLimit", "AssocMaxJobsLimit", "QOSMaxJobsPerUserLimit",
    "InvalidAccount", "InvalidQOS"})
"""Pending reasons that more nodes would not cure: such jobs do not count as waiting."""

UNAVAILABLE = frozenset({"down", "drained", "draining"})
USABLE = frozenset({"idle", "mixed", "allocated"})
OFF = frozenset({"powered_down", "powering_down"})

HELP = {
    "slurmforge_pool_cpus": "CPUs of a pool: allocated, idle on usable nodes, unavailable (down, drained, "
                            "starting), off (powered down).",
    "slurmforge_pool_memory_bytes": "Memory of a pool (RealMemory), in the same states as slurmforge_pool_cpus.",
    "slurmforge_pool_max_nodes": "The pool's max_nodes from the spec.",
    "slurmforge_pool_at_max_size": "1 when every node the pool may have is powered (none left to start).",
    "slurmforge_pool_links": "Links in the pool's fallback chain (the pool itself included).",
    "slurmforge_pool_links_cooling": "Links of the pool's chain cooling down after launch failures.",
    "slurmforge_pool_jobs_pending": "Jobs waiting for nodes in a partition of this pool.",
    "slurmforge_pool_oldest_pending_seconds": "How long the oldest job waiting for this pool has been eligible.",
    "slurmforge_partition_jobs": "Jobs of a partition by state (pending: waiting for nodes only).",
    "slurmforge_partition_oldest_pending_seconds": "How long the partition's oldest waiting job has been eligible.",
    "slurmforge_account_cpus": "CPUs allocated to an account's running jobs, per pool.",
    "slurmforge_account_memory_bytes": "Memory allocated to an account's running jobs, per pool.",
    "slurmforge_account_gpus": "GPUs allocated to an account's running jobs, per pool.",
    "slurmforge_node_unavailable": "1 for each node that is down, drained or draining (only those are listed).",
}


@dataclass
class _Pool:
    cpus: dict[str, int]
    memory: dict[str, int]
    powered: int = 0
    pending: int = 0
    oldest: float = 0.0


def usage_rows(topology: Topology, nodes: Iterable[NodeState], jobs: Iterable[Job], now: float,
               cooling: Mapping[str, int] | None = None) -> tuple[Row, ...]:
    """Every gauge of this module; `cooling` maps a pool to its links cooling down now."""
    pools = {name: _Pool(dict.fromkeys(("allocated", "idle", "unavailable", "off"), 0),
                         dict.fromkeys(("allocated", "idle", "unavailable", "off"), 0)) for name in topology.pools}
    rows: list[Row] = []
    for node in nodes:
        info = topology.nodes.get(node.name)
        if info is None:
            continue
        _tally(pools[info.pool], node)
        if (state := display_state(node)) in UNAVAILABLE:
            rows.append(("slurmforge_node_unavailable", {"node": node.name, "pool": info.pool, "state": state}, 1))
    rows += _job_rows(topology, pools, jobs, now)
    for name, pool in pools.items():
        spec = topology.pools[name]
        rows += [("slurmforge_pool_cpus", {"pool": name, "state": k}, v) for k, v in pool.cpus.items()]
        rows += [("slurmforge_pool_memory_bytes", {"pool": name, "state": k}, v * MIB) for k, v in pool.memory.items()]
        rows += [("slurmforge_pool_max_nodes", {"pool": name}, spec.max_nodes),
                 ("slurmforge_pool_at_max_size", {"pool": name}, int(pool.powered >= spec.max_nodes)),
                 ("slurmforge_pool_links", {"pool": name}, len(spec.chain)),
                 ("slurmforge_pool_links_cooling", {"pool": name}, (cooling or {}).get(name, 0)),
                 ("slurmforge_pool_jobs_pending", {"pool": name}, pool.pending),
                 ("slurmforge_pool_oldest_pending_seconds", {"pool": name}, round(pool.oldest, 1))]
    return tuple(rows)


@functools.lru_cache(maxsize=1024)
def _kind(state: str, flags: frozenset[str]) -> tuple[str, bool]:
    """(where a node's unallocated CPUs count, is it powered), once per state + flags."""
    node = NodeState(name="", state=state, flags=flags)
    shown = display_state(node)
    rest = "idle" if shown in USABLE else "off" if shown in OFF else "unavailable"
    return rest, node.is_powered()


def _tally(pool: _Pool, node: NodeState) -> None:
    rest, powered = _kind(node.state, node.flags)
    pool.powered += powered
    alloc_cpus, alloc_mem = min(node.alloc_cpus, node.cpus), min(node.alloc_memory_mb, node.memory_mb)
    pool.cpus["allocated"] += alloc_cpus
    pool.cpus[rest] += node.cpus - alloc_cpus
    pool.memory["allocated"] += alloc_mem
    pool.memory[rest] += node.memory_mb - alloc_mem


def _job_rows(topology: Topology, pools: dict[str, _Pool], jobs: Iterable[Job], now: float) -> list[Row]:
    counts = {p: {"pending": 0, "running": 0} for p in topology.partitions}
    oldest = dict.fromkeys(topology.partitions, 0.0)
    accounts: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for job in jobs:
        if job.is_pending() and job.reason not in NOT_WAITING_FOR_NODES:
            waited = max(now - job.eligible_at, 0.0) if job.eligible_at else 0.0
            waiting_pools: set[str] = set()
            for part in job.partition.split(","):
                if part in counts:
                    counts[part]["pending"] += 1
                    oldest[part] = max(oldest[part], waited)
                    waiting_pools.update(topology.partitions[part])
            for name in waiting_pools:
                pools[name].pending += 1
                pools[name].oldest = max(pools[name].oldest, waited)
        elif job.is_running():
            if job.partition in counts:
                counts[job.partition]["running"] += 1
            _charge(topology, accounts, job)
    rows: list[Row] = []
    for part, by_state in counts.items():
        rows += [("slurmforge_partition_jobs", {"partition": part, "state": s}, n) for s, n in by_state.items()]
        rows.append(("slurmforge_partition_oldest_pending_seconds", {"partition": part}, round(oldest[part], 1)))
    for (account, pool), (cpus, mem, gpus) in sorted(accounts.items()):
        labels = {"account": account, "pool": pool}
        rows += [("slurmforge_account_cpus", labels, round(cpus, 3)),
                 ("slurmforge_account_memory_bytes", labels, round(mem * MIB)),
                 ("slurmforge_account_gpus", labels, round(gpus, 3))]
    return rows


def _charge(topology: Topology, accounts: dict[tuple[str, str], list[float]], job: Job) -> None:
    """A job's allocation, split evenly over its nodes, charged to each node's pool."""
    names = job.node_names()
    if not names:
        return
    tres, share = parse_tres(job.tres), 1.0 / len(names)
    for name in names:
        info = topology.nodes.get(name)
        if info is not None:
            total = accounts[(job.account or "none", info.pool)]
            total[0] += tres.cpus * share
            total[1] += tres.memory_mb * share
            total[2] += tres.gpus * share
