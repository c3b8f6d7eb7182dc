"""The upgrade's order, guard and resume (slurmforge.upgrade.engine) against a fake cluster that
records every call: steps whose hosts already run the new image are skipped (the hosts are
asked; the record is a hint), a different image starts over, a step out of Slurm's order is
refused before it changes anything."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from slurmforge.drain import JobPolicy
from slurmforge.errors import VersionOrderRefused
from slurmforge.upgrade import progress
from slurmforge.upgrade.engine import upgrade
from slurmforge.upgrade.plan import Kind, Step, make_plan
from slurmforge.upgrade.versions import CTLD, DBD, SACKD, SLURMD, Versions
from tests.unit.test_bringup import Notes
from tests.unit.test_upgrade_plan import hosts, node, spec

pytestmark = pytest.mark.unit

OLD, NEW = "24.11.5", "24.11.6"


class FakeFleet:
    """Hosts on images, daemons on versions; every step's call recorded."""

    def __init__(self, on_new: Sequence[str] = (), slurm: str = NEW) -> None:
        self.image: dict[str, str] = {h.name: ("new" if h.name in on_new else "old") for h in hosts()}
        self.running = {DBD: {"dev-controller": OLD}, CTLD: {"dev-controller": OLD, "dev-controller-backup": OLD},
                        SACKD: {"dev-login": OLD}, SLURMD: {h.name: OLD for h in hosts() if h.pool}}
        self.slurm, self.calls, self.replaced_bin = slurm, [], set()  # type: ignore[var-annotated]
        self.dynamic_released = False

    def host_image(self, name: str) -> str | None:
        return self.image.get(name)

    def versions(self, before: dict[str, dict[str, str]]) -> Versions:
        return Versions({d: dict(v) for d, v in self.running.items()})

    def stale_daemons(self, name: str, daemons: Sequence[str]) -> list[str]:
        return [d for d in daemons if (name, d) in self.replaced_bin]

    def in_place(self, step: Step, restart: Sequence[str], last: bool) -> None:
        self.calls.append(("in_place", step.hosts, tuple(restart), last))
        for daemon in restart:
            for host in step.hosts:
                self.running[daemon][host] = self.slurm
                self.replaced_bin.discard((host, daemon))
        if step.kind is Kind.DBD and not last:  # packages of the shared host: its slurmctld's binary replaced
            self.replaced_bin.add((step.hosts[0], CTLD))
        if last:
            for host in step.hosts:
                self.image[host] = "new"

    def replace_static(self, step: Step) -> list[int]:
        self.calls.append(("replace", step.hosts))
        for host in step.hosts:
            self.image[host], self.running[SLURMD][host] = "new", self.slurm
        return [7] if "dev-cpu-01" in step.hosts else []

    def release_dynamic(self, step: Step) -> None:
        self.calls.append(("release", step.hosts, step.idle))
        self.dynamic_released = True

    def dynamic_done(self, step: Step) -> bool:
        return self.dynamic_released


def plan_of(**kw: object) -> object:
    nodes = [node("dev-cpu-05", "idle"), node("dev-cpu-06", "allocated")]
    return make_plan(spec(), hosts(), nodes, "new", NEW, JobPolicy(), local=True)


def dump_to(tmp_path: Path) -> Path:
    out = tmp_path / "backups" / "dev-20261129-041500"  # take_backups' directory
    out.mkdir(parents=True, exist_ok=True)
    (out / "slurm-state.tar.gz").write_bytes(b"x")
    return out


def test_every_step_in_order_then_a_rerun_does_nothing(tmp_path: Path) -> None:
    fleet, ui, plan = FakeFleet(), Notes(), plan_of()
    record = tmp_path / "upgrade.json"
    report = upgrade(fleet, plan, record, ui, lambda: dump_to(tmp_path))  # type: ignore[arg-type]
    assert fleet.calls[:4] == [("in_place", ("dev-controller",), (DBD,), False),
                               ("in_place", ("dev-controller-backup",), (CTLD,), True),
                               ("in_place", ("dev-controller",), (CTLD,), True),
                               ("in_place", ("dev-login",), (SACKD,), True)]
    assert fleet.calls[4] == ("in_place", ("dev-ceph-01",), (), True)  # no Slurm daemon there
    assert [c[0] for c in fleet.calls[5:]] == ["replace", "replace", "replace", "replace", "replace", "release"]
    assert fleet.calls[-1] == ("release", ("dev-cpu-05", "dev-cpu-06"), ("dev-cpu-05",))
    assert report.requeued == [7] and report.dump.endswith("dev-20261129-041500")
    assert ui.phases[2] == f"step 3/{len(plan.steps)}: slurmdbd dev-controller"  # type: ignore[attr-defined]
    again = FakeFleet(on_new=[h.name for h in hosts()])
    again.dynamic_released = True
    second = upgrade(again, plan, record, Notes(), lambda: dump_to(tmp_path))  # type: ignore[arg-type]
    assert again.calls == [] and second.steps == [] and len(second.skipped) == len(plan.steps)  # type: ignore[attr-defined]


def test_an_interrupted_upgrade_goes_on_from_where_it_stopped(tmp_path: Path) -> None:
    plan, record = plan_of(), tmp_path / "upgrade.json"
    fleet = FakeFleet()
    fleet.replace_static = lambda step: (_ for _ in ()).throw(KeyboardInterrupt())  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        upgrade(fleet, plan, record, Notes(), lambda: dump_to(tmp_path))  # type: ignore[arg-type]
    saved = progress.load(record, "new")
    assert "login:dev-login" in saved.done and not any(k.startswith("static") for k in saved.done)
    # the hosts are asked: the heads say they run the new image, so only the nodes are left
    resumed = FakeFleet(on_new=["dev-controller", "dev-controller-backup", "dev-login", "dev-ceph-01"])
    resumed.running = {d: {h: NEW for h in v} for d, v in resumed.running.items()}
    resumed.running[SLURMD] = {h: OLD for h in resumed.running[SLURMD]}
    upgrade(resumed, plan, record, Notes(), lambda: dump_to(tmp_path))  # type: ignore[arg-type]
    assert [c[0] for c in resumed.calls] == ["replace"] * 5 + ["release"]


def test_the_record_is_a_hint_a_host_not_on_the_image_is_done_again(tmp_path: Path) -> None:
    plan, record = plan_of(), tmp_path / "upgrade.json"
    saved = progress.load(record, "new")
    saved.done = {s.key: 1.0 for s in plan.steps}  # type: ignore[attr-defined]
    progress.save(record, saved)
    fleet = FakeFleet(on_new=["dev-controller", "dev-controller-backup", "dev-cpu-01", "dev-cpu-02", "dev-cpu-03",
                              "dev-cpu-04", "dev-gpu-01", "dev-ceph-01"])
    fleet.running = {d: {h: NEW for h in v} for d, v in fleet.running.items()}
    fleet.running[SACKD] = {"dev-login": OLD}
    fleet.dynamic_released = True
    upgrade(fleet, plan, record, Notes(), lambda: dump_to(tmp_path))  # type: ignore[arg-type]
    assert fleet.calls == [("in_place", ("dev-login",), (SACKD,), True)]


def test_a_new_image_starts_over(tmp_path: Path) -> None:
    record = tmp_path / "upgrade.json"
    old = progress.load(record, "older")
    old.done, old.dump = {"slurmdbd:dev-controller": 1.0}, str(dump_to(tmp_path))
    progress.save(record, old)
    fleet = FakeFleet()
    made: list[int] = []
    upgrade(fleet, plan_of(), record, Notes(), lambda: (made.append(1), dump_to(tmp_path))[1])  # type: ignore[arg-type]
    assert made == [1] and fleet.calls[0] == ("in_place", ("dev-controller",), (DBD,), False)


def test_a_step_out_of_order_is_refused_before_it_changes_anything(tmp_path: Path) -> None:
    fleet = FakeFleet()
    fleet.running[DBD]["dev-controller"] = "24.11.4"
    fleet.in_place = lambda step, restart, last: None  # type: ignore[method-assign]  # slurmdbd never moves
    with pytest.raises(VersionOrderRefused, match="newer than slurmdbd on dev-controller"):
        upgrade(fleet, plan_of(), tmp_path / "upgrade.json", Notes(), lambda: dump_to(tmp_path))  # type: ignore[arg-type]
    assert fleet.calls == []


def test_the_primary_restarts_a_slurmdbd_still_on_a_replaced_binary(tmp_path: Path) -> None:
    """Killed after step 3 installed the packages but before slurmdbd restarted: the primary's
    step restarts slurmdbd first, then slurmctld."""
    plan, record = plan_of(), tmp_path / "upgrade.json"
    fleet = FakeFleet(on_new=["dev-controller-backup"])
    fleet.running[CTLD]["dev-controller-backup"] = NEW
    fleet.running[DBD]["dev-controller"] = NEW
    fleet.replaced_bin = {("dev-controller", DBD), ("dev-controller", CTLD)}
    saved = progress.load(record, "new")
    saved.done = {"slurmdbd:dev-controller": 1.0}
    saved.dump = str(dump_to(tmp_path))
    progress.save(record, saved)
    upgrade(fleet, plan, record, Notes(), lambda: dump_to(tmp_path))  # type: ignore[arg-type]
    assert fleet.calls[:2] == [("in_place", ("dev-controller",), (DBD,), False),
                               ("in_place", ("dev-controller",), (CTLD,), True)]


def test_a_daemons_version_is_its_packages_and_a_replaced_binary_is_seen() -> None:
    """RUNNING's answer as Debian 13's hosts give it (sackd has no -V; dpkg-query names every daemon)."""
    from slurmforge.upgrade.fleet import daemon_state

    assert daemon_state("slurm 24.11.5-4+deb13u1\n/usr/sbin/sackd\n") == ("24.11.5-4+deb13u1", False)
    assert daemon_state("slurm 24.11.6-1\n/usr/sbin/slurmctld (deleted)\n") == ("24.11.6-1", True)
    assert daemon_state("slurm \nnot-running\n") == ("", False)


def test_the_primary_controller_takes_the_images_packages_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """slurmdbd's step and slurmctld's step are the same host's (the primary controller): the
    image's playbook runs in the first, not again in the second (its record is only written at
    the end of the second, so the host does not say it runs the image yet) - the AWS
    rehearsal's upgrade ran it twice, 64 s of 396."""
    from slurmforge import rollout
    from slurmforge.upgrade import fleet as fleet_module
    from slurmforge.upgrade.fleet import ClusterFleet, TargetImage

    ran: list[str | None] = []
    monkeypatch.setattr(rollout, "run_playbook", lambda *a, limit=None, **kw: ran.append(limit))
    monkeypatch.setattr(fleet_module, "playbook_vars", lambda os_: {})
    monkeypatch.setattr("slurmforge.image.service_wheels", lambda os_: tmp_path)
    monkeypatch.setattr(ClusterFleet, "restart", lambda self, name, daemon: None)
    monkeypatch.setattr(ClusterFleet, "host_image", lambda self, name: "old")
    monkeypatch.setattr(ClusterFleet, "write_record", lambda self, name: None)
    monkeypatch.setattr(fleet_module, "roll_out_changed", lambda *a, **kw: type("R", (), {"ok": True})())
    cluster = ClusterFleet(spec(), hosts(), tmp_path, None, TargetImage("new", NEW, {}),  # type: ignore[arg-type]
                           tmp_path / "log", Notes(), JobPolicy(), lambda nodes, drains: None)
    primary = ("dev-controller",)
    cluster.in_place(Step(Kind.DBD, primary), (DBD,), last=False)
    cluster.in_place(Step(Kind.PRIMARY, primary), (CTLD,), last=True)
    cluster.in_place(Step(Kind.LOGIN, ("dev-login",)), (SACKD,), last=True)
    assert ran == ["dev-controller", "dev-login"]
