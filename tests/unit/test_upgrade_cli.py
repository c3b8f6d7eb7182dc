"""`slurmforge upgrade` on the command line: the plan first, --plan changes nothing, a step out
of Slurm's order ends in one line and exit 15, no terminal and no --yes in exit 13."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from slurmforge import cli
from slurmforge import upgrade_start as start_mod
from slurmforge.drain import JobPolicy
from slurmforge.errors import VersionOrderRefused
from slurmforge.target import Target
from slurmforge.upgrade_start import Start
from tests.unit.test_upgrade_plan import hosts, spec

pytestmark = pytest.mark.unit

finished: list[str] = []
"""The steps the fake fleet's hosts report done."""


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    from slurmforge.upgrade.plan import make_plan

    calls: list[str] = []
    finished.clear()
    plan = make_plan(spec(), hosts(), [], "abc123", "24.11.6", JobPolicy(), local=False)

    def fake_start(where: Path, ui: Any, policy: JobPolicy, plan_only: bool, spec_path: Path | None) -> Start:
        return Start(spec(), type("F", (), {"by_name": {h.name: h for h in hosts()}})(), plan,  # type: ignore[arg-type]
                     "node image abc123: Debian's archive has nothing newer for it")

    def refuse(*args: Any, **kwargs: Any) -> None:
        calls.append("roll")
        raise VersionOrderRefused("slurmd on dev-cpu-01 would run Slurm 24.11.6, newer than slurmctld on "
                                  "dev-controller")

    monkeypatch.setattr(start_mod, "aws_start", fake_start)
    monkeypatch.setattr("slurmforge.upgrade.engine.finished", lambda fleet, plan, record: list(finished))
    monkeypatch.setattr("slurmforge.upgrade.engine.upgrade", refuse)
    monkeypatch.setattr(cli, "_target", lambda *a: Target(False, None, tmp_path))
    monkeypatch.setattr(cli, "_inventory_of", lambda target: tmp_path)
    monkeypatch.setattr("slurmforge.package_data.require", lambda *a: None)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return calls


def test_plan_only_shows_the_steps_and_changes_nothing(started: list[str]) -> None:
    res = CliRunner().invoke(cli.app, ["upgrade", "--inventory", "x", "--plan"])
    assert res.exit_code == 0, res.output
    assert "slurmdbd" in res.output and "primary_controller" in res.output and started == []  # plain: piped
    assert "node image abc123: Debian's archive has nothing newer for it" in res.output


def test_a_refused_step_is_one_line_and_exit_15(started: list[str]) -> None:
    res = CliRunner().invoke(cli.app, ["upgrade", "--inventory", "x", "--yes"])
    assert res.exit_code == 15 and started == ["roll"]
    assert res.output.strip().splitlines()[-1] == \
        "error slurmd on dev-cpu-01 would run Slurm 24.11.6, newer than slurmctld on dev-controller"


def test_no_terminal_and_no_yes_is_not_confirmed(started: list[str]) -> None:
    res = CliRunner().invoke(cli.app, ["upgrade", "--inventory", "x"])
    assert res.exit_code == 13 and started == []


def test_a_cluster_on_the_image_everywhere_has_nothing_to_roll(started: list[str]) -> None:
    from slurmforge.upgrade.plan import Kind, make_plan

    plan = make_plan(spec(), hosts(), [], "abc123", "24.11.6", JobPolicy(), local=False)
    finished.extend(s.key for s in plan.steps if s.kind is not Kind.BACKUPS)  # no dump needed: nothing moves
    res = CliRunner().invoke(cli.app, ["upgrade", "--inventory", "x"])  # no --yes, no terminal: not asked
    assert res.exit_code == 0 and started == [], res.output
    assert res.output.strip().splitlines()[-1] == "cluster dev: every host runs image abc123 (Slurm 24.11.6) - " \
                                                  "nothing to roll"
