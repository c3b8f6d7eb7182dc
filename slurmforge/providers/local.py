"""The local provider: every host of the cluster is a podman container with systemd,
started from the one node image, on a podman network with fixed addresses.

Shared storage is a host directory bind-mounted on every node (the local NAS). Ceph
hosts (storage.ceph.hosts) are containers too, started first; each keeps /var/lib/ceph
(monitor store, BlueStore files) in a host directory next to the cluster's secrets, so
a recreated container (new image) finds its Ceph data again.
Dynamic pool nodes are created like every other node and stopped after the rollout:
a stopped container is the local analogue of a powered-down EC2 instance.

Podman's database survives a killed session while the containers' processes do not:
`provision` reconciles what it finds (containers listed as running whose init is gone,
an existing network) instead of assuming a clean host.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmforge.contract import PODMAN_API_DIR, PODMAN_API_SOCKET, LocalProviderSettings, read_settings
from slurmforge.errors import ProvisionError
from slurmforge.hosts import TAG_LINK, Host, HostRole
from slurmforge.inventory import SECRETS_ROOT
from slurmforge.local.api import PodmanApi
from slurmforge.local.podman import ContainerInfo, Podman
from slurmforge.nodes import ceph_host_name, node_sets
from slurmforge.providers.base import (
    CapacityError,
    Instance,
    InstanceState,
    LaunchRequest,
    LaunchResult,
    Machines,
    Provisioner,
)
from slurmforge.render import controller_name, controller_names, login_names
from slurmforge.secrets import SSH_KEY
from slurmforge.spec import Cluster
from slurmforge.spec.models import LocalTarget

log = logging.getLogger(__name__)

LABEL = "slurmforge.cluster"
# The node's init runs in a new time namespace whose boot time is "now", so slurmctld
# sees a powered-up node as freshly booted (containers otherwise report the host's).
INIT = "exec unshare --time --boottime -$(cut -d. -f1 /proc/uptime) /sbin/init"
FIRST_HOST_OFFSET = 10
API_LABEL = "slurmforge.podman-api"
DB_LABEL = "slurmforge.mariadb"
HOSTS_LABEL = "slurmforge.hosts-file"
"""On Slurm hosts /etc/hosts is the node's own file, written by the rollout (roles/common) as on
every target: podman's file (--add-host) is fixed when a container is created, so a host added
later (a backup controller, a grown pool) stayed unknown to the nodes that existed before."""
MARIADB_DATADIR = "/var/lib/mysql"


@dataclass(frozen=True)
class NodePlan:
    host: Host
    address: str


class LocalProvider(Provisioner):
    def __init__(self, spec: Cluster, image: str, podman: Podman | None = None,
                 state_root: Path = SECRETS_ROOT) -> None:
        if not isinstance(spec.target, LocalTarget):
            raise ProvisionError(f"the local provider needs target kind local, not {spec.target.kind}")
        self.spec = spec
        self.target: LocalTarget = spec.target
        self.image = image
        self.podman = podman or Podman()
        self.root = state_root / spec.name
        self.network = f"slurmforge-{spec.name}"

    # ------------------------------------------------------------------ layout

    @property
    def nas_dir(self) -> Path:
        return Path(self.target.shared_dir) if self.target.shared_dir else self.root / "nas"

    def nas_binds(self) -> list[tuple[Path, str]]:
        mounts = self.spec.storage.nas.mounts
        return [(self.nas_dir / "home", mounts.home), (self.nas_dir / "software", mounts.software),
                (self.nas_dir / "slurm_state", mounts.slurm_state)]

    def ceph_data(self, name: str) -> Path:
        """A Ceph host's /var/lib/ceph on this machine."""
        return self.root / "ceph" / name

    def db_dir(self, host: str) -> Path | None:
        """The MariaDB data directory on this machine of `host`: the primary controller's with a
        local database, None for every other host."""
        local = self.spec.accounting.enabled and self.spec.accounting.database.kind == "local"
        return self.root / "mariadb" if local and host == controller_name(self.spec) else None

    def ceph_names(self) -> list[str]:
        ceph = self.spec.storage.ceph
        return [ceph_host_name(self.spec.name, i, local=True) for i in range(1, ceph.hosts + 1)] if ceph else []

    def hosts(self) -> list[Host]:
        """Every host the spec asks for, addresses stable across runs; Ceph hosts first
        (they start first, so CephFS clients find their monitors at boot)."""
        wanted: list[tuple[str, HostRole, str | None, bool]] = [(n, HostRole.CEPH, None, False)
                                                                 for n in self.ceph_names()]
        wanted += [(name, HostRole.CONTROLLER, None, False) for name in controller_names(self.spec)]
        wanted += [(name, HostRole.LOGIN, None, False) for name in login_names(self.spec)]
        for pool in self.spec.pools:
            for nodeset in node_sets(self.spec, pool):
                wanted += [(n, HostRole.COMPUTE, pool.name, nodeset.dynamic) for n in nodeset.names()]
        addresses = self._addresses([w[0] for w in wanted])
        return [Host(name, addresses[name], role, pool, dynamic, self.connection(name))
                for name, role, pool, dynamic in wanted]

    def connection(self, name: str) -> dict[str, str]:
        """Ansible reaches nodes over ssh like real servers (pipelined, one multiplexed
        connection per node: ~10x faster than podman exec for loops)."""
        return {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.root / "secrets" / SSH_KEY),
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                                       "-o LogLevel=ERROR -o ControlMaster=auto -o ControlPersist=300s",
            "slurmforge_container": name,
        }

    def _addresses(self, names: list[str]) -> dict[str, str]:
        """Fixed addresses, remembered in addresses.json so growing a pool never moves a node."""
        path = self.root / "addresses.json"
        known: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
        net = ipaddress.ip_network(self.target.subnet)
        used = set(known.values())
        free = (str(ip) for ip in list(net.hosts())[FIRST_HOST_OFFSET:] if str(ip) not in used)
        for name in names:
            if name not in known:
                try:
                    known[name] = next(free)
                except StopIteration:
                    raise ProvisionError(f"no free address left in {net} for {name}") from None
        self.root.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known, indent=1, sort_keys=True))
        return {n: known[n] for n in names}

    # ------------------------------------------------------------------ provision

    def provision(self, keep_stopped: frozenset[str] = frozenset()) -> list[Host]:
        """Create or converge every host; `keep_stopped` names powered-down nodes that exist,
        are current and stay powered down (they are not booted)."""
        hosts = self.hosts()
        self._ensure_network()
        self._ensure_nas()
        existing = {c.name: c for c in self.podman.containers(f"{LABEL}={self.spec.name}")}
        wanted = {h.name for h in hosts}
        for name in existing:
            if name not in wanted:
                log.info("removing %s: no longer in the spec", name)
                self.podman.remove_container(name)
        for host in hosts:
            self._ensure_container(host, hosts, existing.get(host.name), host.name not in keep_stopped)
        booted = [h for h in hosts if h.name not in keep_stopped]
        self.wait_booted([h.name for h in booted])
        # a stop someone else asked for may land after our start: start those once more
        stopped = [h.name for h in booted if not ((c := self.podman.container(h.name)) and c.is_running)]
        if stopped:
            log.info("started again after a late stop: %s", ", ".join(stopped))
            self.podman.run(["start", *stopped])
            self.wait_booted(stopped)
        return hosts

    def _ensure_network(self) -> None:
        if self.podman.network_exists(self.network):
            info = self.podman.json(["network", "inspect", self.network])
            subnets = [s.get("subnet") for s in (info[0].get("subnets") or [])] if info else []
            if self.target.subnet in subnets:
                return
            log.info("recreating network %s: subnet changed", self.network)
            for c in self.podman.containers(f"{LABEL}={self.spec.name}"):
                self.podman.remove_container(c.name)
            self.podman.run(["network", "rm", "-f", self.network])
        self.podman.run(["network", "create", "--subnet", self.target.subnet, self.network])

    def _ensure_nas(self) -> None:
        for source, _ in self.nas_binds():
            source.mkdir(parents=True, exist_ok=True)
        os.chmod(self.nas_dir, 0o755)
        for name in self.ceph_names():
            self.ceph_data(name).mkdir(parents=True, exist_ok=True)
        if (db := self.db_dir(controller_name(self.spec))) is not None:
            db.mkdir(parents=True, exist_ok=True)

    def _ensure_container(self, host: Host, hosts: list[Host], info: ContainerInfo | None,
                          start: bool = True) -> None:
        if info is None:
            self._free_name(host.name)
        else:
            stale = (info.image != self.image or info.labels.get("slurmforge.address") != host.address
                     or info.labels.get("slurmforge.mac") != mac_address(host.address)
                     or (host.role is HostRole.CONTROLLER and API_LABEL not in info.labels)
                     or info.labels.get(DB_LABEL, "") != str(self.db_dir(host.name) or "")
                     or (host.role is not HostRole.CEPH and HOSTS_LABEL not in info.labels))
            if stale or info.is_dead:
                log.info("recreating %s (%s)", host.name, "stale" if stale else "dead process")
                self.podman.remove_container(host.name)
                info = None
        if info is None:
            self.podman.run(self._run_args(host, hosts))
        elif not info.is_running and start:
            self.podman.run(["start", host.name])

    def _free_name(self, name: str) -> None:
        """A container `ps` did not list may still hold the name (a record podman could not
        read after a restore): ours is removed, anyone else's is left alone."""
        if not self.podman.container_exists(name):
            return
        info = self.podman.json(["inspect", name, "--format", "json"])
        labels = ((info[0].get("Config") or {}).get("Labels") or {}) if info else {}
        if labels.get(LABEL) != self.spec.name:
            raise ProvisionError(f"a container named {name} exists that is not part of cluster {self.spec.name}: "
                                 f"rename or remove it (`podman rm -f {name}`)")
        self.podman.remove_container(name)

    def _run_args(self, host: Host, hosts: list[Host]) -> list[str]:
        args = ["run", "-d", "--name", host.name, "--hostname", host.name,
                "--network", self.network, "--ip", host.address,
                # a fixed MAC per address: a node powered down and up again keeps it, so no
                # neighbour cache (the host's, the controller's) points at a dead one
                "--mac-address", mac_address(host.address), "--label", f"slurmforge.mac={mac_address(host.address)}",
                "--systemd=always", "--cgroupns=host", "--privileged",
                "--label", f"{LABEL}={self.spec.name}", "--label", f"slurmforge.role={host.role.value}",
                "--label", f"slurmforge.address={host.address}"]
        if host.pool:
            args += ["--label", f"slurmforge.pool={host.pool}", "--label", f"slurmforge.dynamic={host.dynamic}"]
        if host.role is HostRole.CEPH:  # not rolled out by cluster.yml: podman's /etc/hosts
            args += [arg for other in hosts for arg in ("--add-host", f"{other.name}:{other.address}")]
            args += ["-v", f"{self.ceph_data(host.name)}:/var/lib/ceph"]
        else:
            args += ["--no-hosts", "--label", f"{HOSTS_LABEL}=rollout"]
            for source, target in self.nas_binds():
                args += ["-v", f"{source}:{target}"]
        if host.role is HostRole.CONTROLLER:
            # the scheduler service starts and stops pool containers through the host's API
            args += ["--label", f"{API_LABEL}={PODMAN_API_SOCKET}", "-v", f"{PODMAN_API_DIR}:{PODMAN_API_DIR}"]
            if (db := self.db_dir(host.name)) is not None:  # accounting outlives the container (new image, restore)
                args += ["--label", f"{DB_LABEL}={db}", "-v", f"{db}:{MARIADB_DATADIR}"]
        # the rollout's public key: sshd lets Ansible in as root, as on a real server
        args += ["-v", f"{self.root / 'secrets' / SSH_KEY}.pub:/root/.ssh/authorized_keys:ro"]
        return [*args, self.image, "sh", "-c", INIT]

    def wait_booted(self, names: Sequence[str], timeout: float = 120) -> None:
        """Wait until systemd in every container finished booting (running or degraded)."""
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                left = max(1.0, deadline - time.monotonic())
                res = self.podman.exec(name, ["systemctl", "is-system-running", "--wait"],
                                       timeout=left, check=False)
                state = res.stdout.strip()
                if state in ("running", "degraded"):
                    break
                if time.monotonic() > deadline:
                    raise ProvisionError(f"{name} did not boot within {timeout:.0f} s (systemd: {state or '?'}); "
                                         f"see `podman logs {name}`; `slurmforge down --local` removes it")
                time.sleep(0.5)

    # ------------------------------------------------------------------ runtime

    def list_instances(self) -> list[Instance]:
        """Every container of the cluster (`up` reads which dynamic nodes are powered down)."""
        out = []
        for c in self.podman.containers(f"{LABEL}={self.spec.name}"):
            running = c.is_running and not c.is_dead
            out.append(Instance(id=c.name, node=c.name, pool=c.labels.get("slurmforge.pool"),
                                state=InstanceState.RUNNING if running else InstanceState.STOPPED,
                                address=c.labels.get("slurmforge.address"), tags=dict(c.labels)))
        return out

    def stop(self, nodes: Sequence[str]) -> None:
        """Power these nodes' containers down (`up` rests the dynamic nodes it rolled out)."""
        if nodes:
            self.podman.run(["stop", "-t", "10", *nodes], check=False)

    def delete(self) -> None:
        for c in self.podman.containers(f"{LABEL}={self.spec.name}"):
            self.podman.remove_container(c.name)
        if self.podman.network_exists(self.network):
            self.podman.run(["network", "rm", "-f", self.network], check=False)


class PoolMachines(Machines):
    """The scheduler service's view from inside the controller: pool containers started
    and stopped through the host's podman API. Told to, it fails every launch on some
    links (pools) with InsufficientInstanceCapacity: the local stand-in for a region
    without capacity. The list is re-read on every launch: one pool name a line in
    `fail_pools_file`, or the `fail_pools` option."""

    def __init__(self, spec: Cluster, api: PodmanApi, fail_pools: Sequence[str] = (),
                 fail_pools_file: Path | None = None) -> None:
        self.spec, self.api = spec, api
        self.fail_pools, self.fail_pools_file = frozenset(fail_pools), fail_pools_file

    def failing_pools(self) -> frozenset[str]:
        names = set(self.fail_pools)
        if self.fail_pools_file is not None:
            with contextlib.suppress(OSError):  # no file: nothing fails
                names |= set(self.fail_pools_file.read_text().split())
        return frozenset(names)

    def list_instances(self) -> list[Instance]:
        """Pool containers only (controller and login are not the service's business)."""
        out = []
        for c in self.api.containers(f"{LABEL}={self.spec.name}"):
            pool = c.labels.get("slurmforge.pool")
            if pool is None:
                continue
            state = InstanceState.RUNNING if c.is_running else InstanceState.STOPPED
            out.append(Instance(id=c.name, node=c.name, pool=pool, state=state,
                                address=c.labels.get("slurmforge.address"), tags=dict(c.labels)))
        return out

    def start(self, request: LaunchRequest) -> LaunchResult:
        if request.capacity_pool in self.failing_pools():
            log.info("launch on %s refused: told to fail it", request.capacity_pool)
            return LaunchResult({}, {n: CapacityError.INSUFFICIENT_INSTANCE_CAPACITY.value for n in request.nodes})
        known = {c.name: c for c in self.api.containers(f"{LABEL}={self.spec.name}")}
        launched: dict[str, Instance] = {}
        failed: dict[str, str] = {}
        for node in request.nodes:
            info = known.get(node)
            if info is None:
                failed[node] = "NoSuchNode"
                continue
            try:
                self.api.start(node)  # idempotent: a running container stays as it is
            except ProvisionError as exc:
                log.warning("start %s failed: %s", node, exc)
                failed[node] = "NodeStartFailed"
                continue
            launched[node] = Instance(node, node, request.pool, InstanceState.RUNNING,
                                      info.labels.get("slurmforge.address"), time.time(),
                                      tags={**info.labels, TAG_LINK: request.capacity_pool})
        return LaunchResult(launched, failed)

    def terminate(self, instances: Sequence[Instance]) -> None:
        """A pool container is not removed: it stops, and its node starts from it again."""
        for node in [i.node for i in instances if i.node]:
            try:
                self.api.stop(node)
            except ProvisionError as exc:
                log.warning("stop %s failed: %s", node, exc)



def service_provider(spec: Cluster, settings: Mapping[str, Any]) -> Machines:
    """The scheduler service's provider, from its settings (contract.LocalProviderSettings:
    the API socket, the pools told to fail)."""
    if not isinstance(spec.target, LocalTarget):
        raise ProvisionError(f"the local provider needs target kind local, not {spec.target.kind}")
    local = read_settings(LocalProviderSettings, dict(settings))
    return PoolMachines(spec, PodmanApi(local.socket), local.fail_pools,
                        Path(local.fail_pools_file) if local.fail_pools_file else None)


def mac_address(address: str) -> str:
    """A locally administered unicast MAC derived from the IPv4 address."""
    return "02:42:" + ":".join(f"{int(octet):02x}" for octet in address.split("."))

