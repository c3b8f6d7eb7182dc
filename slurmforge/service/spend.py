"""What each pool has cost so far this month, for the pool page and /metrics: the same
sacct records and arithmetic as `slurmforge cost` (slurmforge.cost), grouped by pool.

sacct over a month of a busy cluster takes a while, and the loop must not wait for it:
the figures are refreshed every SPEND_INTERVAL seconds, in a thread of their own by
default, and the page shows when they were taken.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from slurmforge.billing import billing_weights
from slurmforge.cost import Period, Pricing, aggregate, month_start, pool_spend
from slurmforge.spec.models import Cluster

log = logging.getLogger(__name__)

SPEND_INTERVAL = 300.0

Reader = Callable[[Period, float], Iterable[str]]
"""(period, now) -> `sacct -P` lines (slurmforge.cost.sacct_argv's)."""


@dataclass(frozen=True)
class Spend:
    since: float
    """The start of the period: 00:00 on the first of the month."""
    at: float
    """When the records were read."""
    pools: dict[str, float] = field(default_factory=dict)
    """pool -> dollars"""
    error: str = ""


class SpendTracker:
    def __init__(self, read: Reader, interval: float = SPEND_INTERVAL, background: bool = True) -> None:
        self.read, self.interval, self.background = read, interval, background
        self.latest: Spend | None = None
        self._lock = threading.Lock()
        self._running: threading.Thread | None = None
        self._asked = float("-inf")

    def update(self, spec: Cluster, now: float) -> Spend | None:
        """Start a refresh when one is due (in the background unless told otherwise);
        the latest figures either way. None when the cluster bills no dollars (no
        accounting, or no partition with prices)."""
        if not billing_weights(spec):
            return None
        if now - self._asked >= self.interval and (self._running is None or not self._running.is_alive()):
            self._asked = now
            if self.background:
                self._running = threading.Thread(target=self.refresh, args=(spec, now), name="slurmforge-spend",
                                                 daemon=True)
                self._running.start()
            else:
                self.refresh(spec, now)
        return self.latest

    def refresh(self, spec: Cluster, now: float) -> Spend:
        period = Period(month_start(now), now)
        try:
            report = aggregate(self.read(period, now), Pricing(spec), period, ("pool",), source="sacct")
            spend = Spend(period.since, now, dict(pool_spend(report)))
        except Exception as exc:  # sacct missing, slurmdbd down: say so, keep the loop going
            log.warning("spend this month: %s", exc)
            last = self.latest
            kept = dict(last.pools) if last and last.since == period.since else {}
            spend = Spend(period.since, now, kept, f"{type(exc).__name__}: {exc}"[:200])
        with self._lock:
            self.latest = spend
        return spend
