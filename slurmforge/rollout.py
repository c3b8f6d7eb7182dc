"""Run the project's playbooks through ansible-runner, streaming events to a callback
(the CLI's progress display) and the full output to a log file."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurmforge import package_data, wheel
from slurmforge.errors import RolloutError
from slurmforge.hosts import Host, HostRole
from slurmforge.inventory import CONTROLLER_PARTS, HOSTS_FILE, NODE_PART, is_controller_input
from slurmforge.package_data import playbooks, require, roles
from slurmforge.progress import Progress as Progress  # what the rollout reports (its display shows it)

CEPH_PLAYBOOK, CLUSTER_PLAYBOOK = "ceph.yml", "cluster.yml"
"""site.yml imports both, one after the other; roll_out runs them at the same time."""
ACCOUNTING_REPORT_TASK = "Accounting - what changed, what was kept, what waits"
"""roles/slurmdbd/tasks/accounts.yml's task that lists, one loop item each, what the
accounting pass changed in slurmdbd; the CLI repeats those lines after the rollout."""


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
    accounting: list[str] = field(default_factory=list)
    """What the accounting passes changed in slurmdbd, kept, or left waiting (one line each)."""

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


def files_digest(files: Iterable[tuple[str, Path]]) -> str:
    """SHA-256 over (name, content) of each file, in the order given."""
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def rollout_digests(inventory: Path, hosts: Iterable[Host]) -> dict[str, dict[str, str]]:
    """What each part of each host's rollout is made of, by host name then part: the mark its
    last complete rollout left (playbooks/rollout_mark.yml, mark_text), so `up` rolls out
    exactly the hosts, and on them the parts, whose inputs changed.

    Every host has the node part, over the generated inventory but the files only the
    controllers' own parts read (inventory.CONTROLLER_PARTS), and slurmforge's roles and
    playbooks. The controllers also have each of their own parts, over the node part's inputs
    and that part's files; the service's part is over slurmforge's own package and files (what
    its wheel is made of: slurmforge.wheel, the same names wherever slurmforge is installed).
    So a partition's limit rolls out the controllers' slurmctld and spec parts alone, and
    spends no task on a compute node (configless: slurmctld's reconfigure gives them the new
    config); a user rolls out every part of every host."""
    files = [(str(p.relative_to(inventory)), p) for p in sorted(inventory.rglob("*"))
             if p.is_file() and "wheel" not in p.relative_to(inventory).parts and p.suffix != ".pyc"]
    shipped = wheel.wheel_files()
    host_side = tuple(f"{package_data.PACKAGE}/{name}/" for name in ("playbooks", "roles"))
    node_files = [*((name, p) for name, p in files if not is_controller_input(name)),
                  *((name, p) for name, p in shipped if name.startswith(host_side))]
    node = {NODE_PART: files_digest(node_files)}
    controller = node | {part: files_digest([*node_files, *_part_files(part, scoped, files, shipped)])
                         for part, scoped in CONTROLLER_PARTS.items()}
    return {h.name: controller if h.role is HostRole.CONTROLLER else node for h in hosts}


def _part_files(part: str, scoped: tuple[str, ...], files: list[tuple[str, Path]],
                shipped: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    if part == "service":
        return shipped
    return [(name, p) for name, p in files
            if any(name == s or (s.endswith("/") and name.startswith(s)) for s in scoped)]


def mark_text(parts: Mapping[str, str]) -> str:
    """A host's mark: one `part digest` line per part, sorted."""
    return "".join(f"{part} {digest}\n" for part, digest in sorted(parts.items()))


def read_mark_text(text: str) -> dict[str, str]:
    """The parts of a mark (mark_text); a mark of another form (an older slurmforge's one
    digest) has none, so every part of the host is rolled out."""
    parts = dict(line.split(" ", 1) for line in text.splitlines() if line.count(" ") == 1)
    return {part: digest.strip() for part, digest in parts.items()}


def stale_parts(hosts: Iterable[str], digests: Mapping[str, Mapping[str, str]], read_mark: Callable[[str], str],
                full: bool = False) -> dict[str, set[str]]:
    """The hosts a rollout must run on, each with its parts whose mark is not their digest in
    `digests` (new, changed, or left half-way by a rollout that failed: a host whose mark is
    gone has every part stale); every host and part if `full`. Hosts with nothing stale are
    left out."""
    stale: dict[str, set[str]] = {}
    for host in hosts:
        marked = {} if full else read_mark_text(read_mark(host))
        parts = {part for part, digest in digests[host].items() if marked.get(part) != digest}
        if parts:
            stale[host] = parts
    return stale


def skipped_parts(stale: Mapping[str, set[str]]) -> list[str]:
    """The parts no host of the rollout needs: skipped (ansible's --skip-tags) on all of them."""
    needed = set().union(*stale.values())
    return sorted(part for part in (NODE_PART, *CONTROLLER_PARTS) if part not in needed)


def service_wheel_dir(cache: Path | None = None) -> Path:
    """Where this machine keeps the scheduler service's wheel (slurmforge.wheel: the running
    package's), named after what goes into it: one build per digest serves every rollout and
    every cluster, and a rollout of unchanged code skips the build."""
    root = cache or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "slurmforge" / "service-wheel"
    return root / wheel.digest()[:16]


def roll_out(inventory: Path, ceph_hosts: Collection[str], log_path: Path, on_event: EventSink | None = None,
             extravars: dict[str, Any] | None = None, limit: Collection[str] | None = None,
             marks: Mapping[str, str] | None = None, skip_parts: Collection[str] = ()) -> RolloutResult:
    """The whole rollout (what site.yml does), with the Ceph hosts (ceph.yml) coming up at
    the same time as the Slurm nodes (cluster.yml): Ceph's bring-up is mostly waiting for
    its daemons. cluster.yml mounts CephFS in its last play, once a file says the Ceph run
    has finished (`slurmforge_ceph_done_file`). The Ceph run logs to <log>-ceph.log; when
    it fails, the other run is cancelled at once instead of waiting for a file system that
    will not come.

    `ceph_hosts`: the inventory's Ceph hosts; `limit`: the hosts to roll out (all when None);
    `marks`: by host, the mark (mark_text of its rollout_digests()) each host that comes
    through every play is left with (None: each host's mark is only removed); `skip_parts`:
    the parts (inventory.CONTROLLER_PARTS, the node part) no host of this rollout needs."""
    # the hosts file, not its directory: Ansible reads every file of an inventory directory as
    # an inventory (the spec, the rendered configs: dozens of parse warnings a run, and a
    # rendered file that happened to parse would add hosts); group_vars/ beside the file load
    hosts_file = str(inventory / HOSTS_FILE)
    extravars = {"scheduler_service_wheel_dir": str(service_wheel_dir()), "scheduler_service_wheel_cached": True,
                 **({"slurmforge_rollout_marks": dict(marks)} if marks else {}), **(extravars or {})}
    skip = ",".join(skip_parts) or None
    ceph = sorted(h for h in ceph_hosts if limit is None or h in limit)
    limit_text = ",".join(sorted(limit)) if limit is not None else None
    if not ceph:
        return run_playbook(CLUSTER_PLAYBOOK, hosts_file, log_path, on_event, extravars, limit_text,
                            skip_tags=skip)
    if limit is not None and set(limit) <= set(ceph):
        return run_playbook(CEPH_PLAYBOOK, hosts_file, log_path, on_event, extravars, ",".join(ceph))
    combined = _Combined(on_event)
    ceph_failed, main_failed = threading.Event(), threading.Event()
    ceph_log = log_path.with_name(f"{log_path.stem}-ceph{log_path.suffix}")
    started = time.monotonic()
    scratch = tempfile.TemporaryDirectory(prefix="slurmforge-ceph-")
    done_file = Path(scratch.name) / "done"  # cluster.yml's CephFS mounts wait for it

    def ceph_run() -> RolloutResult:
        try:
            result = run_playbook(CEPH_PLAYBOOK, hosts_file, ceph_log, combined.ceph, extravars,
                                  ",".join(ceph), cancel=main_failed.is_set)
        except BaseException:
            ceph_failed.set()
            raise
        done_file.write_text("ok\n")
        return result

    with scratch, ThreadPoolExecutor(max_workers=1, thread_name_prefix="ceph-rollout") as pool:
        ceph_future = pool.submit(ceph_run)
        try:
            main = run_playbook(CLUSTER_PLAYBOOK, hosts_file, log_path, combined.main,
                                {**(extravars or {}), "slurmforge_ceph_done_file": str(done_file)}, limit_text,
                                cancel=ceph_failed.is_set, skip_tags=skip)
        except BaseException:
            if ceph_failed.is_set():  # the cause is Ceph's: say that, not "cancelled"
                ceph_future.result()
            main_failed.set()
            raise
        ceph_result = ceph_future.result()
    main.seconds = time.monotonic() - started
    for host, n in ceph_result.changed.items():
        main.changed[host] = main.changed.get(host, 0) + n
    main.plays.update(ceph_result.plays)
    return main


class _Combined:
    """One progress line for two runs: the Slurm nodes' task, and Ceph's while it runs."""

    def __init__(self, sink: EventSink | None) -> None:
        self.sink, self.lock = sink, threading.Lock()
        self.last_main, self.ceph_task = Progress(), ""

    def main(self, progress: Progress) -> None:
        with self.lock:
            self.last_main = progress
            self._emit()

    def ceph(self, progress: Progress) -> None:
        with self.lock:
            self.ceph_task = progress.task
            self._emit()

    def _emit(self) -> None:
        if self.sink is None:
            return
        shown = self.last_main
        if self.ceph_task:
            shown = replace(shown, task=f"{shown.task}  [Ceph: {self.ceph_task}]")
        self.sink(shown)


def run_playbook(playbook: str, inventory: str | dict[str, Any], log_path: Path, on_event: EventSink | None = None,
                 extravars: dict[str, Any] | None = None, limit: str | None = None,
                 phase: str = "rollout", cancel: Callable[[], bool] | None = None,
                 skip_tags: str | None = None) -> RolloutResult:
    """Run playbooks/<playbook> against an inventory (a directory, or a dict of hosts).
    `cancel`: polled while the playbook runs; when it returns True the run stops;
    `skip_tags`: the plays' tags to leave out (comma-separated)."""
    require("ansible_runner", "deploy", "the rollout")
    import ansible_runner  # type: ignore[import-untyped]  # deferred: slow import, rollout only
    from ansible_runner.utils import signal_handler  # type: ignore[import-untyped]

    interrupted = signal_handler()  # main thread only: Ctrl-C / SIGTERM end the run cleanly

    def cancelled() -> bool:
        return bool((interrupted is not None and interrupted()) or (cancel is not None and cancel()))

    progress = Progress(plays_total=count_plays(playbooks() / playbook))
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
            "ANSIBLE_ROLES_PATH": str(roles()),
            "ANSIBLE_CONFIG": str(playbooks() / "ansible.cfg"),
            "ANSIBLE_FORCE_COLOR": "0",
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        }
        run = ansible_runner.run(
            private_data_dir=private, playbook=str(playbooks() / playbook), inventory=inventory,
            envvars=envvars, extravars=extravars or {}, limit=limit, skip_tags=skip_tags, quiet=True,
            event_handler=handle, settings={"suppress_ansible_output": True}, cancel_callback=cancelled,
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
        progress.plays_done += bool(progress.play)
        progress.play, progress.host = data.get("play", ""), ""
    elif kind == "playbook_on_task_start":
        progress.task, progress.hosts_done, progress.host = data.get("task", ""), 0, ""
        progress.tasks_done += 1
    elif kind == "runner_on_start":
        progress.host = data.get("host", "")
    elif kind in ("runner_on_ok", "runner_on_skipped"):
        progress.hosts_done += 1
        progress.host = data.get("host", progress.host)
    elif kind == "runner_on_failed" and not data.get("ignore_errors"):
        res = data.get("res", {})
        result.failures.append((data.get("host", "?"), data.get("task", "?"), _failure_message(res)))
    elif kind == "runner_on_unreachable":
        res = data.get("res", {})
        result.failures.append((data.get("host", "?"), data.get("task", "?"),
                                "unreachable: " + _failure_message(res)))
    elif kind == "runner_item_on_ok" and data.get("task") == ACCOUNTING_REPORT_TASK:
        result.accounting.append(str(data.get("res", {}).get("msg", "")))
    elif kind == "playbook_on_stats":
        result.changed = {h: int(n) for h, n in (data.get("changed") or {}).items()}


def count_plays(playbook: Path) -> int:
    """The plays a playbook runs, through its import_playbook lines (0 when it cannot be read:
    the display then shows no total)."""
    import yaml

    try:
        entries = yaml.safe_load(playbook.read_text()) or []
    except (OSError, yaml.YAMLError):
        return 0
    count = 0
    for entry in entries if isinstance(entries, list) else []:
        imported = entry.get("ansible.builtin.import_playbook") or entry.get("import_playbook")
        count += count_plays(playbook.parent / imported) if imported else int("hosts" in entry)
    return count


def _first_error(log_path: Path) -> str:
    """Ansible's own errors (syntax, missing roles) come as [ERROR] lines, not events."""
    for line in log_path.read_text(errors="replace").splitlines():
        clean = line.replace("\x1b[0;31m", "").replace("\x1b[0m", "").strip()
        if clean.startswith(("[ERROR]:", "ERROR!")):
            return clean[:300]
    return ""


def ansible_playbook_available() -> bool:
    return shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) is not None
