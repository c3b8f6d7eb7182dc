"""Where module work runs: a tiny interface over one node.

The publishing engine only runs argument lists and reads/writes files through an
Executor, so the same code works here (LocalExecutor, subprocess) and on a cluster
node (podman exec / ssh, later). The helpers below are the few file-tree operations
the engine needs, each built from `run`.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from slurmforge.errors import RemoteError

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 1800.0
SHARED_UMASK = 0o022


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def reason(self) -> str:
        """The last meaningful stderr (or stdout) line: what a person needs to see."""
        for text in (self.stderr, self.stdout):
            lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("WARNING:")]
            if lines:
                return lines[-1][:300]
        return f"exit code {self.rc}"


class Executor(Protocol):
    """Runs commands and moves file contents on one node. What it creates must be
    readable by every user (umask 022): the tree is shared."""

    name: str

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = DEFAULT_TIMEOUT) -> Completed:
        """Run argv (never a shell string); env adds to the node's environment."""
        ...

    def read_file(self, path: str) -> str | None:
        """The file's text, or None when it does not exist."""
        ...

    def write_file(self, path: str, text: str) -> None:
        """Create or replace the file (not atomic: see `write_atomic`)."""
        ...


class LocalExecutor:
    """This machine, through subprocess."""

    name = "local"

    def run(self, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = DEFAULT_TIMEOUT) -> Completed:
        full_env = {**os.environ, **env} if env else None
        log.debug("run %s", argv)
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, env=full_env,
                                  timeout=timeout, check=False, umask=SHARED_UMASK)
        except subprocess.TimeoutExpired:
            return Completed(tuple(argv), 124, "", f"timed out after {timeout:.0f} s")
        except OSError as exc:
            return Completed(tuple(argv), 127, "", f"{argv[0]}: {exc.strerror}")
        return Completed(tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def read_file(self, path: str) -> str | None:
        try:
            return Path(path).read_text()
        except FileNotFoundError:
            return None

    def write_file(self, path: str, text: str) -> None:
        target = Path(path)
        target.write_text(text)
        target.chmod(0o644)


# --------------------------------------------------------------------------- helpers


def check(ex: Executor, argv: Sequence[str], what: str, env: Mapping[str, str] | None = None) -> Completed:
    """Run argv; a non-zero exit becomes a one-line RemoteError naming `what`."""
    done = ex.run(argv, env=env)
    if not done.ok:
        detail = f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}"
        raise RemoteError(f"{what} failed on {ex.name}: {done.reason()}", detail)
    return done


def exists(ex: Executor, path: str) -> bool:
    return ex.run(["test", "-e", path, "-o", "-L", path]).ok  # -L: dangling links count


def make_dirs(ex: Executor, *paths: str) -> None:
    check(ex, ["mkdir", "-p", "--", *paths], f"creating {paths[0]}")


def rename(ex: Executor, src: str, dst: str, replace: bool = False) -> None:
    """rename(2) on one filesystem: atomic. Without `replace`, an existing dst is an error."""
    if not replace and exists(ex, dst):
        raise RemoteError(f"{dst} already exists on {ex.name}; refusing to replace it")
    check(ex, ["mv", "-f", "-T", "--", src, dst], f"moving {src} to {dst}")


def remove_tree(ex: Executor, path: str) -> None:
    check(ex, ["rm", "-rf", "--", path], f"removing {path}")


def write_atomic(ex: Executor, path: str, text: str, scratch: str) -> None:
    """Write `scratch` (same filesystem, outside the published tree), then rename it
    over `path`: readers see the old file or the new one, never half of it."""
    ex.write_file(scratch, text)
    rename(ex, scratch, path, replace=True)
