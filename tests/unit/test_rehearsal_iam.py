"""The AWS rehearsal's IAM check (tests.harness.rehearsal.stand_in.instance_roles_enforced),
against a moto server: a call with an instance role's credentials to Secrets Manager or SQS
does what the role's policies allow and nothing else; the admin's calls are the account's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from tests.harness.rehearsal.stand_in import instance_roles_enforced
from tests.pulumi.conftest import moto_server

pytestmark = pytest.mark.unit
REGION = "us-east-1"


@dataclass
class World:
    admin: boto3.Session
    role: boto3.Session
    """Credentials of an assumed role, as the metadata service hands them to an instance."""
    mine: str
    other: str
    queue: str
    other_queue: str


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with moto_server(REGION):
        admin = boto3.Session(region_name=REGION)
        sm, sqs, iam = admin.client("secretsmanager"), admin.client("sqs"), admin.client("iam")
        mine = sm.create_secret(Name="c-munge-key", SecretString="k1")["ARN"]
        other = sm.create_secret(Name="c-db-password", SecretString="p1")["ARN"]
        queue = sqs.create_queue(QueueName="c-spot")["QueueUrl"]
        other_queue = sqs.create_queue(QueueName="c-other")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        role = iam.create_role(RoleName="c-compute", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                    "Principal": {"Service": "ec2.amazonaws.com"}}]}))["Role"]
        iam.put_role_policy(RoleName="c-compute", PolicyName="node", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": [mine]},
                {"Effect": "Allow", "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage"], "Resource": queue_arn}]}))
        assumed = admin.client("sts").assume_role(RoleArn=role["Arn"], RoleSessionName="i-1")["Credentials"]
        session = boto3.Session(region_name=REGION, aws_access_key_id=assumed["AccessKeyId"],
                                aws_secret_access_key=assumed["SecretAccessKey"],
                                aws_session_token=assumed["SessionToken"])
        yield World(admin, session, mine, other, queue, other_queue)


def denied(call: Any) -> str:
    with pytest.raises(Exception) as e:
        call()
    assert "AccessDenied" in str(e.value), e.value
    return str(e.value)


@pytest.fixture
def enforced() -> Iterator[None]:
    with instance_roles_enforced():
        yield


def test_a_role_reads_the_secrets_its_policy_names_and_no_other(world: World, enforced: None) -> None:
    sm = world.role.client("secretsmanager")
    assert sm.get_secret_value(SecretId=world.mine)["SecretString"] == "k1"
    assert sm.get_secret_value(SecretId="c-munge-key")["SecretString"] == "k1"  # by name: the same secret
    denied(lambda: sm.get_secret_value(SecretId=world.other))
    denied(lambda: sm.put_secret_value(SecretId=world.mine, SecretString="x"))  # an action not granted


def test_a_role_receives_from_its_queue_only(world: World, enforced: None) -> None:
    sqs = world.role.client("sqs")
    sqs.receive_message(QueueUrl=world.queue, WaitTimeSeconds=0)
    denied(lambda: sqs.receive_message(QueueUrl=world.other_queue, WaitTimeSeconds=0))
    denied(lambda: sqs.send_message(QueueUrl=world.queue, MessageBody="x"))


def test_a_batch_call_needs_the_single_calls_permission_as_on_aws(world: World, enforced: None) -> None:
    """sqs:DeleteMessage allows DeleteMessageBatch (AWS has no sqs:DeleteMessageBatch)."""
    sqs = world.role.client("sqs")
    world.admin.client("sqs").send_message(QueueUrl=world.queue, MessageBody="notice")
    (message,) = sqs.receive_message(QueueUrl=world.queue, WaitTimeSeconds=0)["Messages"]
    entries = [{"Id": "0", "ReceiptHandle": message["ReceiptHandle"]}]
    done = sqs.delete_message_batch(QueueUrl=world.queue, Entries=entries)
    assert [e["Id"] for e in done["Successful"]] == ["0"]
    denied(lambda: sqs.delete_message_batch(QueueUrl=world.other_queue, Entries=[{"Id": "0", "ReceiptHandle": "x"}]))
    denied(lambda: sqs.send_message_batch(QueueUrl=world.queue, Entries=[{"Id": "0", "MessageBody": "x"}]))


def test_the_admins_calls_pass_and_a_roles_ec2_calls_are_judged(world: World, enforced: None) -> None:
    assert world.admin.client("secretsmanager").get_secret_value(SecretId=world.other)["SecretString"] == "p1"
    world.admin.client("ec2").describe_instances()
    # the role has no EC2 statement: EC2 refuses it (tests/unit/test_rehearsal_ec2_iam.py: the conditions)
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        world.role.client("ec2").describe_instances()


def test_outside_the_check_roles_are_not_judged(world: World) -> None:
    """The check is the context's own: without it a role's call passes (moto's default)."""
    sm = world.role.client("secretsmanager")
    assert sm.get_secret_value(SecretId=world.other)["SecretString"] == "p1"
    with instance_roles_enforced():
        denied(lambda: sm.get_secret_value(SecretId=world.other))
    assert sm.get_secret_value(SecretId=world.other)["SecretString"] == "p1"
