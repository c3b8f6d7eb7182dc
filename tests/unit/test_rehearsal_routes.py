"""The rehearsal's VPC routing (tests.harness.rehearsal.routes) against a moto server: a
private subnet has a way out only once its route table sends 0.0.0.0/0 to an available NAT
gateway in a public subnet with an attached internet gateway."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from tests.harness.rehearsal.routes import CHAIN, cut_off_rules, lift_rules, no_way_out
from tests.pulumi.conftest import moto_server

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def ec2() -> Iterator[Any]:
    with moto_server("us-east-1"):
        yield boto3.client("ec2", region_name="us-east-1")


def test_a_private_subnet_has_no_way_out_until_its_nat_route_exists(ec2: Any) -> None:
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    public = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.0.0/24")["Subnet"]["SubnetId"]
    private = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.16.0/20")["Subnet"]["SubnetId"]
    assert "no route" in str(no_way_out(ec2, private))  # the VPC's main table: local only
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    public_rt = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=public_rt, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
    ec2.associate_route_table(RouteTableId=public_rt, SubnetId=public)
    assert "not attached" in str(no_way_out(ec2, public))
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    assert no_way_out(ec2, public) is None
    eip = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=public, AllocationId=eip)["NatGateway"]["NatGatewayId"]
    private_rt = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=private_rt, DestinationCidrBlock="0.0.0.0/0", NatGatewayId=nat)
    assert "no route" in str(no_way_out(ec2, private))  # the table exists, the subnet is not in it yet
    ec2.associate_route_table(RouteTableId=private_rt, SubnetId=private)
    assert no_way_out(ec2, private) is None


def test_a_cut_off_machine_keeps_its_vpc_and_the_metadata_service() -> None:
    rules = cut_off_rules("10.9.0.0/16")
    assert rules[-1] == ["-I", "OUTPUT", "1", "-j", CHAIN]
    assert ["-A", CHAIN, "-d", "10.9.0.0/16", "-j", "RETURN"] in rules
    assert any("169.254.169.254/32" in r for r in rules) and rules[-2][-3:] == ["REJECT", "--reject-with",
                                                                               "icmp-net-unreachable"]
    assert lift_rules()[0] == ["-D", "OUTPUT", "-j", CHAIN]
