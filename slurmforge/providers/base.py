"""The provider interface the CLI and the scheduler service share.

A provider turns the spec's hosts into machines: it provisions the cluster's fixed
hosts (controller, login, static nodes; on AWS `pulumi up` does this and the provider
only reads the stack's outputs), starts and stops pool nodes on demand, lists what
exists, and fetches a node's boot log.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class HostRole(StrEnum):
    CONTROLLER = "controller"
    LOGIN = "login"
    COMPUTE = "compute"


@dataclass(frozen=True)
class Host:
    """A machine of the cluster, as the inventory lists it."""

    name: str
    address: str
    role: HostRole
    pool: str | None = None
    dynamic: bool = False
    """A pool node above min_nodes: powered down until Slurm asks for it."""
    connection: dict[str, str] = field(default_factory=dict)
    """Ansible connection variables (ansible_connection, ansible_user, ...)."""


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


@dataclass(frozen=True)
class LaunchRequest:
    """Start these nodes of one pool. `token` makes the request idempotent: the same
    token never launches twice (EC2 ClientToken; the local provider checks state)."""

    pool: str
    nodes: tuple[str, ...]
    token: str
    jobs: tuple[int, ...] = ()


@dataclass(frozen=True)
class LaunchResult:
    launched: dict[str, Instance]
    """node name -> instance"""
    failed: dict[str, str]
    """node name -> error code (InsufficientInstanceCapacity, ...)"""


class Provider(ABC):
    """What `local` and `aws` implement."""

    name: str

    @abstractmethod
    def provision(self) -> list[Host]:
        """Create (or converge) the cluster's machines; return every host."""

    @abstractmethod
    def list_instances(self) -> list[Instance]:
        """Every machine of this cluster that exists, whatever its state."""

    @abstractmethod
    def start(self, request: LaunchRequest) -> LaunchResult:
        """Start pool nodes."""

    @abstractmethod
    def stop(self, nodes: Sequence[str]) -> None:
        """Stop (power down) pool nodes; their names stay valid for a later start."""

    @abstractmethod
    def delete(self) -> None:
        """Remove every machine and network of the cluster."""

    @abstractmethod
    def logs(self, node: str, lines: int = 200) -> str:
        """The node's recent boot/system log, for failure reports."""
