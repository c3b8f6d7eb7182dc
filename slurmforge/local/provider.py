"""The local provider: every host of the cluster is a podman container with systemd,
started from the one node image, on a podman network with fixed addresses; each container is
described once (slurmforge.local.container), whoever makes it.

Shared storage is a host directory bind-mounted on every node (the local NAS). Ceph
hosts (storage.ceph.hosts) are containers too, started first; each keeps /var/lib/ceph
(monitor store, BlueStore files) in a host directory next to the cluster's secrets, so
a recreated container (new image) finds its Ceph data again.

`up` (LocalProvider) makes the head nodes, the Ceph hosts and the static nodes. Every
compute node's container mounts the join program and the munge key and joins at boot, as an
EC2 instance runs its user data. A dynamic pool node has a container only while it is
powered up, like an instance: the scheduler service (PoolMachines) makes a fresh one from the
node image when Slurm resumes the node and removes it when Slurm suspends it; nothing
survives but the shared storage. A static node whose machine died gets a fresh container
the same way.

Podman's database survives a killed session while the containers' processes do not:
`provision` reconciles what it finds (containers listed as running whose init is gone,
an existing network) instead of assuming a clean host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import ipaddress
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from slurmforge.contract import JOIN_UNIT, PODMAN_API_DIR, LocalProviderSettings, read_settings
from slurmforge.errors import ProvisionError
from slurmforge.hosts import (
    LOCAL_FIRST_HOST_OFFSET,
    TAG_LINK,
    TAG_TOKEN,
    Host,
    HostRole,
    controller_name,
    controller_names,
    login_names,
)
from slurmforge.image import RECORD
from slurmforge.image_record import record_digest
from slurmforge.local.api import PodmanApi
from slurmforge.local.container import (
    ADDRESS_LABEL,
    AUTHORIZED_KEYS,
    DESCRIPTION_LABEL,
    LABEL,
    POOL_LABEL,
    Mount,
    NodeContainer,
    compute_container,
    mac_address,
)
from slurmforge.local.podman import ContainerInfo, Podman
from slurmforge.provider import (
    CapacityError,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    LaunchResult,
    Machines,
    Provisioner,
)
from slurmforge.secrets import MUNGE_KEY, SSH_KEY
from slurmforge.spec import Cluster
from slurmforge.spec.models import LocalTarget, Market
from slurmforge.spec.nodes import ceph_host_name, node_sets
from slurmforge.state_dirs import SECRETS_ROOT

__all__ = ["LABEL", "MARIADB_DATADIR", "LocalProvider", "PoolMachines",
           "mac_address", "service_provider"]

log = logging.getLogger(__name__)

CLUSTER_WAIT_BOOT_JOBS = frozenset({"slurmd.service", JOIN_UNIT, "multi-user.target", "graphical.target"})
"""A compute node's boot jobs while it waits for its cluster: slurmd for a controller to serve
it the config, the join program retrying until the rollout published the node kit; the
targets wait for the units they want."""
MARIADB_DATADIR = "/var/lib/mysql"
STOP_GRACE = 3
"""Seconds a terminated pool container has to shut down before it is killed."""
TERMINATED_LISTED = 3600.0
"""Seconds a machine the service terminated stays listed as terminated (EC2: about an hour)."""


WAVES: dict[HostRole, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # the hosts started again with their disks (provision) in this order, each until a line of
    # what the command prints has all the words that say its service answers
    HostRole.CEPH: (("ceph", "mds", "stat"), ("up:active",)),
    HostRole.CONTROLLER: (("scontrol", "ping"), ("(primary)", "is UP")),
}
STARTABLE = frozenset({"created", "configured", "initialized", "exited", "stopped"})
"""Container states `podman start` takes."""


class LocalProvider(Provisioner):
    def __init__(self, spec: Cluster, image: str, podman: Podman | None = None,
                 state_root: Path = SECRETS_ROOT, join_program: Path | None = None) -> None:
        """`join_program`: the inventory's rendered one (<inventory>/rendered/join.sh), which
        every compute node's container mounts; needed to make or describe compute nodes."""
        if not isinstance(spec.target, LocalTarget):
            raise ProvisionError(f"the local provider needs target kind local, not {spec.target.kind}")
        self.spec = spec
        self.target: LocalTarget = spec.target
        self.image = image
        self.podman = podman or Podman()
        self.root = state_root / spec.name
        self.network = f"slurmforge-{spec.name}"
        self.join_program = join_program

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
        new = [name for name in names if name not in known]
        if new:  # hosts() is asked for often (every compute node's description): write only news
            used = set(known.values())
            free = (str(ip) for ip in list(net.hosts())[LOCAL_FIRST_HOST_OFFSET:] if str(ip) not in used)
            for name in new:
                try:
                    known[name] = next(free)
                except StopIteration:
                    raise ProvisionError(f"no free address left in {net} for {name}") from None
            self.root.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(known, indent=1, sort_keys=True))
        return {n: known[n] for n in names}

    # ------------------------------------------------------------------ provision

    def provision(self) -> list[Host]:
        """Create or converge every fixed host (head nodes, Ceph hosts, static nodes) and boot
        it; return every host of the spec. A dynamic node's container is the scheduler
        service's: one that runs stays (Slurm powered the node up, it may run jobs), one
        that stopped is removed (a powered-down node has no machine)."""
        hosts = self.hosts()
        self._ensure_network()
        self._ensure_nas()
        existing = {c.name: c for c in self.podman.containers(f"{LABEL}={self.spec.name}")}
        wanted = {h.name for h in hosts}
        for name in existing:
            if name not in wanted:
                log.info("removing %s: no longer in the spec", name)
                self.podman.remove_container(name)
        # Machines that come back with their disks (a host restart) come back in the order their
        # services need each other - the Ceph hosts (until the file system is served), then the
        # controllers (until slurmctld answers), then the rest - so that no node boots to find
        # no /data (its health check would drain it) or no slurmctld to fetch its configs from
        # (slurmd retries only every 10 s, sackd alike).
        waves: dict[HostRole, list[str]] = {}
        order = list(WAVES)
        for host in sorted(hosts, key=lambda h: order.index(h.role) if h.role in WAVES else len(order)):
            info = existing.get(host.name)
            if not host.dynamic:
                for role in [r for r in waves if r is not host.role and waves[r]]:
                    self._settle(role, waves.pop(role))
                if self._ensure_container(host, hosts, info) and host.role in WAVES:
                    waves.setdefault(host.role, []).append(host.name)
            elif info is not None and info.state != "created" and not (info.is_running and not info.is_dead):
                # a created one is a launch of the scheduler service under way (it runs
                # throughout `up`); a stopped or dead one is left from an older release
                log.info("removing %s: a powered-down node has no container", host.name)
                self.podman.remove_container(host.name)
        fixed = [h for h in hosts if not h.dynamic]
        self.wait_booted([h.name for h in fixed])
        # a stop someone else asked for may land after our start: start those once more
        found = [c for h in fixed if (c := self.podman.container(h.name)) is not None]
        stopped = [c for c in found if not c.is_running]
        if stopped:
            log.info("started again after a late stop: %s", ", ".join(c.name for c in stopped))
            self._start(stopped)
            self.wait_booted([c.name for c in stopped])
        return hosts

    def service_settings(self) -> LocalProviderSettings:
        """What the scheduler service needs to make a pool node's container as this provider
        does (contract.LocalProviderSettings)."""
        if self.join_program is None:
            raise ProvisionError("the local provider was not given the inventory's join program")
        hosts = self.hosts()
        return LocalProviderSettings(
            image=self.image, network=self.network,
            addresses={h.name: h.address for h in hosts if h.role is HostRole.COMPUTE},
            nas={target: str(source) for source, target in self.nas_binds()},
            ssh_key=str(self.ssh_public_key), join_program=str(self.join_program.resolve()),
            munge_key=str(self.root / "secrets" / MUNGE_KEY))

    @property
    def ssh_public_key(self) -> Path:
        return self.root / "secrets" / f"{SSH_KEY}.pub"

    def _ensure_network(self) -> None:
        """The cluster's network, without podman's DNS (aardvark-dns, or CNI's dnsname):
        nodes find each other by name only as on every target - /etc/hosts from the
        join program (docs/node-lifecycle.md, "Names") - not by their container names."""
        if self.podman.network_exists(self.network):
            info = self.podman.json(["network", "inspect", self.network])
            subnets = [s.get("subnet") for s in (info[0].get("subnets") or [])] if info else []
            dns = bool(info[0].get("dns_enabled")) if info else False
            if self.target.subnet in subnets and not dns:
                return
            log.info("recreating network %s: %s", self.network, "its DNS answers container names" if dns
                     else "subnet changed")
            for c in self.podman.containers(f"{LABEL}={self.spec.name}"):
                self.podman.remove_container(c.name)
            self.podman.run(["network", "rm", "-f", self.network])
        self.podman.run(["network", "create", "--disable-dns", "--subnet", self.target.subnet, self.network])

    def _ensure_nas(self) -> None:
        for source, _ in self.nas_binds():
            source.mkdir(parents=True, exist_ok=True)
        os.chmod(self.nas_dir, 0o755)
        for name in self.ceph_names():
            self.ceph_data(name).mkdir(parents=True, exist_ok=True)
        if (db := self.db_dir(controller_name(self.spec))) is not None:
            db.mkdir(parents=True, exist_ok=True)

    def stale_nodes(self) -> list[str]:
        """Static compute nodes whose running container `provision` would make again (its
        image or description differs: a new node image, the pool's new hardware): what a
        rollout drains first (slurmforge.drain). Not one whose processes died (a host restart):
        it runs no job, and the controller that would drain it may be as dead (cold start)."""
        hosts = self.hosts()
        existing = {c.name: c for c in self.podman.containers(f"{LABEL}={self.spec.name}")}
        return [h.name for h in hosts if h.role is HostRole.COMPUTE and not h.dynamic
                and (info := existing.get(h.name)) is not None and info.is_running and not info.is_dead
                and self._stale(info, self.container(h, hosts))]

    def _stale(self, info: ContainerInfo, wanted: NodeContainer) -> bool:
        """Made again: another description, or another image than the cluster's - a head host's
        image is what its RECORD says (`slurmforge upgrade` brings head hosts to an image in
        place), a compute node's its container's."""
        if info.labels.get(DESCRIPTION_LABEL) != wanted.digest:
            return True
        if wanted.role is HostRole.COMPUTE:
            return info.image != self.image
        recorded = record_digest(self.podman.read_file(info.name, RECORD))
        if info.image == self.image:
            # upgraded in place to another image (a spec's images.refresh, then `up` of a spec
            # without it): the host runs what its RECORD says, not the cluster's image
            return recorded is not None and self.image_digest is not None and recorded != self.image_digest
        return recorded is None or recorded != self.image_digest

    @functools.cached_property
    def image_digest(self) -> str | None:
        """The node image's inputs digest (its RECORD's `inputs`), read once from the image."""
        from slurmforge.local.image_cache import image_record

        return record_digest(image_record(self.podman, self.image))

    def remake(self, names: Sequence[str]) -> None:
        """These hosts' containers made again from the current image (the upgrade's replacement
        of drained static nodes), booted; a compute node joins at boot."""
        hosts = self.hosts()
        for host in (h for h in hosts if h.name in names):
            self.podman.remove_container(host.name)
            self._ensure_container(host, hosts, None)
        self.wait_booted(list(names))

    def _settle(self, role: HostRole, names: list[str], timeout: float = 120) -> None:
        """Once these hosts, started again with their disks, have booted: until their service
        answers (WAVES). A Ceph MDS that restarts waits mds_reconnect_timeout (45 s) for the
        clients it had before being active again. Waited at most `timeout`: a service that does
        not come back is the rollout's and the validation's to report."""
        self.wait_booted(names)
        command, answer = WAVES[role]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            said = self.podman.run(["exec", names[0], "timeout", "10", *command], check=False, timeout=30)
            if any(all(word in line for word in answer) for line in said.splitlines()):
                return
            time.sleep(2)
        log.info("%s: %s did not answer %s %.0f s after it started: going on", role, names[0], " ".join(answer),
                 timeout)

    def _ensure_container(self, host: Host, hosts: list[Host], info: ContainerInfo | None) -> bool:
        """Make, start or leave the host's container; True when it was started again with its
        disk (its processes had died)."""
        wanted = self.container(host, hosts)
        if info is None:
            self._free_name(host.name)
        else:
            stale = self._stale(info, wanted)
            if info.is_dead and not stale and (revived := self.podman.revive(info)) is not None:
                log.info("starting %s again: its processes died (a host restart), its disk is kept", host.name)
                self._start([revived])
                return True
            if stale or info.is_dead:
                log.info("recreating %s (%s)", host.name, "stale" if stale else "dead process")
                self.podman.remove_container(host.name)
                info = None
        if info is None:
            self.podman.run(wanted.run_args())
        elif not info.is_running:
            self._start([info])
        return False

    def _start(self, found: list[ContainerInfo]) -> None:
        """Start these containers. One podman cannot start yet - stopping (a stop still
        under way: a machine under load, a `podman stop` whose wait ran out), paused - is
        stopped first: the stop waits for it, or kills it after 10 s."""
        busy = [c.name for c in found if c.state not in STARTABLE]
        if busy:
            self.podman.run(["stop", "-t", "10", *busy], check=False)
        self.podman.run(["start", *(c.name for c in found)])

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

    def container(self, host: Host, hosts: list[Host]) -> NodeContainer:
        """The host's container: a compute node's as the scheduler service makes it (it joins
        at boot); the others' here."""
        if host.role is HostRole.COMPUTE:
            return compute_container(self.spec, self.service_settings(), host.name)
        mounts = [Mount(str(self.ssh_public_key), AUTHORIZED_KEYS, read_only=True)]
        extra_hosts = None
        if host.role is HostRole.CEPH:  # not rolled out by cluster.yml: podman's /etc/hosts
            extra_hosts = tuple((other.name, other.address) for other in hosts)
            mounts.insert(0, Mount(str(self.ceph_data(host.name)), "/var/lib/ceph"))
        else:
            mounts[:0] = [Mount(str(source), target) for source, target in self.nas_binds()]
        if host.role is HostRole.CONTROLLER:
            # the scheduler service makes and removes pool containers through the host's API
            mounts.append(Mount(PODMAN_API_DIR, PODMAN_API_DIR))
            if (db := self.db_dir(host.name)) is not None:  # accounting outlives the container (new image, restore)
                mounts.append(Mount(str(db), MARIADB_DATADIR))
        return NodeContainer(host.name, self.image, self.network, host.address, host.role, self.spec.name,
                             mounts=tuple(mounts), extra_hosts=extra_hosts)

    def wait_booted(self, names: Sequence[str], timeout: float = 120) -> None:
        """Wait until systemd in every container finished booting (running or degraded), or
        all that is left of its boot is waiting for the cluster (CLUSTER_WAIT_BOOT_JOBS): a
        compute node joins at boot, and when the controllers are made with it they are
        configured, and the node kit published, only by the rollout that comes after this wait."""
        deadline = time.monotonic() + timeout
        for name in names:
            while True:
                res = self.podman.exec(name, ["systemctl", "is-system-running"], timeout=30, check=False)
                state = res.stdout.strip()
                if state in ("running", "degraded") or (state == "starting" and self._waits_for_cluster(name)):
                    break
                if time.monotonic() > deadline:
                    raise ProvisionError(f"{name} did not boot within {timeout:.0f} s (systemd: {state or '?'}); "
                                         f"see `podman logs {name}`; `slurmforge down --local` removes it")
                time.sleep(0.5)

    def _waits_for_cluster(self, name: str) -> bool:
        res = self.podman.exec(name, ["systemctl", "list-jobs", "--no-legend", "--plain"], timeout=30, check=False)
        units = {line.split()[1] for line in res.stdout.splitlines() if len(line.split()) > 1}
        return bool(units) and units <= CLUSTER_WAIT_BOOT_JOBS

    def delete(self) -> None:
        for c in self.podman.containers(f"{LABEL}={self.spec.name}"):
            self.podman.remove_container(c.name)
        if self.podman.network_exists(self.network):
            self.podman.run(["network", "rm", "-f", self.network], check=False)


class PoolMachines(Machines):
    """The scheduler service's view from inside the controller: pool node containers made
    and removed through the host's podman API, like instances. A launch makes a fresh
    container from the node image (`compute_container`, as `up` makes a static node: it
    joins at boot); a termination stops and removes it. An
    instance's id is its container's id, so a termination never reaches the machine that
    replaced it under the same name.

    Told to, it fails every launch on some links (pools) with InsufficientInstanceCapacity:
    the local stand-in for a region without capacity. The list is re-read on every launch:
    one pool name a line in `fail_pools_file`, or the `fail_pools` option.

    And it delivers spot interruption notices, as EC2 does two minutes ahead: a node name a
    line in `interrupt_file` is a notice for that node's machine when the machine runs on a
    link (pool) of market spot (a spot pool's node launched on its on-demand fallback has
    nothing to lose); the service acknowledges each, which takes its line out.

    A machine it terminated stays listed, terminated, for TERMINATED_LISTED seconds, as EC2
    lists a terminated instance for about an hour: the service knows at its next loop that
    the machine is gone, instead of waiting `missing_grace` for a machine nobody lists. The
    list lives in this process (a restarted service has only the grace, as on a cloud that
    forgot)."""

    def __init__(self, spec: Cluster, api: PodmanApi, settings: LocalProviderSettings,
                 fail_pools_file: Path | None = None, interrupt_file: Path | None = None) -> None:
        self.terminated: dict[str, tuple[float, Instance]] = {}
        self.spec, self.api, self.settings = spec, api, settings
        self.fail_pools, self.fail_pools_file = frozenset(settings.fail_pools), fail_pools_file
        self.interrupt_file = interrupt_file
        self.spot_links = frozenset(p.name for p in spec.pools if p.market is Market.SPOT)

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
            pool = c.labels.get(POOL_LABEL)
            if pool is None:
                continue
            state = InstanceState.RUNNING if c.is_running else InstanceState.STOPPED
            out.append(Instance(id=c.id or c.name, node=c.name, pool=pool, state=state,
                                address=c.labels.get(ADDRESS_LABEL), launched_at=c.started_at or None,
                                tags=dict(c.labels)))
        now, listed = time.time(), {i.id for i in out}
        self.terminated = {k: v for k, v in self.terminated.items() if now - v[0] < TERMINATED_LISTED}
        return out + [inst for k, (_, inst) in sorted(self.terminated.items()) if k not in listed]

    def start(self, request: LaunchRequest) -> LaunchResult:
        if request.capacity_pool in self.failing_pools():
            log.info("launch on %s refused: told to fail it", request.capacity_pool)
            return LaunchResult({}, {n: CapacityError.INSUFFICIENT_INSTANCE_CAPACITY.value for n in request.nodes})
        known = {c.name: c for c in self.api.containers(f"{LABEL}={self.spec.name}")}
        launched: dict[str, Instance] = {}
        failed: dict[str, str] = {}
        for node in request.nodes:
            if node not in self.settings.addresses:
                failed[node] = "NoSuchNode"
                continue
            info, container = known.get(node), compute_container(self.spec, self.settings, node)
            if info is not None and info.is_running and info.labels.get(TAG_TOKEN) == request.token:
                # a retried launch (EC2's ClientToken): no second machine
                launched[node] = self._instance(container, info.id or node, request, None)
                continue
            started = time.time()  # the machine's launch: the join share is measured from here
            try:
                # a machine of the node that is not this launch's (stale, released) goes first
                launched[node] = self._instance(container, self._launch(container, info, request), request, started)
            except ProvisionError as exc:
                log.warning("launch of %s failed: %s", node, exc)
                failed[node] = "NodeStartFailed"
        return LaunchResult(launched, failed)

    def _launch(self, container: NodeContainer, old: ContainerInfo | None, request: LaunchRequest) -> str:
        """A fresh container, started, labelled with the launch's token and link (whose
        capacity it is: a spot link's machine gets notices); its id. What is left of an
        earlier one is removed first; a new one that does not start is removed again."""
        if old is not None:
            self.api.remove(old.id or old.name)
        body = container.create_body()
        body["labels"] = {**body["labels"], TAG_TOKEN: request.token, TAG_LINK: request.capacity_pool}
        ident = self.api.create(body)
        try:
            self.api.start(ident)
        except ProvisionError:
            with contextlib.suppress(ProvisionError):
                self.api.remove(ident)
            raise
        return ident

    @staticmethod
    def _instance(container: NodeContainer, ident: str, request: LaunchRequest, started: float | None) -> Instance:
        return Instance(ident, container.name, request.pool, InstanceState.RUNNING, container.address, started,
                        tags={**container.all_labels(), TAG_LINK: request.capacity_pool})

    def interruptions(self) -> list[Interruption]:
        """A notice for each node named in the interrupt file whose machine runs on a spot link;
        a name without such a machine is dropped from the file (said once in the log)."""
        names = self._notices()
        if not names:
            return []
        machines = {i.node: i for i in self.list_instances() if i.state is InstanceState.RUNNING}
        notices, ignored = [], []
        for name in names:
            inst = machines.get(name)
            if inst is not None and inst.tags.get(TAG_LINK, inst.pool) in self.spot_links:
                notices.append(Interruption(instance=inst.id, noticed_at=time.time(), receipt=name))
            else:
                ignored.append(name)
        if ignored:
            log.warning("no spot machine to interrupt for %s: notice dropped", ", ".join(ignored))
            self._forget(ignored)
        return notices

    def acknowledge(self, interruptions: Sequence[Interruption]) -> None:
        self._forget([i.receipt for i in interruptions])

    def _notices(self) -> list[str]:
        if self.interrupt_file is None:
            return []
        try:
            return list(dict.fromkeys(self.interrupt_file.read_text().split()))
        except OSError:  # no file: no notice
            return []

    def _forget(self, names: Sequence[str]) -> None:
        """Take these names out of the interrupt file (rewritten whole, by rename)."""
        if self.interrupt_file is None:
            return
        left = [n for n in self._notices() if n not in set(names)]
        tmp = self.interrupt_file.with_name(self.interrupt_file.name + ".tmp")
        with contextlib.suppress(OSError):
            tmp.write_text("".join(f"{n}\n" for n in left))
            tmp.replace(self.interrupt_file)

    def terminate(self, instances: Sequence[Instance]) -> None:
        """Stop and remove the containers: nothing of the machine survives (what lives on the
        NAS does). One already gone is fine. The service's loop waits for this (a new machine
        of the node takes the same name), so a machine gets STOP_GRACE seconds to shut down
        - systemd stops slurmd and unmounts CephFS in about half a second - then is killed,
        as EC2 cuts a terminating instance's shutdown short."""
        for inst in instances:
            try:
                self.api.stop(inst.id, timeout=STOP_GRACE)
                self.api.remove(inst.id)
                self.terminated[inst.id] = (time.time(), dataclasses.replace(inst, state=InstanceState.TERMINATED))
            except ProvisionError as exc:
                log.warning("terminating %s (%s) failed: %s", inst.id[:12], inst.node or "-", exc)


def service_provider(spec: Cluster, settings: Mapping[str, Any]) -> Machines:
    """The scheduler service's provider, from its settings (contract.LocalProviderSettings:
    the node image, network, addresses and host paths `up` wrote, the API socket, the pools
    told to fail)."""
    if not isinstance(spec.target, LocalTarget):
        raise ProvisionError(f"the local provider needs target kind local, not {spec.target.kind}")
    local = read_settings(LocalProviderSettings, dict(settings))
    return PoolMachines(spec, PodmanApi(local.socket), local,
                        Path(local.fail_pools_file) if local.fail_pools_file else None,
                        Path(local.interrupt_file) if local.interrupt_file else None)
