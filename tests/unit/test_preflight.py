"""`slurmforge preflight` (slurmforge/aws/preflight.py) against the stand-in's AWS: a moto
server with the rehearsal's strict IAM (EC2 calls authorized with AWS's condition keys and
DryRun answered) and an account's EC2 quotas. A good account passes; an account with no P
instance quota, a role without one EC2 permission, a missing key pair or parent AMI are
each one line with the fix."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
import yaml

from slurmforge.aws.preflight import DEBIAN_OWNER, lines, preflight, vcpus_needed
from slurmforge.distro import distro
from slurmforge.spec import load_spec, validate_data
from tests.harness.rehearsal.quotas import ec2_quotas
from tests.harness.rehearsal.stand_in import instance_roles_enforced
from tests.pulumi.conftest import POOLS_AWS, moto_server

pytestmark = pytest.mark.unit
REGION = "us-east-1"
SPEC = load_spec(POOLS_AWS)
OFFERED = validate_data(yaml.safe_load(POOLS_AWS.read_text().replace("p3.8xlarge", "p3dn.24xlarge").replace(
    "us-east-1a", "us-east-1c").replace("us-east-1b", "us-east-1d")), "pools-aws.yaml (offered)")
"""The example where moto's offerings (AWS's data as moto ships it) have its types: they list
no p3 type in us-east-1, and p3dn.24xlarge in us-east-1c and -1d only."""
ENOUGH = {"L-1216C47A": 64, "L-34B43A08": 64, "L-417A185B": 384, "L-7212CCBC": 384, "L-DB2E81BA": 0,
          "L-3819A6DF": 0}
EVERYTHING = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}]}


@dataclass
class Account:
    session: Any
    outputs: dict[str, Any]
    roles: dict[str, str]


def _role(iam: Any, name: str, policy: dict[str, Any]) -> str:
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                     "Principal": {"AWS": "arn:aws:iam::123456789012:root"}}]}
    arn = str(iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"])
    iam.put_role_policy(RoleName=name, PolicyName="deploy", PolicyDocument=json.dumps(policy))
    return arn


def _stack(session: Any) -> dict[str, Any]:
    """What `pulumi up` made that preflight reads: the pools' templates, the subnets, the controller."""
    ec2 = session.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    subnets = {s.zone: ec2.create_subnet(VpcId=vpc, CidrBlock=s.cidr, AvailabilityZone=s.zone)["Subnet"]["SubnetId"]
               for s in OFFERED.network.private_subnets}
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = [{"Key": "slurmforge:cluster", "Value": SPEC.name}]
    templates = {p.name: ec2.create_launch_template(LaunchTemplateName=f"{SPEC.name}-{p.name}", LaunchTemplateData={
        "ImageId": image, "TagSpecifications": [{"ResourceType": "instance", "Tags": [
            *tags, {"Key": "slurmforge:pool", "Value": p.name}]}]})["LaunchTemplate"]["LaunchTemplateId"]
        for p in OFFERED.pools}
    ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, SubnetId=subnets["us-east-1c"], TagSpecifications=[
        {"ResourceType": "instance", "Tags": [*tags, {"Key": "slurmforge:role", "Value": "controller"}]}])
    return {"region": REGION, "launch_templates": templates, "private_subnets": subnets,
            "spot_queue_url": f"https://sqs.{REGION}.amazonaws.com/123456789012/{SPEC.name}-spot"}


@pytest.fixture(scope="module")
def account() -> Iterator[Account]:
    with moto_server(REGION), instance_roles_enforced():
        yield make_account()


def make_account() -> Account:
    """The account of the stand-in (moto, this process's clients pointed at it): the key
    pair, Debian's AMI, the stack's templates and controller, a deployer role with every EC2
    permission and one without ec2:CreateFleet."""
    session = boto3.Session(region_name=REGION)
    ec2 = session.client("ec2")
    ec2.create_key_pair(KeyName="mlpools-admin")
    ami = ec2.register_image(Name=distro(SPEC.images.base).parent_ami, Architecture="x86_64")["ImageId"]
    from moto.ec2.models import ec2_backends

    image = ec2_backends["123456789012"][REGION].amis[ami]
    image.owner_id, image.architecture = DEBIAN_OWNER, "x86_64"  # Debian publishes it (moto drops both)
    iam = session.client("iam")
    without_fleet = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "NotAction": "ec2:CreateFleet", "Resource": "*"}]}
    roles = {"deployer": _role(iam, "deployer", EVERYTHING), "no-fleet": _role(iam, "no-fleet", without_fleet)}
    return Account(session, _stack(session), roles)


def run(account: Account, quotas: dict[str, float] = ENOUGH, role: str = "deployer") -> list[str]:
    with ec2_quotas(quotas):
        return list(lines(preflight(OFFERED, account.session, account.outputs, account.roles[role])))


def test_the_spec_needs_the_vcpus_of_its_max_nodes() -> None:
    need = {q.code: n for q, n in vcpus_needed(SPEC).items()}
    # p3.8xlarge (32 vCPUs) x 4 nodes, on demand and spot; controller (4), login (2), 3 Ceph
    # hosts (4 each), the image build (2), the cpu pool's 4 nodes of 2
    assert need["L-417A185B"] == 128 and need["L-7212CCBC"] == 128
    assert need["L-1216C47A"] == 4 + 2 + 3 * 4 + 2 + 4 * 2


def test_a_ready_account_has_no_problem(account: Account) -> None:
    started = time.monotonic()
    assert run(account) == []
    assert time.monotonic() - started < 10


def test_an_account_without_p_instance_quota(account: Account) -> None:
    found = run(account, {**ENOUGH, "L-417A185B": 0, "L-7212CCBC": 0})
    assert found == [
        "quotas: All P4, P3 and P2 Spot Instance Requests (L-7212CCBC) is 0 vCPUs, the spec needs 384 at its max "
        "nodes; fix: request 384 in the Service Quotas console (Amazon EC2, this region), or lower max_nodes",
        "quotas: Running On-Demand P instances (L-417A185B) is 0 vCPUs, the spec needs 384 at its max nodes; "
        "fix: request 384 in the Service Quotas console (Amazon EC2, this region), or lower max_nodes"], found


def test_a_role_without_one_ec2_permission(account: Account) -> None:
    found = run(account, role="no-fleet")
    assert len(found) == len(OFFERED.pools) and all(
        "the scheduler service's CreateFleet from the pool's launch template is refused (UnauthorizedOperation)"
        in line for line in found), found


def test_the_examples_p3_is_not_offered_where_it_asks(account: Account) -> None:
    """AWS's offerings as moto ships them: no p3.8xlarge in us-east-1 (a real account answers for itself)."""
    with ec2_quotas(ENOUGH):
        found = lines(preflight(SPEC, account.session))
    # one line per type and zone, at the first field that places it there
    assert [f.split(";")[0] for f in found] == [f"pools[1].instance_types: p3.8xlarge is not offered in {zone}"
                                                for zone in ("us-east-1a", "us-east-1b")], found


def test_a_missing_key_pair_and_parent_ami(account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    other = OFFERED.model_copy(update={"target": OFFERED.target.model_copy(update={"key_name": "nobody"})})
    monkeypatch.setattr("slurmforge.aws.preflight.DEBIAN_OWNER", "999999999999")
    with ec2_quotas(ENOUGH):
        found = lines(preflight(other, account.session, now=datetime.now(UTC)))
    assert [f.split(":")[0] for f in found] == ["target.key_name", "images"], found


def test_the_command_prints_one_line_per_problem_and_exits_5(account: Account, tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from slurmforge.cli import app

    spec = tmp_path / "cluster.yaml"
    spec.write_text(POOLS_AWS.read_text().replace("p3.8xlarge", "p3dn.24xlarge").replace(
        "us-east-1a", "us-east-1c").replace("us-east-1b", "us-east-1d"))
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({**account.outputs, "cluster": SPEC.name, "controller": "x", "ssh_user": "admin",
                                   "hosts": [], "ami_id": "ami-1"}))
    with ec2_quotas({**ENOUGH, "L-417A185B": 0}):
        res = CliRunner().invoke(app, ["preflight", str(spec), "--stack-outputs", str(outputs),
                                       "--role-arn", account.roles["no-fleet"]])
    stdout = [line for line in res.stdout.splitlines() if line]
    assert res.exit_code == 5, res.output
    assert len(stdout) == 1 + len(SPEC.pools) and stdout[0].startswith("quotas: Running On-Demand P instances"), stdout
    assert "preflight: 4 problem(s) in the account for mlpools" in res.stderr
