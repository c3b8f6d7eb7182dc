"""Where this machine keeps slurmforge's state, outside the repository and the installed
package: per-cluster secrets, generated inventories, the local target's NAS and database."""

from __future__ import annotations

import os
from pathlib import Path

SECRETS_ROOT = Path("/var/lib/slurmforge")
"""root's state root (state_root)."""
LOG_DIR = Path("/var/log/slurmforge")
"""root's log directory (log_dir)."""


def state_root() -> Path:
    """Where this machine keeps slurmforge's per-cluster state, outside the repo: secrets
    (and on the local target its NAS and database): /var/lib/slurmforge for root; anyone
    else's own `$XDG_STATE_HOME/slurmforge` (~/.local/state/slurmforge), so an AWS cluster's
    inventory, rollout and validation run from an admin's account without root."""
    if os.geteuid() == 0:
        return SECRETS_ROOT
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "slurmforge"


def inventories_root() -> Path:
    """Where generated inventories go unless the user names a directory, whatever the target
    and however slurmforge was installed: under the state root, beside the clusters' secrets -
    never in the current directory or the installed package."""
    return state_root() / "inventories"


def default_inventory(cluster: str) -> Path:
    return inventories_root() / cluster


def secrets_dir(cluster: str) -> Path:
    """The cluster's secrets on the machine that runs the rollout: 0700 directory, 0600
    files. Roles read them with `lookup('file', ...)` + no_log."""
    return state_root() / cluster / "secrets"


def log_dir() -> Path:
    """Where rollouts, bring-ups and the raw answers of podman and ssh are logged:
    /var/log/slurmforge for root, else beside the user's own state (state_root)."""
    return LOG_DIR if os.geteuid() == 0 else state_root() / "log"
