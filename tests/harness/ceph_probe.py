"""Ceph on a local cluster, seen from the host: `ceph` run in a Ceph host's container.
Used by the integration tests and bench/ceph_bench.py (fault: stop an OSD, time the
recovery)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from slurmforge.errors import ProvisionError
from slurmforge.local.podman import Podman


@dataclass(frozen=True)
class CephState:
    """What `ceph status -f json` says, reduced to what the tests and the bench ask."""

    health: str
    osds: int
    osds_up: int
    osds_in: int
    pgs: int
    pgs_active: int
    pgs_clean: int
    mds_active: int

    @classmethod
    def from_status(cls, status: dict[str, Any]) -> CephState:
        by_state = status.get("pgmap", {}).get("pgs_by_state", [])

        def count(word: str) -> int:
            return sum(s["count"] for s in by_state if word in s["state_name"].split("+"))

        osdmap = status.get("osdmap", {})
        ranks = status.get("fsmap", {}).get("by_rank", [])
        return cls(health=status.get("health", {}).get("status", "?"), osds=osdmap.get("num_osds", 0),
                   osds_up=osdmap.get("num_up_osds", 0), osds_in=osdmap.get("num_in_osds", 0),
                   pgs=status.get("pgmap", {}).get("num_pgs", 0), pgs_active=count("active"),
                   pgs_clean=sum(s["count"] for s in by_state if s["state_name"] == "active+clean"),
                   mds_active=sum(1 for r in ranks if r.get("status") == "up:active"))

    @property
    def is_clean(self) -> bool:
        """Every OSD up and in, every placement group active+clean, an active MDS."""
        return (self.osds > 0 and self.osds_up == self.osds_in == self.osds and self.pgs > 0
                and self.pgs_clean == self.pgs and self.mds_active > 0)

    @property
    def is_degraded(self) -> bool:
        """Ceph noticed a lost OSD: it is down and some placement groups are not clean."""
        return self.osds_up < self.osds and self.pgs_clean < self.pgs

    @property
    def is_serving(self) -> bool:
        """Clients can read and write: every placement group active (maybe degraded)."""
        return self.pgs > 0 and self.pgs_active == self.pgs and self.mds_active > 0


class CephProbe:
    def __init__(self, podman: Podman, host: str) -> None:
        self.podman, self.host = podman, host

    def ceph(self, *args: str, timeout: float = 60) -> str:
        res = self.podman.exec(self.host, ["timeout", str(int(timeout)), "ceph", *args], check=False,
                               timeout=timeout + 10)
        if res.returncode != 0:
            raise ProvisionError(f"ceph {' '.join(args)} on {self.host} failed: {res.stderr.strip()[:300]}")
        return res.stdout

    def state(self) -> CephState:
        return CephState.from_status(json.loads(self.ceph("status", "-f", "json")))

    def wait(self, predicate: str, timeout: float = 300, interval: float = 1.0) -> tuple[CephState, float]:
        """Poll until the state's `predicate` property (is_clean, is_degraded, is_serving) holds;
        the state and the seconds it took."""
        started = time.monotonic()
        while True:
            try:
                state: CephState | None = self.state()
            except (ProvisionError, ValueError):
                state = None  # a monitor election or a restarting daemon: ask again
            if state is not None and getattr(state, predicate):
                return state, time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise ProvisionError(f"Ceph on {self.host} not {predicate} after {timeout:.0f} s: {state}")
            time.sleep(interval)

    def osd_service(self, osd: int, action: str) -> None:
        """systemctl start|stop ceph-osd@N on the Ceph host."""
        self.podman.exec(self.host, ["systemctl", action, f"ceph-osd@{osd}"], timeout=120)
