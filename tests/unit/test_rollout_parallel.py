"""roll_out: ceph.yml and cluster.yml at the same time, merged into one result; a Ceph
failure cancels the other run and is the error the user sees. (run_playbook itself is
exercised by every `up` of the local cluster; here it is replaced to observe timing.)"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from slurmforge import rollout
from slurmforge.errors import RolloutError
from slurmforge.rollout import CEPH_PLAYBOOK, CLUSTER_PLAYBOOK, Progress, RolloutResult, roll_out, service_wheel_dir

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


class FakeRuns:
    def __init__(self, seconds: float = 0.3, ceph_fails: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.spans: dict[str, tuple[float, float]] = {}
        self.seconds, self.ceph_fails = seconds, ceph_fails
        self.done_seen = False
        self.lock = threading.Lock()

    def __call__(self, playbook: str, inventory: str, log_path: Path, on_event: Any = None,
                 extravars: Any = None, limit: str | None = None, phase: str = "rollout",
                 cancel: Any = None, skip_tags: str | None = None) -> RolloutResult:
        with self.lock:
            self.calls.append({"playbook": playbook, "limit": limit, "log": log_path, "extravars": extravars,
                               "skip_tags": skip_tags})
        start = time.monotonic()
        if on_event is not None:
            on_event(Progress(play=playbook, task=f"task of {playbook}"))
        deadline = start + (0.05 if playbook == CEPH_PLAYBOOK and self.ceph_fails else self.seconds)
        while time.monotonic() < deadline:
            if cancel is not None and cancel():
                self.spans[playbook] = (start, time.monotonic())
                raise RolloutError("rollout", "localhost", playbook, "cancelled", str(log_path))
            time.sleep(0.01)
        if playbook == CLUSTER_PLAYBOOK and extravars and "slurmforge_ceph_done_file" in extravars:
            done = Path(extravars["slurmforge_ceph_done_file"])  # what the CephFS mount play waits for
            while not done.exists() and not (cancel is not None and cancel()):
                time.sleep(0.01)
            self.done_seen = done.exists()
        self.spans[playbook] = (start, time.monotonic())
        if playbook == CEPH_PLAYBOOK and self.ceph_fails:
            raise RolloutError("rollout", "ceph-01", "Make the monitor", "mon did not start", str(log_path))
        host = "ceph-01" if playbook == CEPH_PLAYBOOK else "ctl"
        return RolloutResult(ok=True, changed={host: 3, "shared": 1}, plays={playbook: self.seconds})


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> FakeRuns:
    fake = FakeRuns()
    monkeypatch.setattr(rollout, "run_playbook", fake)
    return fake


def test_without_ceph_hosts_only_the_cluster_playbook_runs(runs: FakeRuns, tmp_path: Path) -> None:
    result = roll_out(tmp_path, [], tmp_path / "up.log", limit=["ctl", "cpu-01"])
    assert [c["playbook"] for c in runs.calls] == [CLUSTER_PLAYBOOK]
    assert runs.calls[0]["limit"] == "cpu-01,ctl"
    assert result.changed == {"ctl": 3, "shared": 1}


def test_ceph_and_cluster_run_at_the_same_time_and_merge(runs: FakeRuns, tmp_path: Path) -> None:
    shown: list[str] = []
    started = time.monotonic()
    result = roll_out(tmp_path, ["ceph-01"], tmp_path / "up.log", lambda p: shown.append(p.task),
                      extravars={"x": 1})
    elapsed = time.monotonic() - started
    assert {c["playbook"] for c in runs.calls} == {CEPH_PLAYBOOK, CLUSTER_PLAYBOOK}
    (c0, c1), (m0, m1) = runs.spans[CEPH_PLAYBOOK], runs.spans[CLUSTER_PLAYBOOK]
    assert c0 < m1 and m0 < c1, "the two runs overlap"
    assert elapsed < 2 * runs.seconds
    ceph_call = next(c for c in runs.calls if c["playbook"] == CEPH_PLAYBOOK)
    assert ceph_call["limit"] == "ceph-01" and ceph_call["log"] == tmp_path / "up-ceph.log"
    extra = {c["playbook"]: c["extravars"] for c in runs.calls}
    assert extra[CEPH_PLAYBOOK]["x"] == 1 and extra[CLUSTER_PLAYBOOK]["x"] == 1
    # both runs build (or reuse) the service's wheel in the directory of these sources
    assert extra[CLUSTER_PLAYBOOK]["scheduler_service_wheel_dir"] == str(service_wheel_dir())
    assert extra[CLUSTER_PLAYBOOK]["scheduler_service_wheel_cached"] is True
    assert runs.done_seen, "the Ceph run's done file appeared for the cluster run"
    assert result.changed == {"ctl": 3, "ceph-01": 3, "shared": 2}
    assert set(result.plays) == {CEPH_PLAYBOOK, CLUSTER_PLAYBOOK}
    assert any("[Ceph: task of ceph.yml]" in t for t in shown), shown


def test_a_limit_without_the_ceph_host_leaves_ceph_alone(runs: FakeRuns, tmp_path: Path) -> None:
    roll_out(tmp_path, ["ceph-01"], tmp_path / "up.log", limit=["cpu-03"])
    assert [(c["playbook"], c["limit"]) for c in runs.calls] == [(CLUSTER_PLAYBOOK, "cpu-03")]


def test_a_limit_of_only_ceph_hosts_runs_only_ceph(runs: FakeRuns, tmp_path: Path) -> None:
    roll_out(tmp_path, ["ceph-01"], tmp_path / "up.log", limit=["ceph-01"])
    assert [(c["playbook"], c["limit"]) for c in runs.calls] == [(CEPH_PLAYBOOK, "ceph-01")]


def test_a_ceph_failure_cancels_the_cluster_run_and_is_what_the_user_sees(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = FakeRuns(seconds=30, ceph_fails=True)
    monkeypatch.setattr(rollout, "run_playbook", fake)
    started = time.monotonic()
    with pytest.raises(RolloutError) as info:
        roll_out(tmp_path, ["ceph-01"], tmp_path / "up.log")
    assert time.monotonic() - started < 5, "the cluster run was not cancelled"
    assert info.value.host == "ceph-01" and "mon did not start" in str(info.value)


def test_site_yml_is_ceph_then_cluster() -> None:
    """Admins' `ansible-playbook site.yml` runs the same two playbooks, in order."""
    import yaml

    site = yaml.safe_load((PLAYBOOKS / "site.yml").read_text())
    assert [p["ansible.builtin.import_playbook"] for p in site] == [CEPH_PLAYBOOK, CLUSTER_PLAYBOOK]
    def hosts(playbook: str, variables: dict[str, str] | None = None) -> set[str]:
        """The host patterns of every play, through imported playbooks and their vars."""
        found: set[str] = set()
        for play in yaml.safe_load((PLAYBOOKS / playbook).read_text()):
            if "ansible.builtin.import_playbook" in play:
                found |= hosts(play["ansible.builtin.import_playbook"], play.get("vars") or {})
            else:
                pattern = play["hosts"]
                for name, value in (variables or {}).items():
                    pattern = pattern.replace("{{ " + name + " }}", value)
                found.add(pattern)
        return found

    ceph_hosts, cluster_hosts = hosts(CEPH_PLAYBOOK), hosts(CLUSTER_PLAYBOOK)
    assert ceph_hosts == {"ceph"} and "ceph" not in " ".join(cluster_hosts)
