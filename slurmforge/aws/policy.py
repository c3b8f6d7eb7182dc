"""The scheduler service's IAM policy: what the stack attaches to the controller's role
(stacks/iam.py, SchedulerAccess) and what `slurmforge preflight` DryRuns the service's calls
with before the first job. A pure function of the cluster's scope, so both read one copy.

The service (on the controller's role) may:
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

from dataclasses import dataclass
from typing import Any

from slurmforge.hosts import TAG_CLUSTER as CLUSTER_TAG
from slurmforge.hosts import TAG_POOL as POOL_TAG


def partition(region: str) -> str:
    """The ARN partition of a region (aws, aws-cn, aws-us-gov)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


LAUNCH_ACTIONS = ["ec2:RunInstances", "ec2:CreateFleet"]
# Exactly what slurmforge/aws/provider.py calls (tests/pulumi/test_service_settings_round_trip.py
# records every call of a whole cycle against moto and compares it with this policy).
INSTANCE_ACTIONS = ["ec2:TerminateInstances", "ec2:CreateTags"]
DESCRIBE_ACTIONS = ["ec2:DescribeInstances", "ec2:DescribeLaunchTemplateVersions"]


def _doc(statements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": statements}


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
