"""Times as a person reads them on the pool page and in `slurmforge pools`: durations
("4 min 20 s", "2 h 05 min"), clock times in UTC, and "in"/"ago" from now."""

from __future__ import annotations

import time


def duration(seconds: float) -> str:
    s = max(round(seconds), 0)
    if s < 60:
        return f"{s} s"
    if s < 600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    if s < 3600:
        return f"{round(s / 60)} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def clock(at: float) -> str:
    """14:05:03 UTC"""
    return time.strftime("%H:%M:%S UTC", time.gmtime(at))


def day(at: float) -> str:
    """1 Nov 2026 (UTC)"""
    t = time.gmtime(at)
    return f"{t.tm_mday} {time.strftime('%b %Y', t)}"


def relative(at: float, now: float) -> str:
    """'in 3 min' or '3 min ago'."""
    return f"in {duration(at - now)}" if at > now else f"{duration(now - at)} ago"
