"""What a first `pulumi up` in a fresh account meets that Pulumi's mocks and moto let pass:
the order resources are made in (a machine before its subnet's route out), presigned URLs
S3 refuses, a parent AMI EC2 has deprecated (docs/aws.md, "What only an account shows")."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from stacks.common import s3_client
from tests.pulumi.conftest import DYNAMIC, POOLS_AWS, StackRun, run_stack

pytestmark = pytest.mark.pulumi

PLACED = ("aws:ec2/instance:Instance", DYNAMIC)
"""What the stack places in a subnet that needs the network out: head and Ceph hosts (apt, the
rollout's downloads), the image's build instance (Debian's mirror, S3)."""


@pytest.fixture(scope="module")
def unpinned() -> StackRun:
    return run_stack(POOLS_AWS, "unpinned")


def _associations(run: StackRun) -> dict[str, str]:
    """Subnet id -> its route table association's name."""
    return {r.inputs["subnetId"]: r.name for r in run.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")}


def test_everything_placed_in_a_subnet_waits_for_its_route_out(unpinned: StackRun) -> None:
    routes = _associations(unpinned)
    placed = [r for r in unpinned.resources if r.typ in PLACED]
    assert {r.typ for r in placed} == set(PLACED)
    for resource in placed:
        subnet = resource.inputs.get("subnetId") or resource.inputs.get("subnet_id")
        waits = unpinned.waits_for(resource.name)
        assert routes[subnet] in waits, f"{resource.name} in {subnet} does not wait for its route out"
        if "private" in routes[subnet]:
            assert any(n.endswith("-nat") for n in waits), f"{resource.name}: no NAT gateway before it"


@pytest.mark.parametrize("region", ["us-east-1", "eu-west-1"])
def test_presigned_urls_are_sigv4_on_the_regional_endpoint(region: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    s3 = s3_client(boto3.Session(region_name=region), region)
    url: str = s3.generate_presigned_url("get_object", Params={"Bucket": "mlpools-image", "Key": "k"})
    assert url.startswith((f"https://s3.{region}.amazonaws.com/", f"https://mlpools-image.s3.{region}.amazonaws.com/"))
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url and "AWSAccessKeyId" not in url


def test_the_parent_ami_is_found_after_ec2_deprecates_it(unpinned: StackRun) -> None:
    amis: list[Any] = [c for c in unpinned.calls if c.token == "aws:ec2/getAmi:getAmi"]
    assert amis and all(c.args.get("includeDeprecated") is True for c in amis)
