"""The plan: what applying a spec does to a running cluster, in Slurm's terms.

Three versions are compared. Deployed (D): what the controller has installed and what Slurm
and slurmdbd say now (slurmforge.plan.deployed). Old (O): what this slurmforge renders from
the spec the last rollout shipped. New (N): what it renders from the spec to apply. Every
row says what changes from D to N, because that is what the rollout writes; its cause is
"spec" when O and N differ there (the edit), "drift" when only D differs (the deployed
file is not what this slurmforge makes of the deployed spec: another slurmforge version,
or an edit by hand) and "cluster" when Slurm's or slurmdbd's live state differs from the
deployed files (an `scontrol update`, an account added by hand).

What Slurm does with each kind of change, and what that does to jobs (Slurm 24.11):
- a node removed from slurm.conf, or whose socket/core layout or GRES count changes under a
  running job: the reconfigure ends the job (NODE_FAIL; a batch job that may be requeued is
  requeued) - src/slurmctld/read_config.c, _sync_jobs_to_conf. Such a node is drained first
  and its jobs are let finish. A machine whose hardware changes is made again (rebuild);
  a dynamic node that is powered down has no machine: it starts on the new hardware.
- a partition removed: "If a partition that is in use is deleted from the configuration
  and slurm is restarted or reconfigured (scontrol reconfigure), jobs using the partition
  are canceled" (slurm.conf(5)) - running and pending alike, and a pending job that names
  it among others too (get_part_list fails the whole list; no requeue: the job has no
  partition left).
- MaxTime lowered: a running job keeps its own time limit (job_time_limit in job_mgr.c reads
  the job's end time, not the partition's); a pending job whose limit is over the new
  MaxTime waits with reason PartitionTimeLimit until its limit is lowered (job_limits_check).
- a reconfigure rebuilds partitions from slurm.conf alone, dropping what `scontrol update`
  set ("ReconfigFlags ... The default ... will rebuild the partition information using only
  the definitions in the slurm.conf file", slurm.conf(5)); node DOWN and DRAIN states stay.
Daemons: slurmforge.plan.configs.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurmforge import accounting
from slurmforge.drain import REBUILD, REMOVE, Drain, JobPolicy
from slurmforge.errors import PLAN_CHANGES_EXIT, ProvisionError, SpecError, listing, one_line
from slurmforge.hostlists import compress, expand
from slurmforge.hosts import controller_name
from slurmforge.plan import configs as cf
from slurmforge.plan.deployed import Deployed
from slurmforge.render import render_all
from slurmforge.slurm.client import Job, NodeState
from slurmforge.spec import Cluster, parse_spec
from slurmforge.spec.models import Pool
from slurmforge.spec.nodes import node_sets, pool_hardware, pool_hostlist
from slurmforge.spec.routing import JOB_SUBMIT_SCRIPT
from slurmforge.spec.slurmtime import parse_slurm_time

CHANGES_EXIT = PLAN_CHANGES_EXIT
"""`slurmforge plan`'s exit code when applying the spec changes something (0: nothing;
the spec's own code, 2, when it is invalid; ClusterUnreachable's, 11, when the cluster
cannot be read)."""

SPEC, DRIFT, CLUSTER = "spec", "drift", "cluster"
KINDS = ("cluster", "pool", "node", "partition", "scheduling", "power", "slurm.conf", "config", "accounting",
         "user", "group", "target", "network", "images", "head", "storage", "modules", "mail", "monitoring",
         "daemon", "jobs")
"""Every row's kind, in the order the plan lists them."""
SCHEDULING_KEYS = ("Priority", "Preempt", "Scheduler", "Select", "DefMem", "MaxJobCount", "EnforcePartLimits",
                   "JobSubmitPlugins")
POWER_KEYS = ("Suspend", "Resume", "TreeWidth")
SECTIONS = ("target", "network", "images", "head", "storage", "modules", "mail", "monitoring")
"""Spec sections listed field by field (their Slurm side, if any, shows in the config rows)."""
ACTIVE_ON_NODE = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED"})
ARROW = "->"


class PlanError(ProvisionError):
    """The spec and the deployed cluster cannot be compared (another cluster, a deployed
    spec this slurmforge cannot read)."""


@dataclass(frozen=True)
class Row:
    kind: str
    """One of KINDS."""
    name: str
    change: str
    """add, remove, change, grow, shrink, rebuild, reconfigure, restart, ends, waits, ..."""
    detail: str
    cause: str = SPEC
    jobs: tuple[int, ...] = ()
    """The jobs a jobs row is about."""


@dataclass
class ClusterPlan:
    cluster: str
    controller: str
    rows: list[Row] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What could not be known (slurmctld or slurmdbd did not answer, ...)."""
    drains: list[Drain] = field(default_factory=list)
    """Nodes with a machine that the apply rebuilds or takes out: drained first (slurmforge.drain)."""

    @property
    def changed(self) -> bool:
        return bool(self.rows)

    @property
    def exit_code(self) -> int:
        return CHANGES_EXIT if self.changed else 0


# --------------------------------------------------------------------------- entry point


def make_plan(new: Cluster, deployed: Deployed, policy: JobPolicy | None = None) -> ClusterPlan:
    """What applying `new` does to the cluster `deployed` describes; `policy`: what the apply
    does with the jobs on nodes it drains (default: waits for them)."""
    plan = ClusterPlan(new.name, deployed.controller)
    if deployed.spec_text is None:
        plan.rows.append(Row("cluster", new.name, "create", f"nothing was rolled out on {deployed.controller} yet: "
                             f"the first rollout makes every part ({len(new.pools)} pools, "
                             f"{sum(p.max_nodes for p in new.pools):,} nodes, {len(new.partitions)} partitions)"))
        return plan
    try:
        old = parse_spec(deployed.spec_text, f"{deployed.controller}:deployed spec", checks=False)
    except SpecError as exc:
        first = exc.problems[0].line() if exc.problems else "unreadable"
        raise PlanError(f"this slurmforge cannot read the spec deployed on {deployed.controller}: {first}; "
                        "fix: plan with the slurmforge that rolled it out") from None
    if old.name != new.name:
        raise PlanError(f"{deployed.controller} runs cluster '{old.name}', the spec is cluster '{new.name}'; "
                        "fix: plan against that cluster's own controller or inventory")
    if not deployed.mark:
        plan.warnings.append(f"the last rollout did not finish on {deployed.controller} (no rollout mark): its "
                             "files may be part old, part new")
    if deployed.nodes is None:
        plan.warnings.append(f"slurmctld did not answer ({deployed.slurm_error}): nodes and jobs are not counted")
    _Planner(plan, old, new, deployed, policy or JobPolicy()).run()
    order = {k: i for i, k in enumerate(KINDS)}
    plan.rows.sort(key=lambda r: order[r.kind])  # stable: each kind keeps its own order
    return plan


class _Planner:
    def __init__(self, plan: ClusterPlan, old: Cluster, new: Cluster, deployed: Deployed,
                 policy: JobPolicy) -> None:
        self.plan, self.old, self.new, self.deployed, self.policy = plan, old, new, deployed, policy
        self.d_files = deployed.configs
        self.o_files = render_all(old)  # the file name in their first line is a comment: not compared
        self.n_files = render_all(new)
        self.d = cf.parse_slurm_conf(self.d_files.get(cf.SLURM_CONF, ""))
        self.o = cf.parse_slurm_conf(self.o_files[cf.SLURM_CONF])
        self.n = cf.parse_slurm_conf(self.n_files[cf.SLURM_CONF])
        self.live_nodes: dict[str, NodeState] = {n.name: n for n in deployed.nodes or []}
        self.jobs: list[Job] = [j for j in deployed.jobs or [] if j.state not in accounting.FINAL_JOB_STATES]
        self._on_node: dict[str, list[int]] | None = None
        self.dbd = self._dbd_compared()

    def add(self, kind: str, name: str, change: str, detail: str, cause: str = SPEC,
            jobs: Iterable[int] = ()) -> None:
        self.plan.rows.append(Row(kind, name, change, detail, cause, tuple(jobs)))

    def run(self) -> None:
        self.pools()
        self.nodes()
        self.partitions()
        self.settings()
        self.other_configs()
        self.accounting()
        self.people()
        self.sections()
        self.daemons()

    # ------------------------------------------------------------------ jobs

    def jobs_on(self, nodes: Iterable[str]) -> list[int]:
        """Jobs that hold any of `nodes` now (running, completing, suspended)."""
        if self._on_node is None:
            self._on_node = {}
            for job in self.jobs:
                if job.state in ACTIVE_ON_NODE and job.nodes:
                    for node in job.node_names():
                        self._on_node.setdefault(node, []).append(job.id)
        found: set[int] = set()
        for node in nodes:
            found.update(self._on_node.get(node, ()))
        return sorted(found)

    def has_machine(self, node: str, dynamic: bool) -> bool:
        """Is there a machine behind the node now: slurmctld's view, else the spec's
        (a static node has one, a dynamic one is taken as powered down)."""
        live = self.live_nodes.get(node)
        return live.is_powered() if live is not None else not dynamic

    # ------------------------------------------------------------------ pools and nodes

    def pools(self) -> None:
        old = {p.name: p for p in self.old.pools}
        for pool in self.new.pools:
            before = old.pop(pool.name, None)
            if before is None:
                self.add("pool", pool.name, "add", describe_pool(self.new, pool))
                continue
            changes = leaf_changes(_dump(before), _dump(pool))
            if changes:
                self.add("pool", pool.name, pool_change(before, pool), changes_text(changes))
        for pool in old.values():
            self.add("pool", pool.name, "remove", f"its {pool.max_nodes:,} node(s) {pool_hostlist(self.old, pool)} "
                                                  "leave Slurm")

    def nodes(self) -> None:
        new_dynamic = node_places(self.new)
        where = node_places(self.old) | new_dynamic  # a node's pool, and whether it is dynamic
        d_nodes, n_nodes, o_nodes = self.d.nodes, self.n.nodes, self.o.nodes
        machine_changed = {p.name for p in self.new.pools for q in self.old.pools
                           if p.name == q.name and (pool_hardware(p) != pool_hardware(q)
                                                    or p.instance_types != q.instance_types)}
        groups: dict[tuple[str, str, str, str], list[str]] = {}

        def group(node: str, change: str, detail: str, cause: str) -> None:
            pool = where.get(node, ("", False))[0]
            groups.setdefault((pool, change, detail, cause), []).append(node)

        for node in n_nodes:
            if node not in d_nodes:
                dynamic = new_dynamic.get(node, ("", True))[1]
                group(node, "add", "on demand: powered down until a job needs it" if dynamic else
                      "static: its machine is made by the rollout", SPEC if node not in o_nodes else DRIFT)
        for node in d_nodes:
            if node not in n_nodes:
                dynamic = where.get(node, ("", True))[1]
                group(node, "remove", "up" if self.has_machine(node, dynamic) else "powered down",
                      SPEC if node in o_nodes else DRIFT)
        seen: dict[tuple[int, int, int], bool] = {}  # nodes of one line share their fields: compare once
        for node, fields in n_nodes.items():
            before = d_nodes.get(node)
            if before is None:
                continue
            new_machine = where.get(node, ("", False))[0] in machine_changed
            key = (id(before), id(fields), id(o_nodes.get(node)))
            if not new_machine and seen.setdefault(key, before == fields):
                continue
            self._node_changed(node, before, fields, o_nodes.get(node), new_machine, where.get(node, ("", True))[1],
                               new_dynamic.get(node, ("", False))[1], group)
        if not groups:
            return
        removed, rebuilt = [], []
        for (pool, change, detail, cause), names in groups.items():
            name = compress(names)
            where_ = f"{len(names):,} nodes of pool {pool}" if len(names) > 1 else f"pool {pool}"
            text = f"{where_}: {detail}" if pool else detail
            if change == "remove":
                up = [n for n in names if self.has_machine(n, where.get(n, ("", True))[1])]
                removed += up
                text += "; leaves Slurm" + ("; drained first, removed once its jobs end" if up else "")
                if up:
                    self.plan.drains.append(Drain(tuple(up), f"leaves Slurm (pool {pool} shrinks or goes)", REMOVE,
                                                  where.get(up[0], ("", True))[1]))
            if change == "rebuild":
                rebuilt += names
                self.plan.drains.append(Drain(tuple(names), f"rebuilt ({detail.split(':')[0]})", REBUILD,
                                              where.get(names[0], ("", False))[1]))
            self.add("node", name, change, text, cause)
        self._node_jobs(removed, "leave Slurm", "then they are removed")
        self._node_jobs(rebuilt, "are made again", "then their machines are made again and they are resumed")

    def _node_changed(self, node: str, before: Mapping[str, str], after: Mapping[str, str],
                      old: Mapping[str, str] | None, new_machine: bool, was_dynamic: bool, dynamic: bool,
                      group: Callable[[str, str, str, str], None]) -> None:
        keys = cf.changed_keys(before, after)
        if not keys and not new_machine:
            return
        cause = SPEC if old != after or new_machine else DRIFT
        hardware = [k for k in keys if k in cf.HARDWARE_KEYS]
        text = "; ".join(f"{k} {cf.shown(before.get(k))} {ARROW} {cf.shown(after.get(k))}" for k in keys)
        if hardware or new_machine:
            text = text or "its machine type changes"
            if self.has_machine(node, was_dynamic):
                then = "power down (it starts on the new hardware)" if was_dynamic else \
                    "make its machine again, resume"
                group(node, "rebuild", f"{text}: drain, {then}", cause)
            else:
                group(node, "change", f"{text}: powered down, starts on the new hardware", cause)
            return
        if "State" in keys:  # CLOUD or not: the pool's min_nodes moved
            group(node, "on-demand" if dynamic else "static", text, cause)
            return
        group(node, "change", text, cause)

    def _node_jobs(self, nodes: list[str], what: str, why: str) -> None:
        if not nodes:
            return
        jobs = self.jobs_on(nodes)
        if jobs:
            held = sorted({n for n in nodes if self.jobs_on([n])})
            self.add("jobs", compress(held), "requeue" if self.policy.requeue else "drain",
                     f"{_jobs(jobs, 'running job')} on nodes that {what}: {self.policy.words()}; {why}",
                     jobs=jobs)

    # ------------------------------------------------------------------ partitions

    def partitions(self) -> None:
        d, o, n = self.d.partitions, self.o.partitions, self.n.partitions
        for name, fields in n.items():
            before = d.get(name)
            if before is None:
                self.add("partition", name, "add", _fields_text(fields), SPEC if name not in o else DRIFT)
                continue
            by_cause: dict[str, list[str]] = {}
            for key in cf.changed_keys(before, fields):
                cause = SPEC if (o.get(name) or {}).get(key) != fields.get(key) else DRIFT
                by_cause.setdefault(cause, []).append(
                    _nodes_change(before.get(key), fields.get(key)) if key == "Nodes" else
                    f"{key} {cf.shown(before.get(key))} {ARROW} {cf.shown(fields.get(key))}")
            for cause, texts in by_cause.items():
                self.add("partition", name, "change", "; ".join(texts), cause)
            self._max_time(name, before.get("MaxTime"), fields.get("MaxTime"))
        for name in d:
            if name not in n:
                jobs = [j for j in self.jobs if name in j.partition.split(",")]
                running = [j.id for j in jobs if j.state in ACTIVE_ON_NODE]
                pending = [j.id for j in jobs if j.state == "PENDING"]
                self.add("partition", name, "remove", f"{_states(running, pending)} end at the reconfigure"
                         if jobs else "no job uses it", SPEC if name in o else DRIFT)
                if jobs:
                    self.add("jobs", f"partition {name}", "end",
                             f"{_states(running, pending)} in {name}: Slurm ends every job of a removed partition at "
                             "the reconfigure, pending ones that also name another partition too; let them finish "
                             "or move them first (scontrol update jobid=... partition=...)",
                             jobs=sorted(running + pending))

    def _max_time(self, partition: str, before: str | None, after: str | None) -> None:
        old, new = _seconds(before), _seconds(after)
        if new >= old:
            return
        over = [j for j in self.jobs if partition in j.partition.split(",") and j.time_limit * 60 > new]
        running = [j.id for j in over if j.state in ACTIVE_ON_NODE]
        pending = [j.id for j in over if j.state == "PENDING"]
        if running:
            self.add("jobs", f"partition {partition}", "run-past", f"{_jobs(running, 'running job')} over the new "
                     f"MaxTime {after}: each keeps its own time limit (Slurm ends a running job at its own limit)",
                     jobs=running)
        if pending:
            self.add("jobs", f"partition {partition}", "wait", f"{_jobs(pending, 'pending job')} over the new "
                     f"MaxTime {after}: each waits (reason PartitionTimeLimit) until its time limit is lowered "
                     "(scontrol update jobid=... timelimit=...)", jobs=pending)

    # ------------------------------------------------------------------ cluster-wide settings

    def settings(self) -> None:
        d, o, n = self.d.settings, self.o.settings, self.n.settings
        for key in cf.changed_keys(d, n):
            before, after = d.get(key), n.get(key)
            change = "add" if before is None else "remove" if after is None else "change"
            text = f"{cf.shown(before)} {ARROW} {cf.shown(after)}"
            if key in cf.NOT_LIVE:
                text += f" (not live: {cf.NOT_LIVE[key]})"
            self.add(setting_kind(key), key, change, text, SPEC if o.get(key) != after else DRIFT)

    def other_configs(self) -> None:
        files = [cf.GRES_CONF, cf.CGROUP_CONF, JOB_SUBMIT_SCRIPT, cf.MAIL_CONF]
        if self.dbd:
            files.append(cf.SLURMDBD_CONF)
        for name in files:
            before, old, after = self.d_files.get(name), self.o_files.get(name), self.n_files[name]
            if cf.same_config(before, after, name):
                continue
            cause = SPEC if not cf.same_config(old, after, name) else DRIFT
            if before is None:
                self.add("config", name, "add", f"installed on the controller ({len(cf.significant_lines(after))} "
                                                "line(s))", cause)
            elif name == cf.GRES_CONF:
                self._gres(before, old or "", after)
            elif name == JOB_SUBMIT_SCRIPT:
                lines = sum(1 for line in difflib.ndiff(cf.significant_lines(before, "--"),
                                                        cf.significant_lines(after, "--")) if line[:1] in "+-")
                self.add("config", name, "change", f"{lines} line(s) differ: where jobs that name no partition go "
                                                   "(scheduling.default_cpu_pool, default_gpu_pool)", cause)
            else:
                b, o, a = (cf.parse_settings(t) for t in (before, old or "", after))
                for key in cf.changed_keys(b, a):
                    self.add("config", f"{name} {key}", "change", f"{cf.shown(b.get(key))} {ARROW} "
                             f"{cf.shown(a.get(key))}", SPEC if o.get(key) != a.get(key) else DRIFT)

    def _dbd_compared(self) -> bool:
        """Is slurmdbd.conf compared: the rollout installs it only with accounting, and only on
        the primary controller (read from a backup, it is not there to compare)."""
        if not self.new.accounting.enabled:
            return False
        if cf.SLURMDBD_CONF not in self.d_files and self.deployed.controller != controller_name(self.old):
            self.plan.warnings.append(f"read from {self.deployed.controller}, not the primary controller: "
                                      "slurmdbd.conf (on the primary only) is not compared")
            return False
        return True

    def _gres(self, before: str, old: str, after: str) -> None:
        b, o, a = cf.parse_gres_conf(before), cf.parse_gres_conf(old), cf.parse_gres_conf(after)
        groups: dict[tuple[str, str], list[str]] = {}
        for node in a:
            if node in b and b[node] != a[node]:  # nodes that come or go: the node rows say so
                text = "; ".join(f"{k} {cf.shown(b[node].get(k))} {ARROW} {cf.shown(a[node].get(k))}"
                                 for k in cf.changed_keys(b[node], a[node]))
                groups.setdefault((text, SPEC if o.get(node) != a[node] else DRIFT), []).append(node)
        for (text, cause), nodes in groups.items():
            self.add("config", cf.GRES_CONF, "change", f"{compress(n for n in nodes if n) or 'every node'}: {text}",
                     cause)

    # ------------------------------------------------------------------ accounting

    def accounting(self) -> None:
        if not self.new.accounting.enabled:
            return
        state, error = self.deployed.accounting_state()
        if state is None:
            self.plan.warnings.append(f"slurmdbd's QoS, accounts and users were not read ({error}): not compared")
            return
        jobs = None if self.deployed.jobs is None else active_jobs(self.jobs)
        wanted = accounting.make_plan(accounting.desired_state(self.new), state, jobs, phase="before")
        deployed = (accounting.make_plan(accounting.desired_state(self.old), state, jobs, phase="before")
                    if self.old.accounting.enabled else accounting.Plan())
        baseline = {c.line for c in deployed.changes} | set(deployed.kept) | set(deployed.deferred)
        for change in wanted.changes:
            verb, entity = change.argv[0], change.argv[1]
            name = change.argv[2] if verb == "add" else next(
                (a.split("=", 1)[1] for a in change.argv if a.startswith("name=")), "")
            prefix = f"{verb} {entity} {name}"
            detail = change.line[len(prefix):].lstrip(": ").strip() if change.line.startswith(prefix) else change.line
            self.add("accounting", f"{entity} {name}".strip(), verb, detail or change.line,
                     CLUSTER if change.line in baseline else SPEC)
        for line in wanted.kept:
            self.add("accounting", _subject(line), "kept", line, CLUSTER if line in baseline else SPEC)
        for line in wanted.deferred:
            self.add("accounting", _subject(line), "later", f"after slurmctld loads the new slurm.conf: {line}",
                     CLUSTER if line in baseline else SPEC)

    # ------------------------------------------------------------------ users, groups, other sections

    def people(self) -> None:
        for kind, old, new in (("group", self.old.groups, self.new.groups), ("user", self.old.users, self.new.users)):
            before = {x.name: x for x in old}
            for item in new:
                was = before.pop(item.name, None)
                if was is None:
                    self.add(kind, item.name, "add", f"{_person(item)}: the rollout adds it on head and static "
                             "nodes; an on-demand node that is up gets it at its next start (node kit)")
                elif changes := leaf_changes(_person_dump(was), _person_dump(item)):
                    self.add(kind, item.name, "change", changes_text(changes))
            for name in before:
                self.add(kind, name, "remove", "leaves the spec; nodes keep the account (the join program adds and "
                                               "changes accounts, never removes them)")

    def sections(self) -> None:
        old, new = self.old.model_dump(mode="json"), self.new.model_dump(mode="json")
        for section in SECTIONS:
            for path, before, after in leaf_changes(old.get(section), new.get(section)):
                change = "add" if before is None else "remove" if after is None else "change"
                self.add(section, path or section, change, f"{_value(before)} {ARROW} {_value(after)}")
        for path, before, after in leaf_changes(
                {k: old["accounting"][k] for k in ("enabled", "database")},
                {k: new["accounting"][k] for k in ("enabled", "database")}):
            self.add("accounting", path, "change", f"{_value(before)} {ARROW} {_value(after)}")

    # ------------------------------------------------------------------ daemons

    def daemons(self) -> None:
        files = [f for f in cf.RECONFIGURED if not cf.same_config(self.d_files.get(f), self.n_files[f], f)]
        cause = SPEC if any(not cf.same_config(self.o_files[f], self.n_files[f], f) for f in files) else DRIFT
        if files:
            not_live = [k for k in cf.changed_keys(self.d.settings, self.n.settings) if k in cf.NOT_LIVE]
            if not_live:
                self.add("daemon", "slurmctld", "restart", f"{', '.join(not_live)} change: Slurm cannot apply "
                         f"{'them' if len(not_live) > 1 else 'it'} with a reconfigure, and the rollout only "
                         "reconfigures: stop the daemons and apply by hand (man slurm.conf)", cause)
            else:
                verb = "changes" if len(files) == 1 else "change"
                self.add("daemon", "slurmctld", "reconfigure", f"{', '.join(files)} {verb}: scontrol reconfigure "
                         "starts a new slurmctld on the new files and hands over; running jobs and submissions go on",
                         cause)
            self._backups(cause)
            self.add("daemon", "slurmd", "reconfigure", "every slurmd gets the new config from slurmctld "
                     "(configless) at the reconfigure", cause)
            self._partition_resets()
        if self.dbd and not cf.same_config(self.d_files.get(cf.SLURMDBD_CONF),
                                                      self.n_files[cf.SLURMDBD_CONF], cf.SLURMDBD_CONF):
            dbd_cause = SPEC if not cf.same_config(self.o_files[cf.SLURMDBD_CONF], self.n_files[cf.SLURMDBD_CONF],
                                                   cf.SLURMDBD_CONF) else DRIFT
            self.add("daemon", "slurmdbd", "restart", "slurmdbd.conf changes: the rollout restarts slurmdbd; "
                     "slurmctld keeps the job records for it meanwhile", dbd_cause)

    def _backups(self, cause: str) -> None:
        before = self.d.settings.get("SlurmctldHost", ())[1:]
        for host in self.n.settings.get("SlurmctldHost", ())[1:]:
            if host in before:
                self.add("daemon", "slurmctld", "restart", f"on the backup {host}: standing by, it starts again on "
                                                           "the new files (it runs no job)", cause)
            else:
                self.add("daemon", "slurmctld", "start", f"on the new backup {host}", cause)

    def _partition_resets(self) -> None:
        """What `scontrol update` set on a partition, which the reconfigure undoes."""
        for live in self.deployed.partitions or []:
            conf = self.n.partitions.get(live.name)
            if conf is None:
                continue
            wanted, deployed = _live_terms(conf), _live_terms(self.d.partitions.get(live.name, conf))
            have: dict[str, float | str] = {"State": live.state, "MaxTime": live.max_time,
                                            "DefaultTime": live.default_time}
            # what the spec changes, the partition's own row says
            differ = [k for k in wanted if wanted[k] != have[k] and deployed[k] == wanted[k]]
            if differ:
                self.add("partition", live.name, "reset", "; ".join(
                    f"{k} {_minutes_text(have[k])} {ARROW} {_minutes_text(wanted[k])}" for k in differ)
                    + ": slurmctld has it so (scontrol update); a reconfigure rebuilds partitions from slurm.conf "
                    "(man slurm.conf, ReconfigFlags)", CLUSTER)


# --------------------------------------------------------------------------- helpers


def node_places(spec: Cluster) -> dict[str, tuple[str, bool]]:
    """Node name -> (its pool, dynamic) for every node of the spec."""
    return {name: (s.pool, s.dynamic) for p in spec.pools for s in node_sets(spec, p) for name in s.names()}


def describe_pool(spec: Cluster, pool: Pool) -> str:
    hw = pool_hardware(pool)
    what = f"{hw.cpus} CPUs, {hw.memory_mb:,} MB" + (f", {hw.gpus} {hw.gpu_model or 'GPU'}" if hw.gpus else "") \
        if hw else ", ".join(pool.instance_types)
    static = min(pool.min_nodes, pool.max_nodes)
    return (f"{pool.max_nodes:,} node(s) {pool_hostlist(spec, pool)} ({what}): {static:,} static, "
            f"{pool.max_nodes - static:,} on demand")


def pool_change(before: Pool, after: Pool) -> str:
    if pool_hardware(before) != pool_hardware(after) or before.instance_types != after.instance_types:
        return "rebuild"
    sizes = [(before.max_nodes, after.max_nodes), (before.min_nodes, after.min_nodes)]
    if any(b != a for b, a in sizes) and all(b <= a for b, a in sizes):
        return "grow"
    if any(b != a for b, a in sizes) and all(b >= a for b, a in sizes):
        return "shrink"
    return "change"


def setting_kind(key: str) -> str:
    if key.startswith(SCHEDULING_KEYS):
        return "scheduling"
    if key.startswith(POWER_KEYS):
        return "power"
    return "slurm.conf"


def active_jobs(jobs: Sequence[Job]) -> accounting.ActiveJobs:
    """Who has jobs that are not finished, as the accounting plan asks (squeue's view)."""
    return accounting.ActiveJobs(frozenset(j.account.lower() for j in jobs),
                                 frozenset((j.user, j.account.lower()) for j in jobs),
                                 frozenset(j.qos.lower() for j in jobs))


_SUBJECT = re.compile(r"^(?:kept |remove )?(qos|account|user) ([^\s:;,]+)")


def _subject(line: str) -> str:
    match = _SUBJECT.match(line)
    return f"{match.group(1)} {match.group(2)}" if match else "-"


def _dump(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(mode="json")
    data.pop("name", None)
    return data


def leaf_changes(old: Any, new: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(path, old, new) of every value that differs; mappings by key, lists of named
    mappings (accounts, alerts) by name, other lists whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in [*new, *(k for k in old if k not in new)]:
            out += leaf_changes(old.get(key), new.get(key), f"{path}.{key}" if path else str(key))
        return out
    if _named(old) and _named(new):
        before, after = {x["name"]: x for x in old}, {x["name"]: x for x in new}
        out = []
        for name in [*after, *(k for k in before if k not in after)]:
            out += leaf_changes(before.get(name), after.get(name), f"{path}[{name}]")
        return out
    return [] if old == new else [(path, old, new)]


def _named(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(x, dict) and "name" in x for x in value)


def _person_dump(item: Any) -> dict[str, Any]:
    """A user or group as the plan compares it: SSH keys by count and digest, not in full."""
    data = _dump(item)
    if "ssh_keys" in data:
        keys = data.pop("ssh_keys")
        data["ssh_keys"] = f"{len(keys)} key(s) #{hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:8]}"
    return data


def _person(item: Any) -> str:
    """A new user or group in a few words: uid 3004, groups ml-users, accounts research."""
    data = _dump(item)
    keys = len(data.pop("ssh_keys", []))
    words = [f"{k} {','.join(v) if isinstance(v, list) else _value(v)}" for k, v in data.items()
             if v not in (None, [], False)]
    return ", ".join(words + ([f"{keys} SSH key(s)"] if keys else []))


def changes_text(changes: Sequence[tuple[str, Any, Any]]) -> str:
    return "; ".join(f"{path} {_value(before)} {ARROW} {_value(after)}" for path, before, after in changes)


def _value(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return one_line(value, 80)
    return one_line(json.dumps(value, separators=(",", ":")), 80)


def _nodes_change(before: str | None, after: str | None) -> str:
    """A partition's Nodes change as the nodes it gains and loses."""
    old, new = set(expand(before or "")), set(expand(after or ""))
    parts = ([f"+{compress(new - old)}"] if new - old else []) + ([f"-{compress(old - new)}"] if old - new else [])
    return f"Nodes {' '.join(parts) or '(order)'}"


def _fields_text(fields: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in fields.items())


def _seconds(text: str | None) -> float:
    """A MaxTime in seconds; no MaxTime is UNLIMITED."""
    try:
        return parse_slurm_time(text) if text else math.inf
    except ValueError:
        return math.inf


def _live_terms(conf: Mapping[str, str]) -> dict[str, float | str]:
    """A PartitionName line's State, MaxTime and DefaultTime as slurmctld reports them."""
    return {"State": conf.get("State", "UP").upper(), "MaxTime": _minutes(conf.get("MaxTime")),
            "DefaultTime": _minutes(conf.get("DefaultTime"), none=0.0)}


def _minutes(text: str | None, none: float = math.inf) -> float:
    if not text:
        return none
    seconds = _seconds(text)
    return seconds if seconds == math.inf else seconds / 60


def _minutes_text(value: float | str) -> str:
    if isinstance(value, str):
        return value
    if value == math.inf:
        return "UNLIMITED"
    days, rest = divmod(int(value), 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00" if days else f"{rest // 60:02d}:{rest % 60:02d}:00"


def _count(items: Sequence[object], what: str) -> str:
    return f"{len(items):,} {what}{'' if len(items) == 1 else 's'}"


def _jobs(ids: Sequence[int], what: str) -> str:
    """'2 running jobs (41, 42)'."""
    return f"{_count(ids, what)} ({listing([str(j) for j in ids])})"


def _states(running: Sequence[int], pending: Sequence[int]) -> str:
    return " and ".join(([_jobs(running, "running job")] if running else [])
                        + ([_jobs(pending, "pending job")] if pending else []))
