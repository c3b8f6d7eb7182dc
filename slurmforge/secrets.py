"""Per-cluster secrets on the machine that runs the rollout: generated once, kept in a
0700 directory outside the repo, 0600 files, never printed. (AWS keeps the same ones -
`CLUSTER_SECRETS` - in Secrets Manager; the stack generates them and the rollout copies
them here, so the roles read every secret from this directory on every target.)"""

from __future__ import annotations

import base64
import os
import secrets
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from slurmforge.state_dirs import secrets_dir

MUNGE_KEY = "munge.key"
DB_PASSWORD = "slurmdbd.password"
JWT_KEY = "jwt_hs256.key"
SSH_KEY = "id_ed25519"
CEPH_FSID = "ceph.fsid"
CEPH_MON_KEY = "ceph.mon.key"
CEPH_ADMIN_KEY = "ceph.client.admin.key"
CEPH_CLIENT_KEY = "ceph.client.fs.key"
"""The mon. key, client.admin (Ceph hosts only) and the CephFS client key every Slurm
node mounts with; OSD, mgr and MDS keys are made on their hosts by the roles."""
CEPH_SECRETS = (CEPH_FSID, CEPH_MON_KEY, CEPH_ADMIN_KEY, CEPH_CLIENT_KEY)


@dataclass(frozen=True)
class ClusterSecret:
    """One secret of the cluster's: its file in the secrets directory and how a new one is made."""

    name: str
    stack_key: str
    """Its key in the AWS stack's secret_arns output."""
    binary: bool
    """Random bytes, kept base64-encoded in Secrets Manager; else text, kept as it is."""
    make: Callable[[], bytes]


CLUSTER_SECRETS = (
    # munge takes keys of 32 to 1024 bytes: the most
    ClusterSecret(MUNGE_KEY, "munge_key", True, lambda: secrets.token_bytes(1024)),
    ClusterSecret(DB_PASSWORD, "db_password", False, lambda: secrets.token_urlsafe(32).encode()),
    # slurmctld and slurmdbd sign and verify the REST API's tokens with it: 32 random bytes,
    # as Slurm's JWT guide makes it
    ClusterSecret(JWT_KEY, "jwt_key", True, lambda: secrets.token_bytes(32)),
)
"""The secrets made once per cluster, here locally and by the stack on AWS (stacks/cluster_secrets.py)."""


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def cephx_key(now: float | None = None) -> str:
    """A Ceph secret as `ceph-authtool --gen-print-key` makes it: base64 of a
    CryptoKey header (type 1 = AES, created sec and nsec, length 16) and 16 random bytes."""
    stamp = time.time() if now is None else now
    sec, nsec = int(stamp), int((stamp % 1) * 1e9)
    return base64.b64encode(struct.pack("<hiih", 1, sec, nsec, 16) + secrets.token_bytes(16)).decode()


def ensure_ceph_secrets(directory: Path) -> None:
    """The cluster's fsid and Ceph keys, made once: re-made keys would lock every daemon
    and client out of the existing monitor."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    if not (directory / CEPH_FSID).exists():
        _write_private(directory / CEPH_FSID, str(uuid.uuid4()).encode())
    for name in (CEPH_MON_KEY, CEPH_ADMIN_KEY, CEPH_CLIENT_KEY):
        if not (directory / name).exists():
            _write_private(directory / name, cephx_key().encode())
    for name in CEPH_SECRETS:
        os.chmod(directory / name, 0o600)


def ceph_fsid(directory: Path) -> str:
    return (directory / CEPH_FSID).read_text().strip()


def ensure_secrets(cluster: str, root: Path | None = None, ceph: bool = False) -> Path:
    """Create every one of CLUSTER_SECRETS that is missing (the munge key, the DB password,
    the JWT key), the rollout's SSH key, and the Ceph fsid and keys when the cluster has Ceph."""
    directory = root or secrets_dir(cluster)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    for secret in CLUSTER_SECRETS:
        if not (directory / secret.name).exists():
            _write_private(directory / secret.name, secret.make())
    if not (directory / SSH_KEY).exists():
        # the rollout's key to reach nodes as root (local target: sshd in each container)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"slurmforge-{cluster}",
                        "-f", str(directory / SSH_KEY)], check=True, capture_output=True)
    for name in (*(secret.name for secret in CLUSTER_SECRETS), SSH_KEY):
        os.chmod(directory / name, 0o600)
    if ceph:
        ensure_ceph_secrets(directory)
    return directory


# ------------------------------------------------------------------ rotation
# A rotated secret goes into the store the cluster already uses and replaces the old one
# there: the secrets directory on every target (the roles and the local containers read it),
# and on AWS Secrets Manager too (what a new pool machine's join program fetches), the same
# code for both. `slurmforge rotate` (slurmforge/rotate.py) then carries it to the nodes.

def new_munge_key() -> bytes:
    return secrets.token_bytes(1024)


def new_db_password() -> str:
    return secrets.token_urlsafe(32)


def replace_in_place(path: Path, data: bytes) -> None:
    """The file's new content, 0600, in the same inode: a local pool container has the
    munge key bind-mounted from this very file, and a bind mount keeps the inode it was
    made with (a rename would leave the container the old key until it is made again)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.truncate(0)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(path, 0o600)


class SecretsManagerWriter(Protocol):
    """The part of boto3's secretsmanager client a rotation uses."""

    def put_secret_value(self, **kwargs: Any) -> dict[str, Any]: ...

    def describe_secret(self, **kwargs: Any) -> dict[str, Any]: ...

    def update_secret_version_stage(self, **kwargs: Any) -> dict[str, Any]: ...


@dataclass
class SecretStore:
    """Where the cluster's munge key and database password live: the secrets directory, and
    (AWS) Secrets Manager by the stack's ARNs, {secret file name: ARN}."""

    directory: Path
    client: SecretsManagerWriter | None = None
    arns: Mapping[str, str] = field(default_factory=dict)

    def put(self, name: str, value: bytes) -> None:
        """The new value everywhere the store keeps it, the old one gone: Secrets Manager
        first (new machines fetch it from there), its previous version left with no label
        (Secrets Manager deletes unlabelled versions); then the directory's file."""
        if self.client is not None and name in self.arns:
            arn = self.arns[name]
            binary = next((s.binary for s in CLUSTER_SECRETS if s.name == name), True)
            text = base64.b64encode(value).decode() if binary else value.decode()
            self.client.put_secret_value(SecretId=arn, SecretString=text)
            for version, stages in self.client.describe_secret(SecretId=arn).get("VersionIdsToStages", {}).items():
                if "AWSPREVIOUS" in stages:
                    self.client.update_secret_version_stage(SecretId=arn, VersionStage="AWSPREVIOUS",
                                                            RemoveFromVersionId=version)
        replace_in_place(self.directory / name, value)

    def get(self, name: str) -> bytes:
        return (self.directory / name).read_bytes()
