"""The two provider interfaces, one per caller, and the machine vocabulary they use.

- `Machines`: what the scheduler service calls on the controller (list, launch and terminate
  pool machines; spot notices). `aws.AwsProvider` and `local.PoolMachines` implement it.
- `Provisioner`: what the CLI calls to make and remove a cluster's fixed hosts (controller,
  login, static nodes, Ceph hosts). `local.LocalProvider` implements it; on AWS the Pulumi
  stack makes them, and `slurmforge inventory --from-stack-outputs` reads them.

A provider implements what its target does, and nothing else: no method raises "not supported".
`build_provider` is the one place a target's `Machines` is built, for the daemon
(service.main) and the CLI (aws.teardown) alike.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, cast

from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host

if TYPE_CHECKING:
    from slurmforge.spec.models import Cluster


class InstanceState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TERMINATED = "terminated"


@dataclass(frozen=True)
class Instance:
    """One machine as the provider sees it. Fields the cloud has not filled in yet
    (EC2 is eventually consistent) are None: "not yet", never "broken"."""

    id: str
    node: str | None
    pool: str | None
    state: InstanceState
    address: str | None = None
    launched_at: float | None = None
    market: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    image: str | None = None
    """The image it booted (an AMI id on AWS)."""


@dataclass(frozen=True)
class LaunchRequest:
    """Start these nodes of one pool. `token` makes the request idempotent: the same
    token never launches twice (EC2 ClientToken; the local provider checks state)."""

    pool: str
    nodes: tuple[str, ...]
    token: str
    jobs: tuple[int, ...] = ()
    link: str | None = None
    """The pool whose capacity to launch on (market, instance types, zones, launch
    template): `pool` itself or one of its fallback pools. None means `pool`."""
    node_jobs: dict[str, int] = field(default_factory=dict)
    """node -> the job it starts for (from SLURM_RESUME_FILE), for tags."""
    job_users: dict[int, str] = field(default_factory=dict)
    """job -> the user who submitted it, for tags."""
    job_accounts: dict[int, str] = field(default_factory=dict)
    """job -> the Slurm account it runs under, for tags (cost allocation)."""

    @property
    def capacity_pool(self) -> str:
        return self.link or self.pool


class ErrorCodes(StrEnum):
    """A kind of launch error, by the codes the cloud answers with."""

    @classmethod
    def includes(cls, code: str) -> bool:
        return code in cls._value2member_map_


class CapacityError(ErrorCodes):
    """Launch error codes that mean "no capacity on this link now": the service tries the
    next link of the pool's fallback chain at once and cools this one down."""

    INSUFFICIENT_INSTANCE_CAPACITY = "InsufficientInstanceCapacity"
    INSUFFICIENT_CAPACITY = "InsufficientCapacity"
    SPOT_MAX_PRICE_TOO_LOW = "SpotMaxPriceTooLow"
    UNSUPPORTED = "Unsupported"
    UNFULFILLED_CAPACITY = "UnfulfilledCapacity"
    """The fleet returned fewer instances than asked and named no reason."""


class QuotaError(ErrorCodes):
    """Launch error codes that mean "the account's quota is used up": no other zone and no
    wait helps until someone raises the quota. The service names the quota, blocks every
    link drawing on it for longer than a capacity cooldown, and tries the next link of the
    pool's fallback chain at once."""

    VCPU_LIMIT_EXCEEDED = "VcpuLimitExceeded"
    MAX_SPOT_INSTANCE_COUNT_EXCEEDED = "MaxSpotInstanceCountExceeded"
    INSTANCE_LIMIT_EXCEEDED = "InstanceLimitExceeded"


@dataclass(frozen=True, order=True)
class Quota:
    """An account limit that stops a link's launches until someone raises it (EC2: a
    Service Quota, such as L-DB2E81BA, "Running On-Demand G and VT instances")."""

    code: str
    """The quota's code ("" when the cloud's table does not know the instance family)."""
    name: str

    def __str__(self) -> str:
        return f"{self.name} ({self.code})" if self.code else self.name

THROTTLED = "RequestLimitExceeded"
"""The launch was not attempted or was throttled (EC2's token buckets): not a property
of the link, so it is retried on the same link later without a cooldown."""


@dataclass(frozen=True)
class Interruption:
    """The cloud will take an instance away soon (EC2: the two-minute spot notice)."""

    instance: str
    noticed_at: float
    kind: str = "spot-interruption"
    receipt: str = ""
    """Provider-specific handle to acknowledge the notice once it is recorded."""


@dataclass(frozen=True)
class LaunchResult:
    launched: dict[str, Instance]
    """node name -> instance"""
    failed: dict[str, str]
    """node name -> error code (InsufficientInstanceCapacity, ...)"""


class Machines(ABC):
    """What the scheduler service drives: a cluster's pool machines, listed, started and
    removed, and the cloud's notices about them. `aws` (EC2) and the local pool containers
    implement it."""

    @abstractmethod
    def list_instances(self) -> list[Instance]:
        """Every pool machine of this cluster that exists, whatever its state: never a head
        node, a Ceph host or another cluster's machine."""

    @abstractmethod
    def start(self, request: LaunchRequest) -> LaunchResult:
        """Start pool nodes."""

    @abstractmethod
    def terminate(self, instances: Sequence[Instance]) -> None:
        """Remove these instances (orphans, failed or released nodes) for good: a cloud
        machine is terminated, a local container stopped and removed."""

    def interruptions(self) -> list[Interruption]:
        """Notices of instances the cloud is about to take away. Default: none."""
        return []

    def acknowledge(self, interruptions: Sequence[Interruption]) -> None:  # noqa: B027 - optional hook
        """The service recorded these notices; the provider may forget them. Default:
        nothing to do."""


class Provisioner(ABC):
    """What the CLI drives: the cluster's fixed hosts made, converged and removed. The local
    target implements it; an AWS cluster's hosts come from its Pulumi stack (`pulumi up`,
    `pulumi destroy`), so AWS has no provisioner."""

    @abstractmethod
    def hosts(self) -> list[Host]:
        """Every host the spec asks for, as the inventory will list them."""

    @abstractmethod
    def provision(self) -> list[Host]:
        """Create (or converge) every fixed host (head nodes, Ceph hosts, static nodes) and
        boot it; return every host. Dynamic nodes' machines are the scheduler service's."""

    @abstractmethod
    def delete(self) -> None:
        """Remove every machine and network of the cluster."""


def build_provider(spec: Cluster, settings: Mapping[str, Any]) -> Machines:
    """The target's `Machines`: `slurmforge.<kind>.provider` offers `service_provider(spec,
    settings) -> Machines` (aws: the EC2 provider; local: the pool containers). Loaded by
    the target's kind, so that this interface imports no target."""
    kind = spec.target.kind
    try:
        module = importlib.import_module(f"slurmforge.{kind}.provider")
    except ImportError as exc:
        raise ProvisionError(f"no '{kind}' provider for the scheduler service: {exc}") from exc
    factory = getattr(module, "service_provider", None)
    if factory is None:
        raise ProvisionError(f"slurmforge.{kind}.provider has no service_provider(spec, settings)")
    return cast(Machines, factory(spec, settings))
