"""Why a node's slurmd could not start, as the node said it: the join program's ExecStopPost of
slurmd writes `<epoch> <slurmd's last fatal or error line>` to one file per node in the node
kit on the NAS (join.slurmd_failures_dir), which the service reads every loop. So a machine that
cannot start slurmd - a GPU device file missing, a config it cannot read - is reported and
replaced with its reason within a loop, not at ResumeTimeout; and a replacement that fails
the same way twice stops replacing (slurm.reasons.REPLACEMENT_STOPPED) instead of cycling.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SlurmdFailure:
    at: float
    """When slurmd stopped (the node's clock)."""
    line: str
    """slurmd's last fatal line (else its last error line) of that run."""


def parse_failure(text: str) -> SlurmdFailure | None:
    """`<epoch> <line>`; None for anything else (a file being written, someone's edit)."""
    at, _, line = text.strip().partition(" ")
    try:
        when = float(at)
    except ValueError:
        return None
    return SlurmdFailure(when, line.strip()) if line.strip() else None


def read_failures(directory: Path | None) -> dict[str, SlurmdFailure]:
    """node -> its slurmd's last failure; {} when the directory is not there (no node failed
    yet, or the NAS does not answer: then Slurm's ResumeTimeout still catches the machine)."""
    if directory is None:
        return {}
    found: dict[str, SlurmdFailure] = {}
    try:
        paths = [p for p in directory.iterdir() if not p.name.startswith(".")]
    except OSError:
        return {}
    for path in paths:
        try:
            failure = parse_failure(path.read_text(errors="replace")[:1000])
        except OSError:
            continue
        if failure is not None:
            found[path.name] = failure
    return found
