"""A pool (node group): its launch template. No Auto Scaling group: the scheduler service
launches and terminates each node by name (see docs/aws.md for why), with the pool's policy
from the inventory (the spec and the provider settings slurmforge.aws.inventory writes).

The launch template carries every secure default (IMDSv2 with hop limit 1, encrypted
root volume, no public address), the pool's preferred instance type (`Pool.preferred_type`;
the service overrides it for flexible pools), spot options for spot pools, the placement group and EFA
interface when asked for, and the join program as user data (slurmforge.node.program, the one
program every target's nodes join with: node name from the instance's tag, munge key from
Secrets Manager with the instance role, ...). Everything else is baked into the golden
image or comes from the node kit on the NAS.
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from slurmforge.errors import ProvisionError
from slurmforge.image_variant import ImageVariant, pool_image_variant
from slurmforge.spec.models import Market, Pool

from .common import (
    CLUSTER_TAG,
    POOL_TAG,
    ROOT_DEVICE,
    VOLUME_TYPE,
    child,
    launch_template_metadata,
    tags,
)

# The spec has no root volume size for pools yet; at least the image's size.
POOL_ROOT_GB = 100
# Spot pools' templates carry the spot market options (RunInstances honours them). The
# scheduler service launches with EC2 Fleet `instant`, which also asks for spot in its
# own request; should EC2 Fleet refuse templates with market options, set this False.
SPOT_OPTIONS_IN_TEMPLATE = True
USER_DATA_LIMIT = 16 * 1024
"""EC2 takes at most 16 KB of user data (before base64)."""


def user_data(program: str) -> str:
    """The launch template's user data: the join program, base64. A program over EC2's limit
    goes gzip-compressed (cloud-init unpacks it); one that is still too large is an error
    here, not at the first launch."""
    raw = program.encode()
    if len(raw) > USER_DATA_LIMIT:
        raw = gzip.compress(raw, mtime=0)  # mtime 0: the same program, the same template
        if len(raw) > USER_DATA_LIMIT:
            raise ProvisionError(f"the join program is {len(program.encode())} bytes, {len(raw)} gzip-compressed: "
                                 f"over EC2's {USER_DATA_LIMIT}-byte user data limit")
    return base64.b64encode(raw).decode()


def pool_ami(pool: Pool, amis: Mapping[ImageVariant, pulumi.Input[str]]) -> pulumi.Input[str]:
    """The image the pool's machines boot: the gpu variant (the NVIDIA driver) for NVIDIA
    GPUs, the base otherwise."""
    variant = pool_image_variant(pool)
    if variant not in amis:
        raise ProvisionError(f"pool {pool.name} boots the {variant} image variant, which this stack does not bake")
    return amis[variant]


def pool_tags(cluster: str, pool: str) -> dict[str, str]:
    return {**tags(cluster, "pool"), POOL_TAG: pool}


def spot_options(pool: Pool) -> aws.ec2.LaunchTemplateInstanceMarketOptionsArgs | None:
    """Spot pools: one-time requests, terminated on interruption (the service relaunches
    or falls back; no max price, so never more than on-demand)."""
    if pool.market is not Market.SPOT or not SPOT_OPTIONS_IN_TEMPLATE:
        return None
    return aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
        market_type="spot",
        spot_options=aws.ec2.LaunchTemplateInstanceMarketOptionsSpotOptionsArgs(
            spot_instance_type="one-time", instance_interruption_behavior="terminate"))


def network_interface(pool: Pool, groups: Sequence[pulumi.Input[str]]) -> aws.ec2.LaunchTemplateNetworkInterfaceArgs:
    # Types with several network cards take more EFA interfaces; card 0 carries one here.
    return aws.ec2.LaunchTemplateNetworkInterfaceArgs(
        device_index=0, associate_public_ip_address="false", delete_on_termination="true",
        security_groups=groups, interface_type="efa" if pool.efa else None)


@dataclass(frozen=True)
class PoolArgs:
    cluster: str
    """Cluster name: tags."""
    pool: Pool
    """The spec's pool."""
    amis: Mapping[ImageVariant, pulumi.Input[str]]
    """The golden image of each variant the cluster bakes (slurmforge.image_variant)."""
    security_group_ids: Sequence[pulumi.Input[str]]
    """The cluster group."""
    instance_profile_arn: pulumi.Input[str]
    """The pool nodes' instance profile."""
    join_program: pulumi.Input[str]
    """The join program (slurmforge.node.program.render_join): the user data."""


class NodePool(pulumi.ComponentResource):
    launch_template_id: pulumi.Output[str]
    launch_template_arn: pulumi.Output[str]

    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:Pool", name, None, opts)
        pool = args.pool
        group = None
        if pool.placement_group:
            group = aws.ec2.PlacementGroup(f"{name}-placement", strategy="cluster",
                                           tags=pool_tags(args.cluster, pool.name), opts=child(self))
        template = self._template(name, args, group)
        self.launch_template_id, self.launch_template_arn = template.id, template.arn
        self.register_outputs({"launch_template_id": template.id})

    def _template(self, name: str, args: PoolArgs, group: aws.ec2.PlacementGroup | None) -> aws.ec2.LaunchTemplate:
        pool = args.pool
        node_tags = {CLUSTER_TAG: args.cluster, POOL_TAG: pool.name}
        program = pulumi.Output.from_input(args.join_program).apply(user_data)
        return aws.ec2.LaunchTemplate(
            f"{name}-template", description=f"slurmforge {args.cluster} pool {pool.name}",
            image_id=pool_ami(pool, args.amis), instance_type=pool.preferred_type,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=args.instance_profile_arn),
            metadata_options=launch_template_metadata(),
            network_interfaces=[network_interface(pool, args.security_group_ids)],
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=ROOT_DEVICE, ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    encrypted="true", volume_size=POOL_ROOT_GB, volume_type=VOLUME_TYPE,
                    delete_on_termination="true"))],
            instance_market_options=spot_options(pool),
            placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=group.name) if group else None,
            tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=node_tags)
                                for kind in ("instance", "volume", "network-interface")],
            user_data=program, update_default_version=True,
            tags=pool_tags(args.cluster, pool.name), opts=child(self))
