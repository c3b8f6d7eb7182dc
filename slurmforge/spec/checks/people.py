"""Accounting, users and groups: what slurmdbd, sacctmgr and useradd will be asked to do."""

from __future__ import annotations

from collections.abc import Iterator

from slurmforge.errors import Problem
from slurmforge.spec.checks.registry import check, cycles, is_aws
from slurmforge.spec.models import Cluster

# uid/gid 65534 is nobody/nogroup on Debian; 1000 is taken by the default user ('admin')
# cloud-init creates on Debian's AWS images.
NOBODY_ID = 65534
CLOUD_USER_ID = 1000


@check
def external_db_needs_host(spec: Cluster) -> Iterator[Problem]:
    """An external database names its host; a local one does not."""
    db = spec.accounting.database
    if db.kind == "external" and not db.host:
        yield Problem("accounting.database.host", "external database without a host",
                      "set host (e.g. the RDS endpoint)", show_value=False)
    if db.kind == "local" and db.host:
        yield Problem("accounting.database.host", "host is only for kind: external", "remove host", db.host)


@check
def account_parents(spec: Cluster) -> Iterator[Problem]:
    """An account's parent exists and is not itself."""
    names = {a.name for a in spec.accounting.accounts}
    for i, a in enumerate(spec.accounting.accounts):
        if a.parent and (a.parent not in names or a.parent == a.name):
            yield Problem(f"accounting.accounts[{i}].parent", "parent is not another defined account",
                          "name an account defined above, or drop parent", a.parent)


@check
def account_parents_acyclic(spec: Cluster) -> Iterator[Problem]:
    """Account parents form a tree: no account is its own ancestor."""
    accounts = spec.accounting.accounts
    index = {a.name: i for i, a in enumerate(accounts)}
    for cycle in cycles({a.name: [a.parent] if a.parent else [] for a in accounts}):
        yield Problem(f"accounting.accounts[{index[cycle[0]]}].parent", f"parent cycle {' -> '.join(cycle)}",
                      "let one of them have no parent (it then sits under root)", show_value=False)


@check
def user_groups_defined(spec: Cluster) -> Iterator[Problem]:
    """Users belong only to defined groups."""
    groups = {g.name for g in spec.groups}
    for i, u in enumerate(spec.users):
        for j, g in enumerate(u.groups):
            if g not in groups:
                yield Problem(f"users[{i}].groups[{j}]", "undefined group", "add it under groups:", g)


@check
def user_accounts_defined(spec: Cluster) -> Iterator[Problem]:
    """Users' accounts exist; default_account is one of them; accounts need accounting."""
    names = {a.name for a in spec.accounting.accounts}
    for i, u in enumerate(spec.users):
        for j, a in enumerate(u.accounts):
            if a not in names:
                yield Problem(f"users[{i}].accounts[{j}]", "undefined account",
                              "add it under accounting.accounts", a)
        if u.default_account and u.default_account not in u.accounts:
            yield Problem(f"users[{i}].default_account", "not one of the user's accounts",
                          "add it to accounts, or pick one of them", u.default_account)
        if u.accounts and not spec.accounting.enabled:
            yield Problem(f"users[{i}].accounts", "accounts need accounting", "set accounting.enabled: true",
                          show_value=False)


@check
def uid_gid_ranges(spec: Cluster) -> Iterator[Problem]:
    """uids and gids do not collide with each other (users get a private group with
    gid = uid), nor with nobody (65534) or, on AWS, the image's default user (1000)."""
    gids = {g.gid: g.name for g in spec.groups}
    taken = {NOBODY_ID: "nobody/nogroup"} | ({CLOUD_USER_ID: "the image's default user 'admin'"}
                                               if is_aws(spec) else {})
    for i, u in enumerate(spec.users):
        if u.uid in gids:
            yield Problem(f"users[{i}].uid", f"equals the gid of group '{gids[u.uid]}' (users get a private "
                          "group with gid = uid)", "pick uids and gids from separate ranges", u.uid)
        if u.uid in taken:
            yield Problem(f"users[{i}].uid", f"taken by {taken[u.uid]}", "pick another uid (e.g. from 2000 up)", u.uid)
    for i, g in enumerate(spec.groups):
        if g.gid in taken:
            yield Problem(f"groups[{i}].gid", f"taken by {taken[g.gid]}", "pick another gid (e.g. from 2000 up)", g.gid)


@check
def ssh_keys_look_like_keys(spec: Cluster) -> Iterator[Problem]:
    """SSH keys are public keys in OpenSSH format (never a private key), one per line of
    authorized_keys (a line break would add a second key)."""
    prefixes = ("ssh-ed25519 ", "ssh-rsa ", "ecdsa-sha2-", "sk-ssh-ed25519@", "sk-ecdsa-")
    for i, u in enumerate(spec.users):
        for j, k in enumerate(u.ssh_keys):
            if "PRIVATE KEY" in k:
                yield Problem(f"users[{i}].ssh_keys[{j}]", "this is a private key: remove it from the spec now",
                              "paste the .pub file's line instead (and replace the key if this file was shared)",
                              show_value=False)
            elif not k.startswith(prefixes):
                yield Problem(f"users[{i}].ssh_keys[{j}]", "not an OpenSSH public key",
                              "paste the .pub file's line (ssh-ed25519 AAAA...)", show_value=False)
            elif not k.strip().isprintable():
                yield Problem(f"users[{i}].ssh_keys[{j}]", "more than one line (or control characters)",
                              "one key per list item, each the .pub file's one line", show_value=False)
