"""Head nodes: the controller (slurmctld, slurmdbd, the scheduler service), the optional
backup controller in a second zone, and the login node(s) — the only hosts with a
public address (an Elastic IP, so the address admins put in their SSH config stays)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from slurmforge.hosts import HostRole
from slurmforge.spec.models import HeadNode

from .common import child, cloud_config_hostname, instance_metadata, root_volume, tags


@dataclass(frozen=True)
class HeadNodesArgs:
    cluster: str
    """Cluster name: tags."""
    controller: HeadNode
    """Controller instance type and root volume size (also used for the backup)."""
    login: HeadNode
    """Login instance type and root volume size."""
    controller_names: list[str]
    """The controller's host name, then the backup controller's when there is one."""
    login_subnet_ids: Mapping[str, pulumi.Input[str]]
    """Each login node's name and its public subnet (slurmforge.render.login_subnets)."""
    ami_id: pulumi.Input[str]
    """The golden image."""
    private_subnet_ids: Sequence[pulumi.Input[str]]
    """Private subnets in distinct zones: controller in the first, backup in the second."""
    controller_sg_ids: Sequence[pulumi.Input[str]]
    """The cluster and controller groups."""
    login_sg_ids: Sequence[pulumi.Input[str]]
    """The cluster and login groups."""
    controller_profile: pulumi.Input[str]
    """Instance profile name of the controller role."""
    login_profile: pulumi.Input[str]
    """Instance profile name of the login role."""
    key_name: str
    """EC2 key pair for the Ansible rollout."""


def host_entry(name: str, role: HostRole, private_ip: pulumi.Input[str],
               public_ip: pulumi.Input[str] | None = None) -> dict[str, Any]:
    """One element of the `hosts` stack output."""
    return {"name": name, "role": role.value, "private_ip": private_ip, "public_ip": public_ip}


class HeadNodes(pulumi.ComponentResource):
    hosts: list[dict[str, Any]]
    controller_ips: list[pulumi.Output[str]]

    def __init__(self, name: str, args: HeadNodesArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:HeadNodes", name, None, opts)
        self.hosts, self.controller_ips = [], []
        for i, host in enumerate(args.controller_names):
            # the backup lives in another zone: a zone outage leaves one controller
            subnet = args.private_subnet_ids[i % len(args.private_subnet_ids)]
            node = self._instance(host, "controller", args.controller, subnet, args.controller_sg_ids,
                                  args.controller_profile, public=False, args=args)
            self.controller_ips.append(node.private_ip)
            self.hosts.append(host_entry(host, HostRole.CONTROLLER, node.private_ip))
        for host, subnet in args.login_subnet_ids.items():
            node = self._instance(host, "login", args.login, subnet, args.login_sg_ids, args.login_profile,
                                  public=True, args=args)
            address = aws.ec2.Eip(f"{host}-ip", domain="vpc", instance=node.id,
                                  tags=tags(args.cluster, "login", host), opts=child(self))
            self.hosts.append(host_entry(host, HostRole.LOGIN, node.private_ip, address.public_ip))
        self.register_outputs({"hosts": self.hosts})

    def _instance(self, host: str, role: str, size: HeadNode, subnet: pulumi.Input[str],
                  groups: Sequence[pulumi.Input[str]], profile: pulumi.Input[str], *, public: bool,
                  args: HeadNodesArgs) -> aws.ec2.Instance:
        return aws.ec2.Instance(
            host, ami=args.ami_id, instance_type=size.instance_type, subnet_id=subnet,
            vpc_security_group_ids=list(groups), iam_instance_profile=profile, key_name=args.key_name,
            associate_public_ip_address=public, metadata_options=instance_metadata(),
            root_block_device=root_volume(size.volume_gb), user_data=cloud_config_hostname(host),
            tags=tags(args.cluster, role, host),
            # a new golden image must not replace the controller under running jobs:
            # head nodes are updated by the Ansible rollout
            opts=child(self, ignore_changes=["ami", "userData"]))
