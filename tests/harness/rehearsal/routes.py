"""Whether a subnet of the stand-in has a way out, as a VPC decides it: its route table (the
one associated with it, else the VPC's main table) sends 0.0.0.0/0 to an internet gateway
attached to the VPC, or to a NAT gateway that is available and sits in a subnet that has
one (docs.aws.amazon.com/vpc/latest/userguide/VPC_Route_Tables.html, "Subnet route tables";
nat-gateway-scenarios.html). Until then an instance there reaches nothing outside its VPC
but the metadata service (link-local): not Debian's mirror, not S3, not AWS's APIs.

Machines (machines.py) cut a machine off with `cut_off_rules` in its own network namespace
while its subnet has no way out, and lift them when the route appears: on a first `pulumi
up`, an instance that does not wait for its subnet's route fails its downloads here as on EC2.
"""

from __future__ import annotations

from typing import Any

WORLD = "0.0.0.0/0"
CHAIN = "SF-NO-WAY-OUT"
IMDS = "169.254.169.254"


def _table(ec2: Any, subnet: dict[str, Any]) -> dict[str, Any] | None:
    main = [{"Name": "vpc-id", "Values": [subnet["VpcId"]]}, {"Name": "association.main", "Values": ["true"]}]
    for filters in ([{"Name": "association.subnet-id", "Values": [subnet["SubnetId"]]}], main):
        tables = ec2.describe_route_tables(Filters=filters)["RouteTables"]
        if tables:
            return dict(tables[0])
    return None


def _igw_attached(ec2: Any, igw: str, vpc: str) -> bool:
    gateways = ec2.describe_internet_gateways(InternetGatewayIds=[igw])["InternetGateways"]
    return any(a.get("VpcId") == vpc and a.get("State") in ("available", "attached")
               for g in gateways for a in g.get("Attachments", []))


def no_way_out(ec2: Any, subnet_id: str, through_nat: bool = True) -> str | None:
    """Why the subnet has no route out, or None when it has one."""
    subnet = ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]
    table = _table(ec2, subnet)
    route = next((r for r in (table or {}).get("Routes", []) if r.get("DestinationCidrBlock") == WORLD
                  and r.get("State", "active") == "active"), None)
    if route is None:
        return f"subnet {subnet_id}: no route to {WORLD} in its route table"
    if str(route.get("GatewayId", "")).startswith("igw-"):
        if _igw_attached(ec2, route["GatewayId"], subnet["VpcId"]):
            return None
        return f"subnet {subnet_id}: its internet gateway {route['GatewayId']} is not attached to the VPC"
    nat_id = route.get("NatGatewayId")
    if nat_id and through_nat:
        nat = ec2.describe_nat_gateways(NatGatewayIds=[nat_id])["NatGateways"][0]
        if nat.get("State") != "available":
            return f"subnet {subnet_id}: NAT gateway {nat_id} is {nat.get('State')}"
        behind = no_way_out(ec2, str(nat["SubnetId"]), through_nat=False)
        return None if behind is None else f"subnet {subnet_id}: NAT gateway {nat_id} has no way out ({behind})"
    return f"subnet {subnet_id}: its {WORLD} route leads nowhere out"


def cut_off_rules(vpc_cidr: str) -> list[list[str]]:
    """iptables commands (in the machine's namespace) that leave it its VPC, its loopback
    and the metadata service (DNAT'd by the IMDS rule: matched by its original address)."""
    return [["-N", CHAIN],
            ["-A", CHAIN, "-o", "lo", "-j", "RETURN"],
            ["-A", CHAIN, "-m", "conntrack", "--ctorigdst", f"{IMDS}/32", "-j", "RETURN"],
            ["-A", CHAIN, "-d", vpc_cidr, "-j", "RETURN"],
            ["-A", CHAIN, "-j", "REJECT", "--reject-with", "icmp-net-unreachable"],
            ["-I", "OUTPUT", "1", "-j", CHAIN]]


def lift_rules() -> list[list[str]]:
    return [["-D", "OUTPUT", "-j", CHAIN], ["-F", CHAIN], ["-X", CHAIN]]
