"""The service's small web face, on the standard library's http.server:

    /            the pool page (templates/pools.html.j2, StrictUndefined, autoescaped)
    /metrics     Prometheus text format
    /pools.json  the snapshot, for `slurmforge pools`
    /healthz     200 once a loop has published a snapshot

and `pools_table(snapshot)`, the same numbers as a table for the CLI (slurmforge.tables).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jinja2

from slurmforge.contract import SERVICE_PORT
from slurmforge.package_data import templates
from slurmforge.service import when
from slurmforge.service.guard import HoldReason
from slurmforge.service.snapshot import NODE_STATES, ClusterSnapshot, JobRow, PoolSnapshot
from slurmforge.service.usage import HELP as USAGE_HELP
from slurmforge.tables import Column, Table, money

log = logging.getLogger(__name__)

SnapshotSource = Callable[[], ClusterSnapshot | None]

COUNTER_HELP = {
    "slurmforge_launched_nodes_total": "Nodes launched, by pool and link.",
    "slurmforge_launch_failures_total": "Nodes whose launch failed, by pool, link and error code.",
    "slurmforge_terminated_instances_total": "Instances terminated, by pool and why (release, orphan, duplicate).",
    "slurmforge_interruptions_total": "Spot interruption notices received.",
    "slurmforge_interruption_errors_total": "Loops whose reading or acknowledging of the spot notice queue failed "
                                            "(the service log says why, once).",
    "slurmforge_replaced_nodes_total": "Static nodes in service again on a new machine, by pool (docs/service.md).",
    "slurmforge_replacement_seconds_total": "Seconds from a static node's failure seen to its replacement seen "
                                            "in service, summed, by pool (over slurmforge_replaced_nodes_total: "
                                            "the mean).",
    "slurmforge_joined_nodes_total": "Machines the service launched whose slurmd registered, by pool.",
    "slurmforge_join_seconds_total": "Seconds from a machine's launch to its slurmd's start (the join share), "
                                     "summed, by pool (over slurmforge_joined_nodes_total: the mean).",
    "slurmforge_service_held_actions_total": "Actions the service held back, by why (docs/service.md).",
    "slurmforge_service_untrusted_loops_total": "Loops whose view of Slurm or the cloud was not trusted, by why.",
    "slurmforge_runaway_records_closed_total": "Runaway job records (slurmdbd: active; slurmctld: unknown) the "
                                               "service closed (docs/service.md).",
}


# --------------------------------------------------------------------------- metrics


def metrics_text(snap: ClusterSnapshot) -> str:
    lines: list[str] = []
    lines += _gauge("slurmforge_pool_nodes", "Nodes of a pool by state.",
                    (({"pool": p.name, "state": s}, p.count(s)) for p in snap.pools for s in NODE_STATES))
    lines += _gauge("slurmforge_pool_gpus", "GPUs of a pool: in use, free on running nodes, powered off.",
                    (({"pool": p.name, "state": k}, v) for p in snap.pools
                     for k, v in (("used", p.gpus_used), ("free", p.gpus_free), ("off", p.gpus_off))))
    lines += _gauge("slurmforge_pool_gpus_wanted", "GPUs the pool's pending jobs ask for.",
                    (({"pool": p.name}, p.gpus_wanted) for p in snap.pools))
    lines += _gauge("slurmforge_pool_spend_dollars", "What the pool's jobs cost this month (TRES billing, sacct).",
                    (({"pool": p.name}, round(p.spend, 4)) for p in snap.pools if p.spend is not None))
    lines += _gauge("slurmforge_pool_recent_launches", f"Nodes launched in the last {snap.window_seconds:.0f} s.",
                    (({"pool": p.name}, p.launches) for p in snap.pools))
    lines += _gauge("slurmforge_pool_recent_launch_failures",
                    f"Node launches failed in the last {snap.window_seconds:.0f} s.",
                    (({"pool": p.name}, p.failures) for p in snap.pools))
    lines += _gauge("slurmforge_node_replacement_stopped",
                    "A static node the service stopped replacing: two new machines failed the same way.",
                    (({"node": node, "pool": p.name}, 1) for p in snap.pools for node, _ in p.stopped))
    cooling = {c.link: c for p in snap.pools for c in p.cooling}
    lines += _gauge("slurmforge_link_cooldown_seconds", "Seconds until a failed link is tried again.",
                    (({"link": link}, max(c.until - snap.taken_at, 0.0)) for link, c in sorted(cooling.items())))
    lines += _gauge("slurmforge_links_cooling", "Links cooling down after failures.", [({}, len(cooling))])
    lines += _gauge("slurmforge_link_quota_blocked",
                    "1 while an EC2 Service Quota (quota_code, quota) stops a link's launches: raise it.",
                    (({"link": link, "quota_code": q.code, "quota": q.name}, 1)
                     for link, c in sorted(cooling.items()) for q in c.quotas))
    lines += _gauge("slurmforge_loop_duration_seconds", "Duration of the last loop.", [({}, snap.loop_seconds)])
    lines += _gauge("slurmforge_snapshot_timestamp_seconds", "When the last loop published.", [({}, snap.taken_at)])
    holding = {h.reason for h in snap.holds}
    lines += _gauge("slurmforge_service_holding", "1 while the service holds actions back, by why (docs/service.md).",
                    (({"reason": r.value}, int(r in holding)) for r in HoldReason))
    lines += _gauge("slurmforge_service_unconfirmed_actions",
                    "Repairs waiting for their verdict to hold over enough loops.", [({}, snap.unconfirmed)])
    lines += _rows_text(snap.gauges, "gauge", USAGE_HELP)
    lines += _rows_text(sorted(snap.counters, key=lambda c: c[0]), "counter", COUNTER_HELP, always=COUNTER_HELP)
    return "\n".join(lines) + "\n"


def _rows_text(rows: Any, kind: str, help_texts: dict[str, str], always: Any = ()) -> list[str]:
    """Rows (name, labels, value) grouped by name, in first-seen order, each with HELP and TYPE."""
    grouped: dict[str, list[str]] = {name: [] for name in always}
    for name, labels, value in rows:
        grouped.setdefault(name, []).append(f"{name}{_labels(labels)} {_number(value)}")
    lines: list[str] = []
    for name, samples in sorted(grouped.items()) if always else grouped.items():
        lines += [f"# HELP {name} {help_texts.get(name, name)}", f"# TYPE {name} {kind}", *samples]
    return lines


def _gauge(name: str, help_text: str, rows: Any) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge",
            *(f"{name}{_labels(labels)} {_number(value)}" for labels, value in rows)]


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items())) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


# --------------------------------------------------------------------------- page


@cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates())),
                              undefined=jinja2.StrictUndefined, autoescape=True, trim_blocks=True,
                              lstrip_blocks=True)


def page_context(snap: ClusterSnapshot) -> dict[str, Any]:
    now = snap.taken_at
    spend = snap.spend
    return {
        "cluster": snap.cluster,
        "updated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(snap.taken_at)),
        "loop_ms": round(snap.loop_seconds * 1000),
        "window_minutes": round(snap.window_seconds / 60),
        "pools": [_pool_context(p, now) for p in snap.pools],
        "events": [{"when": when.clock(e.at), "ago": when.relative(e.at, now), "kind": e.kind, "pool": e.pool,
                    "link": e.link, "count": e.count, "detail": readable_detail(e.detail, now)}
                   for e in snap.events[:30]],
        "holds": [{"reason": h.reason.value, "detail": h.detail, "held": h.held,
                   "since": f"{when.clock(h.since)} ({when.relative(h.since, now)})"} for h in snap.holds],
        "spend": None if spend is None else {
            "since": when.day(spend.since), "read": when.relative(spend.at, now), "error": spend.error,
            "total": money(sum(spend.pools.values()))},
    }


def _pool_context(p: PoolSnapshot, now: float) -> dict[str, Any]:
    return {
        "name": p.name, "kind": p.kind, "market": p.market, "chain": list(p.chain), "total": p.total,
        "min_nodes": p.min_nodes, "max_nodes": p.max_nodes,
        "states": [(s.replace("_", " "), p.count(s)) for s in NODE_STATES if p.count(s)],
        "gpus_used": p.gpus_used, "gpus_free": p.gpus_free, "gpus_off": p.gpus_off, "gpus_wanted": p.gpus_wanted,
        "gpus_total": p.gpus_used + p.gpus_free + p.gpus_off, "launches": p.launches, "failures": p.failures,
        "stopped": p.stopped,
        "cooling": [{"link": c.link, "left": when.duration(c.until - now), "until": when.clock(c.until),
                     "failures": c.failures, "last_error": c.last_error,
                     "quotas": [{"code": q.code, "name": q.name} for q in c.quotas]} for c in p.cooling],
        "running": p.jobs_running, "pending": p.jobs_pending,
        "reasons": [{"reason": r, "count": n} for r, n in p.pending_reasons],
        "jobs": [{"id": j.id, "user": j.user, "account": j.account, "state": j.state.lower(), "gpus": j.gpus,
                  "what": _job_what(j, now)} for j in p.jobs],
        "more_jobs": p.jobs_running + p.jobs_pending - len(p.jobs),
        "spend": None if p.spend is None else money(p.spend),
    }


def _job_what(job: JobRow, now: float) -> str:
    """'waiting 12 min: Resources' / 'running 2 h 05 min'."""
    if job.state == "PENDING":
        waited = f"waiting {when.duration(now - job.since)}" if job.since else "waiting"
        return f"{waited}: {job.reason}"
    ran = f"{job.state.lower()} {when.duration(now - job.since)}" if job.since else job.state.lower()
    return f"{ran}: {job.reason}" if job.reason else ran


_UNTIL = re.compile(r"\buntil (\d{9,11})(?:\.\d+)?\b")
_TOKEN = re.compile(r"^token \S+$")


def readable_detail(detail: str, now: float) -> str:
    """An event's detail with what only the service reads made readable: epoch times as
    clock times ('until 1795449835' from older releases), launch tokens dropped."""
    if _TOKEN.match(detail):
        return ""
    return _UNTIL.sub(lambda m: f"until {when.clock(float(m[1]))} ({when.relative(float(m[1]), now)})", detail)


def render_page(snap: ClusterSnapshot) -> str:
    return environment().get_template("pools.html.j2").render(**page_context(snap))


# --------------------------------------------------------------------------- CLI table


POOL_COLUMNS = (
    Column("pool", "Pool"), Column("kind", "Kind", drop=6), Column("market", "Market", drop=7),
    Column("nodes", "Nodes", numeric=True, drop=4), Column("idle", "Idle", numeric=True),
    Column("busy", "Busy", numeric=True), Column("starting", "Starting", numeric=True),
    Column("off", "Off", numeric=True), Column("down", "Down/drain", numeric=True),
    Column("jobs_running", "Jobs run", numeric=True), Column("jobs_pending", "Jobs wait", numeric=True),
    Column("gpus_used", "GPUs used", numeric=True), Column("gpus_wanted", "GPUs wanted", numeric=True, drop=5),
    Column("gpus_free", "GPUs free", numeric=True), Column("spend_usd", "Spend (USD)", money, numeric=True, drop=3),
    Column("launched", "Launched", numeric=True, drop=9), Column("failed", "Failed", numeric=True, drop=8),
    Column("cooling", "Cooling down", wrap=True),
)
"""`slurmforge pools`: at 80 columns the launches, failures, kind, market, GPUs wanted,
total and spend give way (in that order) to the nodes by state, jobs, GPUs and cooling links."""


def pools_table(snap: ClusterSnapshot) -> Table:
    """`slurmforge pools`: one row per pool; what the service holds back in the notes."""
    since = None if snap.spend is None else datetime.fromtimestamp(snap.spend.since).astimezone()
    table = Table(f"{snap.cluster}: pools", POOL_COLUMNS, meta={
        "cluster": snap.cluster, "period": {"since": since.isoformat(timespec="seconds")} if since else None})
    for p in snap.pools:
        cooling = ", ".join(f"{c.link} ({when.duration(c.until - snap.taken_at)}"
                            f"{''.join(f', quota {q.code or q.name}' for q in c.quotas)})" for c in p.cooling)
        table.rows.append((
            p.name, p.kind, p.market, p.total, p.count("idle"), p.count("allocated") + p.count("mixed"),
            p.count("powering_up"), p.count("powered_down") + p.count("powering_down"),
            p.count("down") + p.count("drained") + p.count("draining"), p.jobs_running, p.jobs_pending,
            p.gpus_used, p.gpus_wanted, p.gpus_free, p.spend, p.launches, p.failures, cooling or None))
    table.notes += [f"HOLDING BACK {h.held} action(s) since {time.strftime('%H:%M:%S', time.gmtime(h.since))}: "
                    f"{h.reason.value}: {h.detail}" for h in snap.holds]
    if snap.spend is not None:
        table.notes.append(f"spend since {when.day(snap.spend.since)} "
                           f"(read {when.relative(snap.spend.at, snap.taken_at)})")
    return table


# --------------------------------------------------------------------------- server


class _Handler(BaseHTTPRequestHandler):
    source: SnapshotSource

    def do_GET(self) -> None:
        snap = type(self).source()
        path = self.path.split("?", 1)[0]
        if path not in ROUTES:
            self._send(404, "text/plain", "not found\n")
        elif snap is None:
            self._send(503, "text/plain", "no loop has finished yet\n")
        else:
            content_type, render = ROUTES[path]
            self._send(200, content_type, render(snap))

    def _send(self, status: int, content_type: str, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)


ROUTES: dict[str, tuple[str, Callable[[ClusterSnapshot], str]]] = {
    "/": ("text/html", render_page),
    "/metrics": ("text/plain; version=0.0.4", metrics_text),
    "/pools.json": ("application/json", ClusterSnapshot.to_json),
    "/healthz": ("text/plain", lambda _: "ok\n"),
}


def serve(source: SnapshotSource, host: str = "127.0.0.1", port: int = SERVICE_PORT) -> ThreadingHTTPServer:
    """Start serving in a background thread; `server.shutdown()` stops it."""
    handler = type("Handler", (_Handler,), {"source": staticmethod(source)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="slurmforge-web", daemon=True).start()
    log.info("serving the pool page and /metrics on http://%s:%d/", host, server.server_address[1])
    return server
