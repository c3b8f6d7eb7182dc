"""ResumeProgram, SuspendProgram, ResumeFailProgram and SlurmctldPrimaryOnProg: record
the request, return.

slurmctld runs these in its power-save thread; a slow one blocks it (slurm-gcp had to
detach its resume program). Each program only copies its arguments and, for resume, the
SLURM_RESUME_FILE (a descriptor of slurmctld that vanishes when the program exits) into
one spool file, written atomically, and exits. The daemon picks the file up, records it in
its state database and removes it. Nothing here imports more than the standard library.

If the spool cannot be written the daemon still acts: it reads Slurm's node states every
loop, and a node POWERING_UP without a machine gets one.

SlurmctldPrimaryOnProg (`slurmforge-control`) says a slurmctld took control: started after
a crash or a stop, or a backup taking over. Such a slurmctld has recovered its nodes from
the state file and never asks a POWERING_UP node to register (ping_nodes.c skips them), so a
slurmd that registered with the slurmctld before it goes unheard until ResumeTimeout; the
service replaces such a machine (service.assess, `stale_machine`). A reconfigure starts
a new slurmctld too (24.11 re-executes it, with SLURMCTLD_RECONF set, and that one runs the
program as well), but it saved its state first and pushes the config to every slurmd,
which registers again: the program records nothing then.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from slurmforge import contract

SPOOL_DIR = Path(contract.SPOOL_DIR)
"""Written by SlurmUser (slurmctld runs the programs), read and emptied by the service.
The role creates it owned by slurm, group of the service user, mode 2770 (slurmctld's
umask makes the files 0640: the setgid group is how the service reads them)."""
SPOOL_ENV = "SLURMFORGE_SPOOL"


class HandoffKind(StrEnum):
    RESUME = "resume"
    SUSPEND = "suspend"
    RESUME_FAIL = "resume-fail"
    CONTROL = "control"
    """A slurmctld took control (SlurmctldPrimaryOnProg)."""


RECONFIGURE_ENV = "SLURMCTLD_RECONF"
"""Set by slurmctld in the process a reconfigure starts (src/slurmctld/controller.c,
_try_to_reconfig), and so in the programs that process runs."""


@dataclass(frozen=True)
class Handoff:
    """One call of a power-saving program, as the spool file holds it."""

    id: str
    kind: HandoffKind
    nodes: str
    """Slurm's hostlist expression, unexpanded."""
    at: float
    resume_file: str = ""
    """The SLURM_RESUME_FILE text (resume only)."""


def spool_dir() -> Path:
    return Path(os.environ.get(SPOOL_ENV) or SPOOL_DIR)


def record(kind: HandoffKind, argv: Sequence[str], spool: Path | None = None) -> Path:
    """Write one spool file for this call and return its path."""
    spool = spool or spool_dir()
    now = time.time()
    resume_text = ""
    if kind is HandoffKind.RESUME and os.environ.get("SLURM_RESUME_FILE"):
        resume_text = Path(os.environ["SLURM_RESUME_FILE"]).read_text()
    body = json.dumps({"kind": kind.value, "nodes": ",".join(argv), "at": now, "resume_file": resume_text})
    name = f"{kind.value}-{time.time_ns()}-{os.getpid()}.json"
    tmp = spool / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o660)
    with os.fdopen(fd, "w") as out:
        out.write(body)
    final = spool / name
    os.replace(tmp, final)
    return final


def _main(kind: HandoffKind) -> int:
    try:
        record(kind, sys.argv[1:])
    except OSError as exc:
        # slurmctld logs our stderr; the daemon still sees the nodes in Slurm's state
        print(f"slurmforge-{kind.value}: cannot record {sys.argv[1:]}: {exc}", file=sys.stderr)
        return 1
    return 0


def resume_main() -> int:
    return _main(HandoffKind.RESUME)


def suspend_main() -> int:
    return _main(HandoffKind.SUSPEND)


def resume_fail_main() -> int:
    return _main(HandoffKind.RESUME_FAIL)


def control_main() -> int:
    if os.environ.get(RECONFIGURE_ENV):
        return 0  # the reconfigure pushes the config to every slurmd, and each registers again
    return _main(HandoffKind.CONTROL)


# --------------------------------------------------------------------------- daemon side


def pending(spool: Path) -> list[tuple[Path, Handoff]]:
    """Spool files in arrival order; unreadable ones are skipped (and left for a human)."""
    found = []
    try:
        entries = sorted(e.name for e in os.scandir(spool) if e.name.endswith(".json") and not e.name.startswith("."))
    except FileNotFoundError:
        return []
    for name in entries:
        path = spool / name
        try:
            data = json.loads(path.read_text())
            item = Handoff(id=name, kind=HandoffKind(data["kind"]), nodes=str(data["nodes"]),
                           at=float(data["at"]), resume_file=str(data.get("resume_file") or ""))
        except (OSError, ValueError, KeyError):
            continue
        found.append((path, item))
    return found


def has_pending(spool: Path) -> bool:
    try:
        with os.scandir(spool) as entries:
            return any(e.name.endswith(".json") and not e.name.startswith(".") for e in entries)
    except FileNotFoundError:
        return False
