"""Can this slurmforge's node image take over an existing cluster's Slurm state?

Slurm keeps jobs in StateSaveLocation and accounting in slurmdbd's database; a release
takes both over only from `Distro.upgrades_from` on (24.11: from 23.02). The release that
last ran a cluster is recorded next to its state (STATE_MARKER in StateSaveLocation,
written by the slurm_controller role once slurmctld answers). A cluster with state but
no marker was built before slurmforge recorded it: every such cluster ran Debian 12's
Slurm 22.05.

Two callers apply this rule before anything changes: `up --local` (reading the state on
this machine and the node images its containers run) and the first play of cluster.yml
on the controller (every target, admins' ansible-playbook too), which gets the same
numbers from the inventory (`slurmforge_slurm`).
"""

from __future__ import annotations

from pathlib import Path

from slurmforge.distro import Distro, is_upgradable
from slurmforge.errors import UpgradeRefused

STATE_MARKER = "slurmforge-slurm-release"
"""In StateSaveLocation: the Slurm release series that last ran the cluster ("24.11")."""
BEFORE_MARKER = "22.05"
"""What ran a cluster whose state has no marker (every slurmforge cluster before Debian 13)."""
STATE_FILES = ("job_state", "node_state", "resv_state")
"""Any of these in StateSaveLocation means slurmctld ran there."""


def state_release(state_dir: Path) -> str | None:
    """The release that wrote the state in `state_dir`; None when there is no state."""
    marker = state_dir / STATE_MARKER
    if marker.is_file():
        return marker.read_text().strip() or BEFORE_MARKER
    if any((state_dir / name).exists() for name in STATE_FILES):
        return BEFORE_MARKER
    return None


def refusal(cluster: str, old: str, os: Distro) -> str:
    return (f"cluster {cluster} holds Slurm {old} state and accounting; the {os.base} image runs Slurm "
            f"{os.slurm_release}, which takes them over only from Slurm {os.upgrades_from} on: rebuild the cluster "
            "(its jobs and accounting are lost), or export accounting first - see docs/upgrade.md")


def check_takeover(cluster: str, old: str | None, os: Distro) -> None:
    """UpgradeRefused (one line: what, why, the choices) unless `os` can take over `old`."""
    if old is not None and not is_upgradable(old, os):
        raise UpgradeRefused(refusal(cluster, old, os))
