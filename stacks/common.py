"""What every component shares: tag keys, the secure instance defaults, ARN helpers.

The secure defaults live here once so that a new instance or launch template cannot
forget them: IMDSv2 only with a hop limit of 1 (a container on a node cannot reach
the instance's credentials) and encrypted EBS.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

from slurmforge.hosts import TAG_CLUSTER, TAG_NAME, TAG_NODE, TAG_POOL, TAG_ROLE

# Tag keys: the ones the scheduler service sets on pool nodes come from the provider
# interface. Its IAM policy lets it touch only instances tagged with this cluster and a
# pool: `tags` below never puts POOL_TAG on an instance of the stack (head nodes, Ceph).
CLUSTER_TAG = TAG_CLUSTER
POOL_TAG = TAG_POOL
NODE_TAG = TAG_NODE
ROLE_TAG = TAG_ROLE
"""What a stack-made resource is for (controller, login, ceph, network, ...)."""

# Debian's cloud images log in as `admin`; the root device is /dev/xvda.
SSH_USER = "admin"
ROOT_DEVICE = "/dev/xvda"
VOLUME_TYPE = "gp3"

# Everyone may reach nothing: the only world-open ingress is SSH to the login node,
# and only when the spec says allow_ssh_from_anywhere.
WORLD = "0.0.0.0/0"


def s3_client(session: Any, region: str) -> Any:
    """An S3 client that signs with Signature Version 4 on the region's own endpoint.

    botocore's default signs presigned URLs with SigV2 on the global endpoint
    (s3.amazonaws.com), in every region: S3 refuses SigV2 for buckets created after
    2020-06-24 ("AWS Signature Version 2 turned off", docs.aws.amazon.com/AmazonS3/latest/
    userguide/UsingAWSSDK.html#UsingAWSSDK-sig2-deprecation), and for a bucket outside
    us-east-1 the global host answers a 307 Temporary Redirect until DNS has caught up
    (docs.aws.amazon.com/AmazonS3/latest/userguide/Redirects.html), which `curl -f` does not
    follow. Every S3 client and presigned URL of slurmforge comes from here. An endpoint set
    in the environment (AWS_ENDPOINT_URL: the rehearsal's stand-in) still wins.

    The endpoint is named explicitly: with virtual-host addressing botocore still puts a
    bucket outside us-east-1 on `<bucket>.s3.amazonaws.com`, the global host."""
    from botocore.config import Config  # type: ignore[import-untyped]

    config = Config(signature_version="s3v4", s3={"us_east_1_regional_endpoint": "regional"})
    regional = session.client("s3", region_name=region, config=config).meta.endpoint_url
    return session.client("s3", region_name=region, config=config, endpoint_url=regional)


def instance_metadata() -> aws.ec2.InstanceMetadataOptionsArgs:
    """IMDSv2 only, hop limit 1; tags readable from IMDS (nodes read their name there)."""
    return aws.ec2.InstanceMetadataOptionsArgs(
        http_endpoint="enabled",
        http_tokens="required",
        http_put_response_hop_limit=1,
        instance_metadata_tags="enabled",
    )


def launch_template_metadata() -> aws.ec2.LaunchTemplateMetadataOptionsArgs:
    """The same defaults as `instance_metadata`, for launch templates."""
    return aws.ec2.LaunchTemplateMetadataOptionsArgs(
        http_endpoint="enabled",
        http_tokens="required",
        http_put_response_hop_limit=1,
        instance_metadata_tags="enabled",
    )


def root_volume(size_gb: int) -> aws.ec2.InstanceRootBlockDeviceArgs:
    """An encrypted gp3 root volume (the account's default EBS key)."""
    return aws.ec2.InstanceRootBlockDeviceArgs(
        encrypted=True, volume_size=size_gb, volume_type=VOLUME_TYPE, delete_on_termination=True
    )


def all_egress_rules() -> list[aws.ec2.SecurityGroupEgressArgs]:
    """Outbound to anywhere (package mirrors and AWS APIs through the NAT gateway);
    egress is not ingress: nothing outside can open a connection through it."""
    return [aws.ec2.SecurityGroupEgressArgs(protocol="-1", from_port=0, to_port=0, cidr_blocks=[WORLD],
                                            description="outbound through the NAT gateway / IGW")]


def cloud_config_hostname(hostname: str) -> str:
    """User data for head and storage hosts: only the hostname; Ansible does the rest."""
    return f"#cloud-config\nhostname: {hostname}\nfqdn: {hostname}\npreserve_hostname: false\n"


def tags(cluster: str, role: str, name: str | None = None, **extra: str) -> dict[str, str]:
    out = {CLUSTER_TAG: cluster, ROLE_TAG: role, **extra}
    if name is not None:
        out[TAG_NAME] = name
    return out


def policy_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=1, sort_keys=False)


def assume_role_policy(service: str) -> str:
    return policy_json({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    })


def child(parent: pulumi.Resource, **kwargs: Any) -> pulumi.ResourceOptions:
    """Options for a component's child: parent=self, plus anything else given."""
    return pulumi.ResourceOptions(parent=parent, **kwargs)
