"""Secrets: the munge key, the accounting database password and the JWT key (the REST
API's tokens), generated here and kept in Secrets Manager - the cluster's secrets
(slurmforge.secrets.CLUSTER_SECRETS), which the rollout copies to its secrets directory.
Nodes fetch the munge key and the password with their instance role; the stack exports
those values only as secret outputs (encrypted in the state, hidden in `stack output`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_random as random

from .common import child, tags

# munge takes keys of 32 to 1024 bytes: use the most. Kept base64-encoded in the
# secret; nodes and the rollout decode it when they write /etc/munge/munge.key.
MUNGE_KEY_BYTES = 1024
DB_PASSWORD_LENGTH = 32
# Slurm's JWT guide makes an HS256 key of 32 random bytes; base64 in the secret as well.
JWT_KEY_BYTES = 32


@dataclass(frozen=True)
class SecretsArgs:
    cluster: str
    """Cluster name: tags and descriptions."""


class Secrets(pulumi.ComponentResource):
    munge_key_arn: pulumi.Output[str]
    db_password_arn: pulumi.Output[str]
    jwt_key_arn: pulumi.Output[str]
    munge_key: pulumi.Output[str]
    """base64 of the key; secret."""
    db_password: pulumi.Output[str]
    """Secret."""

    def __init__(self, name: str, args: SecretsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:Secrets", name, None, opts)
        key = random.RandomBytes(f"{name}-munge-key", length=MUNGE_KEY_BYTES, opts=child(self))
        # no quotes, backslashes, '#' or '=': the password is written into slurmdbd.conf
        password = random.RandomPassword(f"{name}-db-password", length=DB_PASSWORD_LENGTH, special=True,
                                         override_special="-_.", opts=child(self))
        self.munge_key = pulumi.Output.secret(key.base64)
        self.db_password = pulumi.Output.secret(password.result)
        self.munge_key_arn = self._store(name, "munge-key", "munge key (base64)", self.munge_key, args.cluster)
        self.db_password_arn = self._store(name, "db-password", "Slurm accounting database password",
                                           self.db_password, args.cluster)
        jwt = random.RandomBytes(f"{name}-jwt-key", length=JWT_KEY_BYTES, opts=child(self))
        self.jwt_key_arn = self._store(name, "jwt-key", "Slurm JWT key, HS256 (base64)",
                                       pulumi.Output.secret(jwt.base64), args.cluster)
        self.register_outputs({"munge_key_arn": self.munge_key_arn, "db_password_arn": self.db_password_arn,
                               "jwt_key_arn": self.jwt_key_arn})

    def _store(self, name: str, role: str, what: str, value: pulumi.Output[str], cluster: str) -> pulumi.Output[str]:
        secret = aws.secretsmanager.Secret(f"{name}-{role}", description=f"slurmforge {cluster}: {what}",
                                           tags=tags(cluster, "secret"), opts=child(self))
        aws.secretsmanager.SecretVersion(f"{name}-{role}", secret_id=secret.id, secret_string=value,
                                         opts=child(self))
        return secret.arn
