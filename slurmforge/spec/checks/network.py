"""The AWS network: the VPC's subnets, their sizes and zones, and who may reach the login node."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass

from slurmforge.errors import Problem
from slurmforge.hosts import controller_names, login_subnets
from slurmforge.spec.checks.registry import check, dupes, is_aws, per_run, stack_makes_rds
from slurmforge.spec.models import AwsTarget, Cluster

# AWS accepts VPC and subnet netmasks from /16 to /28, and keeps 5 addresses of every subnet.
AWS_PREFIXES = range(16, 29)
AWS_RESERVED_PER_SUBNET = 5


@dataclass(frozen=True, slots=True)
class _Net:
    """A CIDR the models validated, as numbers (ipaddress's objects cost microseconds each:
    seconds for the 200,000 subnets a 10 MB spec can list)."""

    path: str
    cidr: str
    first: int
    last: int
    prefix: int

    @classmethod
    def of(cls, path: str, cidr: str) -> _Net:
        address, _, prefix = cidr.partition("/")
        first = int.from_bytes(socket.inet_aton(address), "big")
        return cls(path, cidr, first, first + (1 << (32 - int(prefix))) - 1, int(prefix))

    @property
    def size(self) -> int:
        return self.last - self.first + 1


@per_run
def _subnets(spec: Cluster) -> list[_Net]:
    return [_Net.of(f"network.{kind}[{i}].cidr", s.cidr)
            for kind in ("public_subnets", "private_subnets") for i, s in enumerate(getattr(spec.network, kind))]


@check
def subnets_inside_vpc(spec: Cluster) -> Iterator[Problem]:
    """Subnets lie inside the VPC CIDR."""
    vpc = _Net.of("network.vpc_cidr", spec.network.vpc_cidr)
    for net in _subnets(spec):
        if net.first < vpc.first or net.last > vpc.last:
            yield Problem(net.path, f"outside vpc_cidr {vpc.cidr}", "pick a range inside the VPC", net.cidr)


@check
def subnets_do_not_overlap(spec: Cluster) -> Iterator[Problem]:
    """No two subnets overlap (each subnet that overlaps another is named once, with the
    widest one it overlaps)."""
    # CIDR ranges either nest or are apart: in address order, a range overlaps an earlier
    # one exactly when it starts before the furthest end seen so far.
    widest: _Net | None = None
    for net in sorted(_subnets(spec), key=lambda n: (n.first, n.prefix)):
        if widest is not None and net.first <= widest.last:
            yield Problem(net.path, f"overlaps {widest.path} ({widest.cidr})", "use disjoint ranges", net.cidr)
        if widest is None or net.last > widest.last:
            widest = net


@check
def aws_cidr_sizes(spec: Cluster) -> Iterator[Problem]:
    """On AWS the VPC and every subnet are /16 to /28 (AWS refuses other sizes)."""
    if not is_aws(spec):
        return
    for net in [_Net.of("network.vpc_cidr", spec.network.vpc_cidr), *_subnets(spec)]:
        if net.prefix not in AWS_PREFIXES:
            yield Problem(net.path, f"/{net.prefix}; AWS accepts /16 to /28", "use a size from /16 to /28", net.cidr)


def _private_hosts(spec: Cluster) -> dict[str, int]:
    """What the stack puts in the private subnets besides the pools' nodes, each with an
    address of its own there (an instance's or a network interface's): the controllers
    (stacks/head.py), the Ceph hosts (stacks/ceph.py), an EFS mount target in every private
    subnet (stacks/nas.py: "a mount target ... has an IP address in the subnet", Amazon EFS
    User Guide), the RDS instance (stacks/database.py; its network interface is in one of its
    subnet group's subnets) and the image's build instance (stacks/image.py), unless an AMI
    is pinned."""
    hosts = {"controller(s)": len(controller_names(spec)),
             "Ceph hosts": spec.storage.ceph.hosts if spec.storage.ceph else 0,
             "EFS mount targets": len(spec.network.private_subnets) if spec.storage.nas.kind == "efs" else 0,
             "RDS instance": 1 if stack_makes_rds(spec) else 0,
             "image build instance": 0 if spec.images.ami else 1}
    return {what: count for what, count in hosts.items() if count}


@check
def private_subnets_fit_nodes(spec: Cluster) -> Iterator[Problem]:
    """On AWS the private subnets have an address for every node the pools may start and
    for everything else the stack puts there (controllers, Ceph hosts, EFS mount targets,
    the RDS instance, the image's build instance), less the 5 addresses AWS keeps of every
    subnet ("The first four IP addresses and the last IP address in each subnet CIDR block
    are not available for your use": Amazon VPC User Guide, Subnet CIDR blocks)."""
    if not is_aws(spec) or not spec.network.private_subnets:
        return
    usable = sum(_Net.of("", s.cidr).size - AWS_RESERVED_PER_SUBNET for s in spec.network.private_subnets)
    nodes = sum(p.max_nodes for p in spec.pools)
    others = _private_hosts(spec)
    if usable < nodes + sum(others.values()):
        besides = ", ".join(f"{count} {what}" for what, count in others.items())
        yield Problem("network.private_subnets", f"{usable:,} usable addresses (AWS keeps 5 of each subnet) for up to "
                      f"{nodes:,} nodes and {besides}", "use larger private subnets (a /20 holds 4,091 addresses) or "
                      "lower max_nodes", show_value=False)


# A NAT gateway has a private address in its subnet (stacks/network.py puts it in the first
# public subnet): "a NAT gateway ... is assigned a private IPv4 address from the IPv4
# address range of the subnet" (Amazon VPC User Guide, NAT gateways).
NAT_GATEWAYS = 1


@check
def public_subnets_fit_logins(spec: Cluster) -> Iterator[Problem]:
    """On AWS every public subnet has an address for the login nodes the stack puts in it
    (login nodes take the public subnets in turn) and, in the first, the NAT gateway, less
    the 5 addresses AWS keeps of every subnet (Amazon VPC User Guide, Subnet CIDR blocks)."""
    if not is_aws(spec):
        return
    logins = login_subnets(spec)
    for i, subnet in enumerate(spec.network.public_subnets):
        usable = _Net.of("", subnet.cidr).size - AWS_RESERVED_PER_SUBNET
        hosts = sum(1 for index in logins.values() if index == i)
        nat = NAT_GATEWAYS if i == 0 else 0
        if usable < hosts + nat:
            yield Problem(f"network.public_subnets[{i}].cidr", f"{usable} usable addresses (AWS keeps 5 of each "
                          f"subnet) for {hosts} login node(s){' and the NAT gateway' if nat else ''}",
                          "use a larger subnet (a /27 holds 27), add public subnets, or lower head.login_count",
                          subnet.cidr)


@check
def private_subnets_distinct_zones(spec: Cluster) -> Iterator[Problem]:
    """Private subnets sit in distinct zones, and on AWS there are at least two."""
    zones = [s.zone for s in spec.network.private_subnets]
    twice = dupes(zones)
    for i, s in enumerate(spec.network.private_subnets):
        if s.zone in twice:
            yield Problem(f"network.private_subnets[{i}].zone", "duplicate zone",
                          "one private subnet per zone", s.zone)
    if is_aws(spec) and len(set(zones)) < 2:
        yield Problem("network.private_subnets", f"{len(set(zones))} zone(s); AWS needs private subnets in >= 2",
                      "add a private subnet in a second zone", show_value=False)


@check
def aws_needs_public_subnet(spec: Cluster) -> Iterator[Problem]:
    """On AWS a public subnet carries the login node and the NAT gateway."""
    if is_aws(spec) and not spec.network.public_subnets:
        yield Problem("network.public_subnets", "none defined",
                      "add one, e.g. {cidr: 10.0.0.0/24, zone: us-east-1a}", show_value=False)


def zone_in(region: str, zone: str) -> bool:
    return zone.startswith(region) and len(zone) == len(region) + 1


@check
def subnet_zones_in_region(spec: Cluster) -> Iterator[Problem]:
    """Subnet zones belong to the target region."""
    if not isinstance(spec.target, AwsTarget):
        return
    region = spec.target.region
    for kind in ("public_subnets", "private_subnets"):
        for i, s in enumerate(getattr(spec.network, kind)):
            if not zone_in(region, s.zone) and s.zone == s.zone.strip():  # else: aws_names_as_written
                yield Problem(f"network.{kind}[{i}].zone", f"not a zone of {region}", f"use {region}a", s.zone)


@check
def admin_cidrs_not_world(spec: Cluster) -> Iterator[Problem]:
    """0.0.0.0/0 in admin_cidrs needs allow_ssh_from_anywhere: true."""
    for i, c in enumerate(spec.network.admin_cidrs):
        if ipaddress.ip_network(c).prefixlen == 0 and not spec.network.allow_ssh_from_anywhere:
            yield Problem(f"network.admin_cidrs[{i}]", "opens SSH to the whole internet",
                          "list your office/VPN ranges, or set network.allow_ssh_from_anywhere: true", c)


@check
def admin_cidrs_reach_someone(spec: Cluster) -> Iterator[Problem]:
    """admin_cidrs name ranges someone connects from: not loopback, link-local, 'this
    network', multicast or reserved addresses (RFC 6890: none of them leaves its machine or
    link, and no machine's address is in the last three), which the login node's security
    group would let in and from which no SSH connection ever comes."""
    for i, cidr in enumerate(spec.network.admin_cidrs):
        why = no_host_range(cidr)
        if why is not None:
            yield Problem(f"network.admin_cidrs[{i}]", f"{why}: no SSH connection to the login node comes from it",
                          "use the public range your admins connect from (e.g. your office's /24)", cidr)


@check
def aws_needs_admin_cidrs(spec: Cluster) -> Iterator[Problem]:
    """On AWS somebody must be able to reach the login node."""
    if is_aws(spec) and not spec.network.admin_cidrs:
        yield Problem("network.admin_cidrs", "empty: nobody could reach the login node over SSH",
                      "add your office/VPN CIDR (e.g. 203.0.113.0/24)", show_value=False)


# IPv4 ranges no machine's interface takes an address from, or whose packets no router
# (or Linux, for the first two) sends to another machine, and why (RFC 6890's registry
# marks each not forwardable; Linux drops such packets as martians).
NO_HOST_RANGES = (
    (ipaddress.IPv4Network("0.0.0.0/8"), "'this network' (RFC 1122, 3.2.1.3): no machine has such an address"),
    (ipaddress.IPv4Network("127.0.0.0/8"), "loopback (RFC 1122, 3.2.1.3): every machine keeps 127.0.0.0/8 for "
     "itself and sends none of it to another"),
    (ipaddress.IPv4Network("169.254.0.0/16"), "link-local (RFC 3927): no router forwards it, and EC2 keeps it for "
     "its own services (169.254.169.254)"),
    (ipaddress.IPv4Network("224.0.0.0/4"), "multicast (RFC 5771): a group, never one machine's address"),
    (ipaddress.IPv4Network("240.0.0.0/4"), "reserved (RFC 1112; 255.255.255.255 is the broadcast): Linux gives "
     "no interface such an address"),
)


def no_host_range(cidr: str) -> str | None:
    """Why no machine's address lies in this IPv4 range (the first range of NO_HOST_RANGES
    it sits in), or None; 0.0.0.0/0, everything, is not one of them."""
    net = ipaddress.IPv4Network(cidr)
    return next((why for bad, why in NO_HOST_RANGES if net.prefixlen and net.subnet_of(bad)), None)
