"""Exactly one scheduler service acts: the one beside the slurmctld in control, holding the lock."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

from slurmforge.service.guard import HoldReason
from slurmforge.service.leader import Leadership, in_control
from slurmforge.slurm.client import SlurmClient, parse_ping

HOSTS = ["dev-controller", "dev-controller-backup"]
# `scontrol ping --json` of Slurm 24.11 with the primary down (trimmed: meta, errors, warnings)
PING_PRIMARY_DOWN = json.dumps({"pings": [
    {"hostname": "dev-controller", "pinged": "DOWN", "responding": False, "latency": 1002, "mode": "primary",
     "primary": True},
    {"hostname": "dev-controller-backup", "pinged": "UP", "responding": True, "latency": 310, "mode": "backup",
     "primary": False}], "errors": [], "warnings": []})


def test_the_first_controller_that_answers_is_in_control() -> None:
    assert in_control(HOSTS, {"dev-controller": True, "dev-controller-backup": True}) == "dev-controller"
    assert in_control(HOSTS, {"dev-controller": False, "dev-controller-backup": True}) == "dev-controller-backup"
    assert in_control(HOSTS, {"dev-controller": False, "dev-controller-backup": False}) is None


def test_ping_json_is_read_even_when_scontrol_exits_non_zero() -> None:
    import subprocess

    def runner(argv: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, PING_PRIMARY_DOWN, "")

    assert SlurmClient(runner).ping() == {"dev-controller": False, "dev-controller-backup": True}
    assert parse_ping(PING_PRIMARY_DOWN)["dev-controller-backup"] is True


def test_one_controller_always_acts_without_a_lock(tmp_path: Path) -> None:
    lead = Leadership("dev-controller", HOSTS[:1], tmp_path, lambda: {})
    assert lead.check().acting and not lead.held


def test_the_backup_acts_only_while_the_primary_is_down_and_hands_back(tmp_path: Path) -> None:
    view = {"dev-controller": True, "dev-controller-backup": True}
    backup = Leadership("dev-controller-backup", HOSTS, tmp_path, lambda: view)
    standing = backup.check()
    assert not standing.acting and "dev-controller is in control" in standing.why
    view["dev-controller"] = False
    assert backup.check().acting and backup.held
    assert (tmp_path / "leader.lock").read_text().startswith("dev-controller-backup ")
    view["dev-controller"] = True
    assert not backup.check().acting and not backup.held


def test_no_controller_answering_is_held_as_an_outage_not_a_standby(tmp_path: Path) -> None:
    """Both slurmctlds down is the outage a single controller has: the page and /metrics say
    slurm-view (never-down's hold), not that another service leads."""
    lead = Leadership("dev-controller", HOSTS, tmp_path, lambda: {h: False for h in HOSTS})
    standing = lead.check()
    assert not standing.acting and standing.reason is HoldReason.SLURM_VIEW and "holding" in standing.why
    other = Leadership("dev-controller-backup", HOSTS, tmp_path, lambda: dict.fromkeys(HOSTS, True))
    assert other.check().reason is HoldReason.STANDBY


def test_a_failed_ping_lets_go(tmp_path: Path) -> None:
    answers: list[dict[str, bool]] = [{"dev-controller": True}]

    def ping() -> dict[str, bool]:
        if not answers:
            raise OSError("scontrol: not found")
        return answers.pop()

    lead = Leadership("dev-controller", HOSTS, tmp_path, ping)
    assert lead.check().acting
    standing = lead.check()
    assert not standing.acting and "scontrol ping failed" in standing.why and not lead.held
    assert standing.reason is HoldReason.SLURM_VIEW


# ----------------------------------------------------------------------------- two processes


def _contender(me: str, shared: str, view_file: str, log_file: str, seed: int) -> None:
    """A service's loop, reduced to the leadership check and an 'action' bracketed in a log."""
    rng = random.Random(seed)

    def ping() -> dict[str, bool]:
        return dict(json.loads(Path(view_file).read_text()))

    lead = Leadership(me, HOSTS, Path(shared), ping)
    with open(log_file, "a", buffering=1) as log:
        while True:
            if lead.check().acting:
                log.write(f"B {time.monotonic_ns()}\n")
                time.sleep(rng.uniform(0, 0.004))
                log.write(f"E {time.monotonic_ns()}\n")
            time.sleep(rng.uniform(0, 0.002))


def _intervals(log: Path, deaths: list[int]) -> list[tuple[int, int]]:
    """Acting intervals; one cut short by a kill ends at that kill."""
    out: list[tuple[int, int]] = []
    begin: int | None = None
    for line in log.read_text().splitlines():
        kind, at = line.split()
        if kind == "B":
            if begin is not None:  # killed mid-action: ended at the first kill after it began
                out.append((begin, next(d for d in deaths if d > begin)))
            begin = int(at)
        elif begin is not None:
            out.append((begin, int(at)))
            begin = None
    if begin is not None:
        out.append((begin, next((d for d in deaths if d > begin), time.monotonic_ns())))
    return out


def test_never_two_leaders_under_random_kills_and_flapping_views(tmp_path: Path) -> None:
    """Two services contend for 3 s while Slurm's view flips at random and either one is
    kill -9'd at random points and restarted: no two acting intervals ever overlap, and
    both led at some point (the lock moves)."""
    rng = random.Random(7)
    view = tmp_path / "view.json"
    view.write_text(json.dumps({h: True for h in HOSTS}))
    logs = {h: tmp_path / f"{h}.log" for h in HOSTS}
    deaths: dict[str, list[int]] = {h: [] for h in HOSTS}
    ctx = multiprocessing.get_context("fork")

    def start(host: str) -> multiprocessing.process.BaseProcess:
        proc = ctx.Process(target=_contender, args=(host, str(tmp_path), str(view), str(logs[host]),
                                                    rng.randrange(1 << 30)), daemon=True)
        proc.start()
        return proc

    procs = {h: start(h) for h in HOSTS}
    end = time.monotonic() + 3.0
    try:
        while time.monotonic() < end:
            time.sleep(rng.uniform(0.01, 0.08))
            if rng.random() < 0.5:  # Slurm's view changes: the primary answers or not
                tmp = view.with_suffix(".tmp")
                tmp.write_text(json.dumps({"dev-controller": rng.random() < 0.5, "dev-controller-backup": True}))
                tmp.replace(view)
            else:  # one service dies mid-whatever and systemd starts it again
                victim = rng.choice(HOSTS)
                assert procs[victim].pid is not None
                deaths[victim].append(time.monotonic_ns())  # before the kill: never later than the death
                os.kill(procs[victim].pid, signal.SIGKILL)
                procs[victim].join()
                procs[victim] = start(victim)
    finally:
        for proc in procs.values():
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
            proc.join()
    intervals = {h: _intervals(logs[h], deaths[h]) for h in HOSTS}
    assert all(intervals.values()), {h: len(v) for h, v in intervals.items()}  # both led at some point
    primary, backup = intervals[HOSTS[0]], intervals[HOSTS[1]]
    overlaps = [(a, b) for a in primary for b in backup if a[0] < b[1] and b[0] < a[1]]
    assert not overlaps, overlaps[:3]
    assert sum(len(d) for d in deaths.values()) >= 5
