"""The node kit: what changes without a new join program, published on the NAS under the
software mount every node has. The rollout publishes the spec's users and groups, every fixed
host's address (`kit_files`), the CephFS client's ceph.conf and (root only) keyring; the
scheduler service keeps the pool hosts there (`pool_hosts_file`), and a node whose slurmd
stopped on an error leaves its reason (`slurmd_failures_dir`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurmforge.contract import KIT_POOL_HOSTS, KIT_SLURMD_FAILURES, KIT_SUBDIR
from slurmforge.hosts import Host
from slurmforge.spec import Cluster


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
    """The node kit's public files (accounts, hosts), by name; the rollout adds ceph.conf and
    the keyring."""
    accounts = ["# slurmforge node kit: groups and users of the spec (the join program applies them)"]
    accounts += [f"group {g.name} {g.gid}" for g in spec.groups]
    for u in spec.users:
        groups = [*u.groups, *(["sudo"] if u.admin else [])]
        accounts.append(f"user {u.name} {u.uid} {','.join(groups)}".rstrip())
    # fixed hosts only: a pool node's address is known once its machine is (the pool hosts)
    host_lines = [f"{h.address} {h.name}" for h in sorted(hosts, key=lambda h: h.name) if h.address and not h.dynamic]
    return {"accounts": "\n".join(accounts) + "\n", "hosts": "\n".join(host_lines) + "\n"}
