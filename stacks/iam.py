"""IAM: one instance role per node kind, and the scheduler service's permissions.

Node roles (Iam): controller, login and pool nodes may read the munge key, the controller
also the database password; nothing else. (No Session Manager: Debian's AMIs carry no SSM
Agent and Debian does not package it, so its policy would be a grant nothing uses; admins
and the rollout reach private hosts over SSH through the login node.) A pool node's join program (its user data)
makes one AWS call, GetSecretValue on the munge key (tests/pulumi/test_join_aws.py runs
it against moto enforcing the role's policies); its name comes from IMDS and the node kit
from the NAS, neither an API call.

The scheduler service (SchedulerAccess, on the controller's role) may:
  - launch instances only from this cluster's launch templates (RunInstances under
    ec2:LaunchTemplate; CreateFleet on the templates as resources: its request context
    has no ec2:LaunchTemplate key, per AWS's Service Authorization Reference),
    and only tagged with this cluster's name and a pool (aws:RequestTag; Denies enforce it),
  - terminate and retag only its pool machines: instances that carry this cluster's tag
    and a pool tag (ec2:ResourceTag), which no head node or Ceph host of the stack has;
    never change either tag afterwards,
  - pass the pool nodes' role to EC2, read its pools' policies and the spot queue,
  - describe (EC2's Describe* calls have no resource-level permissions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pulumi
import pulumi_aws as aws

from .common import CLUSTER_TAG, POOL_TAG, assume_role_policy, child, partition, policy_json, tags

LAUNCH_ACTIONS = ["ec2:RunInstances", "ec2:CreateFleet"]
# Exactly what slurmforge/aws/provider.py calls (tests/pulumi/test_service_settings_round_trip.py
# records every call of a whole cycle against moto and compares it with this policy).
INSTANCE_ACTIONS = ["ec2:TerminateInstances", "ec2:CreateTags"]
DESCRIBE_ACTIONS = ["ec2:DescribeInstances", "ec2:DescribeLaunchTemplateVersions"]


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
class SchedulerScope:
    """Everything the scheduler service's policy is scoped to."""

    cluster: str
    region: str
    account: str
    launch_template_arns: list[str]
    compute_role_arn: str
    queue_arn: str


def scheduler_policy(s: SchedulerScope) -> dict[str, Any]:
    """The scheduler service's permissions, nothing broader."""
    p = partition(s.region)
    ec2 = f"arn:{p}:ec2:{s.region}:{s.account}"
    # a pool machine of this cluster: the service launched it (stacks.common.tags never
    # puts a pool tag on an instance)
    pool_machine = {"StringEquals": {f"ec2:ResourceTag/{CLUSTER_TAG}": s.cluster},
                    "Null": {f"ec2:ResourceTag/{POOL_TAG}": "false"}}
    return _doc([
        # RunInstances - the calls an instant fleet makes with the service's permissions -
        # carries ec2:LaunchTemplate on every resource it authorizes (instance, volume, ENI,
        # subnet, SG, image, ...: AWS's Service Authorization Reference, RunInstances).
        {"Sid": "LaunchFromClusterTemplates", "Effect": "Allow", "Action": "ec2:RunInstances",
         "Resource": [f"{ec2}:*", f"arn:{p}:ec2:{s.region}::image/*"],
         "Condition": {"ArnLike": {"ec2:LaunchTemplate": s.launch_template_arns}}},
        # CreateFleet's own authorization has no ec2:LaunchTemplate key on any resource type
        # (the reference's CreateFleet rows: fleet, instance, image, launch-template,
        # placement-group, subnet, volume): a condition on it would refuse every fleet. The
        # fleet is scoped by the one resource it cannot do without, the launch template -
        # this cluster's only - and its instances by RunInstances above and the Denies below.
        {"Sid": "FleetFromClusterTemplates", "Effect": "Allow", "Action": "ec2:CreateFleet",
         "Resource": [f"{ec2}:fleet/*", *s.launch_template_arns]},
        {"Sid": "FleetResources", "Effect": "Allow", "Action": "ec2:CreateFleet",
         "Resource": [f"{ec2}:{kind}/*" for kind in ("instance", "volume", "subnet", "placement-group")]
         + [f"arn:{p}:ec2:{s.region}::image/*"]},
        {"Sid": "LaunchOnlyTaggedForThisCluster", "Effect": "Deny", "Action": LAUNCH_ACTIONS,
         "Resource": f"{ec2}:instance/*",
         "Condition": {"StringNotEquals": {f"aws:RequestTag/{CLUSTER_TAG}": s.cluster}}},
        {"Sid": "LaunchOnlyPoolMachines", "Effect": "Deny", "Action": LAUNCH_ACTIONS,
         "Resource": f"{ec2}:instance/*", "Condition": {"Null": {f"aws:RequestTag/{POOL_TAG}": "true"}}},
        {"Sid": "TagOnLaunch", "Effect": "Allow", "Action": "ec2:CreateTags",
         "Resource": [f"{ec2}:{kind}/*" for kind in
                      ("instance", "volume", "network-interface", "spot-instances-request", "fleet")],
         "Condition": {"StringEquals": {"ec2:CreateAction": ["RunInstances", "CreateFleet"]}}},
        {"Sid": "ManageClusterInstances", "Effect": "Allow", "Action": INSTANCE_ACTIONS,
         "Resource": f"{ec2}:instance/*", "Condition": pool_machine},
        {"Sid": "KeepTheClusterTag", "Effect": "Deny", "Action": ["ec2:CreateTags", "ec2:DeleteTags"],
         "Resource": f"{ec2}:instance/*",
         "Condition": {"ForAnyValue:StringEquals": {"aws:TagKeys": [CLUSTER_TAG, POOL_TAG]},
                       "Null": {"ec2:CreateAction": "true"}}},
        {"Sid": "PassPoolNodeRole", "Effect": "Allow", "Action": "iam:PassRole", "Resource": s.compute_role_arn,
         "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}},
        {"Sid": "SpotServiceLinkedRole", "Effect": "Allow", "Action": "iam:CreateServiceLinkedRole",
         "Resource": f"arn:{p}:iam::{s.account}:role/aws-service-role/spot.amazonaws.com/*",
         "Condition": {"StringLike": {"iam:AWSServiceName": "spot.amazonaws.com"}}},
        {"Sid": "ReadSpotNotices", "Effect": "Allow",
         "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage"],
         "Resource": s.queue_arn},
        {"Sid": "DescribeIsReadOnly", "Effect": "Allow", "Action": DESCRIBE_ACTIONS, "Resource": "*"},
    ])


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
