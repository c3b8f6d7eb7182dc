"""What the service must remember across restarts, in SQLite (stdlib, WAL).

- launch records: written *before* the provider is called (status pending) and completed
  after. A pending record found later (the daemon died mid-launch) is retried with the
  same idempotency token, so a crash never launches twice;
- bindings: node <-> instance, from launch results, so a node is matched to its machine by
  instance id even before the cloud lists it (EC2 is eventually consistent);
- per-link cooldowns with exponential backoff (60 s, doubling, at most an hour; a link
  whose account quota is used up: 15 min, doubling, at most an hour, with the quotas);
- hand-off requests from the power-saving programs (the job each node is for);
- interruption notices and their progress; per-node marks ("not responding since");
- jobs kept off a replaced static node's new machine until the retries of RPCs sent to
  its dead one are over (service.respond, STALE_RPC_WINDOW), and whether the service
  added the node to each job's ExcNodeList, so that it takes it out again;
- recent events and counters for the pool page and /metrics.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from slurmforge.provider import Quota
from slurmforge.service.handoff import Handoff, HandoffKind
from slurmforge.slurm.client import parse_resume_file

SCHEMA_VERSION = 2
"""2: cooldowns.quotas."""
JOINING = "joining"
"""Mark of a node whose machine the service launched, since the launch, until its slurmd
registered (the join share's event) or the node went back to power save."""
COOLDOWN_START = 60.0
COOLDOWN_MAX = 3600.0
QUOTA_COOLDOWN_START = 900.0
INTERRUPTION_COOLDOWN = 300.0
"""A spot link stays cool at least this long after an interrupted job is requeued (the
checkpoint grace after the notice): EC2 is taking that capacity back, and the requeued job
must find the next link, not a new spot machine taken again minutes later. The AWS
rehearsal found the 60 s of a capacity failure over before the job was even requeued."""
"""A used-up quota stays so until someone raises it: tried again after 15 min, not 60 s."""
EVENTS_KEPT = 2000

SCHEMA = """
CREATE TABLE IF NOT EXISTS launches (
    token TEXT PRIMARY KEY, pool TEXT NOT NULL, link TEXT NOT NULL, nodes TEXT NOT NULL,
    jobs TEXT NOT NULL, created_at REAL NOT NULL, status TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS launches_status ON launches(status);
CREATE TABLE IF NOT EXISTS bindings (
    node TEXT PRIMARY KEY, instance TEXT NOT NULL, link TEXT NOT NULL,
    launched_at REAL NOT NULL, token TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cooldowns (
    link TEXT PRIMARY KEY, until REAL NOT NULL, failures INTEGER NOT NULL,
    last_error TEXT NOT NULL, updated_at REAL NOT NULL, quotas TEXT NOT NULL DEFAULT '[]');
CREATE TABLE IF NOT EXISTS requests (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, nodes TEXT NOT NULL, node_jobs TEXT NOT NULL,
    at REAL NOT NULL, closed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS interruptions (
    instance TEXT PRIMARY KEY, node TEXT, link TEXT, noticed_at REAL NOT NULL, stage TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS marks (
    node TEXT NOT NULL, kind TEXT NOT NULL, since REAL NOT NULL, PRIMARY KEY (node, kind));
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, kind TEXT NOT NULL, pool TEXT NOT NULL,
    link TEXT NOT NULL, count INTEGER NOT NULL, detail TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS signalled (
    job INTEGER PRIMARY KEY, signal TEXT NOT NULL, at REAL NOT NULL, why TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kept_away (
    job INTEGER NOT NULL, node TEXT NOT NULL, until REAL NOT NULL, stage TEXT NOT NULL,
    PRIMARY KEY (job, node));
CREATE TABLE IF NOT EXISTS counters (
    name TEXT NOT NULL, labels TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (name, labels));
"""


def backoff(failures: int, quota: bool = False) -> float:
    """Cooldown after the n-th failure in a row: 60 s, 120 s, 240 s, ... at most 1 h; for a
    used-up quota 15 min, 30 min, 1 h."""
    start = QUOTA_COOLDOWN_START if quota else COOLDOWN_START
    return float(min(start * 2 ** max(failures - 1, 0), COOLDOWN_MAX))


@dataclass(frozen=True)
class Binding:
    node: str
    instance: str
    link: str
    launched_at: float
    token: str


@dataclass(frozen=True)
class LaunchRecord:
    token: str
    pool: str
    link: str
    nodes: tuple[str, ...]
    jobs: tuple[int, ...]
    created_at: float
    status: str = "pending"


@dataclass(frozen=True)
class Cooldown:
    link: str
    until: float
    failures: int
    last_error: str
    updated_at: float
    quotas: tuple[Quota, ...] = ()
    """The account quotas that stopped the link's launches (none: no capacity)."""

    def active(self, now: float) -> bool:
        return self.until > now


@dataclass(frozen=True)
class Request:
    id: str
    kind: HandoffKind
    nodes: str
    at: float


@dataclass(frozen=True)
class InterruptionRecord:
    instance: str
    node: str | None
    link: str | None
    noticed_at: float
    stage: str = "new"
    """new -> signalled (node drained, jobs told) -> done (jobs requeued, node released)"""


@dataclass(frozen=True)
class SignalledJob:
    """A job the service signalled (a spot notice, a failed health check): if the signal
    ends it - a script that neither traps nor passes it on - the service requeues it, as
    Slurm would have at the machine's loss."""

    job: int
    signal: str
    at: float
    why: str = ""


KEEP_NEW, KEEP_ADDED, KEEP_NOTHING = "new", "added", "nothing"


@dataclass(frozen=True)
class KeptAway:
    """A job that ran on a static node's dead machine, kept off the node until `until`.
    stage: new (not excluded yet) -> added (the service added the node to the job's
    ExcNodeList, and takes it out at `until`) or nothing (the job excluded it itself, or
    was not pending: nothing to undo)."""

    job: int
    node: str
    until: float
    stage: str = KEEP_NEW


@dataclass(frozen=True)
class Event:
    at: float
    kind: str
    pool: str
    link: str
    count: int
    detail: str


@dataclass(frozen=True)
class ServiceState:
    """Everything the classifier needs from the database, read once per loop."""

    bindings: Mapping[str, Binding] = field(default_factory=dict)
    pending_launches: tuple[LaunchRecord, ...] = ()
    cooldowns: Mapping[str, Cooldown] = field(default_factory=dict)
    node_jobs: Mapping[str, int] = field(default_factory=dict)
    requests: tuple[Request, ...] = ()
    interruptions: tuple[InterruptionRecord, ...] = ()
    marks: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    signalled: Mapping[int, SignalledJob] = field(default_factory=dict)
    kept_away: tuple[KeptAway, ...] = ()


class Store:
    def __init__(self, path: str | Path, wal: bool = True) -> None:
        """`wal`: False for a store on shared storage (NFS): WAL's index is one host's shared memory."""
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), isolation_level=None, timeout=10.0, check_same_thread=False)
        self._db.execute(f"PRAGMA journal_mode={'WAL' if wal else 'DELETE'}")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._migrate()
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _migrate(self) -> None:
        """A store of an earlier version gets what this one added (the other controller's
        service may be doing the same on a shared store)."""
        if "quotas" in {row[1] for row in self._db.execute("PRAGMA table_info(cooldowns)")}:
            return
        try:
            self._db.execute("ALTER TABLE cooldowns ADD COLUMN quotas TEXT NOT NULL DEFAULT '[]'")
        except sqlite3.OperationalError as exc:
            if "duplicate column" not in str(exc):
                raise

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # ------------------------------------------------------------------ snapshot

    def snapshot(self) -> ServiceState:
        requests = self.open_requests()
        node_jobs: dict[str, int] = {}
        for row in self._db.execute("SELECT node_jobs FROM requests WHERE closed = 0 ORDER BY at"):
            node_jobs.update({k: int(v) for k, v in json.loads(row[0]).items()})
        return ServiceState(
            bindings=self.bindings(), pending_launches=tuple(self.pending_launches()),
            cooldowns=self.cooldowns(), node_jobs=node_jobs, requests=tuple(requests),
            interruptions=tuple(self.interruptions()), marks=self.marks(), signalled=self.signalled(),
            kept_away=tuple(self.kept_away()),
        )

    # ------------------------------------------------------------------ launches

    def begin_launch(self, record: LaunchRecord) -> None:
        """Write-ahead: the intent exists before the provider hears of it."""
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO launches VALUES (?, ?, ?, ?, ?, ?, 'pending')",
                (record.token, record.pool, record.link, json.dumps(record.nodes), json.dumps(record.jobs),
                 record.created_at),
            )

    def finish_launch(self, token: str, bindings: Sequence[Binding]) -> None:
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO bindings VALUES (?, ?, ?, ?, ?)",
                [(b.node, b.instance, b.link, b.launched_at, b.token) for b in bindings],
            )
            db.execute("UPDATE launches SET status = 'done' WHERE token = ?", (token,))

    def abandon_launch(self, token: str) -> None:
        self._db.execute("UPDATE launches SET status = 'abandoned' WHERE token = ?", (token,))

    def pending_launches(self) -> list[LaunchRecord]:
        rows = self._db.execute(
            "SELECT token, pool, link, nodes, jobs, created_at, status FROM launches WHERE status = 'pending'"
            " ORDER BY created_at")
        return [LaunchRecord(r[0], r[1], r[2], tuple(json.loads(r[3])), tuple(json.loads(r[4])), r[5], r[6])
                for r in rows]

    def launch(self, token: str) -> LaunchRecord | None:
        row = self._db.execute(
            "SELECT token, pool, link, nodes, jobs, created_at, status FROM launches WHERE token = ?",
            (token,)).fetchone()
        if row is None:
            return None
        return LaunchRecord(row[0], row[1], row[2], tuple(json.loads(row[3])), tuple(json.loads(row[4])),
                            row[5], row[6])

    # ------------------------------------------------------------------ bindings

    def bind(self, binding: Binding) -> None:
        self._db.execute("INSERT OR REPLACE INTO bindings VALUES (?, ?, ?, ?, ?)",
                         (binding.node, binding.instance, binding.link, binding.launched_at, binding.token))

    def unbind(self, nodes: Iterable[str]) -> None:
        with self._tx() as db:
            db.executemany("DELETE FROM bindings WHERE node = ?", [(n,) for n in nodes])

    def bindings(self) -> dict[str, Binding]:
        rows = self._db.execute("SELECT node, instance, link, launched_at, token FROM bindings")
        return {r[0]: Binding(*r) for r in rows}

    # ------------------------------------------------------------------ cooldowns

    def cool_down(self, link: str, error: str, now: float, quotas: Sequence[Quota] = ()) -> Cooldown:
        """Record a failure of `link` (for these used-up `quotas`, if any); the cooldown
        doubles with each failure in a row."""
        previous = self.cooldowns().get(link)
        failures = (previous.failures if previous else 0) + 1
        cooldown = Cooldown(link, now + backoff(failures, bool(quotas)), failures, error, now, tuple(quotas))
        self.set_cooldown(cooldown)
        return cooldown

    def set_cooldown(self, cooldown: Cooldown) -> None:
        self._db.execute("INSERT OR REPLACE INTO cooldowns VALUES (?, ?, ?, ?, ?, ?)",
                         (cooldown.link, cooldown.until, cooldown.failures, cooldown.last_error, cooldown.updated_at,
                          json.dumps([[q.code, q.name] for q in cooldown.quotas])))

    def link_succeeded(self, link: str) -> Cooldown | None:
        """Forget the link's failures; the cooldown that ended, if there was one."""
        ended = self.cooldowns().get(link)
        self._db.execute("DELETE FROM cooldowns WHERE link = ?", (link,))
        return ended

    def cooldowns(self) -> dict[str, Cooldown]:
        rows = self._db.execute("SELECT link, until, failures, last_error, updated_at, quotas FROM cooldowns")
        return {r[0]: Cooldown(r[0], r[1], r[2], r[3], r[4], tuple(Quota(*q) for q in json.loads(r[5]))) for r in rows}

    # ------------------------------------------------------------------ requests

    def add_handoffs(self, items: Iterable[Handoff]) -> int:
        """Record spool files; the file name is the key, so a file read twice (the daemon
        died before removing it) counts once."""
        rows = []
        for item in items:
            node_jobs = parse_resume_file(item.resume_file).node_jobs() if item.resume_file else {}
            rows.append((item.id, item.kind.value, item.nodes, json.dumps(node_jobs), item.at))
        with self._tx() as db:
            before = db.total_changes
            db.executemany("INSERT OR IGNORE INTO requests (id, kind, nodes, node_jobs, at) VALUES (?, ?, ?, ?, ?)",
                           rows)
            return db.total_changes - before

    def open_requests(self) -> list[Request]:
        rows = self._db.execute("SELECT id, kind, nodes, at FROM requests WHERE closed = 0 ORDER BY at")
        return [Request(r[0], HandoffKind(r[1]), r[2], r[3]) for r in rows]

    def close_requests(self, ids: Iterable[str]) -> None:
        with self._tx() as db:
            db.executemany("UPDATE requests SET closed = 1 WHERE id = ?", [(i,) for i in ids])

    # ------------------------------------------------------------------ interruptions

    def add_interruption(self, record: InterruptionRecord) -> bool:
        cur = self._db.execute("INSERT OR IGNORE INTO interruptions VALUES (?, ?, ?, ?, ?)",
                               (record.instance, record.node, record.link, record.noticed_at, record.stage))
        return cur.rowcount == 1

    def set_interruption_stage(self, instance: str, stage: str) -> None:
        self._db.execute("UPDATE interruptions SET stage = ? WHERE instance = ?", (stage, instance))

    def interruptions(self, include_done: bool = False) -> list[InterruptionRecord]:
        where = "" if include_done else "WHERE stage != 'done'"
        rows = self._db.execute(f"SELECT instance, node, link, noticed_at, stage FROM interruptions {where}")
        return [InterruptionRecord(*r) for r in rows]

    # ------------------------------------------------------------------ signalled jobs

    def add_signalled(self, jobs: Iterable[int], signal: str, at: float, why: str) -> None:
        with self._tx() as db:
            db.executemany("INSERT OR REPLACE INTO signalled VALUES (?, ?, ?, ?)",
                           [(int(j), signal, at, why) for j in jobs])

    def forget_signalled(self, jobs: Iterable[int]) -> None:
        with self._tx() as db:
            db.executemany("DELETE FROM signalled WHERE job = ?", [(int(j),) for j in jobs])

    def signalled(self) -> dict[int, SignalledJob]:
        rows = self._db.execute("SELECT job, signal, at, why FROM signalled")
        return {int(r[0]): SignalledJob(int(r[0]), r[1], r[2], r[3]) for r in rows}

    # ------------------------------------------------------------------ jobs kept away

    def keep_away(self, jobs: Iterable[int], node: str, until: float) -> None:
        """Recorded before the node goes DOWN (a service that dies next excludes them on
        restart); a record already there keeps its stage."""
        with self._tx() as db:
            db.executemany("INSERT OR IGNORE INTO kept_away VALUES (?, ?, ?, ?)",
                           [(int(j), node, until, KEEP_NEW) for j in jobs])

    def set_kept_away(self, job: int, node: str, stage: str) -> None:
        self._db.execute("UPDATE kept_away SET stage = ? WHERE job = ? AND node = ?", (stage, int(job), node))

    def forget_kept_away(self, job: int, node: str) -> None:
        self._db.execute("DELETE FROM kept_away WHERE job = ? AND node = ?", (int(job), node))

    def kept_away(self) -> list[KeptAway]:
        rows = self._db.execute("SELECT job, node, until, stage FROM kept_away ORDER BY node, job")
        return [KeptAway(int(r[0]), r[1], r[2], r[3]) for r in rows]

    # ------------------------------------------------------------------ marks

    def set_mark(self, node: str, kind: str, since: float) -> None:
        self._db.execute("INSERT OR IGNORE INTO marks VALUES (?, ?, ?)", (node, kind, since))

    def clear_mark(self, node: str, kind: str) -> None:
        self._db.execute("DELETE FROM marks WHERE node = ? AND kind = ?", (node, kind))

    def marks(self) -> dict[str, dict[str, float]]:
        found: dict[str, dict[str, float]] = {}
        for node, kind, since in self._db.execute("SELECT node, kind, since FROM marks"):
            found.setdefault(node, {})[kind] = since
        return found

    def prune(self, now: float, keep: float = 86400.0) -> None:
        """Forget finished launches, closed requests and handled notices older than `keep`."""
        with self._tx() as db:
            db.execute("DELETE FROM launches WHERE status != 'pending' AND created_at < ?", (now - keep,))
            db.execute("DELETE FROM requests WHERE closed = 1 AND at < ?", (now - keep,))
            db.execute("DELETE FROM interruptions WHERE stage = 'done' AND noticed_at < ?", (now - keep,))
            db.execute("DELETE FROM signalled WHERE at < ?", (now - keep,))

    # ------------------------------------------------------------------ events, counters

    def add_event(self, event: Event) -> None:
        cur = self._db.execute("INSERT INTO events (at, kind, pool, link, count, detail) VALUES (?, ?, ?, ?, ?, ?)",
                               (event.at, event.kind, event.pool, event.link, event.count, event.detail))
        if cur.lastrowid is not None and cur.lastrowid % 100 == 0:
            self._db.execute("DELETE FROM events WHERE id <= ?", (cur.lastrowid - EVENTS_KEPT,))

    def events(self, since: float = 0.0, limit: int = 200) -> list[Event]:
        rows = self._db.execute(
            "SELECT at, kind, pool, link, count, detail FROM events WHERE at >= ? ORDER BY id DESC LIMIT ?",
            (since, limit))
        return [Event(*r) for r in rows]

    def count(self, name: str, labels: Mapping[str, str], value: float = 1.0) -> None:
        key = json.dumps(dict(sorted(labels.items())))
        self._db.execute(
            "INSERT INTO counters VALUES (?, ?, ?) ON CONFLICT (name, labels) DO UPDATE SET value = value + ?",
            (name, key, value, value))

    def counters(self) -> list[tuple[str, dict[str, str], float]]:
        rows = self._db.execute("SELECT name, labels, value FROM counters ORDER BY name, labels")
        return [(r[0], json.loads(r[1]), r[2]) for r in rows]
