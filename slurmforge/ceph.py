"""Ceph's layout, computed once from the spec and the provisioned hosts: which hosts run
monitors, managers and MDS daemons, which OSD ids live where, the CRUSH failure domain,
and ceph.conf (rendered through the one template environment, like the Slurm configs).

Manual deployment (no cephadm): the roles read this layout from the inventory and the
keys from the secrets directory (slurmforge/secrets.py).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

import jinja2

from slurmforge.hosts import Host, HostRole
from slurmforge.spec.models import Ceph, Cluster, LocalTarget
from slurmforge.templating import make_environment

CEPH_CONF = "ceph.conf"
MAX_MONITORS = 3
MON_V2_PORT, MON_V1_PORT = 3300, 6789
# Local OSDs share one small machine: BlueStore's floor for its memory target (its
# default is 4 GiB per OSD). Real hosts keep Ceph's default.
LOCAL_OSD_MEMORY_TARGET = 896 * 2**20
# CRUSH bucket types by ordinal (osd_crush_chooseleaf_type)
FAILURE_DOMAINS = {"osd": 0, "host": 1}


@dataclass(frozen=True)
class OsdSlot:
    """One OSD: its id (stable: host index x osds_per_host + slot) and a UUID derived
    from the cluster, host and slot (so `ceph osd new` is idempotent)."""

    id: int
    uuid: str
    slot: int
    """Index on its host: which of the host's volumes (AWS) it uses."""


def ceph_hosts(hosts: list[Host]) -> list[Host]:
    return [h for h in hosts if h.role is HostRole.CEPH]


def monitor_count(n_hosts: int) -> int:
    """An odd number of monitors, at most three: 1 host -> 1, 2 -> 1, 3+ -> 3."""
    n = min(MAX_MONITORS, n_hosts)
    return n if n % 2 else n - 1


def monitors(hosts: list[Host]) -> list[Host]:
    storage = ceph_hosts(hosts)
    return storage[:monitor_count(len(storage))]


def mds_hosts(hosts: list[Host]) -> list[Host]:
    """An active MDS and, when there is a second host, a standby."""
    return ceph_hosts(hosts)[:2]


def failure_domain(spec: Cluster) -> str:
    """'host' when there are enough hosts for the replicas; 'osd' only where the checks
    allow fewer hosts than replicas (the local target)."""
    ceph = _ceph(spec)
    return "host" if ceph.hosts >= ceph.replication else "osd"


def min_size(ceph: Ceph) -> int:
    """Writes continue while this many replicas are up: one less than size (size 2 -> 1,
    size 3 -> 2), so losing one OSD never blocks I/O. min_size 1 means a write acked
    while only one copy exists; see docs/ceph.md for the trade-off."""
    return max(1, ceph.replication - 1)


def osd_slots(spec: Cluster, hosts: list[Host]) -> dict[str, list[OsdSlot]]:
    """host name -> its OSDs."""
    ceph = _ceph(spec)
    out = {}
    for index, host in enumerate(ceph_hosts(hosts)):
        out[host.name] = [OsdSlot(id=index * ceph.osds_per_host + j, uuid=_osd_uuid(spec.name, host.name, j), slot=j)
                          for j in range(ceph.osds_per_host)]
    return out


def _osd_uuid(cluster: str, host: str, slot: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"slurmforge:{cluster}:{host}:osd{slot}"))


def client_name(ceph: Ceph) -> str:
    """The CephFS client every Slurm node mounts as (caps limited to the file system)."""
    return f"{ceph.fs_name}-fs"


def client_caps(ceph: Ceph) -> dict[str, str]:
    """What `ceph fs authorize <fs> client.<name> / rw` grants (Pacific)."""
    fs = ceph.fs_name
    return {"mds": f"allow rw fsname={fs}", "mon": f"allow r fsname={fs}", "osd": f"allow rw tag cephfs data={fs}"}


def mon_addrs(host: Host) -> str:
    return f"[v2:{host.address}:{MON_V2_PORT},v1:{host.address}:{MON_V1_PORT}]"


def ceph_vars(spec: Cluster, hosts: list[Host]) -> dict[str, Any] | None:
    """What the ceph and storage_client roles read (group_vars, no secrets)."""
    if spec.storage.ceph is None:
        return None
    ceph = spec.storage.ceph
    return {
        "fs_name": ceph.fs_name,
        "mount": ceph.mount,
        "replication": ceph.replication,
        "min_size": min_size(ceph),
        "failure_domain": failure_domain(spec),
        "osd_size_gb": ceph.osd_size_gb,
        "client": client_name(ceph),
        "client_caps": client_caps(ceph),
        "monitors": [h.name for h in monitors(hosts)],
        "mon_addresses": [h.address for h in monitors(hosts)],
        "monmap_args": [arg for m in monitors(hosts) for arg in ("--addv", m.name, mon_addrs(m))],
        "mds": [h.name for h in mds_hosts(hosts)],
        "osds": {name: [{"id": s.id, "uuid": s.uuid, "slot": s.slot} for s in slots]
                 for name, slots in osd_slots(spec, hosts).items()},
        "osd_count": ceph.osd_count,
    }


@cache
def environment() -> jinja2.Environment:
    return make_environment()


def render_ceph_conf(spec: Cluster, hosts: list[Host], fsid: str, source: str = "cluster.yaml") -> str:
    """/etc/ceph/ceph.conf, the same on Ceph hosts and clients (no keys in it)."""
    ceph = _ceph(spec)
    mons = monitors(hosts)
    if not mons:
        raise ValueError("storage.ceph is set but the inventory has no Ceph hosts")
    local = isinstance(spec.target, LocalTarget)
    return environment().get_template("ceph.conf.j2").render(
        source=source, fsid=fsid, mons=mons, mon_addrs=[mon_addrs(m) for m in mons],
        size=ceph.replication, min_size=min_size(ceph), chooseleaf=FAILURE_DOMAINS[failure_domain(spec)],
        osd_memory_target=LOCAL_OSD_MEMORY_TARGET if local else None,
        block_size=ceph.osd_size_gb * 2**30 if local else None, local=local)


def _ceph(spec: Cluster) -> Ceph:
    if spec.storage.ceph is None:
        raise ValueError("the spec has no storage.ceph")
    return spec.storage.ceph
