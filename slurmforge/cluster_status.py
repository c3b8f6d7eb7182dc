"""`status` and `pools` on a cluster known by its inventory (AWS, machines you own): read on
its controller, reached as every command reaches a node (slurmforge.remote.node: ssh with
the inventory's connection vars, podman exec for a local one). The local cluster's own
(slurmforge.local.manage) also knows which containers run."""

from __future__ import annotations

from pathlib import Path

from slurmforge.errors import ClusterUnreachable
from slurmforge.fleet import controller
from slurmforge.image_record import Reader, read_records
from slurmforge.inventory import read_inventory
from slurmforge.local.up import SINFO_NODES, node_states
from slurmforge.remote.node import executor_for
from slurmforge.service.snapshot import ClusterSnapshot
from slurmforge.tables import Table

FETCH = ("import sys, urllib.request; "
         "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())")
"""Run on the controller (its Python 3.13, the node image's): the service's page is not
reachable from outside a VPC, so the fetch happens where it is."""


def inventory_status(inventory: Path, reader: Reader | None = None) -> Table:
    """Every host of the inventory with its role, pool, address, Slurm state (sinfo on the
    controller), node image and Slurm version (its RECORD, read on every host that has a
    machine - all at once; a powered-down dynamic node has none); the machine column is the
    local target's alone."""
    from slurmforge.local.manage import node_table, read_record

    spec, hosts = read_inventory(inventory)
    head = controller(spec, hosts)
    done = executor_for(head).run(list(SINFO_NODES), timeout=20)
    if not done.ok:
        raise ClusterUnreachable(f"sinfo on {head.name} failed: {done.reason()}; fix: is slurmctld running "
                                 f"there? (`systemctl status slurmctld` on {head.name})")
    states = node_states(done.stdout)
    up = [h for h in hosts if not (h.dynamic and states.get(h.name, "").endswith("~"))]  # sinfo(1): ~ powered off
    table = node_table(spec.name, hosts, None, done.stdout, read_records(up, reader or read_record))
    table.title = f"cluster {spec.name} ({spec.target.kind}, inventory {inventory})"
    return table


def inventory_pools(inventory: Path, port: int) -> ClusterSnapshot:
    """The scheduler service's /pools.json, fetched on the controller."""
    spec, hosts = read_inventory(inventory)
    head = controller(spec, hosts)
    url = f"http://{head.address}:{port}/pools.json"
    done = executor_for(head).run(["python3", "-c", FETCH, url], timeout=30)
    if not done.ok:
        raise ClusterUnreachable(f"the scheduler service on {head.name} did not answer at {url}: {done.reason()}; "
                                 f"fix: `systemctl status slurmforge-service` on {head.name}")
    try:
        return ClusterSnapshot.from_json(done.stdout)
    except (ValueError, KeyError, TypeError) as exc:
        raise ClusterUnreachable(f"{url} on {head.name} did not return a pool snapshot: {exc}") from None
