"""An Executor on one node of a cluster, from its inventory's host entry.

Local nodes (the inventory sets `slurmforge_container`) are reached through
`podman exec -i`; every other node through ssh with the inventory's connection vars
(slurmforge.connection: ansible_host, ansible_user, ansible_port, the key, the common args
such as a ProxyJump). Work runs as root (`sudo -n` when the inventory says so), or
as a cluster user when asked (`podman exec -u`; `runuser` over ssh), under `umask 022`,
inside `timeout` on the node: a `podman exec` whose client dies keeps running otherwise.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmforge.connection import becomes_root, container, ssh_argv
from slurmforge.errors import NeedsRoot, NodeUnreachable, RemoteError, one_line
from slurmforge.hosts import Host
from slurmforge.remote.executor import DEFAULT_TIMEOUT, Completed

log = logging.getLogger(__name__)

# `sh -c SCRIPT sh ARGS...`: the script is a constant, the arguments stay arguments.
UMASK_EXEC = 'umask 022; exec "$@"'
READ_SCRIPT = '[ -e "$1" ] || exit 3; exec cat -- "$1"'
WRITE_SCRIPT = 'cat > "$1" && chmod 0644 -- "$1"'
MISSING = 3
PODMAN_FAILED = 125  # podman's own error (no such container, not running), not the command's
GRACE = 30.0  # the client waits this much longer than the node-side `timeout`


@dataclass
class NodeExecutor:  # not frozen: Executor.name is a plain attribute
    """Runs argument lists on one node as root, or as a cluster user (`podman exec -u` in the
    prefix, or `run_as`), files world-readable."""

    name: str
    prefix: tuple[str, ...]
    """How to reach the node: `podman exec -i NAME` or `ssh ... user@host`."""
    remote_shell: bool = False
    """ssh joins its arguments into one string for the remote shell: quote them."""
    sudo: bool = False
    run_as: str | None = None
    """A user to become on the node (`runuser`), for a transport that cannot log in as them."""

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = DEFAULT_TIMEOUT) -> Completed:
        return self._exec(argv, env, timeout, None)

    def run_with_input(self, argv: Sequence[str], stdin: str, timeout: float = DEFAULT_TIMEOUT) -> Completed:
        """argv with `stdin` on its standard input (a secret that must not be in an argv)."""
        return self._exec(argv, None, timeout, stdin)

    def read_file(self, path: str) -> str | None:
        done = self._exec(["sh", "-c", READ_SCRIPT, "sh", path], None, 120, None)
        if done.rc == MISSING:
            return None
        if not done.ok:
            raise RemoteError(f"reading {path} failed on {self.name}: {done.reason()}")
        return done.stdout

    def write_file(self, path: str, text: str) -> None:
        done = self._exec(["sh", "-c", WRITE_SCRIPT, "sh", path], None, 120, text)
        if not done.ok:
            raise RemoteError(f"writing {path} failed on {self.name}: {done.reason()}")

    def command(self, argv: Sequence[str], env: Mapping[str, str] | None, timeout: float) -> list[str]:
        """The full local argument list that runs argv on the node."""
        inner = ["timeout", str(int(timeout)), *(["sudo", "-n"] if self.sudo else []),
                 *(["runuser", "-u", self.run_as, "--"] if self.run_as else []),
                 "env", *(f"{k}={v}" for k, v in (env or {}).items()),
                 "sh", "-c", UMASK_EXEC, "sh", *argv]
        return [*self.prefix, *([shlex.join(inner)] if self.remote_shell else inner)]

    def _exec(self, argv: Sequence[str], env: Mapping[str, str] | None, timeout: float,
              stdin: str | None) -> Completed:
        full = self.command(argv, env, timeout)
        log.debug("run on %s: %s", self.name, argv)
        try:
            proc = subprocess.run(full, input=stdin if stdin is not None else "", capture_output=True,
                                  text=True, timeout=timeout + GRACE, check=False)
        except subprocess.TimeoutExpired:
            return Completed(tuple(argv), 124, "", f"timed out after {timeout:.0f} s")
        except OSError as exc:
            return Completed(tuple(argv), 127, "", f"{full[0]}: {exc.strerror}")
        if proc.returncode == 255 and self.remote_shell:  # ssh's own failure, not the command's
            log_file = self._log(proc.stderr)
            raise NodeUnreachable(f"cannot reach {self.name} over ssh: {_last_line(proc.stderr)}; fix: check the "
                                  f"inventory's ansible_host/ansible_user and the key (ssh's words: {log_file})")
        if proc.returncode == PODMAN_FAILED and self.prefix[:2] == ("podman", "exec"):
            if os.geteuid() != 0:  # the containers are root's: this user's podman has none
                raise NeedsRoot()
            log_file = self._log(proc.stderr)
            raise NodeUnreachable(f"cannot reach {self.name} through podman: its container is not running; fix: "
                                  f"`sudo slurmforge status --local` shows what runs, `sudo slurmforge up --local` "
                                  f"starts it (podman's words: {log_file})")
        return Completed(tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def _log(self, stderr: str) -> Path | str:
        """podman's or ssh's whole answer, appended to the log the error line names."""
        from slurmforge.state_dirs import log_dir

        path = log_dir() / "reach.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as out:
                out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {self.name}: {' '.join(self.prefix)}\n"
                          f"{stderr.rstrip()}\n")
        except OSError:
            return "not logged: the log directory is not writable"
        return path


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("Warning:")]
    return one_line(lines[-1], 200) if lines else "no answer"


def executor_for(host: Host, user: str | None = None) -> NodeExecutor:
    """podman exec for a local node, ssh with the inventory's connection vars otherwise
    (slurmforge.connection); as root, or as `user`."""
    local = container(host)
    if local:
        return NodeExecutor(host.name, ("podman", "exec", "-i", *(("-u", user) if user else ()), local))
    return NodeExecutor(host.name, (*ssh_argv(host), "--"), remote_shell=True, sudo=becomes_root(host), run_as=user)

