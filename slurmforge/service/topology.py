"""What the spec says about capacity, digested once per spec: which pool each node
belongs to, which nodes are static (kept at count), and each pool's fallback chain.

A *link* is one pool's way of getting machines (its market, instance types, zones and
launch template); a pool's chain is the pool itself, then its fallback pools in order,
each followed by its own fallbacks (depth first, each pool once). On AWS a link's
launches draw on the EC2 Service Quotas of its instance types in its market.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from slurmforge.instance_types import ec2_quota
from slurmforge.provider import Quota
from slurmforge.spec.models import Cluster
from slurmforge.spec.nodes import node_sets, pool_hardware


@dataclass(frozen=True, slots=True)
class NodeInfo:
    pool: str
    static: bool


@dataclass(frozen=True)
class PoolInfo:
    name: str
    kind: str
    market: str
    gpus_per_node: int
    min_nodes: int
    max_nodes: int
    chain: tuple[str, ...]
    instance_types: tuple[str, ...] = ()
    quotas: tuple[Quota, ...] = ()
    """The account limits this pool's launches draw on (AWS: the EC2 Service Quotas of its
    instance types in its market); none on targets without any."""


@dataclass(frozen=True)
class Topology:
    cluster: str
    nodes: Mapping[str, NodeInfo]
    pools: Mapping[str, PoolInfo]
    resume_timeout: float
    partitions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """partition -> its pools"""
    static_scraped_by_service: bool = False
    """Static pool nodes have no address in the inventory (AWS: the service launches their
    instances), so prometheus.yml cannot list them: the service's scrape targets do."""

    def chain(self, pool: str) -> tuple[str, ...]:
        return self.pools[pool].chain

    def market(self, link: str) -> str:
        info = self.pools.get(link)
        return info.market if info else ""


def fallback_chain(spec: Cluster, pool: str) -> tuple[str, ...]:
    chain: list[str] = []

    def visit(name: str) -> None:
        if name in chain:
            return
        chain.append(name)
        for nxt in spec.pool(name).fallback:
            visit(nxt)

    visit(pool)
    return tuple(chain)


def topology(spec: Cluster) -> Topology:
    nodes: dict[str, NodeInfo] = {}
    pools: dict[str, PoolInfo] = {}
    for pool in spec.pools:
        hw = pool_hardware(pool)
        pools[pool.name] = PoolInfo(
            name=pool.name, kind=pool.kind.value, market=pool.market.value, gpus_per_node=hw.gpus if hw else 0,
            min_nodes=pool.min_nodes, max_nodes=pool.max_nodes, chain=fallback_chain(spec, pool.name),
            instance_types=tuple(pool.instance_types),
            quotas=tuple(sorted({ec2_quota(t, pool.market.value) for t in pool.instance_types}))
            if spec.target.kind == "aws" else (),
        )
        for nodeset in node_sets(spec, pool):
            info = NodeInfo(pool.name, not nodeset.dynamic)
            for name in nodeset.names():
                nodes[name] = info
    partitions = {p.name: tuple(p.pools) for p in spec.partitions}
    return Topology(spec.name, nodes, pools, float(spec.scheduling.resume_timeout), partitions,
                    static_scraped_by_service=spec.target.kind == "aws")
