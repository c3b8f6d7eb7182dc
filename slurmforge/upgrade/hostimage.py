"""Which node image a host runs: its RECORD (slurmforge.image.RECORD, written by the image
build, or by `slurmforge upgrade` on a head host it upgraded in place) names the image's
inputs digest. Light: the local provider, `status` and `validate` read it too."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from slurmforge.errors import SlurmforgeError
from slurmforge.hosts import Host

SHORT = 12
"""The digest's characters `status` shows."""


def record_field(text: str | None, key: str) -> str | None:
    """One field of a RECORD's text (`inputs`: the image's digest; `slurm`: its Slurm version);
    None when there is none (no RECORD, not JSON)."""
    try:
        found = json.loads(text or "")
    except ValueError:
        return None
    return str(found.get(key)) if isinstance(found, dict) and found.get(key) else None


def record_digest(text: str | None) -> str | None:
    return record_field(text, "inputs")


# ---------------------------------------------------------------- every host's, at once (`status`)

UNREAD = "?"
"""`status`'s image and version cells for a host whose RECORD could not be read (no answer
in time, no RECORD); a host with no machine shows nothing ('-')."""
READ_TIMEOUT = 5.0
"""One host's read, at most: a `podman exec` answers in a fraction of a second, an ssh
connection in one or two; a host that does not answer in this is shown as unread."""
PARALLEL = 16
"""Hosts read at once: each read is a process waiting on its host, not work here."""

Reader = Callable[[Host], str | None]
"""A host's RECORD text ('' when it has none), or None when it could not be read."""


def read_record(host: Host, timeout: float = READ_TIMEOUT) -> str | None:
    """The host's RECORD as every command reaches it (slurmforge.remote.node: podman exec,
    ssh), the whole exchange bounded by `timeout`: the process is killed past it."""
    from slurmforge.image import RECORD
    from slurmforge.remote.node import MISSING, READ_SCRIPT, executor_for

    argv = executor_for(host).command(["sh", "-c", READ_SCRIPT, "sh", RECORD], None, timeout)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if done.returncode == 0:
        return done.stdout
    return "" if done.returncode == MISSING else None


def read_records(hosts: Sequence[Host], reader: Reader = read_record) -> dict[str, str | None]:
    """Every host's RECORD (see Reader), read concurrently: the whole costs about the slowest
    host's read, not their sum."""
    if not hosts:
        return {}
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(hosts))) as pool:
        return dict(zip((h.name for h in hosts), pool.map(_guarded(reader), hosts), strict=True))


def _guarded(reader: Reader) -> Reader:
    def read(host: Host) -> str | None:
        try:
            return reader(host)
        except SlurmforgeError:  # unreachable, not root: unread, like a timeout
            return None
    return read


def image_cell(text: str | None) -> str:
    """`status`'s image column: the RECORD's digest, short; '?' when unread or absent."""
    digest = record_digest(text)
    return digest[:SHORT] if digest else UNREAD
