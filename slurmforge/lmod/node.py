"""The node the Lmod publisher builds on, and the cluster it reads it from (`--inventory`).

Which node: the first login node. It mounts the shared tree like every node, runs the
same image as the compute nodes (so a venv built there runs on them), is always up
(compute nodes of a dynamic pool may be powered down), and a pip build there takes no
CPU away from jobs. Without a login node, the first static compute node.
"""

from __future__ import annotations

from pathlib import Path

from slurmforge.errors import ModuleError
from slurmforge.hosts import Host, HostRole
from slurmforge.inventory import read_inventory
from slurmforge.remote.node import NodeExecutor, executor_for
from slurmforge.spec import Cluster


def build_host(hosts: list[Host], name: str | None = None) -> Host:
    """The node that builds: `name` if given, else the first login node, else the first
    static compute node."""
    hosts = [h for h in hosts if h.role is not HostRole.CEPH]  # no module tree on storage hosts
    if name is not None:
        for host in hosts:
            if host.name == name:
                return host
        raise ModuleError(f"no Slurm node {name!r} in the inventory; nodes: {', '.join(h.name for h in hosts)}")
    logins = [h for h in hosts if h.role is HostRole.LOGIN]
    computes = [h for h in hosts if h.role is HostRole.COMPUTE and not h.dynamic]
    if not logins and not computes:
        raise ModuleError("the inventory has no login node and no static compute node to build on")
    return (logins or computes)[0]


def open_inventory(inventory: Path, node: str | None = None) -> tuple[Cluster, NodeExecutor]:
    """The cluster spec (its modules.root is the tree) and an executor on its build node."""
    if not (inventory / "hosts.yml").is_file():
        raise ModuleError(f"{inventory}: not an inventory (no hosts.yml); "
                          "fix: pass the inventory `slurmforge up` or `inventory` wrote "
                          "(.../slurmforge/inventories/<cluster>)")
    spec, hosts = read_inventory(inventory)
    return spec, executor_for(build_host(hosts, node))
