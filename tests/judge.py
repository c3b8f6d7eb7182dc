"""The judge: containers from the node image that run the tools which judge what slurmforge
renders (slurmctld, scontrol, munged, promtool, amtool, Lmod, python3). The binary that
judges a config is the binary that will run it on the nodes, never this machine's own.

The node image is the one `slurmforge up --local` uses, built here when missing (same
code, same content-hash tag). Every judge container bind-mounts /tmp at /tmp, so the
test's temp dirs have the same path inside and out; it runs `sleep infinity`, and each
command is a `podman exec` inside a `timeout` (a killed podman client leaves the command
running otherwise). Removing the container ends everything it ran. Tests that make
hundreds of calls (module publishing) enter the container's namespaces with nsenter
instead (`Judge.enter`): the same image, files, network and environment, without
podman exec's 0.2-0.4 s per call.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import uuid
from collections.abc import Mapping, Sequence
from functools import cache, cached_property
from pathlib import Path

from slurmforge.bringup import log_path
from slurmforge.distro import DEFAULT_BASE, distro
from slurmforge.local.host import prepare_host
from slurmforge.local.image_cache import ensure_images
from slurmforge.local.podman import Podman

EXEC_GRACE = 15  # the podman client waits this much longer than the command's own timeout


@cache
def node_image() -> str:
    """The node image's tag, built on first use (minutes) and cached by content hash."""
    prepare_host()
    os_ = distro(DEFAULT_BASE)
    log = log_path("tests", "image")
    return ensure_images(Podman(), log, os=os_)


class Judge:
    """One container from the node image, on podman's default network: daemons need an
    address that is not loopback (slurmctld's getaddrinfo uses AI_ADDRCONFIG, which finds
    nothing to listen on with loopback alone), and pip reaches the package registry as the
    nodes do."""

    def __init__(self, image: str, prefix: str = "slurmforge-judge") -> None:
        self.name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.image = image
        args = ["podman", "run", "-d", "--rm", "--name", self.name, "--hostname", self.name,
                "-v", "/tmp:/tmp", image, "sleep", "infinity"]
        subprocess.run(args, check=True, capture_output=True, timeout=120)

    @property
    def hostname(self) -> str:
        return self.name

    def run(self, argv: Sequence[str], cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
            user: str | None = None, timeout: int = 60, check: bool = False) -> subprocess.CompletedProcess[str]:
        """argv inside the container (stdout, stderr and the exit code as the tool gave them)."""
        cmd = ["podman", "exec", *(["-w", str(cwd)] if cwd else []), *(["-u", user] if user else [])]
        for key, value in (env or {}).items():
            cmd += ["-e", f"{key}={value}"]
        cmd += [self.name, "timeout", str(timeout), *argv]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + EXEC_GRACE, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{shlex.join(argv)} failed ({done.returncode}) in the node image:\n"
                                 f"{done.stdout}{done.stderr}")
        return done

    @cached_property
    def enter(self) -> tuple[str, ...]:
        """A prefix that runs argv in the container's namespaces (the node image's root,
        network and hostname) with the container's environment and nothing of ours: what
        the tools see under `podman exec`, without its cgroup and seccomp profile, in
        ~20 ms instead of 0.2-0.4 s. nsenter needs root: rootless, this is podman exec."""
        if os.geteuid() != 0:
            return ("podman", "exec", "-i", self.name)
        found = subprocess.run(["podman", "inspect", "-f", "{{.State.Pid}}\t{{json .Config.Env}}", self.name],
                               capture_output=True, text=True, check=True, timeout=60).stdout
        pid, env = found.strip().split("\t", 1)
        return ("nsenter", "-t", pid, "-a", "--", "env", "-i", *json.loads(env))

    def spawn(self, argv: Sequence[str], output: Path) -> None:
        """Start argv in the background inside the container, its output in `output`."""
        script = 'out="$1"; shift; exec setsid "$@" > "$out" 2>&1 < /dev/null &'
        subprocess.run(["podman", "exec", self.name, "sh", "-c", script, "sh", str(output), *argv],
                       check=True, capture_output=True, timeout=60)

    def is_running(self, pattern: str) -> bool:
        return self.run(["pgrep", "-f", pattern]).returncode == 0

    def remove(self) -> None:
        subprocess.run(["podman", "rm", "-f", "-t", "0", self.name], capture_output=True, timeout=120, check=False)

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
