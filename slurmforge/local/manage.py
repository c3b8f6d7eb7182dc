"""status / ssh / down for the local cluster, found through its generated inventory."""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from slurmforge.errors import HostError, ProvisionError
from slurmforge.hosts import Host, HostRole, controller_name
from slurmforge.inventory import read_inventory
from slurmforge.local.host import require_root
from slurmforge.local.image_cache import purge_images
from slurmforge.local.podman import Podman
from slurmforge.local.provider import LABEL, LocalProvider
from slurmforge.local.up import slurm_states
from slurmforge.service.snapshot import ClusterSnapshot
from slurmforge.spec import Cluster
from slurmforge.state_dirs import SECRETS_ROOT, default_inventory, inventories_root
from slurmforge.tables import Column, Table


def local_inventories() -> dict[str, Path]:
    found = {}
    for path in sorted(inventories_root().glob("*/cluster.yaml")):
        if "kind: local" in path.read_text():
            found[path.parent.name] = path.parent
    return found


def find_cluster(name: str | None) -> tuple[Cluster, list[Host]]:
    found = local_inventories()
    if name is None:
        if len(found) != 1:
            known = ", ".join(found) or "none"
            raise ProvisionError(f"{len(found)} local clusters ({known}): pass --cluster NAME"
                                 if found else "no local cluster here: run `slurmforge up --local` first")
        name = next(iter(found))
    if name not in found:
        raise ProvisionError(f"no local cluster '{name}' (known: {', '.join(found) or 'none'})")
    return read_inventory(found[name])


STATUS_COLUMNS = (Column("node", "Node"), Column("role", "Role", drop=2), Column("pool", "Pool"),
                  Column("address", "Address", drop=1), Column("container", "Container"),
                  Column("slurm", "Slurm"))


def status_table(name: str | None) -> Table:
    require_root()
    spec, hosts = find_cluster(name)
    podman = Podman()
    running = {c.name: c.is_running for c in podman.containers(f"{LABEL}={spec.name}")}
    states = slurm_states(podman, spec) if running.get(controller_name(spec)) else {}
    return node_table(spec.name, hosts, running, states)


def node_table(cluster: str, hosts: list[Host], running: dict[str, bool], states: dict[str, str]) -> Table:
    """`slurmforge status`: every host with its role, pool, address, container (running,
    stopped; none for a powered-down dynamic node, missing for a fixed one) and Slurm
    state (sinfo's: idle, idle~ when powered down, ...; '?' when slurmctld does not say)."""
    table = Table(f"cluster {cluster} (local)", STATUS_COLUMNS)
    for host in hosts:
        container = "running" if running.get(host.name) else ("stopped" if host.name in running else
                                                              "none" if host.dynamic else "missing")
        slurm = states.get(host.name, None if host.role is not HostRole.COMPUTE else "?")
        table.rows.append((host.name, host.role.value, host.pool, host.address, container, slurm))
    return table


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


def down(name: str | None, purge: bool) -> str:
    require_root()
    spec, hosts = find_cluster(name)
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
