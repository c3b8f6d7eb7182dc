"""The upgrade's order, its version guard and its resume.

Each step of the plan is a phase of the CLI's display. Before a step: is it done already (its
hosts report the new image - the record in upgrade.json is only a hint), then Slurm's version
order with the cluster as it runs now (slurmforge.upgrade.versions: refused in one line, nothing
changed), then the step, then the record. A step that fails leaves the cluster working:
everything before it is on the new image in Slurm's order, everything after on the old.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from slurmforge.bringup import Phases
from slurmforge.hostlists import compress
from slurmforge.upgrade import progress
from slurmforge.upgrade.plan import Kind, Step, UpgradePlan
from slurmforge.upgrade.versions import CTLD, DBD, SACKD, Versions, check_move

RESTARTS = {Kind.DBD: (DBD,), Kind.BACKUP: (CTLD,), Kind.PRIMARY: (DBD, CTLD), Kind.LOGIN: (SACKD,),
            Kind.CEPH: ()}
"""The daemons each in-place step restarts, in Slurm's order (the primary's slurmdbd again
only when its binary was replaced after the slurmdbd step: a resumed run)."""


class Fleet(Protocol):
    """The steps on a cluster (slurmforge.upgrade.fleet.ClusterFleet)."""

    def host_image(self, name: str) -> str | None: ...
    def versions(self, before: dict[str, dict[str, str]]) -> Versions: ...
    def stale_daemons(self, name: str, daemons: Sequence[str]) -> list[str]: ...
    def in_place(self, step: Step, restart: Sequence[str], last: bool) -> None: ...
    def replace_static(self, step: Step) -> list[int]: ...
    def release_dynamic(self, step: Step) -> None: ...
    def dynamic_done(self, step: Step) -> bool: ...


@dataclass
class UpgradeReport:
    steps: list[tuple[str, float]] = field(default_factory=list)
    """(step, seconds) of the steps this run did."""
    skipped: list[str] = field(default_factory=list)
    requeued: list[int] = field(default_factory=list)
    dump: str = ""
    seconds: float = 0.0


def is_done(fleet: Fleet, step: Step, record: progress.Progress, shares_dbd: bool) -> bool:
    """Do the step's hosts already run the new image (asked, not taken from the record)?"""
    if step.kind is Kind.IMAGE:
        return True  # made before the plan: the plan names its digest
    if step.kind is Kind.BACKUPS:
        return bool(record.dump) and Path(record.dump).is_dir()
    if step.kind is Kind.DYNAMIC:  # each powered down, going down, or on the image
        return fleet.dynamic_done(step)
    on_image = all(fleet.host_image(h) == record.image for h in step.hosts)
    if step.kind is Kind.DBD and shares_dbd and not on_image:
        # the primary's RECORD comes with its own step: slurmdbd's is done when the record says
        # so and slurmdbd no longer runs a binary the upgrade replaced
        return step.key in record.done and not fleet.stale_daemons(step.hosts[0], [DBD])
    return on_image and not any(fleet.stale_daemons(h, RESTARTS.get(step.kind, ())) for h in step.hosts)


def shares_slurmdbd(plan: UpgradePlan) -> bool:
    """Does slurmdbd run on the primary controller (one host, two steps)?"""
    primary = next((s.hosts for s in plan.steps if s.kind is Kind.PRIMARY), ())
    return any(s.kind is Kind.DBD and s.hosts == primary for s in plan.steps)


def finished(fleet: Fleet, plan: UpgradePlan, record: progress.Progress) -> list[str]:
    """The steps whose hosts already run the new image (asked, as the run asks them): what
    the plan marks done, and all of them when there is nothing to roll."""
    shares = shares_slurmdbd(plan)
    return [step.key for step in plan.steps if is_done(fleet, step, record, shares)]


def run_step(fleet: Fleet, step: Step, plan: UpgradePlan, dump: Callable[[], Path], shares_dbd: bool,
             record: progress.Progress) -> list[int]:
    """The step itself; the jobs it requeued."""
    if step.kind is Kind.BACKUPS:
        record.dump = str(dump())
    elif step.kind in RESTARTS:
        restart = RESTARTS[step.kind]
        if step.kind is Kind.PRIMARY and shares_dbd:
            restart = (*fleet.stale_daemons(step.hosts[0], [DBD]), CTLD)
        elif step.kind is Kind.PRIMARY:
            restart = (CTLD,)
        fleet.in_place(step, restart, last=not (step.kind is Kind.DBD and shares_dbd))
    elif step.kind is Kind.STATIC:
        return fleet.replace_static(step)
    elif step.kind is Kind.DYNAMIC:
        fleet.release_dynamic(step)
    return []


def upgrade(fleet: Fleet, plan: UpgradePlan, record_path: Path, ui: Phases, dump: Callable[[], Path],
            clock: Callable[[], float] = time.monotonic) -> UpgradeReport:
    """Every step of `plan` not done yet, in order, each behind the version guard."""
    started, report = clock(), UpgradeReport()
    record = progress.load(record_path, plan.image)
    if not record.before:
        record.before = fleet.versions({}).running
        progress.save(record_path, record)
    shares_dbd = shares_slurmdbd(plan)
    for number, step in enumerate(plan.steps, 1):
        where = f" {compress(list(step.hosts))}" if step.hosts else ""
        with ui.phase(f"step {number}/{len(plan.steps)}: {step.kind.value}{where}"):
            if is_done(fleet, step, record, shares_dbd):
                report.skipped.append(step.key)
                ui.note(f"{step.kind.value}{where}: already done")
                if step.key not in record.done:
                    progress.mark_done(record_path, record, step.key, 0.0)
                continue
            if step.moves:
                check_move(fleet.versions(record.before), step.moved(), plan.slurm)
            began = clock()
            report.requeued += run_step(fleet, step, plan, dump, shares_dbd, record)
            seconds = clock() - began
            progress.mark_done(record_path, record, step.key, seconds)
            report.steps.append((step.key, seconds))
    report.dump, report.seconds = record.dump, clock() - started
    return report
