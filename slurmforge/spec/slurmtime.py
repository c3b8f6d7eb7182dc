"""Slurm time strings (MaxTime, DefaultTime, ...), as `man slurm.conf` defines them:
"minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
"days-hours:minutes", "days-hours:minutes:seconds", or UNLIMITED / INFINITE.
"""

from __future__ import annotations

import math
import re

UNLIMITED = math.inf
# Slurm adds a time's fields in a signed 32-bit number of seconds, then rounds up to
# minutes by adding 59 (parse_time.c, time_str2secs and time_str2mins): anything longer
# overflows into a negative "bad value".
SLURM_MAX_SECONDS = 2**31 - 1 - 59

_FORMS = [
    (re.compile(r"^(\d+)$"), ("m",)),
    (re.compile(r"^(\d+):(\d{1,2})$"), ("m", "s")),
    (re.compile(r"^(\d+):(\d{1,2}):(\d{1,2})$"), ("h", "m", "s")),
    (re.compile(r"^(\d+)-(\d{1,2})$"), ("d", "h")),
    (re.compile(r"^(\d+)-(\d{1,2}):(\d{1,2})$"), ("d", "h", "m")),
    (re.compile(r"^(\d+)-(\d{1,2}):(\d{1,2}):(\d{1,2})$"), ("d", "h", "m", "s")),
]
_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_LIMITS = {"h": 24, "m": 60, "s": 60}


def parse_slurm_time(text: str) -> float:
    """Seconds for a Slurm time string; math.inf for UNLIMITED. ValueError if malformed."""
    value = str(text).strip()
    if value.upper() in ("UNLIMITED", "INFINITE"):
        return UNLIMITED
    for pattern, units in _FORMS:
        match = pattern.match(value)
        if not match:
            continue
        total = 0
        for unit, number in zip(units, match.groups(), strict=True):
            n = int(number)
            # the first field may overflow (e.g. "90" minutes), later ones may not
            if unit != units[0] and unit in _LIMITS and n >= _LIMITS[unit]:
                raise ValueError(
                    f"'{value}' is not a Slurm time: {unit} field {n} is out of range"
                )
            total += n * _SECONDS[unit]
        return total
    raise ValueError(
        f"'{value}' is not a Slurm time; use minutes, HH:MM:SS, D-HH:MM:SS or UNLIMITED"
    )
