"""A node's container on the local target, described once: the CLI makes it with `podman run`
(`up`, LocalProvider: head nodes, Ceph hosts, static nodes) and the scheduler service in the
controller makes it through the host's podman REST API (PoolMachines: a pool node powered up,
a static node's replacement). `NodeContainer.run_args` and `NodeContainer.create_body` are two
spellings of the same description, so a node the service makes is the node `up` would make.

`compute_container` is that description for a compute node, from the provider settings the
service reads (contract.LocalProviderSettings, which `up` writes from its LocalProvider): every
compute node - a static one `up` makes, a pool node or a replacement the service makes - gets
the rendered join program and the cluster's munge key, read-only, and joins at boot
(slurmforge-join.service in the node image) as an EC2 instance does from its user data.

Every container carries the digest of its description (DESCRIPTION_LABEL): `up` makes a node
again when what it would make differs in anything (image, address, mounts, labels), not in a
hand-kept list of fields.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slurmforge.contract import JOIN_PROGRAM, JOIN_SECRETS_DIR, LocalProviderSettings
from slurmforge.hosts import HostRole
from slurmforge.spec import Cluster
from slurmforge.spec.nodes import NodeHardware, node_sets, pool_hardware

LABEL = "slurmforge.cluster"
ADDRESS_LABEL = "slurmforge.address"
MAC_LABEL = "slurmforge.mac"
ROLE_LABEL = "slurmforge.role"
POOL_LABEL = "slurmforge.pool"
DYNAMIC_LABEL = "slurmforge.dynamic"
DESCRIPTION_LABEL = "slurmforge.description"
HARDWARE_LABEL = "slurmforge.hardware"
"""A compute node's machine as its pool describes it: a container's hardware is the spec's
(slurm.conf's config_overrides), so this label is what makes a pool's new hardware a new
container, as it is a new instance on AWS."""
INIT = ("exec unshare --time --boottime "
        "-$(awk '{up = int($1) + 1; system(\"sleep \" up - $1); print up}' /proc/uptime) /sbin/init")
"""The node's init runs in a new time namespace whose boot time is "now", so slurmctld sees a
powered-up node as freshly booted (containers otherwise report the host's). The offset is a
whole number of seconds, so init first waits for the host's uptime to reach the next whole
second: the node's uptime then starts at 0, never at up to 1 s (an offset may not make it
negative). slurmctld takes a powering-up node's registration only if the boot it reports
(now minus uptime, whole seconds) is not before the power-up request
(node_mgr.c:waiting_for_node_boot); a machine up within a second of the request that reported
a second too much uptime was "still booting" until ResumeTimeout."""
AUTHORIZED_KEYS = "/root/.ssh/authorized_keys"
MUNGE_KEY = f"{JOIN_SECRETS_DIR}/munge.key"


def mac_address(address: str) -> str:
    """A locally administered unicast MAC derived from the IPv4 address: a node made again
    keeps it, so no neighbour cache (the host's, the controller's) points at a dead one."""
    return "02:42:" + ":".join(f"{int(octet):02x}" for octet in address.split("."))


@dataclass(frozen=True)
class Mount:
    """A host path bind-mounted into the container."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class NodeContainer:
    name: str
    image: str
    network: str
    address: str
    role: HostRole
    cluster: str
    labels: Mapping[str, str] = field(default_factory=dict)
    """Beyond the cluster, role, address and MAC every node has."""
    mounts: tuple[Mount, ...] = ()
    extra_hosts: tuple[tuple[str, str], ...] | None = None
    """(name, address) entries of podman's /etc/hosts; None: the node's own /etc/hosts, as on
    Slurm hosts, written by the rollout (roles/common) or the join program as on every target:
    podman's file is fixed when a container is created, so a host added later (a backup
    controller, a grown pool) would stay unknown to the nodes that existed before."""

    @property
    def mac(self) -> str:
        return mac_address(self.address)

    @property
    def digest(self) -> str:
        """What the container is, in 12 hex digits. Not podman's /etc/hosts entries of a Ceph
        host (every host of the cluster): growing a pool must not restart Ceph."""
        described = {"name": self.name, "image": self.image, "network": self.network, "address": self.address,
                     "role": self.role.value, "labels": dict(sorted(self.labels.items())), "init": INIT,
                     "mounts": [[m.source, m.target, m.read_only] for m in self.mounts],
                     "own_hosts_file": self.extra_hosts is None}
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:12]

    def all_labels(self) -> dict[str, str]:
        return {LABEL: self.cluster, ROLE_LABEL: self.role.value, ADDRESS_LABEL: self.address,
                MAC_LABEL: self.mac, **self.labels, DESCRIPTION_LABEL: self.digest}

    def run_args(self) -> list[str]:
        """`podman run` arguments (the CLI, as root on the host)."""
        args = ["run", "-d", "--name", self.name, "--hostname", self.name,
                "--network", self.network, "--ip", self.address, "--mac-address", self.mac,
                "--systemd=always", "--cgroupns=host", "--privileged"]
        for key, value in self.all_labels().items():
            args += ["--label", f"{key}={value}"]
        if self.extra_hosts is None:
            args.append("--no-hosts")
        else:
            args += [arg for name, address in self.extra_hosts for arg in ("--add-host", f"{name}:{address}")]
        for m in self.mounts:
            args += ["-v", f"{m.source}:{m.target}{':ro' if m.read_only else ''}"]
        return [*args, self.image, "sh", "-c", INIT]

    def create_body(self) -> dict[str, Any]:
        """The libpod API's container create body (POST /libpod/containers/create, podman 4's
        SpecGenerator) for the same container."""
        body: dict[str, Any] = {
            "name": self.name, "hostname": self.name, "image": self.image, "command": ["sh", "-c", INIT],
            "labels": self.all_labels(),
            "netns": {"nsmode": "bridge"},
            "Networks": {self.network: {"static_ips": [self.address], "static_mac": self.mac}},
            "systemd": "always", "cgroupns": {"nsmode": "host"}, "privileged": True,
            "mounts": [{"destination": m.target, "source": m.source, "type": "bind",
                        "options": ["rbind", "ro"] if m.read_only else ["rbind"]} for m in self.mounts],
        }
        if self.extra_hosts is None:
            body["use_image_hosts"] = True
        else:
            body["hostadd"] = [f"{name}:{address}" for name, address in self.extra_hosts]
        return body


def pool_nodes(spec: Cluster) -> dict[str, tuple[str, bool]]:
    """Every pool node of the spec -> (its pool, dynamic)."""
    return {name: (pool.name, nodeset.dynamic) for pool in spec.pools
            for nodeset in node_sets(spec, pool) for name in nodeset.names()}


def compute_container(spec: Cluster, settings: LocalProviderSettings, name: str) -> NodeContainer:
    """A compute node's container, static or dynamic: with the join program and the munge key,
    so it joins at boot by itself (the rollout runs the same program again on a static node)."""
    pool, dynamic = pool_nodes(spec)[name]
    hardware = pool_hardware(next(p for p in spec.pools if p.name == pool))
    mounts = [Mount(source, target) for target, source in settings.nas.items()]
    mounts += [Mount(settings.ssh_key, AUTHORIZED_KEYS, read_only=True),  # Ansible and admins get in as root
               Mount(settings.join_program, JOIN_PROGRAM, read_only=True),
               Mount(settings.munge_key, MUNGE_KEY, read_only=True)]
    return NodeContainer(name, settings.image, settings.network, settings.addresses[name], HostRole.COMPUTE,
                         spec.name, {POOL_LABEL: pool, DYNAMIC_LABEL: str(dynamic), HARDWARE_LABEL: machine(hardware)},
                         tuple(mounts))


def machine(hw: NodeHardware | None) -> str:
    """'1x2x1 1024MB 2 fakegpu': sockets x cores x threads, memory, GPUs."""
    if hw is None:
        return "-"
    return f"{hw.sockets}x{hw.cores_per_socket}x{hw.threads_per_core} {hw.memory_mb}MB" + (
        f" {hw.gpus} {hw.gpu_model or 'gpu'}" if hw.gpus else "")
