"""Per-cluster secrets on the machine that runs the rollout: generated once, kept in a
0700 directory outside the repo, 0600 files, never printed. (AWS keeps the same two in
Secrets Manager; the stack generates them.)"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from slurmforge.inventory import secrets_dir

MUNGE_KEY = "munge.key"
DB_PASSWORD = "slurmdbd.password"
SSH_KEY = "id_ed25519"


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def ensure_secrets(cluster: str, root: Path | None = None) -> Path:
    """Create the munge key (1024 random bytes) and the DB password if missing."""
    directory = root or secrets_dir(cluster)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    if not (directory / MUNGE_KEY).exists():
        _write_private(directory / MUNGE_KEY, secrets.token_bytes(1024))
    if not (directory / DB_PASSWORD).exists():
        _write_private(directory / DB_PASSWORD, secrets.token_urlsafe(32).encode())
    if not (directory / SSH_KEY).exists():
        # the rollout's key to reach nodes as root (local target: sshd in each container)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"slurmforge-{cluster}",
                        "-f", str(directory / SSH_KEY)], check=True, capture_output=True)
    for name in (MUNGE_KEY, DB_PASSWORD, SSH_KEY):
        os.chmod(directory / name, 0o600)
    return directory
