"""Runaway job records (service.runaway): the leader closes them with Slurm's own remedy,
never while slurmctld still holds messages for slurmdbd, and says which it closed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from test_service_daemon import FakeCloud, FakeSlurm, all_nodes, make
from test_service_world import Clock

from slurmforge.service.runaway import CLOSE_COMMAND, QUEUE_COMMAND, Runaway, RunawayCloser, parse_closed
from slurmforge.spec.models import Accounting

pytestmark = pytest.mark.unit

# the shape of what `sacctmgr -i -n -P show runawayjobs format=ID,Submit,Start` printed on the local
# cluster for an array task whose start reached slurmdbd before slurmctld was killed -9
CLOSED = ("NOTE: Runaway jobs are jobs that don't exist in the controller but have a start time and no end "
          "time in the database\n") + """1331_2|2026-11-26T00:32:54|2026-11-26T00:33:15
1402|2026-11-26T00:40:01|2026-11-26T00:40:03

"""
NONE = "Runaway Jobs: No runaway jobs found on cluster dev\n"


def test_the_records_sacctmgr_closed_are_read_from_its_parsable_lines() -> None:
    assert parse_closed(CLOSED) == [Runaway("1331_2", "2026-11-26T00:32:54", "2026-11-26T00:33:15"),
                                    Runaway("1402", "2026-11-26T00:40:01", "2026-11-26T00:40:03")]
    assert parse_closed(NONE) == []
    assert parse_closed("") == []


class Commands:
    def __init__(self, queue: int = 0, closed: str = CLOSED, fail: str = "") -> None:
        self.queue, self.closed, self.fail = queue, closed, fail
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *argv: str) -> str:
        self.calls.append(argv)
        if argv[0] == self.fail:
            raise RuntimeError(f"{argv[0]}: Unable to contact slurm controller")
        if argv == QUEUE_COMMAND:
            return json.dumps({"statistics": {"dbd_agent_queue_size": self.queue}})
        assert argv == CLOSE_COMMAND
        return self.closed


def test_closes_with_sacctmgr_immediate_at_most_once_an_interval() -> None:
    run = Commands()
    closer = RunawayCloser(run, interval=60)
    assert [r.job for r in closer.update(1000.0)] == ["1331_2", "1402"]
    assert run.calls == [QUEUE_COMMAND, CLOSE_COMMAND]
    assert "-i" in CLOSE_COMMAND  # no prompt to answer: sacctmgr commits at once
    assert closer.update(1059.0) == [] and len(run.calls) == 2
    run.closed = NONE
    assert closer.update(1060.0) == [] and len(run.calls) == 4


def test_never_while_messages_for_slurmdbd_are_queued(caplog: pytest.LogCaptureFixture) -> None:
    run = Commands(queue=3)
    with caplog.at_level(logging.INFO):
        assert RunawayCloser(run).update(0.0) == []
    assert run.calls == [QUEUE_COMMAND]  # sacctmgr never ran
    assert "3 message(s) for slurmdbd still queued" in caplog.text


@pytest.mark.parametrize("failing", ["sdiag", "sacctmgr"])
def test_slurm_not_answering_closes_nothing_and_is_said(failing: str, caplog: pytest.LogCaptureFixture) -> None:
    run = Commands(fail=failing)
    closer = RunawayCloser(run, interval=60)
    assert closer.update(0.0) == []
    assert "Unable to contact slurm controller" in caplog.text
    run.fail = ""
    assert closer.update(60.0) != []  # tried again a minute later


def test_the_loop_closes_them_and_leaves_an_event_a_counter_and_a_log_line(
        env: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    slurm = FakeSlurm(all_nodes())
    slurm.runaway_output = CLOSED
    daemon = make(env, slurm, FakeCloud(clock), clock)
    daemon.loop_once()
    assert ("sacctmgr", *CLOSE_COMMAND[1:]) in slurm.commands
    events = [e for e in daemon.store.events() if e.kind == "runaway-closed"]
    assert [(e.count, e.detail) for e in events] == [(2, "1331_2,1402")]
    assert ("slurmforge_runaway_records_closed_total", {}, 2.0) in daemon.store.counters()
    assert "closed runaway job record 1331_2 (submitted 2026-11-26T00:32:54" in caplog.text
    assert daemon.snapshot is not None and any(e.kind == "runaway-closed" for e in daemon.snapshot.events)

    slurm.commands.clear()
    daemon.loop_once()  # within the minute: not asked again
    assert not [c for c in slurm.commands if c[0] == "sacctmgr"]


def test_without_accounting_there_is_nothing_to_close(env: dict[str, Path]) -> None:
    clock = Clock()
    slurm = FakeSlurm(all_nodes())
    slurm.runaway_output = CLOSED
    daemon = make(env, slurm, FakeCloud(clock), clock)
    daemon.read_spec()
    assert daemon.spec is not None
    daemon.spec = daemon.spec.model_copy(update={"accounting": Accounting(enabled=False)})
    assert daemon.close_runaway() == 0
    assert not [c for c in slurm.commands if c[0] in ("sdiag", "sacctmgr")]
    daemon.spec = daemon.spec.model_copy(update={"accounting": Accounting()})
    assert daemon.close_runaway() == 2


def test_a_standby_service_never_closes_them(env: dict[str, Path]) -> None:
    class Follower:
        def check(self) -> object:
            from slurmforge.service.leader import Standing
            return Standing(False, "dev-controller leads")

    clock = Clock()
    slurm = FakeSlurm(all_nodes())
    slurm.runaway_output = CLOSED
    daemon = make(env, slurm, FakeCloud(clock), clock)
    daemon.leadership = Follower()  # type: ignore[assignment]
    daemon.loop_once()
    assert not [c for c in slurm.commands if c[0] in ("sdiag", "sacctmgr")]
