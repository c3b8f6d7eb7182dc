"""Which node image a host runs: its RECORD (slurmforge.image.RECORD, written by the image
build, or by `slurmforge upgrade` on a head host it upgraded in place) names the image's
inputs digest. Light: the local provider, `status` and `validate` read it too."""

from __future__ import annotations

import json
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
PARALLEL = 16
"""Hosts read at once: each read is a process waiting on its host, not work here."""

Reader = Callable[[Host], str | None]
"""A host's RECORD text ('' when it has none), or None when it could not be read."""


def read_records(hosts: Sequence[Host], reader: Reader) -> dict[str, str | None]:
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
