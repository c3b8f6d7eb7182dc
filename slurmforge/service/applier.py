"""Carrying out the classifier's actions: through the Slurm client, the provider and the
store. One failing command is logged and does not stop the others.

Order: bookkeeping (with the events of replaced nodes), then what protects running work
(drain, signal), then nodes marked DOWN, power-downs and requeues, jobs kept off a replaced
node (and let back), terminations, addresses,
power-ups and resumes, and launches last (the slow part).
A launch is written to the store before the provider hears of it and completed after;
if the provider raises, the record stays pending and the next loop retries it with the
same token. A completed launch publishes the pool hosts at once (service.pool_hosts).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurmforge.errors import SlurmCommandError
from slurmforge.hostlists import compress, expand
from slurmforge.provider import (
    THROTTLED,
    Instance,
    InstanceState,
    LaunchRequest,
    LaunchResult,
    Machines,
    Quota,
    QuotaError,
)
from slurmforge.service import actions as a
from slurmforge.service import when
from slurmforge.service.pool_hosts import PoolHosts
from slurmforge.service.state import (
    JOINING,
    KEEP_ADDED,
    KEEP_NOTHING,
    Binding,
    Cooldown,
    Event,
    LaunchRecord,
    Store,
)
from slurmforge.service.topology import Topology
from slurmforge.slurm.client import Job, SlurmClient

log = logging.getLogger(__name__)

PHASES: tuple[tuple[type, ...], ...] = (
    (a.ClearMark, a.SetMark, a.Unbind, a.AbandonLaunch, a.CloseRequests, a.MarkCooldown, a.Bind, a.Replaced,
     a.Joined),
    (a.Drain, a.Signal),
    (a.MarkDown, a.PowerDown),
    (a.Requeue, a.Release),
    (a.KeepAway, a.LetBack),
    (a.ForgetSignalled,),
    (a.Terminate,),
    (a.SetAddress, a.PowerUp, a.Resume),
    (a.Launch,),
    (a.AdvanceInterruption,),
)


@dataclass
class ActReport:
    """What happened; `failed` are nodes whose launch failed on their link (not
    throttled), to be tried on the next link at once."""

    launched: dict[str, Instance] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    errors: int = 0


class Applier:
    def __init__(self, slurm: SlurmClient, provider: Machines, store: Store, clock: Callable[[], float],
                 pool_hosts: PoolHosts | None = None) -> None:
        """`pool_hosts`: published again after each launch (service.pool_hosts)."""
        self.slurm, self.provider, self.store, self.clock = slurm, provider, store, clock
        self.pool_hosts = pool_hosts

    def apply(self, actions: Sequence[a.Action], topology: Topology, instances: Sequence[Instance] = (),
                job_users: Mapping[int, str] | None = None, node_jobs: Mapping[str, int] | None = None,
                job_accounts: Mapping[int, str] | None = None) -> ActReport:
        """job_users, job_accounts: who submitted each job and under which account (tags)."""
        run = _Run(self, topology, {i.id: i for i in instances}, job_users or {}, node_jobs or {}, job_accounts or {})
        for phase in PHASES:
            batch = [x for x in actions if isinstance(x, phase)]
            if batch:
                run.phase(batch)
        return run.report


class _Run:
    """One apply() call: the handlers per action type."""

    def __init__(self, ex: Applier, topology: Topology, instances: dict[str, Instance],
                 job_users: Mapping[int, str], node_jobs: Mapping[str, int], job_accounts: Mapping[int, str]) -> None:
        self.ex, self.store, self.topology, self.instances = ex, ex.store, topology, instances
        self.job_users, self.node_jobs, self.job_accounts = job_users, node_jobs, job_accounts
        self.report = ActReport()
        self.now = ex.clock()

    def phase(self, batch: list[Any]) -> None:
        handlers: dict[type, Callable[[list[Any]], None]] = {
            a.PowerDown: self.power_down, a.MarkDown: self.mark_down, a.Drain: self.drain, a.Terminate: self.terminate,
            a.Requeue: self.requeue, a.Release: self.release, a.Signal: self.signal, a.Launch: self.launch,
            a.PowerUp: lambda xs: self._slurm(self.ex.slurm.power_up, [n for x in xs for n in x.nodes]),
            a.Resume: self.resume, a.SetAddress: self.set_addresses, a.KeepAway: self.keep_away,
            a.LetBack: self.let_back,
        }
        by_type: dict[type, list[Any]] = {}
        for action in batch:
            by_type.setdefault(type(action), []).append(action)
        for kind, items in by_type.items():
            handler = handlers.get(kind)
            if handler is not None:
                handler(items)
            else:
                for item in items:
                    self.single(item)

    def single(self, x: a.Action) -> None:
        st = self.store
        if isinstance(x, a.ClearMark):
            st.clear_mark(x.node, x.kind)
        elif isinstance(x, a.SetMark):
            st.set_mark(x.node, x.kind, x.since)
        elif isinstance(x, a.Unbind):
            st.unbind([x.node])
        elif isinstance(x, a.Bind):
            st.bind(Binding(x.node, x.instance, x.link, x.launched_at, ""))
        elif isinstance(x, a.AbandonLaunch):
            st.abandon_launch(x.token)
        elif isinstance(x, a.CloseRequests):
            st.close_requests(x.ids)
        elif isinstance(x, a.AdvanceInterruption):
            st.set_interruption_stage(x.instance, x.stage)
        elif isinstance(x, a.ForgetSignalled):
            st.forget_signalled(x.jobs)
        elif isinstance(x, a.MarkCooldown):
            self.cooldown(x)
        elif isinstance(x, a.Replaced):
            self.replaced(x)
        elif isinstance(x, a.Joined):
            self.joined(x)

    # ------------------------------------------------------------------ Slurm

    def power_down(self, items: list[a.PowerDown]) -> None:
        for reason, nodes in _by_reason(items).items():
            self._slurm(functools.partial(_power_down, self.ex.slurm, reason=reason), nodes)
            for pool, count in self._pools(nodes).items():
                self.event("power-down", pool, "", count, reason)

    def mark_down(self, items: list[a.MarkDown]) -> None:
        """The jobs to keep off a node are recorded before its DOWN (which requeues them)
        and excluded after it: a service that dies in between excludes them on restart."""
        away = [a.KeepAway(n, x.keep_away, self.now + x.keep_for) for x in items if x.keep_away for n in x.nodes]
        for x in away:
            self.store.keep_away(x.jobs, x.node, x.until)
        for reason, nodes in _by_reason(items).items():
            self._slurm(functools.partial(_mark_down, self.ex.slurm, reason=reason), nodes)
            for pool, count in self._pools(nodes).items():
                self.event("mark-down", pool, "", count, reason)
        if away:
            self.keep_away(away)

    def keep_away(self, items: list[a.KeepAway]) -> None:
        """Each pending job gets the node in its ExcNodeList, unless it named it there itself;
        one Slurm refuses stays to be tried again next loop, while the window lasts."""
        found = self._jobs([j for x in items for j in x.jobs])
        if found is None:
            return
        for x in items:
            self.store.keep_away(x.jobs, x.node, x.until)
            kept = []
            for job_id in x.jobs:
                job = found.get(job_id)
                excluded = expand(job.excluded) if job is not None and job.excluded else []
                if job is None or not job.is_pending() or x.node in excluded:
                    self.store.set_kept_away(job_id, x.node, KEEP_NOTHING)
                    continue
                required = x.node in (expand(job.required) if job.required else [])
                try:  # a job that must run on the node (-w) waits instead: nothing to undo
                    if required:
                        self.ex.slurm.begin_after(job_id, x.until - self.now)
                    else:
                        self.ex.slurm.exclude_nodes(job_id, [*excluded, x.node])
                except SlurmCommandError as exc:
                    log.warning("%s", exc)
                    self.report.errors += 1
                    continue
                self.store.set_kept_away(job_id, x.node, KEEP_NOTHING if required else KEEP_ADDED)
                kept.append(job_id)
            if kept:
                self.event("keep-away", "", "", len(kept), f"job {', '.join(map(str, kept))} kept off {x.node} until "
                           f"{when.clock(x.until)}: an RPC retried for its dead machine may still reach the new one")

    def let_back(self, items: list[a.LetBack]) -> None:
        """The node leaves the ExcNodeList of each job the service added it to, once the job
        is pending (Slurm changes it for no other); a running job keeps its record until
        it is pending again or has ended."""
        stages = {(r.job, r.node): r.stage for r in self.store.kept_away()}
        found = self._jobs([j for x in items for j in x.jobs])
        if found is None:
            return
        for x in items:
            for job_id in x.jobs:
                job = found.get(job_id)
                if stages.get((job_id, x.node)) == KEEP_ADDED and job is not None:
                    if job.is_running() or job.state == "SUSPENDED":
                        continue
                    if job.is_pending():
                        rest = [n for n in expand(job.excluded) if n != x.node] if job.excluded else []
                        try:
                            self.ex.slurm.exclude_nodes(job_id, rest)
                        except SlurmCommandError as exc:
                            log.warning("%s", exc)
                            self.report.errors += 1
                            continue
                self.store.forget_kept_away(job_id, x.node)

    def _jobs(self, ids: list[int]) -> dict[int, Job] | None:
        """The jobs as slurmctld holds them now; None when that could not be read."""
        try:
            return {j.id: j for j in self.ex.slurm.jobs_by_id(sorted(set(ids)))}
        except SlurmCommandError as exc:
            log.warning("%s", exc)
            self.report.errors += 1
            return None

    def drain(self, items: list[a.Drain]) -> None:
        for reason, nodes in _by_reason(items).items():
            self._slurm(functools.partial(_drain, self.ex.slurm, reason=reason), nodes)

    def resume(self, items: list[a.Resume]) -> None:
        nodes = list(dict.fromkeys(n for x in items for n in x.nodes))
        self._slurm(self.ex.slurm.resume, nodes)
        for pool, count in self._pools(nodes).items():
            self.event("resume", pool, "", count, compress(nodes))

    def set_addresses(self, items: list[a.SetAddress]) -> None:
        """One scontrol call for many nodes; per node if that fails."""
        try:
            self.ex.slurm.set_addresses({x.node: x.address for x in items})
        except SlurmCommandError:
            for x in items:
                self._call(self.ex.slurm.set_address, x.node, x.address, x.hostname)

    def requeue(self, items: list[a.Requeue]) -> None:
        jobs = sorted({j for x in items for j in x.jobs})
        if not jobs:
            return
        try:
            self.ex.slurm.requeue(jobs)
        except SlurmCommandError:
            # some were requeued already (POWER_DOWN_FORCE does it) or have ended
            for job in jobs:
                self._call(self.ex.slurm.requeue, [job], quiet=True)
        self.event("requeue", "", "", len(jobs), items[0].reason)

    def release(self, items: list[a.Release]) -> None:
        jobs = sorted({j for x in items for j in x.jobs})
        self._call(self.ex.slurm.release, jobs)
        self.event("release", "", "", len(jobs), f"{items[0].reason}: {', '.join(map(str, jobs))}"[:200])

    def signal(self, items: list[a.Signal]) -> None:
        for x in items:  # remembered first: a signal that ended a job is seen as such next loop
            self.store.add_signalled(x.jobs, x.signal, self.now, x.why)
            self._call(self.ex.slurm.signal, list(x.jobs), x.signal)

    def _slurm(self, fn: Callable[[list[str]], None], nodes: list[str]) -> None:
        """One call for every node; if it fails, one per node so one bad node does not
        hold back the others."""
        try:
            fn(nodes)
        except SlurmCommandError as exc:
            if len(nodes) == 1:
                log.warning("%s", exc)
                self.report.errors += 1
                return
            for node in nodes:
                self._call(fn, [node])

    def _call(self, fn: Callable[..., None], *args: Any, quiet: bool = False) -> None:
        try:
            fn(*args)
        except SlurmCommandError as exc:
            (log.debug if quiet else log.warning)("%s", exc)
            self.report.errors += 0 if quiet else 1

    # ------------------------------------------------------------------ provider

    def terminate(self, items: list[a.Terminate]) -> None:
        doomed = [self.instances.get(x.instance) or Instance(x.instance, x.node, None, InstanceState.RUNNING)
                  for x in items]
        try:
            self.ex.provider.terminate(doomed)
        except Exception:
            log.exception("terminating %d instance(s) failed", len(doomed))
            self.report.errors += 1
            return
        for x in items:
            info = self.topology.nodes.get(x.node or "")
            pool = info.pool if info else ""
            kind = x.reason.split(":", 1)[0] if x.reason.startswith(("orphan", "duplicate")) else "release"
            self.store.count("slurmforge_terminated_instances_total", {"pool": pool, "why": kind})
            log.info("terminate %s (%s): %s", x.instance, x.node or "-", x.reason)
        self.event("terminate", "", "", len(items), items[0].reason)

    def launch(self, items: list[a.Launch]) -> None:
        for x in items:
            self.launch_one(x)

    def launch_one(self, x: a.Launch) -> None:
        self.store.begin_launch(LaunchRecord(x.token, x.pool, x.link, x.nodes, x.jobs, self.now))
        node_jobs = {n: self.node_jobs[n] for n in x.nodes if n in self.node_jobs}
        jobs = set(x.jobs) | set(node_jobs.values())
        users = {j: self.job_users[j] for j in jobs if j in self.job_users}
        accounts = {j: self.job_accounts[j] for j in jobs if j in self.job_accounts}
        request = LaunchRequest(pool=x.pool, nodes=x.nodes, token=x.token, jobs=x.jobs, link=x.link,
                                node_jobs=node_jobs, job_users=users, job_accounts=accounts)
        try:
            result = self.ex.provider.start(request)
        except Exception:
            # outcome unknown: the record stays pending and is retried with this token
            log.exception("launch %s of %d node(s) on %s failed", x.token, len(x.nodes), x.link)
            self.report.errors += 1
            return
        self.finish(x, result)

    def finish(self, x: a.Launch, result: LaunchResult) -> None:
        bindings = [Binding(node, inst.id, x.link, inst.launched_at or self.now, x.token)
                    for node, inst in result.launched.items()]
        self.store.finish_launch(x.token, bindings)
        if self.ex.pool_hosts is not None:  # the new machines' names resolve before they boot, where known
            self.ex.pool_hosts.learn(result.launched.values())
            self.ex.pool_hosts.publish(self.store.bindings())
        for binding in bindings:  # until its slurmd registers: the join share (respond.joined)
            self.store.clear_mark(binding.node, JOINING)
            self.store.set_mark(binding.node, JOINING, binding.launched_at)
        self.report.launched.update(result.launched)
        if result.launched:
            self.store.count("slurmforge_launched_nodes_total", {"pool": x.pool, "link": x.link},
                             len(result.launched))
            ids = set(x.jobs) | {self.node_jobs[n] for n in result.launched if n in self.node_jobs}
            jobs = ", ".join(str(j) for j in sorted(ids))
            self.event("launch", x.pool, x.link, len(result.launched),
                       compress(result.launched) + (f" for job {jobs}" if jobs else ""))
        failed = {n: code for n, code in result.failed.items() if code != THROTTLED}
        for code, nodes in _group(failed).items():
            self.store.count("slurmforge_launch_failures_total", {"pool": x.pool, "link": x.link, "code": code},
                             len(nodes))
            self.event("launch-failed", x.pool, x.link, len(nodes), code)
        if failed:
            codes = sorted(set(failed.values()))
            quota = next((c for c in codes if QuotaError.includes(c)), None)
            pool = self.topology.pools.get(x.link)
            if quota is not None and pool is not None and pool.quotas:
                self.quota_used_up(x, quota, pool.quotas)
            else:
                cooldown = self.store.cool_down(x.link, codes[0], self.now)
                self.event("cooldown", x.pool, x.link, 0, f"{cooldown.last_error}: not tried again for "
                           f"{when.duration(cooldown.until - self.now)}, until {when.clock(cooldown.until)}")
            self.report.failed.update(failed)
        elif result.launched:
            self.link_succeeded(x.link)

    def quota_used_up(self, x: a.Launch, code: str, quotas: tuple[Quota, ...]) -> None:
        """The account's quota stops the link's launches: the link is blocked, and so is
        every other link drawing only on the same quotas (it would fail alike), for longer
        than a capacity cooldown (state.backoff). Said once in the log, when the block
        begins, and as an event each time."""
        links = [x.link, *(name for name, pool in self.topology.pools.items()
                           if name != x.link and pool.quotas and set(pool.quotas) <= set(quotas))]
        before = self.store.cooldowns()
        named, wait, new = " and ".join(map(str, quotas)), "", []
        for link in links:
            cooldown = self.store.cool_down(link, code, self.now, quotas)
            wait = f"tried again in {when.duration(cooldown.until - self.now)}, at {when.clock(cooldown.until)}"
            self.event("quota", x.pool, link, 0, f"{code}: EC2 quota {named} used up; {wait}")
            if link not in before or before[link].quotas != cooldown.quotas:
                new.append(link)
        if new:
            log.warning("EC2 quota %s stops launches on %s (%s): raise it in Service Quotas; %s", named,
                        _links(new), code, wait)

    def link_succeeded(self, link: str) -> None:
        """A launch on the link worked: its failures are forgotten. If a quota had blocked
        it, that quota has room again, and so do the links blocked by it alone."""
        ended = self.store.link_succeeded(link)
        if ended is None or not ended.quotas:
            return
        freed = [link]
        for other, cooldown in self.store.cooldowns().items():
            if cooldown.quotas and set(cooldown.quotas) <= set(ended.quotas):
                self.store.link_succeeded(other)
                freed.append(other)
        log.info("EC2 quota %s no longer stops launches on %s", " and ".join(map(str, ended.quotas)), _links(freed))

    def replaced(self, x: a.Replaced) -> None:
        """The replacement's event, with its times from the first sign of trouble, and
        its count; the sum of the times (over the count: the mean) for /metrics."""
        back = self.now - x.since
        detail = (f"{x.node} in service again on {x.instance}: trouble seen {when.clock(x.since)}, "
                  f"new machine launched +{x.launched_at - x.since:.1f} s")
        if x.registered_at:
            detail += f", its slurmd started +{x.registered_at - x.since:.1f} s"
        detail += f", seen in service +{back:.1f} s"
        log.info("replaced %s", detail)
        self.event("replaced", x.pool, "", 1, detail)
        self.store.count("slurmforge_replaced_nodes_total", {"pool": x.pool})
        self.store.count("slurmforge_replacement_seconds_total", {"pool": x.pool}, back)

    def joined(self, x: a.Joined) -> None:
        """The join share of a machine the service launched: launch -> its slurmd started."""
        seconds = max(x.slurmd_started_at - x.launched_at, 0.0)
        detail = f"{x.node} joined: machine started -> slurmd started {seconds:.1f} s"
        log.info("%s", detail)
        self.event("joined", x.pool, "", 1, detail)
        self.store.count("slurmforge_joined_nodes_total", {"pool": x.pool})
        self.store.count("slurmforge_join_seconds_total", {"pool": x.pool}, seconds)

    def cooldown(self, x: a.MarkCooldown) -> None:
        self.store.set_cooldown(Cooldown(x.link, x.until, x.failures, x.reason, self.now))
        self.event("cooldown", x.link, x.link, 0, x.reason)

    # ------------------------------------------------------------------ helpers

    def event(self, kind: str, pool: str, link: str, count: int, detail: str) -> None:
        self.store.add_event(Event(self.now, kind, pool, link, count, detail))

    def _pools(self, nodes: list[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in nodes:
            info = self.topology.nodes.get(node)
            counts[info.pool if info else ""] = counts.get(info.pool if info else "", 0) + 1
        return counts


def _power_down(slurm: SlurmClient, nodes: list[str], reason: str) -> None:
    slurm.power_down(nodes, reason)


def _mark_down(slurm: SlurmClient, nodes: list[str], reason: str) -> None:
    slurm.mark_down(nodes, reason)


def _drain(slurm: SlurmClient, nodes: list[str], reason: str) -> None:
    slurm.drain(nodes, reason)


def _by_reason(items: Sequence[a.PowerDown | a.Drain | a.MarkDown]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for x in items:
        grouped.setdefault(x.reason, []).extend(x.nodes)
    return {reason: list(dict.fromkeys(nodes)) for reason, nodes in grouped.items()}


def _links(links: Sequence[str]) -> str:
    return f"link{'s' if len(links) > 1 else ''} {', '.join(links)}"


def _group(failed: Mapping[str, str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for node, code in failed.items():
        grouped.setdefault(code, []).append(node)
    return grouped
