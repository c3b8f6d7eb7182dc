"""The node kit: what changes without a new join program, published on the NAS under the
software mount every node has. The rollout publishes the spec's users and groups, every fixed
host's address (`kit_files`), the CephFS client's ceph.conf and (root only) keyring; the
scheduler service keeps the pool hosts there (`pool_hosts_file`), and a node whose slurmd
stopped on an error leaves its reason (`slurmd_failures_dir`). KIT_FILES lists every one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurmforge.contract import KIT_POOL_HOSTS, KIT_SLURMD_FAILURES, KIT_SUBDIR
from slurmforge.hosts import Host
from slurmforge.spec import Cluster


@dataclass(frozen=True)
class KitFile:
    path: str
    """Under the kit; <client> and <node> stand for the CephFS client's and a node's name."""
    writer: str
    readers: str


ACCOUNTS = "accounts"
HOSTS = "hosts"
KIT_FILES: tuple[KitFile, ...] = (
    KitFile(ACCOUNTS, "the rollout (kit_files, roles/storage_client)", "the join's kit step"),
    KitFile(HOSTS, "the rollout (kit_files, roles/storage_client)",
            "the join's hosts step, Slurm's Prolog, the 30 s timer"),
    KitFile("ceph.conf", "the rollout (roles/storage_client, with storage.ceph)", "the join's cephfs step"),
    KitFile("private/ceph.client.<client>.keyring", "the rollout (roles/storage_client; root only)",
            "the join's cephfs step"),
    KitFile(KIT_POOL_HOSTS, "the scheduler service (service.pool_hosts)",
            "the join's hosts step, Slurm's Prolog, the 30 s timer"),
    KitFile(f"{KIT_SLURMD_FAILURES}/<node>", "a node whose slurmd stopped on an error (slurmd's ExecStopPost)",
            "the scheduler service (service.slurmd_failures)"),
)
"""Every file of the node kit: who writes it, who reads it."""


def kit_dir(spec: Cluster) -> str:
    """The node kit on the NAS (under the software mount every node has)."""
    return f"{spec.storage.nas.mounts.software.rstrip('/')}/{KIT_SUBDIR}"


def pool_hosts_file(spec: Cluster) -> str:
    """The kit's pool hosts: every pool node's address while the scheduler service has a
    machine for it (service.pool_hosts writes it, the join program's hosts step reads it)."""
    return f"{kit_dir(spec)}/{KIT_POOL_HOSTS}"


def slurmd_failures_dir(spec: Cluster) -> str:
    """The kit's slurmd failures: a node whose slurmd stopped on an error writes its reason
    there (the join program), the scheduler service reads it (service.slurmd_failures)."""
    return f"{kit_dir(spec)}/{KIT_SLURMD_FAILURES}"


def kit_files(spec: Cluster, hosts: Sequence[Host]) -> Mapping[str, str]:
    """The kit's files the rollout renders (accounts, hosts), by name; roles/storage_client
    publishes them, with ceph.conf and the keyring (KIT_FILES)."""
    accounts = ["# slurmforge node kit: groups and users of the spec (the join program applies them)"]
    accounts += [f"group {g.name} {g.gid}" for g in spec.groups]
    for u in spec.users:
        groups = [*u.groups, *(["sudo"] if u.admin else [])]
        accounts.append(f"user {u.name} {u.uid} {','.join(groups)}".rstrip())
    # fixed hosts only: a pool node's address is known once its machine is (the pool hosts)
    host_lines = [f"{h.address} {h.name}" for h in sorted(hosts, key=lambda h: h.name) if h.address and not h.dynamic]
    return {ACCOUNTS: "\n".join(accounts) + "\n", HOSTS: "\n".join(host_lines) + "\n"}
