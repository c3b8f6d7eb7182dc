"""status / ssh / down for the local cluster, found through its generated inventory."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from slurmforge.errors import HostError, ProvisionError
from slurmforge.hosts import Host, HostRole, controller_name
from slurmforge.image import RECORD
from slurmforge.image_record import UNREAD, Reader, image_cell, read_records, record_field
from slurmforge.inventory import read_inventory
from slurmforge.local.host import require_root
from slurmforge.local.image_cache import purge_images
from slurmforge.local.podman import Podman
from slurmforge.local.provider import LABEL, LocalProvider
from slurmforge.local.up import node_states, node_versions, sinfo_nodes
from slurmforge.remote.node import MISSING, READ_SCRIPT, executor_for
from slurmforge.service.snapshot import ClusterSnapshot
from slurmforge.spec import Cluster
from slurmforge.state_dirs import SECRETS_ROOT, default_inventory
from slurmforge.tables import Column, Table
from slurmforge.target import Target


def find_cluster(name: str | None) -> tuple[Cluster, list[Host]]:
    """The local cluster of that name (None: the only one), from its inventory."""
    return read_inventory(Target(True, name).inventory_dir())


READ_TIMEOUT = 5.0
"""One host's RECORD read, at most: a `podman exec` answers in a fraction of a second, an ssh
connection in one or two; a host that does not answer in this is shown as unread."""


def read_record(host: Host, timeout: float = READ_TIMEOUT) -> str | None:
    """The host's RECORD as every command reaches it (slurmforge.remote.node: podman exec,
    ssh), the whole exchange bounded by `timeout`: the process is killed past it."""
    argv = executor_for(host).command(["sh", "-c", READ_SCRIPT, "sh", RECORD], None, timeout)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if done.returncode == 0:
        return done.stdout
    return "" if done.returncode == MISSING else None


STATUS_COLUMNS = (Column("node", "Node"), Column("role", "Role", drop=2), Column("pool", "Pool"),
                  Column("address", "Address", drop=1), Column("container", "Container"),
                  Column("slurm", "Slurm"), Column("image", "Image", drop=1), Column("version", "Version", drop=3),
                  Column("slurmd", "Slurmd", scope="data"))


def status_table(name: str | None, reader: Reader = read_record) -> Table:
    require_root()
    spec, hosts = find_cluster(name)
    podman = Podman()
    running = {c.name: c.is_running for c in podman.containers(f"{LABEL}={spec.name}")}
    sinfo = sinfo_nodes(podman, spec) if running.get(controller_name(spec)) else ""
    # a stopped container has a machine whose RECORD podman exec cannot read: unread
    records = {**{h.name: None for h in hosts if h.name in running},
               **read_records([h for h in hosts if running.get(h.name)], reader)}
    return node_table(spec.name, hosts, running, sinfo, records)


def node_table(cluster: str, hosts: list[Host], running: dict[str, bool] | None, sinfo: str,
               records: dict[str, str | None]) -> Table:
    """`slurmforge status`: every host with its role, pool, address, container (running,
    stopped; none for a powered-down dynamic node, missing for a fixed one), Slurm state
    (sinfo's: idle, idle~ when powered down, ...; '?' when slurmctld does not say), node
    image (its RECORD's inputs digest, short) and Slurm version (its slurmd's as it
    registered, else its image's). running None: no containers (a cluster of machines: the
    column stays empty). `records`: the RECORD of every host that has a machine (None:
    unread, '?'); a host without one (not in it) shows '-' for its image and version."""
    table = Table(f"cluster {cluster} (local)", STATUS_COLUMNS, meta={"cluster": cluster})
    states, versions = node_states(sinfo), node_versions(sinfo)
    for host in hosts:
        container = None if running is None else _container_state(host, running)
        slurm = states.get(host.name, None if host.role is not HostRole.COMPUTE else "?")
        image = version = None
        if host.name in records:
            text = records[host.name]
            image = image_cell(text)
            version = record_field(text, "slurm") or versions.get(host.name) or UNREAD
        table.rows.append((host.name, host.role.value, host.pool, host.address, container, slurm, image, version,
                           versions.get(host.name)))
    return table


def _container_state(host: Host, running: dict[str, bool]) -> str:
    if running.get(host.name):
        return "running"
    return "stopped" if host.name in running else "none" if host.dynamic else "missing"


def shell(name: str | None, node: str, user: str | None) -> None:
    require_root()
    spec, hosts = find_cluster(name)
    aliases = {"login": next((h.name for h in hosts if h.role is HostRole.LOGIN), ""),
               "controller": controller_name(spec)}
    target = aliases.get(node, node)
    if target not in {h.name for h in hosts}:
        raise ProvisionError(f"no node '{node}' in cluster {spec.name}")
    if user is not None and user not in {u.name for u in spec.users}:
        raise ProvisionError(f"no user '{user}' in cluster {spec.name} (users: "
                             f"{', '.join(u.name for u in spec.users) or 'none'})")
    argv = ["podman", "exec", "-it"]
    if user:
        argv += ["-u", user, "-w", f"{spec.storage.nas.mounts.home.rstrip('/')}/{user}"]
    argv += [target, "bash", "-l"]
    if shutil.which("podman") is None:
        raise HostError("podman is not installed")
    os.execvp("podman", argv)


def down_plan(name: str | None, purge: bool) -> tuple[Cluster, list[Host], list[str]]:
    """The cluster `down` removes and what it says it will remove, each directory --purge
    deletes with its size (the NAS holds the users' home directories)."""
    require_root()
    spec, hosts = find_cluster(name)
    lines = [f"down: remove the {len(hosts)} nodes and the network of local cluster {spec.name} "
             "(running jobs are lost)"]
    if purge:
        provider = LocalProvider(spec, image="", podman=Podman())
        root = SECRETS_ROOT / spec.name
        parts = [(provider.nas_dir, "the NAS: home directories, software, Slurm state"),
                 (root / "mariadb", "the accounting database"), (root / "ceph", "Ceph's data"),
                 (root / "secrets", "the secrets (munge key, database password, JWT key)"),
                 (default_inventory(spec.name), "the inventory")]
        for path, what in parts:
            if path.exists():
                kept = "" if path.is_relative_to(root) or path == default_inventory(spec.name) else \
                    " - kept: target.shared_dir is outside slurmforge's state"
                lines.append(f"  delete {what}: {path} ({human_size(tree_size(path))}){kept}")
        lines.append("  delete the cached node images no other cluster uses")
    return spec, hosts, lines


def down(spec: Cluster, hosts: list[Host], purge: bool) -> str:
    provider = LocalProvider(spec, image="", podman=Podman())
    provider.delete()
    what = f"{len(hosts)} nodes and network of cluster {spec.name}"
    if purge:
        shutil.rmtree(SECRETS_ROOT / spec.name, ignore_errors=True)
        shutil.rmtree(default_inventory(spec.name), ignore_errors=True)
        removed = purge_images(Podman())
        what += (f", its NAS data, secrets, inventory and {len(removed)} cached image(s) no other cluster uses"
                 if removed else ", its NAS data, secrets and inventory (every cached image is in use)")
    return what


def tree_size(path: Path) -> int:
    """Bytes under path (files as stored, symbolic links not followed)."""
    total = 0
    for top, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                continue
    return total


def human_size(size: int) -> str:
    """1,536 -> '1.5 KiB' (binary units, as du -h)."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def pools_snapshot(name: str | None, port: int | None = None, timeout: float = 10) -> ClusterSnapshot:
    """The scheduler service's /pools.json, fetched from the controller's address."""
    from slurmforge.service.main import DEFAULT_PORT

    _, hosts = find_cluster(name)
    controller = next(h for h in hosts if h.role is HostRole.CONTROLLER)
    url = f"http://{controller.address}:{port or DEFAULT_PORT}/pools.json"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as res:
            text = res.read().decode()
    except urllib.error.HTTPError as exc:
        raise ProvisionError(f"the scheduler service on {controller.name} answered HTTP {exc.code} at {url}: "
                             f"{exc.read().decode(errors='replace').strip()[:200]}") from None
    except (OSError, ValueError) as exc:
        raise ProvisionError(f"cannot reach the scheduler service at {url} ({exc}); is {controller.name} "
                             f"running? `systemctl status slurmforge-service` there tells more") from None
    try:
        return ClusterSnapshot.from_json(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise ProvisionError(f"{url} did not return a pool snapshot: {exc}") from None
