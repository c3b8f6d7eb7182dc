"""The AWS rehearsal's EC2 authorization (tests.harness.rehearsal.ec2_iam), against a moto
server in this process: a role's EC2 calls are allowed or refused as AWS's Service
Authorization Reference says - per action, per resource type, with only the condition keys
AWS puts in that context - and a DryRun is answered without being made. The policy is the
one the stack gives the scheduler service (stacks.iam.scheduler_policy)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from slurmforge.aws.policy import SchedulerScope, scheduler_policy
from tests.harness.rehearsal.authorization import Target, decide
from tests.harness.rehearsal.stand_in import instance_roles_enforced
from tests.pulumi.conftest import moto_server

pytestmark = pytest.mark.unit
REGION = "us-east-1"
ACCOUNT = "123456789012"


@dataclass
class Account:
    admin: Any
    template: str
    other_template: str
    subnet: str


def assume(admin: Any, role: str, policy: dict[str, Any], session_policy: dict[str, Any] | None = None) -> Any:
    iam = admin.client("iam")
    arn = iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                "Principal": {"Service": "ec2.amazonaws.com"}}]}))["Role"]["Arn"]
    iam.put_role_policy(RoleName=role, PolicyName="p", PolicyDocument=json.dumps(policy))
    extra = {"Policy": json.dumps(session_policy)} if session_policy else {}
    c = admin.client("sts").assume_role(RoleArn=arn, RoleSessionName="test", **extra)["Credentials"]
    return boto3.Session(region_name=REGION, aws_access_key_id=c["AccessKeyId"],
                         aws_secret_access_key=c["SecretAccessKey"], aws_session_token=c["SessionToken"])


@pytest.fixture(scope="module")
def account() -> Iterator[Account]:
    with moto_server(REGION), instance_roles_enforced():
        admin = boto3.Session(region_name=REGION)
        ec2 = admin.client("ec2")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")["Subnet"]
        group = ec2.create_security_group(VpcId=vpc, GroupName="cluster", Description="c")["GroupId"]
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]

        def template(name: str) -> str:
            return str(ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={
                "ImageId": image, "SecurityGroupIds": [group], "InstanceType": "t3.medium",
                "TagSpecifications": [{"ResourceType": "instance", "Tags": [
                    {"Key": "slurmforge:cluster", "Value": "c"}, {"Key": "slurmforge:pool", "Value": "cpu"}]}],
            })["LaunchTemplate"]["LaunchTemplateId"])

        yield Account(admin, template("c-cpu"), template("other"), subnet["SubnetId"])


def scheduler(acct: Account, template: str) -> dict[str, Any]:
    arn = f"arn:aws:ec2:{REGION}:{ACCOUNT}:launch-template/{template}"
    return scheduler_policy(SchedulerScope(cluster="c", region=REGION, account=ACCOUNT, launch_template_arns=[arn],
                                           compute_role_arn=f"arn:aws:iam::{ACCOUNT}:role/c-compute",
                                           queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:c-spot"))


def fleet(ec2: Any, template: str, subnet: str, dry_run: bool = False, cluster: str = "c") -> Any:
    return ec2.create_fleet(DryRun=dry_run, Type="instant", LaunchTemplateConfigs=[{
        "LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Latest"},
        "Overrides": [{"InstanceType": "t3.medium", "SubnetId": subnet}]}],
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "slurmforge:cluster", "Value": cluster}, {"Key": "slurmforge:pool", "Value": "cpu"}]}])


def code(call: Any) -> str:
    with pytest.raises(ClientError) as e:
        call()
    return str(e.value.response["Error"]["Code"])


def test_the_services_policy_launches_a_fleet_from_its_template(account: Account) -> None:
    ec2 = assume(account.admin, "svc-ok", scheduler(account, account.template)).client("ec2")
    assert code(lambda: fleet(ec2, account.template, account.subnet, dry_run=True)) == "DryRunOperation"
    made = fleet(ec2, account.template, account.subnet)
    assert made["Instances"], made.get("Errors")
    (iid,) = made["Instances"][0]["InstanceIds"]
    ec2.create_tags(Resources=[iid], Tags=[{"Key": "slurmforge:node", "Value": "c-cpu-01"}])
    ec2.terminate_instances(InstanceIds=[iid])


def test_a_fleet_is_refused_from_another_template_or_without_the_clusters_tags(account: Account) -> None:
    ec2 = assume(account.admin, "svc-scoped", scheduler(account, account.template)).client("ec2")
    assert code(lambda: fleet(ec2, account.other_template, account.subnet)) == "UnauthorizedOperation"
    assert code(lambda: fleet(ec2, account.template, account.subnet, cluster="other")) == "UnauthorizedOperation"


def test_the_service_terminates_no_instance_of_the_stack(account: Account) -> None:
    head = account.admin.client("ec2").run_instances(
        ImageId=account.admin.client("ec2").describe_images(Owners=["amazon"])["Images"][0]["ImageId"],
        MinCount=1, MaxCount=1, SubnetId=account.subnet, TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "slurmforge:cluster", "Value": "c"}]}])["Instances"][0]["InstanceId"]
    ec2 = assume(account.admin, "svc-term", scheduler(account, account.template)).client("ec2")
    assert code(lambda: ec2.terminate_instances(InstanceIds=[head])) == "UnauthorizedOperation"


def test_a_session_policy_narrows_what_the_role_may(account: Account) -> None:
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}]}
    ec2 = assume(account.admin, "deployer", everything, session_policy=scheduler(account, account.template)
                 ).client("ec2")
    assert code(lambda: fleet(ec2, account.template, account.subnet, dry_run=True)) == "DryRunOperation"
    assert code(lambda: fleet(ec2, account.other_template, account.subnet, dry_run=True)) == "UnauthorizedOperation"


def test_a_condition_on_a_key_the_reference_does_not_list_fails() -> None:
    """CreateFleet's subnet has no ec2:LaunchTemplate key; RunInstances' subnet has."""
    lt = f"arn:aws:ec2:{REGION}:{ACCOUNT}:launch-template/lt-1"
    policy = [{"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Action": ["ec2:CreateFleet", "ec2:RunInstances"], "Resource": "*",
        "Condition": {"ArnLike": {"ec2:LaunchTemplate": lt}}}]}]
    subnet = Target("subnet", f"arn:aws:ec2:{REGION}:{ACCOUNT}:subnet/subnet-1", {"ec2:LaunchTemplate": [lt]})
    assert decide([policy], "ec2:RunInstances", [subnet]) is None
    assert decide([policy], "ec2:CreateFleet", [subnet]) is not None


def test_the_reference_extract_covers_every_action_the_services_policy_names() -> None:
    from tests.harness.rehearsal.authorization import USED, reference

    assert sorted(reference()) == sorted(f"{service}:{name}" for service, names in USED.items() for name in names)
    policy = scheduler(Account(None, "lt-1", "lt-2", "subnet-1"), "lt-1")
    named = {a for st in policy["Statement"]
             for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])}
    assert named - set(reference()) == set(), "regenerate authorization.json with these in USED"
