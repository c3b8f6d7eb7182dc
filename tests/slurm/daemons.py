"""Slurm's real slurmctld on a rendered config, in a temp dir, with a private munged.

Nothing outside the temp dir changes: the config is adapted (see `adapt_for_tmp`) so
state, log, pid and ports are private, and slurmctld runs in its own mount namespace
where /etc/hosts and /etc/group are bind-mounted copies that add the spec's node names
and groups (the rollout provides both on a real controller). Every daemon runs in its
own process group and `Daemon.stop` ends it, children included.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

NODES_READY_SOURCE = Path(__file__).resolve().parents[2] / "roles/slurm_controller/files/slurmforge-nodes-ready"
STOP_TIMEOUT = 10.0
START_TIMEOUT = 20.0
COMMAND_TIMEOUT = 15.0

# Run slurmctld with the copies of /etc/hosts and /etc/group bind-mounted in a private
# mount namespace. The paths arrive as arguments ("$1", "$2", then the command), never
# pasted into the script.
_WITH_PRIVATE_ETC = 'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/group && shift 2 && exec "$@"'


def find_program(name: str) -> str | None:
    """`name` on PATH or in the sbin directories a non-login root shell may lack."""
    found = shutil.which(name)
    if found:
        return found
    for directory in ("/usr/sbin", "/sbin", "/usr/bin"):
        path = Path(directory) / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class RunDir:
    """Where one slurmctld run keeps everything."""

    root: Path
    conf: Path
    state: Path
    ctld_log: Path
    ctld_pid: Path
    ctld_out: Path
    munge_socket: Path
    munge_key: Path
    munge_out: Path
    power_stub: Path
    hosts: Path
    group: Path

    @classmethod
    def create(cls) -> RunDir:
        # munged refuses a socket whose directories are not searchable by everyone, and
        # pytest's tmp_path sits under a 0700 directory: use a 0755 dir of our own in /tmp
        root = Path(tempfile.mkdtemp(prefix="slurmforge-slurmctld-"))
        root.chmod(0o755)
        (root / "state").mkdir()
        return cls(root=root, conf=root / "slurm.conf", state=root / "state", ctld_log=root / "slurmctld.log",
                   ctld_pid=root / "slurmctld.pid", ctld_out=root / "slurmctld.out",
                   munge_socket=root / "munge.socket", munge_key=root / "munge.key", munge_out=root / "munged.out",
                   power_stub=root / "power-stub", hosts=root / "hosts", group=root / "group")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def adapt_for_tmp(rendered: str, run: RunDir, slurmctld_port: int, slurmd_port: int) -> str:
    """The rendered slurm.conf, changed only where running in a temp dir needs it.

    NodeName and PartitionName lines, and every key not named here, pass through as
    rendered (the test checks that).
    """
    override = {
        # slurmctld only starts on the host SlurmctldHost names: this machine
        "SlurmctldHost": socket.gethostname(),
        # no 'slurm' user owns the temp dir: run as whoever runs the test (root in CI)
        "SlurmUser": pwd.getpwuid(os.getuid()).pw_name,
        # state, log and pid files in the temp dir instead of /var
        "StateSaveLocation": str(run.state),
        "SlurmctldLogFile": str(run.ctld_log),
        "SlurmctldPidFile": str(run.ctld_pid),
        # free ports, so a Slurm already running on this machine is not disturbed
        "SlurmctldPort": str(slurmctld_port),
        "SlurmdPort": str(slurmd_port),
        # slurmctld and scontrol talk to the private munged, not /run/munge
        "AuthInfo": f"socket={run.munge_socket}",
    }
    only_if_rendered = {
        # power saving needs executable programs or slurmctld disables it (and skips
        # checking its settings); the service is not installed here: a no-op stub
        "ResumeProgram": str(run.power_stub),
        "SuspendProgram": str(run.power_stub),
        "ResumeFailProgram": str(run.power_stub),
        # the real program, from the role that installs it
        "PrologSlurmctld": str(NODES_READY_SOURCE),
    }
    # no slurmdbd runs here: slurmctld refuses AccountingStorageTRES/Enforce without it
    drop_prefix = "AccountingStorage"

    lines = rendered.splitlines()
    seen: set[str] = set()
    out: list[str] = []
    for line in lines:
        key = line.split("=", 1)[0] if "=" in line and not line.startswith("#") else ""
        if key.startswith(drop_prefix):
            continue
        if key in override or key in only_if_rendered:
            seen.add(key)
            out.append(f"{key}={override.get(key) or only_if_rendered[key]}")
            continue
        out.append(line)
    missing = [f"{k}={v}" for k, v in override.items() if k not in seen]
    header = 1 if out and out[0].startswith("#") else 0
    return "\n".join([*out[:header], *missing, *out[header:]]) + "\n"


def power_stub_script() -> str:
    return "#!/bin/sh\nexit 0\n"


def etc_hosts_with(names: Iterable[str]) -> str:
    """/etc/hosts plus the node names on 127.0.0.1: slurmctld resolves every non-CLOUD
    node at start and turns an unresolvable one into FUTURE (hidden), 10 s each."""
    return Path("/etc/hosts").read_text() + "127.0.0.1 " + " ".join(names) + "\n"


def etc_group_with(groups: Iterable[tuple[str, int]]) -> str:
    """/etc/group plus the spec's groups, so AllowGroups resolves as on a real controller."""
    have = {line.split(":", 1)[0] for line in Path("/etc/group").read_text().splitlines()}
    extra = "".join(f"{name}:x:{gid}:\n" for name, gid in groups if name not in have)
    return Path("/etc/group").read_text() + extra


class Daemon:
    """A foreground daemon, leader of its own process group; `stop` always ends it."""

    def __init__(self, argv: list[str], output: Path) -> None:
        self.argv = argv
        self.output = output
        self._out: IO[bytes] = output.open("wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._out,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def has_exited(self) -> bool:
        """Without reaping it: until `stop` reaps the leader, its pid names our group only."""
        if self.proc.returncode is not None:
            return True
        info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return info is not None

    def stop(self) -> None:
        if self.proc.returncode is None:
            if not self.has_exited():
                self.proc.send_signal(signal.SIGTERM)
                deadline = time.monotonic() + STOP_TIMEOUT
                while not self.has_exited() and time.monotonic() < deadline:
                    time.sleep(0.05)
            # whatever is left of the group (slurmctld's slurmscriptd, a hung leader)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT)
        self._out.close()

    def output_text(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.output.read_text(errors="replace")


def start_munged(munged: str, run: RunDir) -> Daemon:
    run.munge_key.write_bytes(os.urandom(1024))  # a throwaway key, never the machine's
    run.munge_key.chmod(0o400)
    daemon = Daemon([munged, "--foreground", f"--socket={run.munge_socket}", f"--key-file={run.munge_key}",
                     f"--pid-file={run.root / 'munged.pid'}", f"--seed-file={run.root / 'munged.seed'}",
                     f"--log-file={run.root / 'munged.log'}"], run.munge_out)
    deadline = time.monotonic() + START_TIMEOUT
    while not run.munge_socket.exists():
        if daemon.has_exited() or time.monotonic() > deadline:
            daemon.stop()
            raise RuntimeError(f"munged did not start:\n{daemon.output_text()}")
        time.sleep(0.05)
    return daemon


def slurmctld_argv(slurmctld: str, run: RunDir) -> list[str]:
    # -D: foreground; -c: start from empty state (the state dir is new anyway)
    ctld = [slurmctld, "-D", "-c", "-f", str(run.conf)]
    return ["unshare", "--mount", "--", "sh", "-c", _WITH_PRIVATE_ETC, "sh", str(run.hosts), str(run.group), *ctld]


def scontrol_env(run: RunDir) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(run.conf)}


def wait_until_up(scontrol: str, ctld: Daemon, run: RunDir) -> float:
    """Seconds until `scontrol ping` reports the controller UP; RuntimeError otherwise."""
    start = time.monotonic()
    while time.monotonic() - start < START_TIMEOUT:
        if ctld.has_exited():
            break
        ping = subprocess.run([scontrol, "ping"], env=scontrol_env(run), capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, check=False)
        if "is UP" in ping.stdout:
            return time.monotonic() - start
        time.sleep(0.1)
    log = run.ctld_log.read_text(errors="replace") if run.ctld_log.exists() else "(no log file)"
    output = ctld.output_text()
    hint = ""
    if output.startswith(("unshare:", "mount:")):
        hint = "\n(slurmctld runs in a private mount namespace: that needs root, or CAP_SYS_ADMIN in a container)"
    raise RuntimeError(f"slurmctld did not come up: {shlex.join(ctld.argv)}{hint}\n"
                       f"--- output\n{output}\n--- {run.ctld_log}\n{log}")


# scontrol -o: one record a line, `Key=value` pairs separated by spaces; a value may hold
# '=' (CfgTRES=cpu=2,mem=1G) but a key always follows whitespace.
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][\w:/.]*)=")


def parse_oneliner(line: str) -> dict[str, str]:
    matches = list(_KEY.finditer(line))
    record = {}
    for match, after in zip(matches, [*matches[1:], None], strict=True):
        end = after.start() if after else len(line)
        record[match.group(1)] = line[match.end():end].strip()
    return record


def parse_records(text: str, key: str) -> dict[str, dict[str, str]]:
    records = [parse_oneliner(line) for line in text.splitlines() if line.strip()]
    return {r[key]: r for r in records}
