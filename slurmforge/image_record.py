"""Which node image a host runs: its RECORD (slurmforge.image.RECORD, written by the image
build, or by `slurmforge upgrade` on a head host it upgraded in place) names the image's
inputs digest. Light: the local provider, `status` and `validate` read it too."""

from __future__ import annotations

import json

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
