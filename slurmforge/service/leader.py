"""Which controller's service acts: exactly one, the one beside the slurmctld in control.

With a backup controller (head.backup_controller) the service runs on both controllers.
Two rules decide which one acts, checked at the start of every loop:

1. Slurm's order. A standby backup slurmctld answers pings too, and the primary takes
   control back as soon as it runs, so the controller in control is the first one in
   SlurmctldHost order that answers `scontrol ping`. A service wants to lead when that
   controller is its own host.
2. A lock. Wanting is not enough: the service acts only while it holds an exclusive lock
   (fcntl) on `leader.lock` in its shared directory (on the NAS, beside Slurm's
   StateSaveLocation). The lock is what makes "never two" true whatever the two services
   believe: a service that stops wanting to lead lets go, one that wants to takes it only
   once the other has let go or died (a dead process' locks go with it; on NFS when its
   client's lease runs out).

The launch records the leader keeps (service.state: written before the cloud is called,
with the idempotency token) live in the same shared directory, so the next leader retries
an interrupted launch with the same token: no duplicate machine, no orphan.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from slurmforge.service.guard import HoldReason

log = logging.getLogger(__name__)

LOCK_FILE = "leader.lock"

Ping = Callable[[], Mapping[str, bool]]
"""Every controller's host name -> whether its slurmctld answered (scontrol ping --json)."""


def in_control(controllers: Sequence[str], answering: Mapping[str, bool]) -> str | None:
    """The controller Slurm has in control: the first in SlurmctldHost order that answers."""
    return next((host for host in controllers if answering.get(host, False)), None)


@dataclass(frozen=True)
class Standing:
    acting: bool
    why: str
    """Why this service does not act (empty when it does)."""
    reason: HoldReason = HoldReason.STANDBY
    """What the page and /metrics call the hold: slurm-view when no slurmctld answers at all
    (the same outage a single controller has), standby when another service leads."""


class Leadership:
    def __init__(self, me: str, controllers: Sequence[str], shared_dir: Path, ping: Ping) -> None:
        self.me, self.controllers, self.ping = me, list(controllers), ping
        self.lock_path = shared_dir / LOCK_FILE
        self._lock: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def check(self) -> Standing:
        """Take or let go of the lock as Slurm's view says; act only while holding it."""
        if len(self.controllers) < 2:
            return Standing(True, "")
        try:
            answering = self.ping()
        except Exception as exc:  # no view of the controllers: nobody is known to be in control
            self.release()
            return Standing(False, f"holding back: scontrol ping failed: {type(exc).__name__}: {exc}"[:200],
                            HoldReason.SLURM_VIEW)
        leader = in_control(self.controllers, answering)
        if leader != self.me:
            if self.held:
                log.warning("letting go of the lead: slurmctld on %s is in control", leader or "no controller")
            self.release()
            if leader is None:
                return Standing(False, "holding back: no slurmctld answers", HoldReason.SLURM_VIEW)
            return Standing(False, f"standby: slurmctld on {leader} is in control")
        if not self.held and not self._acquire():
            return Standing(False, f"standby: the service that led before still holds {self.lock_path}")
        return Standing(True, "")

    def _acquire(self) -> bool:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.lock_path, "a+")  # noqa: SIM115 - kept open while the lock is held
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"{self.me} {os.getpid()}\n")
        handle.flush()
        self._lock = handle
        log.warning("taking the lead: slurmctld on %s is in control", self.me)
        return True

    def release(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.lockf(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None
