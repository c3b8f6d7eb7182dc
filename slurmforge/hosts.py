"""The cluster's machines as every part names them: a host's role, the host as the inventory
lists it, and the tags (EC2) or labels (podman) a machine carries.

The inventory, the roles' variables, the Pulumi stack, the providers and the scheduler service
all speak this vocabulary; none of it depends on where a machine runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurmforge.spec.models import Cluster

TAG_CLUSTER = "slurmforge:cluster"
TAG_POOL = "slurmforge:pool"
TAG_LINK = "slurmforge:link"
TAG_NODE = "slurmforge:node"
TAG_JOB = "slurmforge:job"
TAG_USER = "slurmforge:user"
TAG_ACCOUNT = "slurmforge:account"
TAG_TOKEN = "slurmforge:token"
TAG_ROLE = "slurmforge:role"
TAG_NAME = "Name"
"""Instance tags (or container labels). The stack tags what it makes with the cluster and its
role (a pool's launch template with its pool too) and names it, a pool machine reads its node
name from its node tag at boot, and the scheduler service's provider sets them on the machines
it launches; the token tag marks a machine as launched by the service even before its node tag
is visible."""
OWN_TAG_PREFIX = "slurmforge:"
OWN_TAG_KEYS = (TAG_CLUSTER, TAG_POOL, TAG_LINK, TAG_NODE, TAG_JOB, TAG_USER, TAG_ACCOUNT, TAG_TOKEN, TAG_ROLE,
                TAG_NAME)
"""Every tag key slurmforge sets: a user's tags (target.tags) may use none of them."""


class HostRole(StrEnum):
    CONTROLLER = "controller"
    LOGIN = "login"
    COMPUTE = "compute"
    CEPH = "ceph"
    """A Ceph storage host (mon, mgr, OSDs, MDS): not a Slurm node."""


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


# The local target's podman network: its first host addresses are left to podman (the
# gateway, x.x.x.1) and spare; the local provider gives the containers the ones after.
LOCAL_FIRST_HOST_OFFSET = 10


# ----------------------------------------------------------------- names of the fixed hosts

def controller_name(spec: Cluster) -> str:
    """The primary controller: slurmctld in control while it runs, slurmdbd and MariaDB."""
    if spec.target.kind == "static":
        return spec.target.controller.name
    return f"{spec.name}-controller"


def controller_names(spec: Cluster) -> list[str]:
    """Every slurmctld host in Slurm's order: the primary, then the backup (head.backup_controller)."""
    if spec.target.kind == "static":
        backup = spec.target.backup_controller
        return [spec.target.controller.name, *([backup.name] if backup and spec.head.backup_controller else [])]
    return [controller_name(spec), *([f"{spec.name}-controller-backup"] if spec.head.backup_controller else [])]


def login_names(spec: Cluster) -> list[str]:
    if spec.target.kind == "static":
        return [h.name for h in spec.target.login]
    count = spec.head.login_count
    return [f"{spec.name}-login"] if count == 1 else [f"{spec.name}-login-{i}" for i in range(1, count + 1)]


def login_subnets(spec: Cluster) -> dict[str, int]:
    """AWS: each login node's public subnet (its index in network.public_subnets), the
    subnets taken in turn. The stack places them so; the checks look at their zones."""
    count = len(spec.network.public_subnets)
    return {name: i % count for i, name in enumerate(login_names(spec))} if count else {}
