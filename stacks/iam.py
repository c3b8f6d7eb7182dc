"""IAM: one instance role per node kind, and the scheduler service's permissions.

Node roles (Iam): controller, login and pool nodes may read the munge key, the controller
also the database password; nothing else. (No Session Manager: Debian's AMIs carry no SSM
Agent and Debian does not package it, so its policy would be a grant nothing uses; admins
and the rollout reach private hosts over SSH through the login node.) A pool node's join program (its user data)
makes one AWS call, GetSecretValue on the munge key (tests/pulumi/test_join_aws.py runs
it against moto enforcing the role's policies); its name comes from IMDS and the node kit
from the NAS, neither an API call.

The scheduler service's policy (SchedulerAccess, on the controller's role) is
slurmforge.aws.policy's: `slurmforge preflight` DryRuns the service's calls with the same one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pulumi
import pulumi_aws as aws

from slurmforge.aws.policy import SchedulerScope, scheduler_policy

from .common import assume_role_policy, child, policy_json, tags


class NodeKind(StrEnum):
    CONTROLLER = "controller"
    LOGIN = "login"
    COMPUTE = "compute"
    CEPH = "ceph"


def _doc(statements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": statements}


# Which secrets a kind of node reads: every Slurm host runs munge; only the controller
# runs slurmdbd. Ceph hosts read none.
READS_SECRETS: dict[NodeKind, tuple[str, ...]] = {
    NodeKind.CONTROLLER: ("munge_key", "db_password"),
    NodeKind.LOGIN: ("munge_key",),
    NodeKind.COMPUTE: ("munge_key",),
}


def node_policy(kind: NodeKind, secret_arns: dict[str, str]) -> dict[str, Any]:
    """What a node of this kind may do: read its secrets."""
    return _doc([{"Sid": "ReadClusterSecrets", "Effect": "Allow", "Action": "secretsmanager:GetSecretValue",
                  "Resource": [secret_arns[s] for s in READS_SECRETS[kind]]}])


@dataclass(frozen=True)
class IamArgs:
    cluster: str
    """Cluster name: tags."""
    region: str
    """The target region (ARN partition)."""
    munge_key_arn: pulumi.Input[str]
    """Secret every Slurm host reads."""
    db_password_arn: pulumi.Input[str]
    """Secret only the controller reads."""


class Iam(pulumi.ComponentResource):
    role_names: dict[NodeKind, pulumi.Output[str]]
    role_arns: dict[NodeKind, pulumi.Output[str]]
    profile_names: dict[NodeKind, pulumi.Output[str]]
    profile_arns: dict[NodeKind, pulumi.Output[str]]

    def __init__(self, name: str, args: IamArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:Iam", name, None, opts)
        self.role_names, self.role_arns, self.profile_names, self.profile_arns = {}, {}, {}, {}
        for kind in NodeKind:
            self._node_role(name, kind, args)
        self.register_outputs({"profile_names": self.profile_names})

    def _node_role(self, name: str, kind: NodeKind, args: IamArgs) -> None:
        role = aws.iam.Role(f"{name}-{kind}", assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
                            description=f"slurmforge {args.cluster}: {kind} hosts",
                            tags=tags(args.cluster, kind.value), opts=child(self))
        if kind in READS_SECRETS:
            document = pulumi.Output.all(munge_key=args.munge_key_arn, db_password=args.db_password_arn).apply(
                lambda arns: policy_json(node_policy(kind, arns)))
            aws.iam.RolePolicy(f"{name}-{kind}", role=role.id, policy=document, opts=child(self))
        profile = aws.iam.InstanceProfile(f"{name}-{kind}", role=role.name, opts=child(self))
        self.role_names[kind], self.role_arns[kind] = role.name, role.arn
        self.profile_names[kind], self.profile_arns[kind] = profile.name, profile.arn


@dataclass(frozen=True)
class SchedulerAccessArgs:
    cluster: str
    """Cluster name: the tag value every condition checks."""
    region: str
    """The target region (ARNs)."""
    controller_role_name: pulumi.Input[str]
    """The role the scheduler service runs as (it lives on the controller)."""
    compute_role_arn: pulumi.Input[str]
    """The pool nodes' role, which the service passes to EC2."""
    launch_template_arns: Sequence[pulumi.Input[str]]
    """Every pool's launch template: the only ones the service may launch from."""
    queue_arn: pulumi.Input[str]
    """The spot interruption / rebalance queue."""


class SchedulerAccess(pulumi.ComponentResource):
    policy: pulumi.Output[str]

    def __init__(self, name: str, args: SchedulerAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:SchedulerAccess", name, None, opts)
        account = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self)).account_id
        self.policy = pulumi.Output.all(
            account, args.compute_role_arn, args.queue_arn,
            pulumi.Output.all(*args.launch_template_arns),
        ).apply(lambda v: policy_json(scheduler_policy(SchedulerScope(
            cluster=args.cluster, region=args.region, account=v[0], compute_role_arn=v[1], queue_arn=v[2],
            launch_template_arns=list(v[3])))))
        aws.iam.RolePolicy(f"{name}-scheduler", role=args.controller_role_name, policy=self.policy, opts=child(self))
        self.register_outputs({"policy": self.policy})
