"""Accounting, users and groups: what slurmdbd, sacctmgr and useradd will be asked to do."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

from slurmforge.contract import SERVICE_GID, SERVICE_UID
from slurmforge.errors import Problem
from slurmforge.package_data import data
from slurmforge.spec.checks.registry import check, hardwares, is_aws, parent_cycles
from slurmforge.spec.models import Cluster
from slurmforge.spec.slurmtime import parse_slurm_time
from slurmforge.spec.sshkeys import key_problem

# Ids of 1000 and up the node image and the rollout already give (tests/slurm/
# test_reserved_names.py reads the image's /etc/passwd and /etc/group): a spec user's uid
# and private group's gid, and a spec group's gid, must be none of them.
IMAGE_IDS = {65534: "nobody/nogroup", 64030: "the image's slurm account", 64045: "the image's ceph account",
             **dict.fromkeys({SERVICE_UID, SERVICE_GID}, "the scheduler service's account")}
# Taken on AWS by the default user ('admin') cloud-init creates on Debian's AWS images.
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


# The accounts mariadb-install-db makes in a new data directory (MariaDB 11.8, Debian 13's):
# root@localhost and mysql@localhost (unix_socket), and mariadb.sys@localhost, the definer of
# mysql.user's view. MariaDB's own port, where the controller's MariaDB listens.
MARIADB_OWN_USERS = frozenset({"root", "mysql", "mariadb.sys"})
MARIADB_PORT = 3306


@check
def local_database_as_mariadb_runs(spec: Cluster) -> Iterator[Problem]:
    """A local accounting database (MariaDB on the controller) keeps MariaDB's port and
    does not take one of MariaDB's own accounts: slurmdbd.conf says StorageHost=localhost,
    and the MariaDB client reaches localhost through the server's socket, ignoring the port
    (MariaDB's mysql_real_connect), while the server listens on 3306: another port would be
    written and never used. The rollout makes the user with the accounting database's
    privileges only (community.mysql.mysql_user replaces a user's privileges), so root,
    mysql or mariadb.sys would lose what MariaDB needs them for."""
    db = spec.accounting.database
    if not spec.accounting.enabled or db.kind != "local":
        return
    if db.port != MARIADB_PORT:
        yield Problem("accounting.database.port", "a local database is the controller's MariaDB, which listens on "
                      f"{MARIADB_PORT}, and slurmdbd reaches it through its socket (StorageHost=localhost): the port "
                      "would never be used", "remove port, or set kind: external with the database's host", db.port)
    if db.user in MARIADB_OWN_USERS:
        yield Problem("accounting.database.user", "one of MariaDB's own accounts (mariadb-install-db makes root, "
                      "mysql and mariadb.sys): the rollout would leave it the accounting database's privileges only",
                      "use an account of its own, e.g. slurm", db.user)


@cache
def mariadb_reserved_words() -> frozenset[str]:
    """MariaDB's reserved words, lowercase (slurmforge/data/mariadb_reserved_words.txt)."""
    text = data("mariadb_reserved_words.txt").read_text()
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


# The databases MariaDB keeps for itself (and RDS, which adds none a name can take).
MARIADB_OWN_DATABASES = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


@check
def database_name_not_reserved(spec: Cluster) -> Iterator[Problem]:
    """The accounting database's name is neither a MariaDB reserved word (select, order,
    ...) nor one of MariaDB's own databases (mysql, sys, ...): slurmdbd creates its database
    with `create database <name>`, unquoted, and uses it as its own; RDS refuses reserved
    words as DBName (Amazon RDS API Reference, CreateDBInstance: "Can't be a word reserved
    by the specified database engine")."""
    name = spec.accounting.database.name
    if not spec.accounting.enabled:
        return
    if name.lower() in MARIADB_OWN_DATABASES:
        yield Problem("accounting.database.name", "one of MariaDB's own databases",
                      "use a database of its own, e.g. slurm_acct_db", name)
    elif name.lower() in mariadb_reserved_words():
        yield Problem("accounting.database.name", "a word MariaDB reserves: slurmdbd could not create the database",
                      f"use e.g. {name.lower()}_db or slurm_acct_db", name)


@check
def account_parents(spec: Cluster) -> Iterator[Problem]:
    """An account's parent exists and is not itself (root, Slurm's top account, is where an
    account without a parent sits: the models read `parent: root` as no parent); names
    compare as Slurm compares them, ignoring case (sacctmgr stores account names in
    lowercase: slurm_addto_char_list, slurm_protocol_defs.c)."""
    names = {a.name.lower() for a in spec.accounting.accounts}
    for i, a in enumerate(spec.accounting.accounts):
        if a.parent and (a.parent.lower() not in names or a.parent.lower() == a.name.lower()):
            yield Problem(f"accounting.accounts[{i}].parent", "parent is not another defined account",
                          "name an account defined above, or drop parent", a.parent)


@check
def account_parents_acyclic(spec: Cluster) -> Iterator[Problem]:
    """Account parents form a tree: no account is its own ancestor (names ignoring case, as
    Slurm keeps them)."""
    accounts = spec.accounting.accounts
    index = {a.name.lower(): i for i, a in enumerate(accounts)}
    for cycle in parent_cycles({a.name.lower(): a.parent.lower() if a.parent else None for a in accounts}):
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
    """Users' accounts exist; default_account is one of them; accounts need accounting.
    Account names compare ignoring case: Slurm stores them in lowercase and matches a user's
    association to its account so (assoc_mgr.c)."""
    names = {a.name.lower() for a in spec.accounting.accounts}
    for i, u in enumerate(spec.users):
        for j, a in enumerate(u.accounts):
            if a.lower() not in names:
                yield Problem(f"users[{i}].accounts[{j}]", "undefined account",
                              "add it under accounting.accounts", a)
        if u.default_account and u.default_account.lower() not in {a.lower() for a in u.accounts}:
            yield Problem(f"users[{i}].default_account", "not one of the user's accounts",
                          "add it to accounts, or pick one of them", u.default_account)
        if u.accounts and not spec.accounting.enabled:
            yield Problem(f"users[{i}].accounts", "accounts need accounting", "set accounting.enabled: true",
                          show_value=False)


@check
def uid_gid_ranges(spec: Cluster) -> Iterator[Problem]:
    """uids and gids do not collide with each other (users get a private group with
    gid = uid), nor with ids the node image or the rollout give (nobody 65534, slurm, ceph,
    the scheduler service's account) or, on AWS, the image's default user (1000)."""
    gids = {g.gid: g.name for g in spec.groups}
    taken = IMAGE_IDS | ({CLOUD_USER_ID: "the image's default user 'admin'"} if is_aws(spec) else {})
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
    authorized_keys (a line break would add a second key), each one sshd would take: its
    base64 whole, the type inside it the one on the line, RSA of 1024 to 16384 bits,
    Ed25519 of 32 bytes, ECDSA on the curve it names (OpenSSH's sshkey.c; slurmforge/spec/
    sshkeys.py cites each rule)."""
    prefixes = ("ssh-ed25519 ", "ssh-rsa ", "ecdsa-sha2-", "sk-ssh-ed25519@", "sk-ecdsa-")
    for i, u in enumerate(spec.users):
        for j, k in enumerate(u.ssh_keys):
            path = f"users[{i}].ssh_keys[{j}]"
            if "PRIVATE KEY" in k:
                yield Problem(path, "this is a private key: remove it from the spec now",
                              "paste the .pub file's line instead (and replace the key if this file was shared)",
                              show_value=False)
            elif not k.startswith(prefixes):
                yield Problem(path, "not an OpenSSH public key", "paste the .pub file's line (ssh-ed25519 AAAA...)",
                              show_value=False)
            elif not k.strip().isprintable():
                yield Problem(path, "more than one line (or control characters)",
                              "one key per list item, each the .pub file's one line", show_value=False)
            elif (why := key_problem(k)) is not None:
                yield Problem(path, f"sshd would refuse this key: {why}", "paste the whole line of the .pub file "
                              "(ssh-keygen -t ed25519 makes a new one)", _key_start(k))


def _key_start(key: str) -> str:
    """What a key problem shows of the key: its type and the blob's start (enough to find it)."""
    label, _, rest = key.partition(" ")
    return f"{label} {rest[:16]}..." if len(rest) > 16 else key


@check
def accounts_need_accounting(spec: Cluster) -> Iterator[Problem]:
    """Accounts live in the accounting database: without accounting nothing makes them."""
    if spec.accounting.accounts and not spec.accounting.enabled:
        yield Problem("accounting.accounts", "accounts need accounting", "set accounting.enabled: true, or remove "
                      "accounts", show_value=False)


def _limited(spec: Cluster) -> list[str]:
    """The paths of every QoS limit and budget in the spec."""
    paths = []
    for i, q in enumerate(spec.scheduling.qos):
        paths += [f"scheduling.qos[{i}].{key}" for key in ("max_wall", "max_gpus_per_user")
                  if getattr(q, key) is not None]
    paths += [f"accounting.accounts[{i}].budget" for i, a in enumerate(spec.accounting.accounts) if a.budget]
    return paths


@check
def limits_are_enforced(spec: Cluster) -> Iterator[Problem]:
    """QoS limits and budgets need accounting.enforce to hold limits (or safe, which implies
    it): without it slurmctld keeps them in the database and ignores them."""
    enforce = set(spec.accounting.enforce)
    if not spec.accounting.enabled or enforce & {"limits", "safe"}:
        return
    for path in _limited(spec):
        yield Problem(path, "a limit Slurm would not enforce: accounting.enforce has neither limits nor safe",
                      "add limits (or safe) to accounting.enforce", show_value=False)


@check
def gpu_limits_need_gpus(spec: Cluster) -> Iterator[Problem]:
    """A GPU limit (QoS max_gpus_per_user, budget gpu_hours) needs a pool with GPUs: Slurm
    counts GPUs only when some node has them (AccountingStorageTRES=gres/gpu)."""
    if any(hw is not None and hw.gpus for hw in hardwares(spec)):
        return
    for i, q in enumerate(spec.scheduling.qos):
        if q.max_gpus_per_user is not None:
            yield Problem(f"scheduling.qos[{i}].max_gpus_per_user", "no pool has GPUs: the limit would limit "
                          "nothing", "remove max_gpus_per_user, or add a GPU pool", q.max_gpus_per_user)
    for i, a in enumerate(spec.accounting.accounts):
        if a.budget is not None and a.budget.gpu_hours is not None:
            yield Problem(f"accounting.accounts[{i}].budget.gpu_hours", "no pool has GPUs: the budget would limit "
                          "nothing", "remove gpu_hours, or add a GPU pool", a.budget.gpu_hours)


@check
def budgets_count_usage(spec: Cluster) -> Iterator[Problem]:
    """Budgets count an account's usage since the period began: Slurm records usage only
    with multifactor priority, and decays it unless decay_half_life is 0 (spent hours
    would come back before the period ends)."""
    budgets = [i for i, a in enumerate(spec.accounting.accounts) if a.budget is not None]
    if not budgets:
        return
    prio = spec.scheduling.priority
    if prio.type != "multifactor":
        yield Problem("scheduling.priority.type", "budgets need multifactor priority (basic records no usage)",
                      "set scheduling.priority.type: multifactor", prio.type)
    elif parse_slurm_time(prio.decay_half_life) != 0:
        yield Problem("scheduling.priority.decay_half_life", f"accounts have budgets, but Slurm halves recorded "
                      f"usage every {prio.decay_half_life}: spent hours would come back",
                      f'set decay_half_life: "0" (usage then resets every {spec.accounting.budget_period}, '
                      "and fair share counts usage since the period began)", prio.decay_half_life)
