"""Builders the service tests share (a small AWS spec, nodes, instances, a fake clock),
and the tests of the topology they rest on."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import pytest

from slurmforge.hosts import TAG_CLUSTER, TAG_LINK, TAG_NODE, TAG_POOL
from slurmforge.provider import Instance, InstanceState
from slurmforge.service.slurmd_failures import SlurmdFailure
from slurmforge.service.state import ServiceState
from slurmforge.service.topology import Topology, topology
from slurmforge.service.world import Tunables, World
from slurmforge.slurm.client import NodeState
from slurmforge.spec import Cluster, parse_spec

pytestmark = pytest.mark.unit

SPEC = """
api_version: slurmforge/v1
name: t
target: {kind: aws, region: us-east-1, key_name: ops}
network:
  public_subnets: [{cidr: 10.0.0.0/24, zone: us-east-1a}]
  private_subnets:
    - {cidr: 10.0.16.0/20, zone: us-east-1a}
    - {cidr: 10.0.32.0/20, zone: us-east-1b}
  admin_cidrs: [203.0.113.0/24]
scheduling: {resume_timeout: 600}
pools:
  - {name: spot, kind: gpu, instance_types: [g5.12xlarge], market: spot, max_nodes: 4, fallback: [od],
     zones: [us-east-1a, us-east-1b], weight: 1}
  - {name: od, kind: gpu, instance_types: [g5.12xlarge], min_nodes: 1, max_nodes: 4, zones: [us-east-1a],
     weight: 10}
  - {name: cpu, kind: cpu, instance_types: [t3.medium, t2.medium], max_nodes: 3, zones: [us-east-1a, us-east-1b]}
partitions:
  - {name: gpu, pools: [spot, od]}
  - {name: cpu, pools: [cpu], default: true}
storage: {nas: {kind: efs}}
"""

NOW = 1_800_000_000.0


@cache
def spec() -> Cluster:
    return parse_spec(SPEC, "test")


@cache
def topo() -> Topology:
    return topology(spec())


# Slurm node states as sinfo --json (22.05) reports them
POWERED_DOWN = ("idle", "CLOUD", "POWERED_DOWN")
POWERING_UP = ("mixed", "CLOUD", "NOT_RESPONDING", "POWERING_UP")
POWERING_DOWN = ("idle", "CLOUD", "POWERING_DOWN")
IDLE = ("idle", "CLOUD")
ALLOCATED = ("allocated", "CLOUD")
NOT_RESPONDING = ("idle", "CLOUD", "NOT_RESPONDING")
DOWN = ("down", "CLOUD", "NOT_RESPONDING")
DOWN_POWERED_DOWN = ("down", "CLOUD", "POWERED_DOWN", "NOT_RESPONDING")
DRAINED = ("idle", "CLOUD", "DRAIN")
DRAINING = ("allocated", "CLOUD", "DRAIN")
DRAINED_POWERED_DOWN = ("idle", "CLOUD", "DRAIN", "POWERED_DOWN")
STATIC_NONCLOUD = ("idle",)


def node(name: str, state: tuple[str, ...], reason: str = "", address: str | None = None,
         gres: str = "", gres_used: str = "", reason_changed_at: float = 0.0,
         slurmd_started_at: float = 0.0) -> NodeState:
    return NodeState(name=name, state=state[0], flags=frozenset(state[1:]), address=address or name,
                     hostname=name, reason=reason, gres=gres, gres_used=gres_used,
                     reason_changed_at=reason_changed_at, slurmd_started_at=slurmd_started_at)


def instance(iid: str, node_name: str | None, state: InstanceState = InstanceState.RUNNING,
             address: str | None = "10.0.16.5", launched: float = NOW - 300, pool: str | None = "spot",
             link: str | None = None, tags: dict[str, str] | None = None) -> Instance:
    all_tags = {TAG_CLUSTER: "t"} | ({TAG_NODE: node_name} if node_name else {}) | (
        {TAG_POOL: pool} if pool else {}) | ({TAG_LINK: link} if link else {}) | (tags or {})
    return Instance(id=iid, node=node_name, pool=pool, state=state, address=address, launched_at=launched,
                    market="spot", instance_type="g5.12xlarge", zone="us-east-1a", tags=all_tags)


@dataclass
class Clock:
    now: float = NOW

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class WorldBuilder:
    nodes: list[NodeState] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    state: ServiceState = field(default_factory=ServiceState)
    jobs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    now: float = NOW
    failures: dict[str, SlurmdFailure] = field(default_factory=dict)

    def build(self) -> World:
        return World(nodes=self.nodes, instances=self.instances, state=self.state, topology=topo(), now=self.now,
                     jobs=self.jobs, tunables=Tunables(), slurmd_failures=self.failures)


# --------------------------------------------------------------------------- topology


def test_chain_follows_fallbacks_in_order() -> None:
    assert topo().chain("spot") == ("spot", "od")
    assert topo().chain("od") == ("od",)


def test_static_and_dynamic_nodes() -> None:
    nodes = topo().nodes
    assert nodes["t-od-01"].static and not nodes["t-od-02"].static
    assert not nodes["t-spot-01"].static
    assert len(nodes) == 11
    assert topo().pools["spot"].gpus_per_node == 4
    assert topo().resume_timeout == 600
