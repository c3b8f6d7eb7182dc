"""Shared storage: mount points, the NAS kind per target, Ceph's replicas, the module tree."""

from __future__ import annotations

from collections.abc import Iterator

from slurmforge.errors import Problem
from slurmforge.instance_types import lookup
from slurmforge.spec.checks.registry import check, is_aws
from slurmforge.spec.models import Cluster, LocalTarget

# Directories every node keeps for itself. A shared mount may not be one of them, nor
# above one (it would hide it: /var hides /var/log and /var/spool/slurmd), nor inside one:
# configuration and packages (/etc, /usr, /boot, /opt itself), kernel and boot-time
# filesystems (/proc, /sys, /dev, /run), per-node scratch and logs (/tmp, /var/tmp,
# /var/log, /var/cache), package and service state (dpkg, apt, systemd, munge's key,
# MariaDB's and Ceph's data), slurmd's spool and root's home.
PER_NODE_DIRS = (
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/proc", "/sys", "/dev",
    "/run", "/tmp", "/var/tmp", "/var/log", "/var/cache", "/var/lib/dpkg", "/var/lib/apt", "/var/lib/systemd",
    "/var/lib/munge", "/var/lib/mysql", "/var/lib/ceph", "/var/spool/slurmd", "/root", "/lost+found",
)
# Directories a mount may sit inside, but not replace: the image installs into them.
IMAGE_DIRS = ("/opt", "/srv", "/usr/local")


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
    """Is path root itself or inside it? (Both normalised: the models do that.)"""
    return root == "/" or path == root or path.startswith(root + "/")


@check
def mounts_do_not_overlap(spec: Cluster) -> Iterator[Problem]:
    """No mount point equals or sits inside another (one line per mount, naming the first
    one it overlaps)."""
    mounts = _mounts(spec)
    for b, (path_b, dir_b) in enumerate(mounts):
        for path_a, dir_a in mounts[:b]:
            if _under(dir_a, dir_b) or _under(dir_b, dir_a):
                yield Problem(path_b, f"overlaps {path_a} ({dir_a})", "give every mount its own directory", dir_b)
                break


def _system_dir(path: str) -> str | None:
    """The per-node directory a shared mount at `path` would hide or sit in, if any."""
    for d in PER_NODE_DIRS:
        if _under(path, d) or _under(d, path):
            return d
    return path if path in IMAGE_DIRS else None


@check
def mounts_not_system_dirs(spec: Cluster) -> Iterator[Problem]:
    """Shared mounts never hide or sit inside a directory every node needs for itself
    (/, /etc, /usr, /var, /var/log, /var/spool/slurmd, /tmp, /run, /proc, ...), nor replace
    one the image installs into (/opt, /srv, /usr/local)."""
    for path, d in _mounts(spec):
        system = _system_dir(d)
        if system == d:
            yield Problem(path, "a system directory cannot be a shared mount", "use a directory of its own, "
                          "e.g. /shared/<name>", d)
        elif system is not None:
            where = "inside" if _under(d, system) else "above"
            yield Problem(path, f"{where} {system}, which every node keeps for itself",
                          "use a directory of its own, e.g. /shared/<name>", d)


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
    """Ceph has at least as many OSDs, on as many hosts, as its replication; on AWS its hosts
    are a known type built on Nitro (a Xen type's EBS volumes have no NVMe link to find the
    OSDs by)."""
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
    known = lookup(ceph.instance_type) if is_aws(spec) else None  # the catalog, only where it is read
    if known is None and is_aws(spec):
        yield Problem("storage.ceph.instance_type", "unknown instance type", "use e.g. m6i.xlarge",
                      ceph.instance_type)
    elif known is not None and not known.nitro and is_aws(spec):
        # the ceph role finds each OSD volume by its NVMe link (roles/ceph/defaults/main.yml)
        yield Problem("storage.ceph.instance_type", "a Xen instance type: its EBS volumes are not NVMe devices, so "
                      "the OSD volumes have no nvme-Amazon_Elastic_Block_Store_<volume> link to be found by",
                      "use a Nitro type, e.g. m6i.xlarge", ceph.instance_type)


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
    soft = spec.storage.nas.mounts.software
    if not _under(spec.modules.root, soft):
        yield Problem("modules.root", f"not under the shared software mount {soft}",
                      f"use {soft}/modules", spec.modules.root)
