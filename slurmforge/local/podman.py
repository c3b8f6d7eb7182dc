"""A thin podman CLI client: argument lists, JSON output, typed errors.

`podman exec` keeps running if its client is killed, so every call has a timeout and
waits inside containers are wrapped in `timeout`.
"""

from __future__ import annotations

import json
import subprocess
import threading
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from slurmforge.errors import ProvisionError


@dataclass(frozen=True)
class ContainerInfo:
    name: str
    state: str  # created, running, exited, stopped, ...
    pid: int
    labels: dict[str, str]
    image: str
    id: str = ""
    started_at: float = 0.0
    """When the container last started (podman's StartedAt, whole seconds; 0: never)."""

    @property
    def is_running(self) -> bool:
        return self.state == "running" and self.pid > 0

    @property
    def is_dead(self) -> bool:
        """podman's record outlived the container's processes (host restart, machine
        restore; a failed rm or an interrupted stop leaves it "stopping"): it lists as
        running or stopping but cannot start again — a new container can."""
        return self.state in ("running", "stopping") and not runs_in(self.id, self.pid)


def runs_in(container_id: str, pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether process `pid` is the container's: alive and in its cgroup (libpod-<id>).
    A pid alone is not enough: the kernel hands a dead container's pid to the next process
    (a Ceph daemon's thread, on this machine)."""
    if pid <= 0:
        return False
    try:
        cgroup = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return False
    return not container_id or container_id in cgroup


CONTAINERS_CONF = (Path("/usr/share/containers/containers.conf"), Path("/etc/containers/containers.conf"))


def exit_dir(confs: tuple[Path, ...] = CONTAINERS_CONF) -> Path:
    """Where conmon writes containers' exit codes: podman's tmp_dir (containers.conf
    [engine] tmp_dir, the last file that sets it; /run/libpod by default) /exits."""
    tmp = "/run/libpod"
    for conf in confs:
        try:
            engine = tomllib.loads(conf.read_text()).get("engine") or {}
        except (OSError, tomllib.TOMLDecodeError):
            continue
        if isinstance(engine.get("tmp_dir"), str):
            tmp = engine["tmp_dir"]
    return Path(tmp) / "exits"


def run_lines(cmd: list[str], on_line: Callable[[str], None], timeout: float) -> tuple[int, str]:
    """cmd's exit code and its whole output (stdout and stderr as they came), each line passed
    to on_line as it comes (a build's progress); killed after `timeout` seconds (exit -9)."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, errors="replace")
    except FileNotFoundError:
        raise ProvisionError(f"{cmd[0]} is not installed") from None
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            on_line(line.rstrip("\n"))
        return proc.wait(), "".join(lines)
    finally:
        watchdog.cancel()
        if proc.poll() is None:  # on_line raised (Ctrl-C): the build stops with us
            proc.kill()
            proc.wait()


class Podman:
    def __init__(self, binary: str = "podman", timeout: float = 600) -> None:
        self.binary = binary
        self.timeout = timeout

    def run(self, args: list[str], stdin: IO[bytes] | None = None, check: bool = True,
            timeout: float | None = None) -> str:
        cmd = [self.binary, *args]
        try:
            res = subprocess.run(cmd, stdin=stdin, capture_output=True, timeout=timeout or self.timeout)
        except subprocess.TimeoutExpired:
            raise ProvisionError(f"{' '.join(cmd[:4])} timed out after {timeout or self.timeout:.0f} s") from None
        except FileNotFoundError:
            raise ProvisionError("podman is not installed (apt-get install podman)") from None
        out = res.stdout.decode(errors="replace")
        if check and res.returncode != 0:
            err = res.stderr.decode(errors="replace").strip().splitlines()
            raise ProvisionError(f"podman {' '.join(args[:3])} failed: {err[-1] if err else res.returncode}")
        return out

    def json(self, args: list[str]) -> Any:
        out = self.run(args)
        return json.loads(out) if out.strip() else []

    def image_exists(self, tag: str) -> bool:
        return subprocess.run([self.binary, "image", "exists", tag], capture_output=True).returncode == 0

    def containers(self, label: str) -> list[ContainerInfo]:
        rows = self.json(["ps", "-a", "--filter", f"label={label}", "--format", "json"])
        out = []
        for row in rows:
            names = row.get("Names") or [row.get("Name", "")]
            out.append(ContainerInfo(names[0], str(row.get("State", "")).lower(), int(row.get("Pid") or 0),
                                     row.get("Labels") or {}, row.get("Image", ""), row.get("Id", "")))
        return out

    def container(self, name: str) -> ContainerInfo | None:
        rows = self.json(["ps", "-a", "--filter", f"name=^{name}$", "--format", "json"])
        for row in rows:
            names = row.get("Names") or []
            if name in names:
                return ContainerInfo(name, str(row.get("State", "")).lower(), int(row.get("Pid") or 0),
                                     row.get("Labels") or {}, row.get("Image", ""), row.get("Id", ""))
        return None

    def revive(self, info: ContainerInfo, exits: Path | None = None) -> ContainerInfo | None:
        """A container whose processes died under podman (host restart, machine restore) made
        startable again, its disk kept - the local twin of a machine that reboots: conmon, which
        writes a container's exit code into podman's exit directory (`conmon --exit-dir`) as it
        ends, died with it, so podman waits for that file and holds the container "running" or
        "stopping" for good. The code a SIGKILL gives (137) is written where conmon would have,
        and podman, reading it, records the container exited. The container as podman now
        lists it, or None when it is still not startable (then it is made again)."""
        if not info.is_dead or not info.id:
            return None
        exit_file = (exits or exit_dir()) / info.id
        try:
            if not exit_file.exists():
                exit_file.write_text("137")
        except OSError:
            return None
        self.run(["ps", "-a", "--sync", "--filter", f"id={info.id}", "--format", "{{.State}}"], check=False,
                 timeout=120)
        now = self.container(info.name)
        return now if now is not None and now.state in ("exited", "stopped") else None

    def remove_container(self, name: str, attempts: int = 3) -> None:
        """Remove a container, whatever its state. One whose processes died under podman
        (host restart, machine restore: podman still lists it running) fails the first
        `rm -f` ("container state improper") and goes on the next."""
        err = ""
        for _ in range(attempts):
            res = subprocess.run([self.binary, "rm", "-f", "-t", "0", name], capture_output=True, text=True,
                                 timeout=120)
            if not self.container_exists(name):
                return
            err = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
        raise ProvisionError(f"cannot remove container {name}: {err}; remove it with `podman rm -f {name}`")

    def remove_image(self, tag: str) -> bool:
        """`podman rmi` without --force: False (and nothing removed) while a container uses it."""
        return subprocess.run([self.binary, "rmi", tag], capture_output=True, timeout=120).returncode == 0

    def container_exists(self, name: str) -> bool:
        return subprocess.run([self.binary, "container", "exists", name], capture_output=True).returncode == 0

    def read_file(self, name: str, path: str, timeout: float = 30) -> str | None:
        """A file of the container's file system, None when it has none (or no such container):
        `podman cp` reads it from the container's storage, so a stopped container's, or one
        whose processes died with the host, reads as a running one's."""
        import io
        import tarfile

        try:
            res = subprocess.run([self.binary, "cp", f"{name}:{path}", "-"], capture_output=True, timeout=timeout)
        except (subprocess.TimeoutExpired, FileNotFoundError):
            return None
        if res.returncode != 0:
            return None
        try:
            with tarfile.open(fileobj=io.BytesIO(res.stdout)) as archive:
                member = next((m for m in archive.getmembers() if m.isfile()), None)
                found = archive.extractfile(member) if member is not None else None
                return found.read().decode(errors="replace") if found is not None else None
        except tarfile.TarError:
            return None

    def exec(self, name: str, argv: list[str], user: str | None = None, timeout: float = 120,
             check: bool = True, workdir: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [self.binary, "exec", *(["-u", user] if user else []), *(["-w", workdir] if workdir else []), name,
               "timeout", str(int(timeout)), *argv]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 15)
        except subprocess.TimeoutExpired:
            raise ProvisionError(f"{' '.join(argv[:3])} on {name} timed out") from None
        if check and res.returncode != 0:
            err = (res.stderr or res.stdout).strip().splitlines()
            raise ProvisionError(f"{' '.join(argv[:3])} on {name} failed: {err[-1] if err else res.returncode}")
        return res

    def exec_lines(self, name: str, argv: list[str], on_line: Callable[[str], None],
                   timeout: float = 120) -> tuple[int, str]:
        """argv in the container, its output's lines passed to on_line as they come
        (run_lines); its exit code and whole output."""
        cmd = [self.binary, "exec", name, "timeout", str(int(timeout)), *argv]
        return run_lines(cmd, on_line, timeout + 15)

    def network_exists(self, name: str) -> bool:
        return subprocess.run([self.binary, "network", "exists", name], capture_output=True).returncode == 0
