"""Run the project's playbooks through ansible-runner, streaming events to a callback
(the CLI's progress display) and the full output to a log file."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmforge.errors import RolloutError

REPO = Path(__file__).resolve().parents[1]
PLAYBOOKS = REPO / "playbooks"
ROLES = REPO / "roles"


@dataclass
class Progress:
    """What the display shows: the current play and task, hosts done with it."""

    play: str = ""
    task: str = ""
    hosts_done: int = 0
    tasks_done: int = 0


@dataclass
class RolloutResult:
    ok: bool
    changed: dict[str, int] = field(default_factory=dict)
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    """(host, task, message)"""
    seconds: float = 0.0
    log: Path | None = None
    skipped_hosts: int = 0
    """Hosts left out because their last rollout was this exact one."""
    plays: dict[str, float] = field(default_factory=dict)
    """Seconds per play, by play name (e.g. the Ceph bring-up within the rollout)."""

    @property
    def total_changed(self) -> int:
        return sum(self.changed.values())


EventSink = Callable[[Progress], None]


def _failure_message(res: dict[str, Any]) -> str:
    for item in res.get("results") or []:  # a loop: the first failed item says why
        if isinstance(item, dict) and item.get("failed"):
            return f"item {item.get('item', '?')!s:.60}: {_failure_message(item)}"
    for key in ("msg", "stderr", "stdout", "module_stderr"):
        value = res.get(key)
        if value:
            lines = str(value).strip().splitlines()
            return lines[-1][:300] if lines else ""
    return "failed"


def run_playbook(playbook: str, inventory: str | dict[str, Any], log_path: Path, on_event: EventSink | None = None,
                 extravars: dict[str, Any] | None = None, limit: str | None = None,
                 phase: str = "rollout") -> RolloutResult:
    """Run playbooks/<playbook> against an inventory (a directory, or a dict of hosts)."""
    import ansible_runner  # type: ignore[import-untyped]  # deferred: slow import, rollout only

    progress = Progress()
    result = RolloutResult(ok=False, log=log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "a") as logfile, tempfile.TemporaryDirectory(prefix="slurmforge-runner-") as private:
        play_started = [started]

        def handle(event: dict[str, Any]) -> bool:
            if event.get("stdout"):
                logfile.write(event["stdout"] + "\n")
            if event.get("event") in ("playbook_on_play_start", "playbook_on_stats"):
                now = time.monotonic()
                if progress.play:  # the play that ends here
                    result.plays[progress.play] = result.plays.get(progress.play, 0.0) + now - play_started[0]
                play_started[0] = now
            _apply(event, progress, result)
            if on_event is not None:
                on_event(progress)
            return False  # runner need not keep the event on disk

        bin_dir = str(Path(sys.executable).parent)
        envvars = {
            "ANSIBLE_ROLES_PATH": str(ROLES),
            "ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg"),
            "ANSIBLE_FORCE_COLOR": "0",
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        }
        run = ansible_runner.run(
            private_data_dir=private, playbook=str(PLAYBOOKS / playbook), inventory=inventory,
            envvars=envvars, extravars=extravars or {}, limit=limit, quiet=True,
            event_handler=handle, settings={"suppress_ansible_output": True},
        )
        result.seconds = time.monotonic() - started
        result.ok = run.rc == 0 and not result.failures
        if run.rc != 0 and not result.failures:
            result.failures.append(("localhost", playbook, _first_error(log_path) or
                                    f"ansible-playbook exited {run.rc} ({run.status})"))
    if not result.ok:
        host, task, message = result.failures[0]
        raise RolloutError(phase, host, task, message, str(log_path))
    return result


def _apply(event: dict[str, Any], progress: Progress, result: RolloutResult) -> None:
    kind, data = event.get("event", ""), event.get("event_data", {})
    if kind == "playbook_on_play_start":
        progress.play = data.get("play", "")
    elif kind == "playbook_on_task_start":
        progress.task, progress.hosts_done = data.get("task", ""), 0
        progress.tasks_done += 1
    elif kind in ("runner_on_ok", "runner_on_skipped"):
        progress.hosts_done += 1
    elif kind == "runner_on_failed" and not data.get("ignore_errors"):
        res = data.get("res", {})
        result.failures.append((data.get("host", "?"), data.get("task", "?"), _failure_message(res)))
    elif kind == "runner_on_unreachable":
        res = data.get("res", {})
        result.failures.append((data.get("host", "?"), data.get("task", "?"),
                                "unreachable: " + _failure_message(res)))
    elif kind == "playbook_on_stats":
        result.changed = {h: int(n) for h, n in (data.get("changed") or {}).items()}


def _first_error(log_path: Path) -> str:
    """Ansible's own errors (syntax, missing roles) come as [ERROR] lines, not events."""
    for line in log_path.read_text(errors="replace").splitlines():
        clean = line.replace("\x1b[0;31m", "").replace("\x1b[0m", "").strip()
        if clean.startswith(("[ERROR]:", "ERROR!")):
            return clean[:300]
    return ""


def ansible_playbook_available() -> bool:
    return shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) is not None
