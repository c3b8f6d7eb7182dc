"""Shared storage: mount points, the NAS kind per target, Ceph's replicas, the module tree."""

from __future__ import annotations

from collections.abc import Iterator

from slurmforge.catalog import lookup
from slurmforge.errors import Problem
from slurmforge.spec.checks.registry import check, is_aws
from slurmforge.spec.models import Cluster, LocalTarget

SYSTEM_DIRS = frozenset(
    {"/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/var", "/boot", "/proc", "/sys", "/dev", "/run",
     "/tmp", "/root", "/opt"}
)


def _mounts(spec: Cluster) -> list[tuple[str, str]]:
    nas = spec.storage.nas.mounts
    mounts = [("storage.nas.mounts.home", nas.home), ("storage.nas.mounts.software", nas.software),
              ("storage.nas.mounts.slurm_state", nas.slurm_state)]
    if spec.storage.ceph:
        mounts.append(("storage.ceph.mount", spec.storage.ceph.mount))
    if spec.storage.scratch:
        mounts.append(("storage.scratch.path", spec.storage.scratch.path))
    return mounts


def _under(path: str, root: str) -> bool:
    """Is path root itself or inside it?"""
    return (path.rstrip("/") + "/").startswith(root.rstrip("/") + "/")


@check
def mounts_do_not_overlap(spec: Cluster) -> Iterator[Problem]:
    """No mount point equals or sits inside another."""
    mounts = _mounts(spec)
    for a, (path_a, dir_a) in enumerate(mounts):
        for path_b, dir_b in mounts[a + 1:]:
            if _under(dir_a, dir_b) or _under(dir_b, dir_a):
                yield Problem(path_a, f"overlaps {path_b} ({dir_b})", "give every mount its own directory", dir_a)


@check
def mounts_not_system_dirs(spec: Cluster) -> Iterator[Problem]:
    """Mount points are not system directories (/, /etc, /usr, /opt, ...): a mount there hides
    what the image installed."""
    for path, d in _mounts(spec):
        if (d.rstrip("/") or "/") in SYSTEM_DIRS:
            yield Problem(path, "a system directory cannot be a shared mount", "use a directory of its own, "
                          "e.g. /shared/<name>", d)


@check
def nas_kind_fields(spec: Cluster) -> Iterator[Problem]:
    """nfs needs server and export; efs is only for aws; bind only for local."""
    nas = spec.storage.nas
    if nas.kind == "nfs" and (not nas.server or not nas.export):
        yield Problem("storage.nas", "kind nfs needs server and export", "set server: and export:", show_value=False)
    if nas.kind == "efs" and not is_aws(spec):
        yield Problem("storage.nas.kind", f"efs only exists on aws (target is {spec.target.kind})",
                      "use kind: bind (local) or nfs", "efs")
    if nas.kind == "bind" and not isinstance(spec.target, LocalTarget):
        yield Problem("storage.nas.kind", f"a bind mount cannot share storage between machines (target is "
                      f"{spec.target.kind})", "use kind: efs (aws) or nfs", "bind")
    if nas.kind != "nfs" and (nas.server or nas.export):
        yield Problem("storage.nas", "server/export only apply to kind nfs", "remove them", show_value=False)


@check
def ceph_replication(spec: Cluster) -> Iterator[Problem]:
    """Ceph has at least as many OSDs, on as many hosts, as its replication."""
    ceph = spec.storage.ceph
    if ceph is None:
        return
    if ceph.osd_count < ceph.replication:
        yield Problem("storage.ceph.hosts", f"{ceph.osd_count} OSD(s) cannot hold {ceph.replication} replicas",
                      f"add OSDs (hosts x osds_per_host >= {ceph.replication}) or lower replication",
                      show_value=False)
    elif ceph.hosts < ceph.replication and not isinstance(spec.target, LocalTarget):
        yield Problem("storage.ceph.hosts", f"{ceph.hosts} host(s) for {ceph.replication} replicas: one host "
                      "failure loses data", f"use at least {ceph.replication} hosts", ceph.hosts)
    if ceph.replication == 1:
        yield Problem("storage.ceph.replication", "1 replica loses data when a node fails",
                      "use replication: 2 or 3", 1)
    if lookup(ceph.instance_type) is None and is_aws(spec):
        yield Problem("storage.ceph.instance_type", "unknown instance type", "use e.g. m6i.xlarge",
                      ceph.instance_type)


# The local target's Ceph: every host a container, every OSD a BlueStore file on this
# machine's disk, every OSD daemon sharing its memory.
LOCAL_CEPH_MAX_HOSTS = 3
LOCAL_CEPH_MAX_OSDS = 6
LOCAL_CEPH_MAX_OSD_GB = 64


@check
def ceph_local_size(spec: Cluster) -> Iterator[Problem]:
    """On the local target Ceph stays small: at most 3 hosts (containers), 6 OSDs, 64 GB
    per OSD (a file on this machine's disk)."""
    ceph = spec.storage.ceph
    if ceph is None or not isinstance(spec.target, LocalTarget):
        return
    if ceph.hosts > LOCAL_CEPH_MAX_HOSTS:
        yield Problem("storage.ceph.hosts", "every local Ceph host is a container on this machine",
                      f"use at most {LOCAL_CEPH_MAX_HOSTS} hosts (more OSDs per host instead)", ceph.hosts)
    if ceph.osd_count > LOCAL_CEPH_MAX_OSDS:
        yield Problem("storage.ceph.osds_per_host", f"{ceph.osd_count} OSD daemons on one machine",
                      f"keep hosts x osds_per_host at {LOCAL_CEPH_MAX_OSDS} or fewer", ceph.osds_per_host)
    if ceph.osd_size_gb > LOCAL_CEPH_MAX_OSD_GB:
        yield Problem("storage.ceph.osd_size_gb", "a local OSD is a file on this machine's disk",
                      f"use at most {LOCAL_CEPH_MAX_OSD_GB} (4 is plenty to try Ceph)", ceph.osd_size_gb)


@check
def modules_on_software_mount(spec: Cluster) -> Iterator[Problem]:
    """The LMOD tree lives on the shared software mount, so every node sees it."""
    soft = spec.storage.nas.mounts.software.rstrip("/")
    if not _under(spec.modules.root, soft):
        yield Problem("modules.root", f"not under the shared software mount {soft}",
                      f"use {soft}/modules", spec.modules.root)
