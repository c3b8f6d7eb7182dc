"""Runaway job records: slurmdbd holds a job as pending or running that slurmctld does not
know. Slurm makes them when slurmctld loses the last seconds of its state - killed -9, or
a backup taking control from state files a few seconds old - after a job's start already
reached slurmdbd: the job itself runs again from the saved state (or ends), but its first
record never gets an end time.

Such a record is not harmless. slurmdbd counts it as running for ever: its usage grows
the user's and account's totals every hour (fair share, and the GrpTRESMins of a budget),
`sacct` shows it RUNNING, and slurmdbd refuses to remove the association it belongs to
("Job(s) active") - so `up` keeps an account the spec removed. Slurm's remedy is
`sacctmgr show runawayjobs`, which an admin answers with "y"; the service runs it for
them (`-i`), as the leader, every RUNAWAY_INTERVAL seconds, and logs every record it
closed (an event and a counter too).

Never while a record may still be on its way: only when slurmctld answers and its queue
of messages for slurmdbd is empty (`sdiag`), so a job whose end is queued is not taken
for a runaway; sacctmgr itself keeps what slurmctld knows (a job id and submit time it
holds, or one submitted in the last seconds). sacctmgr sets a closed record's end to its
start (or eligible/submit) time and its state to COMPLETED - Slurm 24.11 has no other end
state for it - and slurmdbd re-rolls the usage from that time on.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

RUNAWAY_INTERVAL = 60.0
"""How often the leader looks for runaway records (a few ms when there are none)."""

CLOSE_COMMAND = ("sacctmgr", "-i", "-n", "-P", "show", "runawayjobs", "format=ID,Submit,Start")
QUEUE_COMMAND = ("sdiag", "--json")

_RECORD = re.compile(r"^(\d+(?:_\d+)?)\|([^|]*)\|([^|]*)$")


@dataclass(frozen=True)
class Runaway:
    job: str
    """Slurm's id: 1331 or, for an array task, 1331_2."""
    submit: str
    start: str


def parse_closed(text: str) -> list[Runaway]:
    """The records `CLOSE_COMMAND` listed (and so closed): its `-P` lines; its notes, and
    "No runaway jobs found", are not records."""
    return [Runaway(*m.groups()) for m in map(_RECORD.match, text.splitlines()) if m]


def parse_queue(text: str) -> int:
    """`sdiag --json` -> messages slurmctld still holds for slurmdbd."""
    return int(json.loads(text)["statistics"]["dbd_agent_queue_size"])


class RunawayCloser:
    """Closes runaway records at most every `interval` seconds; `run` is
    SlurmClient.run (argument list -> stdout, raises on a non-zero exit)."""

    def __init__(self, run: Callable[..., str], interval: float = RUNAWAY_INTERVAL) -> None:
        self.run, self.interval = run, interval
        self._asked = float("-inf")

    def update(self, now: float) -> list[Runaway]:
        """The records closed now; [] when not due, when records may be in flight, or when
        Slurm does not answer (logged; the next pass tries again)."""
        if now - self._asked < self.interval:
            return []
        self._asked = now
        try:
            queued = parse_queue(self.run(*QUEUE_COMMAND))
            if queued:
                log.info("runaway job records: not now, %d message(s) for slurmdbd still queued", queued)
                return []
            closed = parse_closed(self.run(*CLOSE_COMMAND))
        except Exception as exc:  # slurmctld or slurmdbd down: nothing to decide on
            log.warning("runaway job records: %s", f"{type(exc).__name__}: {exc}"[:300])
            return []
        for record in closed:
            log.warning("closed runaway job record %s (submitted %s, started %s): slurmdbd held it as active, "
                        "slurmctld does not know it", record.job, record.submit, record.start)
        return closed
