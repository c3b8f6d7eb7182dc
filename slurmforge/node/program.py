"""The join program: what a machine booted from the node image runs to become a Slurm node
of the cluster (templates/node/join.sh.j2), rendered once per cluster through the one template
environment, and the node kit it reads from the NAS.

One program on every target, only its inputs differ (`JoinSettings`):

- AWS: the launch template's user data (cloud-init runs it); the node's name is the
  instance's `slurmforge:node` tag, the munge key comes from Secrets Manager, the NAS is
  mounted over NFS/EFS.
- local: a pool container runs it at boot (slurmforge-join.service in the node image,
  the program bind-mounted read-only); the name is the container's host name, the munge key
  the host's 0600 file mounted read-only, the NAS the provider's bind mounts.
- machines you own (and every compute node during a rollout): roles/slurm_node copies it
  and runs it with the node's name, the munge key copied by the munge role.

What changes without a new program lives in the node kit on the NAS, which every rollout
publishes (slurmforge.node.kit): the users and groups as the spec has them now, every fixed host's
address, the CephFS client's ceph.conf and (root only) keyring. Beside them the scheduler
service keeps the pool hosts (`pool_hosts_file`): the address of every pool node it has a
machine for, which the program's hosts step adds to /etc/hosts at the join, in Slurm's
Prolog before each job and every 30 s. A user added to the spec
and rolled out exists on a node that boots afterwards, though no Ansible runs there: a
published kit, rather than a directory service, because the cluster has no LDAP to keep
alive and a kit is one more file on storage every node mounts already.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

import jinja2

from slurmforge.ceph import client_name
from slurmforge.contract import (
    GPU_STAND_INS_FILE,
    HEALTH_DRAINED_MARK,
    HEALTH_PROGRAM,
    HOLD_FILE,
    HOSTS_REFRESH,
    JOIN_LOCK,
    JOIN_PROGRAM,
    JOIN_SECRETS_DIR,
    JOIN_STEPS_FILE,
    JOIN_UNIT,
    JOINED_MARK,
    NFS_OPTIONS,
    NODE_EXPORTER_PORT,
    NVIDIA_DEVICES_UNIT,
    cluster_cache_dir,
)
from slurmforge.hosts import TAG_NODE, Host
from slurmforge.node.kit import kit_dir, pool_hosts_file, slurmd_failures_dir
from slurmforge.node.steps import STEPS
from slurmforge.render import HEALTH_CHECK_INTERVAL
from slurmforge.spec import Cluster
from slurmforge.spec.nodes import pool_hardware
from slurmforge.templating import make_environment

TEMPLATE = "node/join.sh.j2"
NODE_TAG_WAIT = 300
"""Seconds a new instance waits for its node tag (the service tags it just after launch);
Slurm's ResumeTimeout then marks the node down and the service retries elsewhere."""


Target = Literal["local", "aws", "static"]


@dataclass(frozen=True)
class JoinSettings:
    """What differs between targets; all plain strings (on AWS, resolved stack outputs)."""

    target: Target
    controllers: tuple[tuple[str, str], ...]
    """(name, address) of every slurmctld host, primary first."""
    identity: Literal["hostname", "aws-tag"] = "hostname"
    """hostname: the machine's host name, or the program's argument; aws-tag: the
    instance's slurmforge:node tag (IMDSv2)."""
    secrets: Literal["files", "aws"] = "files"
    """files: JOIN_SECRETS_DIR on the node (the provider's read-only mount, or the rollout's
    copy); aws: Secrets Manager with the instance role (python3-boto3 from the image)."""
    region: str | None = None
    munge_key_arn: str | None = None
    nas_source: str | None = None
    """The NFS/EFS root ("server:/export", "fs-1.efs...:"); None when the provider mounts
    the NAS itself (local bind mounts)."""
    slurmd_flags: tuple[str, ...] = field(default_factory=tuple)
    """Extra slurmd options (local: -b, see local_settings)."""
    stand_in_gpus: tuple[tuple[str, int], ...] = ()
    """(node name prefix, GPUs) of every pool with GPUs, local target only: no GPU there, so
    the gpus step makes /dev/nvidia0..N-1 as character devices with NVIDIA's major (195),
    which gres.conf names and the device cgroup allows or denies per job. Elsewhere a real
    driver makes them (the gpu image variant's unit, which the step starts)."""


@cache
def environment() -> jinja2.Environment:
    return make_environment(quote=shlex.quote)


def stand_in_gpus(spec: Cluster) -> tuple[tuple[str, int], ...]:
    """(node name prefix, GPUs) of every pool with GPUs: the local target's stand-in devices."""
    found = []
    for pool in spec.pools:
        hw = pool_hardware(pool)
        if hw is not None and hw.gpus and hw.gres_name == "gpu":
            found.append((spec.node_prefix(pool), hw.gpus))
    return tuple(found)


def nas_mounts(spec: Cluster) -> list[tuple[str, str]]:
    """(directory on the NAS, mount point) a node mounts: the mount's name in the spec is its
    directory. Not Slurm's state: it is the controllers' only (job scripts, credentials)."""
    return [(name, path) for name, path in spec.storage.nas.mounts.model_dump().items() if name != "slurm_state"]


def nas_source(spec: Cluster, efs_dns: str | None = None) -> str | None:
    """The NAS root the join program mounts from: "server:/export" (nfs), "<EFS DNS>:" (efs,
    once the stack knows its DNS name); None when the provider mounts it (bind)."""
    nas = spec.storage.nas
    if nas.kind == "efs":
        return f"{efs_dns}:" if efs_dns else None
    if nas.kind == "nfs" and nas.server and nas.export:
        return f"{nas.server}:{nas.export.rstrip('/')}"
    return None


def lmod_paths(spec: Cluster) -> dict[str, str]:
    """Where Lmod looks on every node (the join program, roles/lmod on the head nodes): the
    shared module tree and its spider cache, which `slurmforge modules` refreshes."""
    root = spec.modules.root.rstrip("/")
    return {"modulepath": f"{root}/modulefiles", "cache_dir": cluster_cache_dir(root)}


def render_join(spec: Cluster, settings: JoinSettings, source: str = "cluster.yaml") -> str:
    if settings.secrets == "aws" and not (settings.region and settings.munge_key_arn):
        raise ValueError("JoinSettings: secrets 'aws' needs region and munge_key_arn")
    ceph = spec.storage.ceph
    context = {
        "cluster": spec.name,
        "source": source,
        "settings": settings,
        "identity_help": ("the instance's slurmforge:node tag" if settings.identity == "aws-tag"
                          else "this machine's host name"),
        "conf_server": ",".join(name for name, _ in settings.controllers),
        "nfs_options": NFS_OPTIONS,
        "nas_mounts": nas_mounts(spec),
        "nas_directories": list(spec.storage.nas.mounts.model_dump()),
        "kit": kit_dir(spec),
        "pool_hosts": pool_hosts_file(spec),
        "scratch": spec.storage.scratch.path if spec.storage.scratch else None,
        "secrets_dir": JOIN_SECRETS_DIR,
        "hold_file": HOLD_FILE,
        "join_program": JOIN_PROGRAM,
        "health_program": HEALTH_PROGRAM,
        "health_name": HEALTH_PROGRAM.rsplit("/", 1)[-1],
        "health_interval": HEALTH_CHECK_INTERVAL,
        "joined_mark": JOINED_MARK,
        "health_drained_mark": HEALTH_DRAINED_MARK,
        "join_unit": JOIN_UNIT,
        "join_lock": JOIN_LOCK,
        "join_steps_file": JOIN_STEPS_FILE,
        "hosts_refresh": HOSTS_REFRESH,
        "steps": STEPS,  # the one table (slurmforge.node.steps): the parts, their order, the header
        "slurmd_failures": slurmd_failures_dir(spec),
        "gpu_stand_ins_file": GPU_STAND_INS_FILE,
        "nvidia_devices_unit": NVIDIA_DEVICES_UNIT,
        "slurmd_flags": "".join(f"{flag} " for flag in settings.slurmd_flags),
        "exporter_port": NODE_EXPORTER_PORT,
        "lmod": lmod_paths(spec) | {"cached_loads": True},
        "ceph": None if ceph is None else {"mount": ceph.mount, "client": client_name(ceph), "fs_name": ceph.fs_name,
                                           # no Ceph in a container's kernel: ceph-fuse
                                           "fuse": settings.target == "local"},
        "node_tag": TAG_NODE,
        "tag_wait": NODE_TAG_WAIT,
    }
    return environment().get_template(TEMPLATE).render(**context)


def local_settings(spec: Cluster, hosts: Sequence[Host], efs_dns: str | None = None) -> JoinSettings:
    """The hosts the rollout reaches (every head node; the compute nodes of the local target
    and of machines you own): names and addresses from the inventory's hosts, the munge key
    from the rollout's copy. `efs_dns`: an AWS stack's EFS (its head nodes mount it)."""
    from slurmforge.hosts import controller_names

    address = {h.name: h.address for h in hosts}
    controllers = tuple((name, address[name]) for name in controller_names(spec))
    kind = spec.target.kind
    # -b on the local target: a container reports the host's uptime (or, in its own time
    # namespace, one rounded to whole seconds), and slurmctld ignores the registration of a
    # POWERING_UP node whose boot time is older than the resume request - a node up within a
    # second or two of it stayed POWERING_UP until ResumeTimeout. -b: boot time = slurmd start.
    target: Target = "local" if kind == "local" else "aws" if kind == "aws" else "static"
    return JoinSettings(target=target, controllers=controllers, nas_source=nas_source(spec, efs_dns),
                        slurmd_flags=("-b",) if kind == "local" else (),
                        stand_in_gpus=stand_in_gpus(spec) if kind == "local" else ())
