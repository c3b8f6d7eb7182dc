"""The metadata service stand-in of the AWS rehearsal (tests.harness.rehearsal.imds), against a
moto server: IMDSv2 only, one instance per source address, what cloud-init's EC2
datasource and the join program read, live from moto."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from tests.harness.rehearsal.imds import Imds
from tests.pulumi.conftest import moto_server

pytestmark = pytest.mark.unit
REGION = "us-east-1"
A, B = "127.0.0.2", "127.0.0.3"
"""Two callers on this machine, standing for two instances."""
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHr1m9G1b0Q3cZ0mXlF0yQpZl8l5lYpQ0m2zJb7m8yBz admin@rehearsal"


@dataclass
class World:
    ec2: Any
    imds: Imds
    plain: str
    """An instance without profile, tags not enabled, no user data, launched with a key pair."""
    node: str
    """An instance launched by an EC2 Fleet from a template with a profile and tags enabled."""
    subnet: str


def call(imds: Imds, source: str, method: str, path: str, headers: dict[str, str] | None = None
         ) -> tuple[int, str]:
    conn = http.client.HTTPConnection(imds.host, imds.port, timeout=10, source_address=(source, 0))
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def token(imds: Imds, source: str) -> str:
    status, body = call(imds, source, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    assert status == 200
    return body


def get(imds: Imds, source: str, path: str) -> tuple[int, str]:
    return call(imds, source, "GET", path, {"X-aws-ec2-metadata-token": token(imds, source)})


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with moto_server(REGION):
        session = boto3.Session(region_name=REGION)
        ec2, iam = session.client("ec2"), session.client("iam")
        iam.create_role(RoleName="nodes", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}))
        profile = iam.create_instance_profile(InstanceProfileName="nodes")["InstanceProfile"]["Arn"]
        iam.add_role_to_instance_profile(InstanceProfileName="nodes", RoleName="nodes")
        vpc = ec2.create_vpc(CidrBlock="10.213.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.213.1.0/24")["Subnet"]["SubnetId"]
        ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        ec2.import_key_pair(KeyName="admin", PublicKeyMaterial=KEY.encode())
        plain = ec2.run_instances(ImageId=ami, InstanceType="t3.micro", MinCount=1, MaxCount=1, SubnetId=subnet,
                                  KeyName="admin", MetadataOptions={"HttpTokens": "required"})["Instances"][0][
                                      "InstanceId"]
        template = ec2.create_launch_template(LaunchTemplateName="cpu", LaunchTemplateData={
            "ImageId": ami, "InstanceType": "t3.micro", "IamInstanceProfile": {"Arn": profile},
            "UserData": "IyEvYmluL2Jhc2gKZWNobyBqb2lu",  # "#!/bin/bash\necho join"
            "MetadataOptions": {"HttpTokens": "required", "InstanceMetadataTags": "enabled"}},
        )["LaunchTemplate"]["LaunchTemplateId"]
        fleet = ec2.create_fleet(Type="instant", LaunchTemplateConfigs=[{
            "LaunchTemplateSpecification": {"LaunchTemplateId": template, "Version": "$Default"},
            "Overrides": [{"SubnetId": subnet}]}],
            TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"})
        node = fleet["Instances"][0]["InstanceIds"][0]
        ec2.create_tags(Resources=[node], Tags=[{"Key": "slurmforge:node", "Value": "mlpools-cpu-01"}])
        imds = Imds(session, addresses={A: plain, B: node})
        try:
            yield World(ec2, imds, plain, node, subnet)
        finally:
            imds.close()


def test_every_get_needs_a_token_of_its_own_instance(world: World) -> None:
    imds = world.imds
    assert call(imds, A, "GET", "/latest/meta-data/instance-id")[0] == 401  # IMDSv1: refused
    assert call(imds, A, "PUT", "/latest/api/token")[0] == 400  # no TTL
    assert call(imds, A, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "21601"})[0] == 400
    assert get(imds, A, "/latest/meta-data/instance-id") == (200, world.plain)
    assert get(imds, B, "/latest/meta-data/instance-id") == (200, world.node)
    stolen = token(imds, A)
    assert call(imds, B, "GET", "/latest/meta-data/instance-id", {"X-aws-ec2-metadata-token": stolen})[0] == 401


def test_a_request_is_about_the_instance_at_its_source_address(world: World) -> None:
    node = world.ec2.describe_instances(InstanceIds=[world.node])["Reservations"][0]["Instances"][0]
    assert world.imds.instance_at(node["PrivateIpAddress"]) == world.node
    assert world.imds.instance_at("10.213.9.9") is None
    assert call(world.imds, "127.0.0.9", "PUT", "/latest/api/token",
                {"X-aws-ec2-metadata-token-ttl-seconds": "60"})[0] == 404  # no instance there


def test_the_tree_as_cloud_inits_ec2_datasource_walks_it(world: World) -> None:
    imds = world.imds
    node = world.ec2.describe_instances(InstanceIds=[world.node])["Reservations"][0]["Instances"][0]
    for version in ("latest", "2021-03-23"):
        status, listing = get(imds, B, f"/{version}/meta-data/")
        assert status == 200
        assert {"instance-id", "local-ipv4", "placement/", "iam/", "tags/"} <= set(listing.split("\n"))
    assert get(imds, B, "/latest/meta-data/local-ipv4") == (200, node["PrivateIpAddress"])
    assert get(imds, B, "/latest/meta-data/mac") == (200, node["NetworkInterfaces"][0]["MacAddress"])
    assert get(imds, B, "/latest/meta-data/placement/availability-zone") == (
        200, node["Placement"]["AvailabilityZone"])
    mac = node["NetworkInterfaces"][0]["MacAddress"]
    assert get(imds, B, "/latest/meta-data/network/interfaces/macs/") == (200, f"{mac}/")
    assert get(imds, B, f"/latest/meta-data/network/interfaces/macs/{mac}/subnet-ipv4-cidr-block") == (
        200, "10.213.1.0/24")
    assert get(imds, B, f"/latest/meta-data/network/interfaces/macs/{mac}/device-number") == (200, "0")
    assert get(imds, B, "/latest/user-data") == (200, "#!/bin/bash\necho join")
    assert get(imds, A, "/latest/user-data")[0] == 404
    status, document = get(imds, B, "/latest/dynamic/instance-identity/document")
    assert status == 200 and json.loads(document)["instanceId"] == world.node
    assert get(imds, B, "/latest/meta-data/no-such-key")[0] == 404


def test_tags_only_where_the_launch_enabled_them(world: World) -> None:
    assert get(world.imds, B, "/latest/meta-data/tags/instance/slurmforge:node") == (200, "mlpools-cpu-01")
    assert get(world.imds, B, "/latest/meta-data/tags/instance/nope")[0] == 404
    world.ec2.create_tags(Resources=[world.plain], Tags=[{"Key": "slurmforge:node", "Value": "x"}])
    assert get(world.imds, A, "/latest/meta-data/tags/instance/slurmforge:node")[0] == 404


def test_the_credentials_are_the_profile_roles_assumed_in_moto(world: World) -> None:
    """A fleet's instance gets its launch template's profile (moto drops it, EC2 does not)."""
    imds = world.imds
    assert get(imds, B, "/latest/meta-data/iam/security-credentials/") == (200, "nodes")
    status, body = get(imds, B, "/latest/meta-data/iam/security-credentials/nodes")
    credentials = json.loads(body)
    assert status == 200 and credentials["Code"] == "Success"
    sts = boto3.client("sts", region_name=REGION, aws_access_key_id=credentials["AccessKeyId"],
                       aws_secret_access_key=credentials["SecretAccessKey"], aws_session_token=credentials["Token"])
    assert ":assumed-role/nodes/" in sts.get_caller_identity()["Arn"]
    assert get(imds, B, "/latest/meta-data/iam/security-credentials/nodes")[1] == body  # kept until near expiry
    assert get(imds, A, "/latest/meta-data/iam/")[0] == 404  # no profile, no credentials


def test_the_launchs_key_pair_as_cloud_init_reads_it(world: World) -> None:
    """EC2 lists a key as <index>=<name>, its formats under <index>/: cloud-init installs
    openssh-key for the default user (admin on Debian's AMIs)."""
    imds = world.imds
    assert "public-keys/" in get(imds, A, "/latest/meta-data/")[1].split("\n")
    assert get(imds, A, "/latest/meta-data/public-keys/") == (200, "0=admin")
    assert get(imds, A, "/latest/meta-data/public-keys/0/") == (200, "openssh-key")
    assert get(imds, A, "/latest/meta-data/public-keys/0/openssh-key") == (200, KEY + "\n")
    assert get(imds, B, "/latest/meta-data/public-keys/")[0] == 404  # launched without a key pair
