"""Names: unique where they must be, and never one Slurm, DNS or Debian already uses."""

from __future__ import annotations

import re
from collections.abc import Iterator

from slurmforge.contract import SERVICE_USER, SLURMRESTD_USER
from slurmforge.errors import Problem
from slurmforge.spec.checks.registry import check, dupes, head_names, node_prefixes
from slurmforge.spec.models import ROOT_ACCOUNT, Cluster, StaticTarget
from slurmforge.spec.nodes import index_width, node_index

# Slurm's limit on a node name (hostnames longer than this break DNS as well).
MAX_NODE_NAME = 63
HOST_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9-]*")

# Users and groups the node image (Debian 13 and the daemons slurmforge installs) already
# has, and the scheduler service's account the rollout makes: useradd/groupadd fail on them
# (tests/slurm/test_reserved_names.py reads the image's /etc/passwd and /etc/group). 'admin'
# is the default user of Debian's cloud images; slurmrestd's account is made by the rollout too.
SYSTEM_NAMES = frozenset({
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy", "www-data",
    "backup", "list", "irc", "_apt", "nobody", "nogroup", "adm", "tty", "disk", "kmem", "dialout", "fax", "voice",
    "cdrom", "floppy", "tape", "sudo", "audio", "dip", "operator", "src", "shadow", "utmp", "video", "sasl",
    "plugdev", "staff", "users", "input", "sgx", "kvm", "render", "netdev", "systemd-journal", "systemd-network",
    "systemd-timesync", "messagebus", "sshd", "_ssh", "polkitd", "admin", "slurm", "munge", "mysql", "ceph",
    "prometheus", "uuidd", "rdma", "clock", "statd", "_rpc", SERVICE_USER, SLURMRESTD_USER,
})
# Slurm's own QoS: slurmdbd makes it and gives it to every association; the rollout never
# changes it (a spec QoS of this name would be applied once and never reverted).
SLURM_QOS = "normal"
# The word Slurm reads as "everyone" in AllowAccounts= and AllowGroups= (read_config.c).
SLURM_ALL = "all"


@check
def unique_pool_names(spec: Cluster) -> Iterator[Problem]:
    """Pool names are unique."""
    names = dupes([p.name for p in spec.pools])
    for i, p in enumerate(spec.pools):
        if p.name in names:
            yield Problem(f"pools[{i}].name", "duplicate pool name", "give every pool its own name", p.name)


@check
def unique_partition_names(spec: Cluster) -> Iterator[Problem]:
    """Partition names are unique."""
    names = dupes([p.name for p in spec.partitions])
    for i, p in enumerate(spec.partitions):
        if p.name in names:
            yield Problem(f"partitions[{i}].name", "duplicate partition name", "rename one of them", p.name)


@check
def unique_node_prefixes(spec: Cluster) -> Iterator[Problem]:
    """Two pools never produce the same node names."""
    same_name = dupes([p.name for p in spec.pools])
    seen: dict[str, str] = {}
    for i, (p, prefix) in enumerate(zip(spec.pools, node_prefixes(spec), strict=True)):
        if prefix in seen and not (p.name in same_name and p.node_prefix is None):  # reported as a duplicate name
            yield Problem(f"pools[{i}].node_prefix", f"pool '{p.name}' uses the same node prefix as pool "
                          f"'{seen[prefix]}'", "set a distinct node_prefix", prefix)
        seen.setdefault(prefix, p.name)


@check
def node_names_slurm_can_take(spec: Cluster) -> Iterator[Problem]:
    """Node names (`<node_prefix>-<index>`) are lowercase hostnames: a letter first, then
    letters, digits and '-', at most 63 characters."""
    label = HOST_LABEL.fullmatch
    for i, (p, prefix) in enumerate(zip(spec.pools, node_prefixes(spec), strict=True)):
        if not label(prefix):
            yield Problem(f"pools[{i}].node_prefix", "node names must start with a letter and hold only letters, "
                          "digits and '-'", "use a prefix such as 'gpu-a100'", prefix)
        elif not prefix.islower():
            yield Problem(f"pools[{i}].node_prefix", "node names must be lowercase (hostnames)",
                          "use a lowercase prefix", prefix)
        # the longest index is at most 6 digits (index_width, max_nodes <= 65,536)
        if len(prefix) + 7 > MAX_NODE_NAME:
            length = len(prefix) + 1 + max(index_width(p), len(str(p.max_nodes)))
            if length > MAX_NODE_NAME:
                yield Problem(f"pools[{i}].node_prefix", f"node names would be {length} characters, more than "
                              f"{MAX_NODE_NAME}", "shorten the prefix", prefix)


@check
def reserved_host_names(spec: Cluster) -> Iterator[Problem]:
    """Host names are one namespace: no pool's node (or node prefix) has the name of a
    controller, login, database or Ceph host slurmforge names, compared as DNS does
    (ignoring case). (A static target's own machines: static_target_hosts.)"""
    if isinstance(spec.target, StaticTarget):
        return  # machines you own: static_target_hosts names the machine used twice
    pools = {prefix.lower(): (i, p) for i, (p, prefix) in enumerate(zip(spec.pools, node_prefixes(spec), strict=True))}
    reported: set[int] = set()
    for name, what in sorted(head_names(spec).items()):
        low = name.lower()
        prefix = low.rpartition("-")[0]
        for key in (low, prefix):
            i, p = pools.get(key, (-1, None))
            if p is None or i in reported:
                continue
            if key == low or node_index(low, key, index_width(p), p.max_nodes) is not None:
                reported.add(i)
                yield Problem(f"pools[{i}].node_prefix", f"collides with {what} name {name}",
                              "choose another prefix", spec.node_prefix(p))


@check
def unique_group_names_and_gids(spec: Cluster) -> Iterator[Problem]:
    """Group names and gids are unique."""
    names, gids = dupes([g.name for g in spec.groups]), dupes([g.gid for g in spec.groups])
    for i, g in enumerate(spec.groups if names or gids else []):
        if g.name in names:
            yield Problem(f"groups[{i}].name", "duplicate group name", "define each group once", g.name)
        if g.gid in gids:
            yield Problem(f"groups[{i}].gid", "duplicate gid", "give every group its own gid", g.gid)


@check
def unique_user_names_and_uids(spec: Cluster) -> Iterator[Problem]:
    """User names and uids are unique."""
    names, uids = dupes([u.name for u in spec.users]), dupes([u.uid for u in spec.users])
    for i, u in enumerate(spec.users if names or uids else []):
        if u.name in names:
            yield Problem(f"users[{i}].name", "duplicate user name", "define each user once", u.name)
        if u.uid in uids:
            yield Problem(f"users[{i}].uid", "duplicate uid", "give every user its own uid", u.uid)


@check
def user_name_not_group_name(spec: Cluster) -> Iterator[Problem]:
    """A user's name is not also a group name (each user gets a private group)."""
    groups = {g.name for g in spec.groups}
    for i, u in enumerate(spec.users):
        if u.name in groups:
            yield Problem(f"users[{i}].name", "a group has the same name as this user",
                          "rename the group; every user gets a private group of its own name", u.name)


@check
def unique_account_names(spec: Cluster) -> Iterator[Problem]:
    """Account names are unique, whatever their case (Slurm keeps them in lowercase)."""
    names = dupes([a.name.lower() for a in spec.accounting.accounts])
    for i, a in enumerate(spec.accounting.accounts):
        if a.name.lower() in names:
            yield Problem(f"accounting.accounts[{i}].name", "duplicate account", "define each account once", a.name)


@check
def unique_qos_names(spec: Cluster) -> Iterator[Problem]:
    """QoS names are unique, whatever their case (Slurm keeps them in lowercase)."""
    names = dupes([q.name.lower() for q in spec.scheduling.qos])
    for i, q in enumerate(spec.scheduling.qos):
        if q.name.lower() in names:
            yield Problem(f"scheduling.qos[{i}].name", "duplicate QoS", "define each QoS once", q.name)


@check
def reserved_posix_names(spec: Cluster) -> Iterator[Problem]:
    """Users and groups are not ones the OS image already has (root, users, admin, slurm, ...)."""
    named = [("users", [u.name for u in spec.users]), ("groups", [g.name for g in spec.groups])]
    for kind, names in named:
        for i, name in enumerate(names):
            if name in SYSTEM_NAMES:
                yield Problem(f"{kind}[{i}].name", "already exists on every node (a system account)",
                              "pick another name", name)


@check
def slurm_reserved_names(spec: Cluster) -> Iterator[Problem]:
    """No object Slurm owns is redefined: no partition is called DEFAULT (Slurm reads it as
    defaults for the others), no account root (Slurm's top account; `parent: root` is the
    same as no parent), no QoS normal (slurmdbd's own, every association's), and no
    allow_accounts or allow_groups is ALL alone, in any case (Slurm 24.11's read_config.c
    compares the whole AllowAccounts= and AllowGroups= with ALL, ignoring case, and reads it
    as everyone; in a list of several, all is the name of an account or group)."""
    for i, part in enumerate(spec.partitions):
        if part.name.lower() == "default":
            yield Problem(f"partitions[{i}].name", "Slurm reads PartitionName=DEFAULT as defaults for the other "
                          "partitions", "pick another name; mark the default partition with default: true", part.name)
        for key in ("allow_accounts", "allow_groups"):
            names = getattr(part, key)
            for j, name in enumerate(names if len(names) == 1 else []):
                if name.lower() == SLURM_ALL:
                    yield Problem(f"partitions[{i}].{key}[{j}]", f"Slurm reads {key.title().replace('_', '')}=ALL "
                                  "as everyone", f"rename the {key.split('_')[1][:-1]}, or drop {key} to allow "
                                  "everyone", name)
    for i, a in enumerate(spec.accounting.accounts):
        if a.name.lower() == ROOT_ACCOUNT:
            yield Problem(f"accounting.accounts[{i}].name", "root is Slurm's own top account",
                          "pick another name (accounts without parent already sit under root)", a.name)
    for i, q in enumerate(spec.scheduling.qos):
        if q.name.lower() == SLURM_QOS:
            yield Problem(f"scheduling.qos[{i}].name", "normal is Slurm's own QoS (every association has it; the "
                          "rollout never changes it, so nothing set here would be undone)",
                          "give this QoS a name of its own and name it where it applies (partitions' qos)", q.name)
