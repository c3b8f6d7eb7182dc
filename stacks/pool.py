"""A pool (node group): its launch template and the autoscaling policy the scheduler
service enforces, published as an SSM parameter. No Auto Scaling group: the service
launches and terminates each node by name (see docs/aws.md for why).

The launch template carries every secure default (IMDSv2 with hop limit 1, encrypted
root volume, no public address), the pool's first instance type (the service overrides
it for flexible pools), spot options for spot pools, the placement group and EFA
interface when asked for, and user data that only joins the cluster: read the node
name from the instance's tags, fetch the munge key with the instance role, mount the
NAS, start configless slurmd. Everything else is baked into the golden image.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from slurmforge.contract import NODE_EXPORTER_PORT
from slurmforge.spec.models import Market, Pool
from stacks.common import (
    CLUSTER_TAG,
    NODE_TAG,
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
# how long a new instance waits for its node-name tag before giving up (Slurm's
# ResumeTimeout then marks the node down and the service retries elsewhere)
NODE_TAG_WAIT = 300
NFS_OPTIONS = "nfsvers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,_netdev"


@dataclass(frozen=True)
class JoinSettings:
    """What a node needs to join; all plain strings (resolved Outputs)."""

    region: str
    munge_key_arn: str
    controllers: list[tuple[str, str]]
    """(name, private address) of the controller, then the backup."""
    nas_source: str | None = None
    """The NAS root: "fs-1.efs...:" (EFS) or "server:/export" (NFS)."""
    nas_mounts: list[tuple[str, str]] = field(default_factory=list)
    """(directory on the NAS, mount point) to mount on pool nodes; the directory is the
    mount's name in the spec (home, software), as the storage_client role mounts it."""


def join_script(j: JoinSettings) -> str:
    """The pool node's user data: join, nothing else (no Ansible at boot)."""
    q = shlex.quote
    hosts = " ".join(q(f"{ip} {name}") for name, ip in j.controllers)
    conf_servers = ",".join(name for name, _ in j.controllers)
    lines = [
        "#!/bin/bash",
        "# slurmforge pool node: join the cluster (everything else is in the golden image)",
        "set -euo pipefail",
        "imds() {",
        "  local token",
        "  token=$(curl -sf --retry 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' "
        "http://169.254.169.254/latest/api/token)",
        '  curl -sf --retry 5 -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/$1"',
        "}",
        "# the scheduler service tags each instance with the Slurm node it becomes (the tag",
        f"# may appear just after launch: wait for it, up to {NODE_TAG_WAIT} s)",
        'node=""',
        f"for _ in $(seq {NODE_TAG_WAIT // 5}); do",
        f'  node=$(imds meta-data/tags/instance/{NODE_TAG}) && [ -n "$node" ] && break',
        "  sleep 5",
        "done",
        'test -n "$node"',
        'hostnamectl set-hostname "$node"',
        f"printf '%s\\n' {hosts} >> /etc/hosts",
    ]
    if j.nas_source and j.nas_mounts:
        lines.append("# shared storage before slurmd: jobs need /home and the module tree")
        for directory, path in j.nas_mounts:
            lines += [f"mkdir -p {q(path)}",
                      f"echo {q(f'{j.nas_source}/{directory} {path} nfs4 {NFS_OPTIONS} 0 0')} >> /etc/fstab"]
        lines.append("mount -a -t nfs4")
    lines += [
        "# the munge key: from Secrets Manager with the instance role, 0400 munge:munge",
        "umask 077",
        'key=$(mktemp)',
        f"aws --region {q(j.region)} secretsmanager get-secret-value --secret-id {q(j.munge_key_arn)} "
        '--query SecretString --output text | base64 -d > "$key"',
        'install -o munge -g munge -m 0400 "$key" /etc/munge/munge.key',
        'rm -f "$key"',
        "systemctl restart munge",
        "# configless: slurmd fetches slurm.conf from the controller",
        f'echo "SLURMD_OPTIONS=\\"--conf-server {conf_servers} -N $node\\"" > /etc/default/slurmd',
        "systemctl enable --now slurmd",
        "# metrics: the image carries the node exporter disabled; the scheduler service lists",
        f"# this node as a Prometheus target while Slurm has it powered (port {NODE_EXPORTER_PORT}, cluster SG only)",
        "systemctl enable --now prometheus-node-exporter",
    ]
    return "\n".join(lines) + "\n"


def pool_policy(cluster: str, pool: Pool, node_prefix: str, hostlist: str, launch_template_id: str,
                subnets: dict[str, str], security_group_ids: list[str],
                placement_group: str | None) -> dict[str, Any]:
    """The autoscaling policy the scheduler service reads for this pool."""
    return {
        "cluster": cluster,
        "pool": pool.name,
        "node_prefix": node_prefix,
        "hostlist": hostlist,
        "instance_types": list(pool.instance_types),
        "market": pool.market.value,
        "fallback": list(pool.fallback),
        "min_nodes": pool.min_nodes,
        "max_nodes": pool.max_nodes,
        "idle_seconds": pool.idle_seconds,
        "launch_template_id": launch_template_id,
        # the template's interface names no subnet: the launch picks one per zone
        "subnets": subnets,
        "security_group_ids": security_group_ids,
        "placement_group": placement_group,
        "efa": pool.efa,
        "tags": {CLUSTER_TAG: cluster, POOL_TAG: pool.name},
    }


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
    """Cluster name: tags, parameter path."""
    pool: Pool
    """The spec's pool."""
    node_prefix: str
    """Node names are <node_prefix>-<index>."""
    hostlist: str
    """All the pool's node names as a Slurm hostlist."""
    ami_id: pulumi.Input[str]
    """The golden image."""
    subnet_ids: Mapping[str, pulumi.Input[str]]
    """Private subnet by zone, for the zones this pool may use."""
    security_group_ids: Sequence[pulumi.Input[str]]
    """The cluster group."""
    instance_profile_arn: pulumi.Input[str]
    """The pool nodes' instance profile."""
    join: pulumi.Input[JoinSettings]
    """What the user data needs to join the cluster."""


class NodePool(pulumi.ComponentResource):
    launch_template_id: pulumi.Output[str]
    launch_template_arn: pulumi.Output[str]
    parameter_name: pulumi.Output[str]
    parameter_arn: pulumi.Output[str]

    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:Pool", name, None, opts)
        pool = args.pool
        group = None
        if pool.placement_group:
            group = aws.ec2.PlacementGroup(f"{name}-placement", strategy="cluster",
                                           tags=pool_tags(args.cluster, pool.name), opts=child(self))
        template = self._template(name, args, group)
        self.launch_template_id, self.launch_template_arn = template.id, template.arn
        policy = pulumi.Output.all(template.id, pulumi.Output.all(**args.subnet_ids),
                                   pulumi.Output.all(*args.security_group_ids),
                                   group.name if group else None).apply(
            lambda v: json.dumps(pool_policy(args.cluster, pool, args.node_prefix, args.hostlist, v[0], dict(v[1]),
                                             list(v[2]), v[3]), sort_keys=True))
        parameter = aws.ssm.Parameter(f"{name}-policy", name=f"/slurmforge/{args.cluster}/pools/{pool.name}",
                                      # not a secret: visible in diffs and the console
                                      type="String", insecure_value=policy,
                                      description=f"slurmforge pool {pool.name}",
                                      tags=pool_tags(args.cluster, pool.name), opts=child(self))
        self.parameter_name, self.parameter_arn = parameter.name, parameter.arn
        self.register_outputs({"launch_template_id": template.id, "parameter_name": parameter.name})

    def _template(self, name: str, args: PoolArgs, group: aws.ec2.PlacementGroup | None) -> aws.ec2.LaunchTemplate:
        pool = args.pool
        node_tags = {CLUSTER_TAG: args.cluster, POOL_TAG: pool.name}
        user_data = pulumi.Output.from_input(args.join).apply(
            lambda j: base64.b64encode(join_script(j).encode()).decode())
        return aws.ec2.LaunchTemplate(
            f"{name}-template", description=f"slurmforge {args.cluster} pool {pool.name}",
            image_id=args.ami_id, instance_type=pool.instance_types[0],
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
            user_data=user_data, update_default_version=True,
            tags=pool_tags(args.cluster, pool.name), opts=child(self))
