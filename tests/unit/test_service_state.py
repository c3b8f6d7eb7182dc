"""The hand-off programs and the SQLite state: what survives a restart."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_service_world import NOW

from slurmforge.provider import Quota
from slurmforge.service import handoff
from slurmforge.service.handoff import HandoffKind
from slurmforge.service.state import Binding, Event, InterruptionRecord, LaunchRecord, SignalledJob, Store, backoff

pytestmark = pytest.mark.unit

RESUME_FILE = '{"jobs":[{"job_id":7,"nodes":"t-spot-[01-02]"}],"all_nodes":"t-spot-[01-02]"}'


def test_resume_records_hostlist_and_resume_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resume = tmp_path / "fd10"
    resume.write_text(RESUME_FILE)
    monkeypatch.setenv("SLURM_RESUME_FILE", str(resume))
    path = handoff.record(HandoffKind.RESUME, ["t-spot-[01-02]"], tmp_path)
    data = json.loads(path.read_text())
    assert data["kind"] == "resume" and data["nodes"] == "t-spot-[01-02]" and data["resume_file"] == RESUME_FILE
    assert oct(path.stat().st_mode & 0o777) in ("0o660", "0o640", "0o600")  # umask may narrow it
    ((found, item),) = handoff.pending(tmp_path)
    assert found == path and item.kind is HandoffKind.RESUME and handoff.has_pending(tmp_path)


def test_entry_point_runs_as_slurmctld_would(tmp_path: Path) -> None:
    """The console script body: `sys.exit(resume_main())` with Slurm's argv and env."""
    resume = tmp_path / "fd10"
    resume.write_text(RESUME_FILE)
    env = os.environ | {"SLURM_RESUME_FILE": str(resume), handoff.SPOOL_ENV: str(tmp_path)}
    code = "import sys; from slurmforge.service.handoff import resume_main; sys.exit(resume_main())"
    done = subprocess.run([sys.executable, "-c", code, "t-spot-[01-02]"], env=env, capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert [i.nodes for _, i in handoff.pending(tmp_path)] == ["t-spot-[01-02]"]


def test_unwritable_spool_fails_with_a_line_on_stderr(tmp_path: Path) -> None:
    env = os.environ | {handoff.SPOOL_ENV: str(tmp_path / "missing")}
    code = "import sys; from slurmforge.service.handoff import suspend_main; sys.exit(suspend_main())"
    done = subprocess.run([sys.executable, "-c", code, "t-spot-01"], env=env, capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 1 and "cannot record" in done.stderr


def test_handoffs_counted_once_and_jobs_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    resume = tmp_path / "fd"
    resume.write_text(RESUME_FILE)
    monkeypatch.setenv("SLURM_RESUME_FILE", str(resume))
    spool = tmp_path / "spool"
    spool.mkdir()
    handoff.record(HandoffKind.RESUME, ["t-spot-[01-02]"], spool)
    store = Store(tmp_path / "state.db")
    items = [i for _, i in handoff.pending(spool)]
    assert store.add_handoffs(items) == 1
    assert store.add_handoffs(items) == 0  # the daemon died before removing the file
    assert store.snapshot().node_jobs == {"t-spot-01": 7, "t-spot-02": 7}
    store.close_requests([items[0].id])
    assert store.snapshot().node_jobs == {} and store.open_requests() == []


def test_state_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = Store(db)
    store.begin_launch(LaunchRecord("sf-1", "spot", "spot", ("a", "b"), (7,), NOW))
    store.begin_launch(LaunchRecord("sf-2", "spot", "od", ("c",), (), NOW))
    store.finish_launch("sf-2", [Binding("c", "i-c", "od", NOW, "sf-2")])
    store.cool_down("spot", "InsufficientInstanceCapacity", NOW)
    store.add_interruption(InterruptionRecord("i-c", None, None, NOW))
    store.set_mark("c", "unresponsive", NOW)
    store.add_event(Event(NOW, "launch", "spot", "od", 1, "token sf-2"))
    store.count("slurmforge_launched_nodes_total", {"pool": "spot", "link": "od"}, 1)
    store.count("slurmforge_launched_nodes_total", {"link": "od", "pool": "spot"}, 2)
    store.close()

    again = Store(db).snapshot()
    assert [r.token for r in again.pending_launches] == ["sf-1"]
    assert again.pending_launches[0].nodes == ("a", "b") and again.pending_launches[0].jobs == (7,)
    assert again.bindings == {"c": Binding("c", "i-c", "od", NOW, "sf-2")}
    assert again.cooldowns["spot"].until == NOW + 60 and again.cooldowns["spot"].failures == 1
    assert again.interruptions[0].instance == "i-c" and again.marks == {"c": {"unresponsive": NOW}}
    reopened = Store(db)
    assert reopened.events()[0].detail == "token sf-2"
    assert reopened.counters() == [("slurmforge_launched_nodes_total", {"link": "od", "pool": "spot"}, 3.0)]
    assert reopened._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_cooldown_backs_off_and_resets_on_success(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    untils = [store.cool_down("spot", "InsufficientInstanceCapacity", NOW).until - NOW for _ in range(8)]
    assert untils == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert [backoff(n) for n in (1, 2, 3)] == [60, 120, 240]
    store.link_succeeded("spot")
    assert store.cool_down("spot", "x", NOW).until == NOW + 60


G_ON_DEMAND = Quota("L-DB2E81BA", "Running On-Demand G and VT instances")


def test_a_quota_cooldown_is_longer_and_kept_with_its_quotas(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    untils = [store.cool_down("od", "VcpuLimitExceeded", NOW, [G_ON_DEMAND]).until - NOW for _ in range(4)]
    assert untils == [900, 1800, 3600, 3600]
    store.close()
    cooldown = Store(tmp_path / "s.db").cooldowns()["od"]
    assert (cooldown.last_error, cooldown.quotas) == ("VcpuLimitExceeded", (G_ON_DEMAND,))


def test_a_store_of_the_previous_version_gets_the_quota_column(tmp_path: Path) -> None:
    """A service upgraded in place opens the SQLite file its previous release wrote."""
    db = sqlite3.connect(tmp_path / "s.db")
    db.executescript("""CREATE TABLE cooldowns (link TEXT PRIMARY KEY, until REAL NOT NULL,
        failures INTEGER NOT NULL, last_error TEXT NOT NULL, updated_at REAL NOT NULL);
        INSERT INTO cooldowns VALUES ('spot', 1800000060.0, 1, 'InsufficientInstanceCapacity', 1800000000.0);
        PRAGMA user_version=1;""")
    db.close()
    store = Store(tmp_path / "s.db")
    assert store.cooldowns()["spot"].quotas == ()
    store.cool_down("od", "VcpuLimitExceeded", NOW, [G_ON_DEMAND])
    assert store.cooldowns()["od"].quotas == (G_ON_DEMAND,)
    assert Store(tmp_path / "s.db").cooldowns()["spot"].last_error == "InsufficientInstanceCapacity"


def test_begin_launch_twice_keeps_the_first(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.begin_launch(LaunchRecord("sf-1", "spot", "spot", ("a",), (), NOW))
    store.begin_launch(LaunchRecord("sf-1", "spot", "spot", ("a",), (), NOW + 10))  # the retry
    assert [(r.token, r.created_at) for r in store.pending_launches()] == [("sf-1", NOW)]
    store.abandon_launch("sf-1")
    assert store.pending_launches() == [] and store.launch("sf-1").status == "abandoned"  # type: ignore[union-attr]


def test_prune_forgets_only_what_is_finished_and_old(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.begin_launch(LaunchRecord("sf-old-done", "spot", "spot", ("a",), (), NOW - 90_000))
    store.finish_launch("sf-old-done", [])
    store.begin_launch(LaunchRecord("sf-old-pending", "spot", "spot", ("b",), (), NOW - 90_000))
    store.begin_launch(LaunchRecord("sf-new-done", "spot", "spot", ("c",), (), NOW - 10))
    store.finish_launch("sf-new-done", [])
    store.add_interruption(InterruptionRecord("i-1", None, None, NOW - 90_000, "done"))
    store.add_interruption(InterruptionRecord("i-2", None, None, NOW - 90_000, "signalled"))
    store.prune(NOW)
    assert store.launch("sf-old-done") is None
    assert store.launch("sf-old-pending") is not None and store.launch("sf-new-done") is not None
    assert [i.instance for i in store.interruptions(include_done=True)] == ["i-2"]


def test_signalled_jobs_are_kept_across_a_restart_and_forgotten(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.add_signalled((7, 8), "USR1", NOW, "spot interruption notice for c")
    store.close()
    again = Store(tmp_path / "state.db")
    assert again.snapshot().signalled[7] == SignalledJob(7, "USR1", NOW, "spot interruption notice for c")
    again.forget_signalled((7,))
    assert set(again.signalled()) == {8}
    again.prune(NOW + 90_000)
    assert again.signalled() == {}
