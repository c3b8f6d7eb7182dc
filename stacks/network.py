"""Network: VPC, public subnet(s) for the login node and NAT, private subnets (one per
availability zone) for everything else, and the security groups.

Security groups, least privilege:
  login       SSH from the spec's admin CIDRs only (0.0.0.0/0 only with
              network.allow_ssh_from_anywhere); Slurm's REST API (rest_api.port) from
              inside the VPC only (dashboards, portals: tokens authenticate each request)
  cluster     every cluster host (controller, login, pool nodes, Ceph): all traffic
              from members only. Slurm (6817-6819 plus srun's ephemeral ports), NCCL/MPI
              between nodes and EFA (which requires an all-traffic self rule) stay inside.
  controller  membership marks the controller(s): the database allows MariaDB from it alone
The VPC's default security group is emptied, so nothing lands in an open group by accident.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from slurmforge.spec.models import Network as NetworkSpec
from slurmforge.spec.models import Subnet

from .common import WORLD, all_egress_rules, child, tags

SSH = 22


@dataclass(frozen=True)
class NetworkArgs:
    cluster: str
    """Cluster name: resource tags and names."""
    network: NetworkSpec
    """The spec's network section (CIDRs, subnets and zones, admin CIDRs)."""
    rest_api_port: int
    """Where slurmrestd listens on the login node(s) (the spec's rest_api.port)."""


def is_world(cidr: str) -> bool:
    return ipaddress.ip_network(cidr).prefixlen == 0


def ssh_cidrs(admin_cidrs: Sequence[str], allow_anywhere: bool) -> list[str]:
    """Who may SSH to the login node. The spec's checks already refuse 0.0.0.0/0 without
    allow_ssh_from_anywhere; this drops it again so the stack can never open it alone."""
    return [c for c in admin_cidrs if allow_anywhere or not is_world(c)]


def login_ingress(admin_cidrs: Sequence[str], allow_anywhere: bool, vpc_cidr: str,
                  rest_api_port: int) -> list[aws.ec2.SecurityGroupIngressArgs]:
    rest = aws.ec2.SecurityGroupIngressArgs(
        description="Slurm's REST API (slurmrestd, JWT) from inside the VPC", protocol="tcp",
        from_port=rest_api_port, to_port=rest_api_port, cidr_blocks=[vpc_cidr])
    cidrs = ssh_cidrs(admin_cidrs, allow_anywhere)
    if not cidrs:
        return [rest]
    return [aws.ec2.SecurityGroupIngressArgs(
        description="SSH from the admin CIDRs", protocol="tcp", from_port=SSH, to_port=SSH, cidr_blocks=cidrs), rest]


def cluster_ingress() -> list[aws.ec2.SecurityGroupIngressArgs]:
    return [aws.ec2.SecurityGroupIngressArgs(
        description="Slurm, munge-authenticated RPCs, MPI/NCCL, EFA, Ceph: cluster members only",
        protocol="-1", from_port=0, to_port=0, self=True)]


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    public_subnet_ids: list[pulumi.Output[str]]
    private_subnet_ids: dict[str, pulumi.Output[str]]
    """Private subnet id by availability zone."""
    cluster_sg_id: pulumi.Output[str]
    login_sg_id: pulumi.Output[str]
    controller_sg_id: pulumi.Output[str]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:Network", name, None, opts)
        net = args.network
        vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=net.vpc_cidr, enable_dns_support=True,
                          enable_dns_hostnames=True, tags=tags(args.cluster, "network", f"{name}-vpc"),
                          opts=child(self))
        self.vpc_id = vpc.id
        # An empty default group: instances never fall back to a group we did not design.
        aws.ec2.DefaultSecurityGroup(f"{name}-default-sg", vpc_id=vpc.id, ingress=[], egress=[], opts=child(self))
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, opts=child(self))
        public = [self._subnet(name, "public", i, s, vpc, args.cluster) for i, s in enumerate(net.public_subnets)]
        self.public_subnet_ids = self._route_table(name, "public", vpc, public,
                                                   aws.ec2.RouteTableRouteArgs(cidr_block=WORLD, gateway_id=igw.id))
        # One NAT gateway for the cluster: a second one per zone doubles its fixed cost
        # (see docs/aws.md); pool nodes in other zones reach it across zones.
        eip = aws.ec2.Eip(f"{name}-nat-ip", domain="vpc", opts=child(self, depends_on=[igw]))
        nat = aws.ec2.NatGateway(f"{name}-nat", allocation_id=eip.id, subnet_id=public[0].id, opts=child(self))
        private = [self._subnet(name, "private", i, s, vpc, args.cluster) for i, s in enumerate(net.private_subnets)]
        routed = self._route_table(name, "private", vpc, private,
                                   aws.ec2.RouteTableRouteArgs(cidr_block=WORLD, nat_gateway_id=nat.id))
        self.private_subnet_ids = {s.zone: sub for s, sub in zip(net.private_subnets, routed, strict=True)}
        self.cluster_sg_id = self._group(name, "cluster", vpc, cluster_ingress(), args.cluster)
        login = login_ingress(net.admin_cidrs, net.allow_ssh_from_anywhere, net.vpc_cidr, args.rest_api_port)
        self.login_sg_id = self._group(name, "login", vpc, login, args.cluster)
        self.controller_sg_id = self._group(name, "controller", vpc, [], args.cluster)
        self.register_outputs({"vpc_id": self.vpc_id, "cluster_sg_id": self.cluster_sg_id})

    def _subnet(self, name: str, kind: str, index: int, spec: Subnet, vpc: aws.ec2.Vpc,
                cluster: str) -> aws.ec2.Subnet:
        # no public address is ever assigned by a subnet: only the login node asks for one
        return aws.ec2.Subnet(f"{name}-{kind}-{index + 1}", vpc_id=vpc.id, cidr_block=spec.cidr,
                              availability_zone=spec.zone, map_public_ip_on_launch=False,
                              tags=tags(cluster, "network", f"{name}-{kind}-{spec.zone}"), opts=child(self))

    def _route_table(self, name: str, kind: str, vpc: aws.ec2.Vpc, subnets: list[aws.ec2.Subnet],
                     route: aws.ec2.RouteTableRouteArgs) -> list[pulumi.Output[str]]:
        """The subnets' route out, and each subnet's id as the rest of the stack gets it:
        an Output that depends on the subnet's route table association (and so on its
        NAT gateway or internet gateway), so whatever is placed in a subnet - the image's
        build instance, a head node, a mount target - waits until the subnet has a way
        out. A subnet's bare id would let `pulumi up` boot an instance whose apt-get and
        curl fail because its route did not exist yet."""
        table = aws.ec2.RouteTable(f"{name}-{kind}-rt", vpc_id=vpc.id, routes=[route], opts=child(self))
        out = []
        for i, subnet in enumerate(subnets):
            association = aws.ec2.RouteTableAssociation(f"{name}-{kind}-rt-{i + 1}", route_table_id=table.id,
                                                        subnet_id=subnet.id, opts=child(self))
            out.append(pulumi.Output.all(subnet.id, association.id).apply(lambda ids: str(ids[0])))
        return out

    def _group(self, name: str, role: str, vpc: aws.ec2.Vpc, ingress: list[aws.ec2.SecurityGroupIngressArgs],
               cluster: str) -> pulumi.Output[str]:
        group = aws.ec2.SecurityGroup(f"{name}-{role}", vpc_id=vpc.id, description=f"slurmforge {cluster} {role}",
                                      ingress=ingress, egress=all_egress_rules(),
                                      tags=tags(cluster, role, f"{name}-{role}"), opts=child(self))
        return group.id
