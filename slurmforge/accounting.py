#!/usr/bin/python3
"""Accounting that converges: the Slurm database's QoS, accounts, users and their limits made
equal to the spec, and each change reported.

Two halves, one file:

- `desired_state(spec)` runs where the inventory is written: the spec, as the plain JSON
  the rollout ships to the controller (`accounting.json` next to the rendered configs).
- Everything else is the standard library only: the rollout copies this file to the
  controller and runs it with the system's python3 (the scheduler service's venv gets the
  package only in the rollout's last play; accounting runs before the controller's).
  It reads what slurmdbd has (`sacctmgr -n -P show ...`), plans the changes, refuses to
  remove what active jobs use (`squeue`), applies the rest with `sacctmgr -i` and prints
  one JSON document: what changed, what was kept and why, what had to wait.

Order: QoS before the accounts and users that name them, parents before children, users
after their accounts; removals after every addition, children before parents. Slurm
keeps account, QoS and user names, descriptions and organizations in lowercase: so does
the desired state.

Two passes per rollout (roles/slurmdbd/tasks/accounts.yml): `--phase before` runs before
slurmctld loads the new slurm.conf (a partition whose QoS slurmdbd does not know is fatal
to slurmctld) and leaves for later what cannot happen yet: limits on a TRES slurmdbd
learns only when slurmctld registers it (gres/gpu on a new cluster), removing a QoS the
running slurmctld's partitions may still name, removals while slurmctld does not answer
(it says which accounts have jobs). `--phase after` (after the controller play, only when
something waited) does the rest and fails rather than wait again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurmforge.spec.models import Cluster

ROOT = "root"
NORMAL_QOS = "normal"
"""Slurm's own QoS: every association may use it; never removed."""
QOS_FLAGS = ("DenyOnLimit",)
"""Every spec QoS refuses at submission a job that could never run within its limits
(one line from sbatch: "QOSMaxWallDurationPerJobLimit") instead of leaving it pending
forever; a job that must only wait (the user's other jobs hold the GPUs) still pends."""
GPU_TRES = {"gpu": "gres/gpu", "neuron": "gres/neuron"}
"""The accelerator TRES a GPU limit counts, by the gres name nodes.py gives the pool."""
BUDGET_TRES = {"gpu_hours": None, "cpu_hours": "cpu", "billing_hours": "billing"}
"""Budget keys and the TRES their GrpTRESMins limit counts (gpu_hours: every GPU TRES)."""
FINAL_JOB_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                              "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"})
DBD_WAIT_SECONDS = 30.0
"""How long the first read waits for a slurmdbd that has just started."""
COMMAND_TIMEOUT = 120

# sacctmgr -n -P: one record a line, fields joined by '|', no trailing '|'. Free text
# (descriptions, organizations) may hold '|': it is always the last field asked for.
QOS_FORMAT = "name,priority,preempt,flags,maxwall,maxtrespu,description"
ASSOC_FORMAT = "cluster,account,user,parentname,share,grptresmins,qos"


class AccountingError(Exception):
    """sacctmgr or squeue failed in a way the plan cannot go around."""


# --------------------------------------------------------------------------- desired state


def desired_state(spec: Cluster) -> dict[str, Any]:
    """The spec's accounting as plain data, in Slurm's own spelling (lowercase names,
    minutes): what the rollout ships to the controller."""
    from slurmforge.spec.nodes import pool_hardware
    from slurmforge.spec.slurmtime import parse_slurm_time

    gpu_tres = sorted({GPU_TRES[hw.gres_name] for hw in (pool_hardware(p) for p in spec.pools)
                       if hw and hw.gpus and hw.gres_name in GPU_TRES})
    qos = []
    for q in spec.scheduling.qos:
        wall = parse_slurm_time(q.max_wall) if q.max_wall is not None else None
        qos.append({
            "name": q.name.lower(),
            "description": (q.description or q.name).lower(),
            "priority": q.priority,
            "preempt": sorted(p.lower() for p in q.preempt),
            "flags": list(QOS_FLAGS),
            # Slurm keeps MaxWall in whole minutes
            "max_wall_minutes": None if wall is None or wall == float("inf") else -(-int(wall) // 60),
            "max_tres_per_user": {} if q.max_gpus_per_user is None else
            dict.fromkeys(gpu_tres, q.max_gpus_per_user),
        })
    accounts = []
    for a in _parents_first(spec.accounting.accounts):
        limits: dict[str, int] = {}
        if a.budget is not None:
            for key, tres in BUDGET_TRES.items():
                hours = getattr(a.budget, key)
                if hours is not None:
                    limits |= dict.fromkeys(gpu_tres if tres is None else [tres], round(hours * 60))
        accounts.append({
            "name": a.name.lower(),
            "parent": (a.parent or ROOT).lower(),
            "description": (a.description or a.name).lower(),
            "organization": (a.organization or "none").lower(),
            "fairshare": a.fairshare,
            "grp_tres_mins": dict(sorted(limits.items())),
        })
    users = [{"name": u.name, "accounts": sorted({a.lower() for a in u.accounts}),
              "default_account": u.default_account.lower() if u.default_account else None}
             for u in spec.users if u.accounts]
    return {"cluster": spec.name, "qos": qos, "qos_access": sorted({NORMAL_QOS} | {q["name"] for q in qos}),
            "accounts": accounts, "users": users}


def _parents_first(accounts: Sequence[Any]) -> list[Any]:
    """Accounts with every parent before its children (the spec's order otherwise); a
    parent named in another case is the same account (Slurm keeps names in lowercase)."""
    by_name = {a.name.lower(): a for a in accounts}
    done: set[str] = set()
    ordered: list[Any] = []
    for account in accounts:
        chain = []
        while account is not None and account.name.lower() not in done:
            chain.append(account)
            done.add(account.name.lower())
            account = by_name.get(account.parent.lower()) if account.parent else None
        ordered.extend(reversed(chain))
    return ordered


# --------------------------------------------------------------------------- current state


@dataclass(frozen=True)
class QosRow:
    name: str
    priority: int
    preempt: frozenset[str]
    flags: frozenset[str]
    max_wall_minutes: int | None
    max_tres_per_user: dict[str, int]
    description: str


@dataclass(frozen=True)
class AssocRow:
    cluster: str
    account: str
    user: str
    parent: str
    share: str
    grp_tres_mins: dict[str, int]
    qos: frozenset[str]


@dataclass
class State:
    """What slurmdbd has (sacctmgr's view)."""

    clusters: set[str] = field(default_factory=set)
    tres: set[str] = field(default_factory=set)
    qos: dict[str, QosRow] = field(default_factory=dict)
    account_descriptions: dict[str, str] = field(default_factory=dict)
    account_organizations: dict[str, str] = field(default_factory=dict)
    assocs: list[AssocRow] = field(default_factory=list)
    default_accounts: dict[str, str] = field(default_factory=dict)


def _rows(text: str, fields: int) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        row = line.split("|", fields - 1)
        rows.append(row + [""] * (fields - len(row)))
    return rows


def _names(text: str) -> frozenset[str]:
    return frozenset(n.strip().lower() for n in text.split(",") if n.strip())


def parse_tres_counts(text: str) -> dict[str, int]:
    """'cpu=100,gres/gpu=2' -> {'cpu': 100, 'gres/gpu': 2} (as sacctmgr prints TRES limits)."""
    counts = {}
    for item in text.split(","):
        if "=" in item:
            key, value = item.split("=", 1)
            counts[key.strip().lower()] = int(value)
    return counts


def parse_minutes(text: str) -> int | None:
    """sacctmgr's MaxWall ('[D-]HH:MM:SS', 'MM:SS' or empty) in minutes; None: no limit."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts
    return (int(days or 0) * 24 + hours) * 60 + minutes + (1 if seconds else 0)


def parse_tres_names(text: str) -> set[str]:
    """`show tres format=type,name`: 'cpu|' -> cpu, 'gres|gpu' -> gres/gpu."""
    return {f"{kind}/{name}" if name else kind for kind, name in ((r[0].lower(), r[1].lower())
                                                                   for r in _rows(text, 2))}


def parse_qos(text: str) -> dict[str, QosRow]:
    qos = {}
    for name, priority, preempt, flags, maxwall, maxtrespu, description in _rows(text, 7):
        qos[name.lower()] = QosRow(name.lower(), int(priority or 0), _names(preempt),
                                   frozenset(f.lower() for f in _names(flags)), parse_minutes(maxwall),
                                   parse_tres_counts(maxtrespu), description)
    return qos


def parse_assocs(text: str) -> list[AssocRow]:
    return [AssocRow(cluster, account.lower(), user, parent.lower(), share, parse_tres_counts(grptresmins),
                     _names(qos))
            for cluster, account, user, parent, share, grptresmins, qos in _rows(text, 7)]


Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"timed out after {COMMAND_TIMEOUT} s")


def _read(run: Runner, *args: str) -> str:
    done = run(["sacctmgr", "-n", "-P", "show", *args])
    if done.returncode != 0:
        raise AccountingError(f"sacctmgr show {args[0]} failed: {_last_line(done)}")
    return done.stdout


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line.strip() for line in (done.stderr + "\n" + done.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {done.returncode}"


def read_state(run: Runner, wait: float = DBD_WAIT_SECONDS) -> State:
    """slurmdbd's view; the first read waits for a slurmdbd that has just (re)started."""
    deadline = time.monotonic() + wait
    while True:
        done = run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"])
        if done.returncode == 0 or time.monotonic() >= deadline:
            break
        time.sleep(2)
    if done.returncode != 0:
        raise AccountingError(f"slurmdbd does not answer: {_last_line(done)}")
    state = State(clusters={c.strip() for c in done.stdout.split() if c.strip()})
    state.tres = parse_tres_names(_read(run, "tres", "format=type,name"))
    state.qos = parse_qos(_read(run, "qos", f"format={QOS_FORMAT}"))
    for key in ("description", "organization"):
        rows = _rows(_read(run, "account", f"format=account,{key}"), 2)
        setattr(state, f"account_{key}s", {account.lower(): text for account, text in rows})
    state.assocs = parse_assocs(_read(run, "assoc", f"format={ASSOC_FORMAT}"))
    state.default_accounts = {u: d.lower() for u, d in _rows(_read(run, "user", "format=user,defaultaccount"), 2)}
    return state


def state_commands() -> list[tuple[str, ...]]:
    """The commands read_state runs, in order: what a reader that runs them elsewhere (the
    plan, in one round trip to the controller) must run and hand back to it."""
    asked: list[tuple[str, ...]] = []

    def record(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        asked.append(tuple(argv))
        return subprocess.CompletedProcess(list(argv), 0, "", "")

    read_state(record, wait=0)
    return asked


@dataclass(frozen=True)
class ActiveJobs:
    """Who has jobs that are not finished (pending, running, suspended, ...)."""

    accounts: frozenset[str]
    associations: frozenset[tuple[str, str]]
    """(user, account)"""
    qos: frozenset[str]


def parse_active_jobs(text: str) -> ActiveJobs:
    """`squeue -h -a -t all -o %a|%u|%q|%T`: jobs in a final state do not count."""
    rows = [r for r in _rows(text, 4) if r[3].strip().upper() not in FINAL_JOB_STATES]
    return ActiveJobs(frozenset(r[0].lower() for r in rows), frozenset((r[1], r[0].lower()) for r in rows),
                      frozenset(r[2].lower() for r in rows))


def read_active_jobs(run: Runner) -> ActiveJobs | None:
    """None when slurmctld does not answer (then nobody can tell who has jobs)."""
    done = run(["squeue", "-h", "-a", "-t", "all", "-o", "%a|%u|%q|%T"])
    return parse_active_jobs(done.stdout) if done.returncode == 0 else None


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Change:
    line: str
    """What changes, as the rollout reports it."""
    argv: tuple[str, ...]
    """sacctmgr's arguments after `-i`."""
    removal: bool = False


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    """What the spec no longer names but active jobs still use (left, and why)."""
    deferred: list[str] = field(default_factory=list)
    """What waits for the rollout's pass after slurmctld loaded the new config."""

    def report(self) -> dict[str, Any]:
        return {"changed": bool(self.changes), "changes": [c.line for c in self.changes], "kept": self.kept,
                "deferred": self.deferred}


def _tres_text(counts: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(counts.items()))


def _tres_update(current: Mapping[str, int], wanted: Mapping[str, int]) -> dict[str, int]:
    """What to set so that `current` becomes `wanted` (-1 clears a TRES's limit)."""
    update = {k: v for k, v in wanted.items() if current.get(k) != v}
    update |= {k: -1 for k in current if k not in wanted}
    return update


class _Planner:
    def __init__(self, desired: Mapping[str, Any], state: State, jobs: ActiveJobs | None, phase: str) -> None:
        self.desired, self.state, self.jobs, self.phase = desired, state, jobs, phase
        self.cluster: str = desired["cluster"]
        self.plan = Plan()
        self.assocs = [a for a in state.assocs if a.cluster == self.cluster]
        self.account_assoc = {a.account: a for a in self.assocs if not a.user}
        self.user_assocs: dict[str, set[str]] = {}
        for a in self.assocs:
            if a.user:
                self.user_assocs.setdefault(a.user, set()).add(a.account)

    def add(self, line: str, *argv: str, removal: bool = False) -> None:
        self.plan.changes.append(Change(line, tuple(argv), removal))

    def wait(self, line: str) -> None:
        if self.phase == "after":
            raise AccountingError(f"cannot apply after slurmctld started: {line}")
        self.plan.deferred.append(line)

    def known(self, owner: str, field_name: str, counts: Mapping[str, int]) -> dict[str, int]:
        """The TRES limits slurmdbd can hold now; the others wait (slurmctld registers
        gres/gpu when it starts with a slurm.conf that counts it)."""
        unknown = sorted(k for k in counts if k not in self.state.tres)
        if unknown:
            self.wait(f"{owner}: {field_name}={_tres_text({k: counts[k] for k in unknown})} "
                      f"(slurmdbd learns {', '.join(unknown)} when slurmctld starts with the new slurm.conf)")
        return {k: v for k, v in counts.items() if k not in unknown}

    def _tres_setting(self, key: str, current: Mapping[str, int], wanted: Mapping[str, int]) -> list[str]:
        """`key=...` that makes a TRES limit `wanted`, or nothing. A TRES slurmdbd does not
        know yet cannot be in `current` either: only what can be set is compared."""
        update = _tres_update({k: v for k, v in current.items() if k in self.state.tres}, wanted)
        return [f"{key}={_tres_text(update)}"] if update else []

    # ----------------------------------------------------------------- QoS

    def qos(self) -> None:
        wanted = self.desired["qos"]
        exists = set(self.state.qos)
        later: list[Mapping[str, Any]] = []
        # preempt targets first: a new QoS names only QoS that exist
        for q in _preempt_targets_first(wanted):
            name = q["name"]
            limits = self.known(f"qos {name}", "MaxTRESPerUser", q["max_tres_per_user"])
            current = self.state.qos.get(name)
            if current is None:
                settings = [f"Description={q['description']}", f"Priority={q['priority']}",
                            f"Flags={','.join(q['flags'])}"]
                if q["max_wall_minutes"] is not None:
                    settings.append(f"MaxWall={q['max_wall_minutes']}")
                if limits:
                    settings.append(f"MaxTRESPerUser={_tres_text(limits)}")
                if q["preempt"] and set(q["preempt"]) <= exists:
                    settings.append(f"Preempt={','.join(q['preempt'])}")
                elif q["preempt"]:
                    later.append(q)
                self.add(f"add qos {name}: {' '.join(settings)}", "add", "qos", name, *settings)
                exists.add(name)
                continue
            settings = self._qos_settings(q, current, limits)
            if settings:
                self.add(f"modify qos {name}: {' '.join(settings)}", "modify", "qos", "where", f"name={name}",
                         "set", *settings)
        for q in later:
            preempt = ",".join(q["preempt"])
            self.add(f"modify qos {q['name']}: Preempt={preempt}", "modify", "qos", "where", f"name={q['name']}",
                     "set", f"Preempt={preempt}")

    def _qos_settings(self, q: Mapping[str, Any], current: QosRow, limits: Mapping[str, int]) -> list[str]:
        settings = []
        if current.description.lower() != q["description"]:
            settings.append(f"Description={q['description']}")
        if current.priority != q["priority"]:
            settings.append(f"Priority={q['priority']}")
        if current.flags != {f.lower() for f in q["flags"]}:
            settings.append(f"Flags={','.join(q['flags'])}")
        if current.max_wall_minutes != q["max_wall_minutes"]:
            settings.append(f"MaxWall={-1 if q['max_wall_minutes'] is None else q['max_wall_minutes']}")
        settings += self._tres_setting("MaxTRESPerUser", current.max_tres_per_user, limits)
        if current.preempt != set(q["preempt"]):
            settings.append(f"Preempt={','.join(q['preempt'])}")
        return settings

    def qos_access(self) -> None:
        """Every association may ask for every spec QoS (`sbatch --qos=`): the cluster's
        root association lists them, and the associations below inherit the list."""
        root = self.account_assoc.get(ROOT)
        # a cluster added by this plan gets a root association that may use normal only
        current = root.qos if root is not None else {NORMAL_QOS}
        wanted = set(self.desired["qos_access"])
        # a QoS the spec dropped stays usable while jobs use it (or nobody can tell)
        dropped = current - wanted
        wanted |= dropped if self.jobs is None else dropped & self.jobs.qos
        if current != wanted:
            listed = ",".join(sorted(wanted))
            self.add(f"modify account root on {self.cluster}: QOS={listed} (every account may use every QoS)",
                     "modify", "account", "where", f"name={ROOT}", f"cluster={self.cluster}", "set", f"QOS={listed}")

    # ----------------------------------------------------------------- accounts

    def accounts(self) -> None:
        for a in self.desired["accounts"]:
            name = a["name"]
            limits = self.known(f"account {name}", "GrpTRESMins", a["grp_tres_mins"])
            assoc = self.account_assoc.get(name)
            entity = name in self.state.account_descriptions
            if entity:
                settings = []
                if self.state.account_descriptions[name].lower() != a["description"]:
                    settings.append(f"Description={a['description']}")
                if self.state.account_organizations.get(name, "").lower() != a["organization"]:
                    settings.append(f"Organization={a['organization']}")
                if settings:
                    self.add(f"modify account {name}: {' '.join(settings)}", "modify", "account", "where",
                             f"name={name}", "set", *settings)
            if assoc is None:
                settings = [f"Cluster={self.cluster}", f"Description={a['description']}",
                            f"Organization={a['organization']}", f"Fairshare={a['fairshare']}"]
                if a["parent"] != ROOT:
                    settings.append(f"Parent={a['parent']}")
                if limits:
                    settings.append(f"GrpTRESMins={_tres_text(limits)}")
                self.add(f"add account {name}: {' '.join(settings)}", "add", "account", name, *settings)
                continue
            settings = []
            if assoc.share != str(a["fairshare"]):
                settings.append(f"Fairshare={a['fairshare']}")
            if assoc.parent != a["parent"]:
                settings.append(f"Parent={a['parent']}")
            settings += self._tres_setting("GrpTRESMins", assoc.grp_tres_mins, limits)
            if settings:
                self.add(f"modify account {name} on {self.cluster}: {' '.join(settings)}", "modify", "account",
                         "where", f"name={name}", f"cluster={self.cluster}", "set", *settings)

    # ----------------------------------------------------------------- users

    def users(self) -> None:
        for u in self.desired["users"]:
            name, wanted = u["name"], u["accounts"]
            have = self.user_assocs.get(name, set())
            missing = [a for a in wanted if a not in have]
            default = u["default_account"]
            current_default = self.state.default_accounts.get(name)
            if not have and name not in self.state.default_accounts:
                settings = [f"Account={','.join(wanted)}", f"Cluster={self.cluster}",
                            f"DefaultAccount={default or wanted[0]}"]
                self.add(f"add user {name}: {' '.join(settings)}", "add", "user", name, *settings)
                continue
            if missing:
                settings = [f"Account={','.join(missing)}", f"Cluster={self.cluster}"]
                self.add(f"add user {name}: {' '.join(settings)}", "add", "user", name, *settings)
            keep = set(wanted) | self._kept_accounts(name, have - set(wanted))
            new_default = default or (current_default if current_default in keep else wanted[0])
            if current_default != new_default:
                self.add(f"modify user {name}: DefaultAccount={new_default}", "modify", "user", "where",
                         f"name={name}", "set", f"DefaultAccount={new_default}")

    def _kept_accounts(self, user: str, leaving: set[str]) -> set[str]:
        """Of the accounts a user leaves, those whose association stays: root (never the
        spec's to manage) and those the user has active jobs in."""
        kept = {a for a in leaving if a == ROOT}
        if self.jobs is not None:
            kept |= {a for a in leaving if (user, a) in self.jobs.associations}
        return kept

    # ----------------------------------------------------------------- removals

    def removals(self) -> None:
        wanted_users = {u["name"]: set(u["accounts"]) for u in self.desired["users"]}
        wanted_accounts = {a["name"] for a in self.desired["accounts"]}
        leaving_users = {user: have - wanted_users.get(user, set()) - {ROOT}
                         for user, have in sorted(self.user_assocs.items())}
        leaving_users = {u: a for u, a in leaving_users.items() if a}
        leaving_accounts = sorted(set(self.account_assoc) - wanted_accounts - {ROOT})
        leaving_qos = sorted(set(self.state.qos) - {q["name"] for q in self.desired["qos"]} - {NORMAL_QOS})
        if not (leaving_users or leaving_accounts or leaving_qos):
            return
        if self.jobs is None:
            what = [*(f"user {u} from {', '.join(sorted(a))}" for u, a in leaving_users.items()),
                    *(f"account {a}" for a in leaving_accounts), *(f"qos {q}" for q in leaving_qos)]
            self.wait(f"remove {'; '.join(what)} (slurmctld does not answer: it tells who has active jobs)")
            return
        self._remove_users(leaving_users, wanted_users)
        self._remove_accounts(leaving_accounts)
        self._remove_qos(leaving_qos)

    def _remove_users(self, leaving: Mapping[str, set[str]], wanted: Mapping[str, set[str]]) -> None:
        assert self.jobs is not None
        for user, accounts in leaving.items():
            busy = sorted(a for a in accounts if (user, a) in self.jobs.associations)
            for account in busy:
                self.plan.kept.append(f"kept user {user} in account {account}: active jobs there (removed by a "
                                      "rollout after they end)")
            going = sorted(set(accounts) - set(busy))
            stays = self.user_assocs[user] - set(going)
            if not going:
                continue
            if not stays and user not in wanted:
                self.add(f"remove user {user} (accounts {', '.join(going)})", "remove", "user", "where",
                         f"name={user}", f"cluster={self.cluster}", removal=True)
                continue
            if user not in wanted and self.state.default_accounts.get(user) in going:
                new_default = sorted(stays)[0]
                self.add(f"modify user {user}: DefaultAccount={new_default}", "modify", "user", "where",
                         f"name={user}", "set", f"DefaultAccount={new_default}")
            for account in going:
                self.add(f"remove user {user} from account {account}", "remove", "user", "where", f"name={user}",
                         f"account={account}", f"cluster={self.cluster}", removal=True)

    def _remove_accounts(self, leaving: list[str]) -> None:
        assert self.jobs is not None
        parent = {a.account: a.parent for a in self.assocs if not a.user}
        busy = set()
        for account in leaving:  # an account with active jobs keeps its ancestors that also leave
            node: str | None = account
            if account in self.jobs.accounts:
                while node in leaving:
                    busy.add(node)
                    node = parent.get(node)
        for account in sorted(busy):
            why = "active jobs" if account in self.jobs.accounts else "an account below it has active jobs"
            self.plan.kept.append(f"kept account {account}: {why} (removed by a rollout after they end)")

        def depth(name: str) -> int:
            n, node = 0, parent.get(name)
            while node and node != ROOT and n < len(parent):
                n, node = n + 1, parent.get(node)
            return n

        elsewhere = {a.account for a in self.state.assocs if a.cluster != self.cluster}
        for account in sorted((a for a in leaving if a not in busy), key=lambda a: (-depth(a), a)):
            where = ["where", f"name={account}"] + ([f"cluster={self.cluster}"] if account in elsewhere else [])
            self.add(f"remove account {account}", "remove", "account", *where, removal=True)

    def _remove_qos(self, leaving: list[str]) -> None:
        assert self.jobs is not None
        for name in leaving:
            if name in self.jobs.qos:
                self.plan.kept.append(f"kept qos {name}: active jobs use it (removed by a rollout after they end)")
            elif self.phase == "before":
                self.wait(f"remove qos {name} (after slurmctld loads the new slurm.conf: the running one's "
                          "partitions may name it)")
            else:
                self.add(f"remove qos {name}", "remove", "qos", "where", f"name={name}", removal=True)


def _preempt_targets_first(qos: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    by_name = {q["name"]: q for q in qos}
    done: set[str] = set()
    ordered: list[Mapping[str, Any]] = []

    def visit(q: Mapping[str, Any], path: set[str]) -> None:
        if q["name"] in done or q["name"] in path:
            return
        for target in q["preempt"]:
            if target in by_name:
                visit(by_name[target], path | {q["name"]})
        done.add(q["name"])
        ordered.append(q)

    for q in qos:
        visit(q, set())
    return ordered


def make_plan(desired: Mapping[str, Any], state: State, jobs: ActiveJobs | None, phase: str = "after") -> Plan:
    """The changes that make slurmdbd's state the desired one, in the order they can be
    made. `jobs`: who has active jobs (None: slurmctld did not answer, removals wait)."""
    planner = _Planner(desired, state, jobs, phase)
    if desired["cluster"] not in state.clusters:
        planner.add(f"add cluster {desired['cluster']}", "add", "cluster", desired["cluster"])
    planner.qos()
    planner.qos_access()
    planner.accounts()
    planner.users()
    planner.removals()
    return planner.plan


def needs_active_jobs(desired: Mapping[str, Any], state: State) -> bool:
    """Does anything leave (only then is squeue asked)?"""
    cluster = desired["cluster"]
    wanted = {(u["name"], a) for u in desired["users"] for a in u["accounts"]}
    accounts = {a["name"] for a in desired["accounts"]} | {ROOT}
    qos = {q["name"] for q in desired["qos"]} | {NORMAL_QOS}
    return (any(a.cluster == cluster and ((a.user and a.account != ROOT and (a.user, a.account) not in wanted)
                                          or (not a.user and a.account not in accounts)) for a in state.assocs)
            or bool(set(state.qos) - qos))


# --------------------------------------------------------------------------- apply


def converge(desired: Mapping[str, Any], phase: str, run: Runner | None = None, dry_run: bool = False,
             wait: float = DBD_WAIT_SECONDS) -> Plan:
    """Read, plan and (unless dry_run) apply; the plan says what was done."""
    run = run or run_command
    state = read_state(run, wait)
    jobs = read_active_jobs(run) if needs_active_jobs(desired, state) else ActiveJobs(frozenset(), frozenset(),
                                                                                      frozenset())
    plan = make_plan(desired, state, jobs, phase)
    if dry_run:
        return plan
    done: list[Change] = []
    for change in plan.changes:
        result = run(["sacctmgr", "-i", *change.argv])
        output = result.stdout + result.stderr
        if result.returncode != 0 and change.removal and "Job(s) active" in output:
            # a job was submitted after squeue answered: slurmdbd refuses, as it should
            plan.kept.append(f"kept: {change.line.removeprefix('remove ')}: active jobs (slurmdbd refused)")
            continue
        if result.returncode != 0:
            raise AccountingError(f"{change.line}: sacctmgr failed: {_last_line(result)}"
                                  + (f" (after {len(done)} change(s): {'; '.join(c.line for c in done)})"
                                     if done else ""))
        done.append(change)
    plan.changes = done
    return plan


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Make slurmdbd's QoS, accounts and users what the spec says.")
    parser.add_argument("--desired", type=Path, required=True, help="accounting.json from the inventory")
    parser.add_argument("--phase", choices=("before", "after"), default="after",
                        help="before: slurmctld has not loaded the new slurm.conf yet (some changes wait)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    args = parser.parse_args(None if argv is None else list(argv))
    try:
        plan = converge(json.loads(args.desired.read_text()), args.phase, dry_run=args.dry_run)
    except AccountingError as exc:
        print(f"accounting: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(plan.report() | {"dry_run": args.dry_run}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
