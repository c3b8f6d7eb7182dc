"""The golden image every node boots: an EC2 Image Builder pipeline that runs the
project's image playbook on Debian's official AMI of the spec's `images.base` (Debian 13).

The playbook and roles are uploaded as one zip to a private bucket; the Image Builder
component downloads it and runs `ansible-playbook playbooks/image.yml` locally. A
change to the playbooks changes the archive's ETag, which is written into the component
document, so the next `pulumi up` bakes a new image (and pool launch templates follow).
When the spec pins `images.ami`, nothing here is created and that AMI is used.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_aws as aws
import yaml

from slurmforge.distro import Distro
from slurmforge.image_variant import ImageVariant, variant_vars
from stacks.common import (
    ROOT_DEVICE,
    VOLUME_TYPE,
    all_egress_rules,
    assume_role_policy,
    child,
    partition,
    policy_json,
    tags,
)

# Debian's official AMIs are published by this account (https://wiki.debian.org/Cloud/AmazonEC2Image).
DEBIAN_OWNER = "136693071363"
# The playbook written by the roles work (playbooks/ and roles/ at the repo root).
IMAGE_PLAYBOOK = "playbooks/image.yml"
ARCHIVE_KEY = "slurmforge-ansible.zip"
ARCHIVE_DIRS = ("playbooks", "roles")
WORKDIR = "/opt/slurmforge-image"
# The build instance only runs Ansible; the image works on every instance type.
BUILD_INSTANCE_TYPES = ["m6i.large"]
# The GPU stack (driver + CUDA) needs room; pools get at least this much root disk.
IMAGE_VOLUME_GB = 40
RECIPE_VERSION = "1.0.0"
IMAGE_BUILDER_POLICY = "arn:{partition}:iam::aws:policy/EC2InstanceProfileForImageBuilder"
SSM_CORE = "arn:{partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"


@dataclass(frozen=True)
class ImageArgs:
    cluster: str
    """Cluster name: tags."""
    region: str
    """The target region (ARN partition)."""
    pinned_ami: str | None
    """The spec's images.ami: use it and build nothing."""
    vpc_id: pulumi.Input[str]
    """VPC of the build instance."""
    subnet_id: pulumi.Input[str]
    """A private subnet (with NAT) for the build instance."""
    ansible_root: Path
    """The directory holding playbooks/ and roles/ (the repo root)."""
    os: Distro
    """The spec's images.base: which Debian AMI to start from, and the image playbook's vars."""
    variant: ImageVariant = ImageVariant.BASE
    """Which image variant this pipeline bakes (slurmforge.image_variant): the playbook's vars."""


def component_document(archive_url: str, archive_etag: str | None, os: Distro,
                       variant: ImageVariant = ImageVariant.BASE) -> str:
    """The Image Builder component: fetch the playbooks, run the image playbook locally
    (building `variant`)."""
    commands = [
        "set -euo pipefail",
        "export DEBIAN_FRONTEND=noninteractive",
        "apt-get update -q",
        "apt-get install -y -q --no-install-recommends ansible-core unzip",
        f"rm -rf {WORKDIR} && mkdir -p {WORKDIR}",
        f"unzip -q /tmp/{ARCHIVE_KEY} -d {WORKDIR}",
        f"cd {WORKDIR} && ansible-playbook -i localhost, -c local {IMAGE_PLAYBOOK} "
        f"-e {shlex.quote(json.dumps(os.image_vars() | variant_vars(variant), sort_keys=True))}",
        f"rm -rf {WORKDIR} /tmp/{ARCHIVE_KEY}",
    ]
    document = {
        "name": "slurmforge-image",
        "description": f"Runs slurmforge's {IMAGE_PLAYBOOK} (archive etag {archive_etag or 'unknown'})",
        "schemaVersion": 1.0,
        "phases": [{"name": "build", "steps": [
            {"name": "FetchPlaybooks", "action": "S3Download",
             "inputs": [{"source": archive_url, "destination": f"/tmp/{ARCHIVE_KEY}"}]},
            {"name": "RunImagePlaybook", "action": "ExecuteBash", "inputs": {"commands": commands}},
        ]}],
    }
    return yaml.safe_dump(document, sort_keys=False)


def first_ami(resources: Sequence[aws.imagebuilder.outputs.ImageOutputResource]) -> str:
    """The AMI id an Image Builder image produced (one region: one AMI)."""
    amis = [ami.image for r in resources for ami in (r.amis or []) if ami.image]
    if not amis:
        raise ValueError("Image Builder reported no AMI for the golden image")
    return amis[0]


def archive(root: Path) -> pulumi.AssetArchive:
    return pulumi.AssetArchive({d: pulumi.FileArchive(str(root / d)) for d in ARCHIVE_DIRS})


class Image(pulumi.ComponentResource):
    ami_id: pulumi.Output[str]
    pipeline_arn: pulumi.Output[str] | None

    def __init__(self, name: str, args: ImageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:Image", name, None, opts)
        self.pipeline_arn = None
        if args.pinned_ami is not None:
            self.ami_id = pulumi.Output.from_input(args.pinned_ami)
        else:
            self.ami_id = self._build(name, args)
        self.register_outputs({"ami_id": self.ami_id})

    def _build(self, name: str, args: ImageArgs) -> pulumi.Output[str]:
        base = aws.ec2.get_ami_output(
            most_recent=True, owners=[DEBIAN_OWNER],
            filters=[aws.ec2.GetAmiFilterArgs(name="name", values=[args.os.ami_name]),
                     aws.ec2.GetAmiFilterArgs(name="architecture", values=["x86_64"])],
            opts=pulumi.InvokeOutputOptions(parent=self))
        url, etag, bucket_arn = self._upload(name, args)
        profile = self._builder_profile(name, args, bucket_arn)
        component = aws.imagebuilder.Component(
            f"{name}-component", platform="Linux", version=RECIPE_VERSION,
            data=pulumi.Output.all(url, etag).apply(lambda v: component_document(v[0], v[1], args.os, args.variant)),
            tags=tags(args.cluster, "image"), opts=child(self))
        recipe = aws.imagebuilder.ImageRecipe(
            f"{name}-recipe", version=RECIPE_VERSION, parent_image=base.id,
            components=[aws.imagebuilder.ImageRecipeComponentArgs(component_arn=component.arn)],
            block_device_mappings=[aws.imagebuilder.ImageRecipeBlockDeviceMappingArgs(
                device_name=ROOT_DEVICE, ebs=aws.imagebuilder.ImageRecipeBlockDeviceMappingEbsArgs(
                    # the image's snapshot, and every volume made from it, is encrypted
                    encrypted="true", volume_size=IMAGE_VOLUME_GB, volume_type=VOLUME_TYPE,
                    delete_on_termination="true"))],
            tags=tags(args.cluster, "image"), opts=child(self))
        group = aws.ec2.SecurityGroup(f"{name}-builder", vpc_id=args.vpc_id, ingress=[], egress=all_egress_rules(),
                                      description="slurmforge image build: outbound only",
                                      tags=tags(args.cluster, "image"), opts=child(self))
        infra = aws.imagebuilder.InfrastructureConfiguration(
            f"{name}-infra", instance_profile_name=profile, instance_types=BUILD_INSTANCE_TYPES,
            subnet_id=args.subnet_id, security_group_ids=[group.id], terminate_instance_on_failure=True,
            instance_metadata_options=aws.imagebuilder.InfrastructureConfigurationInstanceMetadataOptionsArgs(
                http_tokens="required", http_put_response_hop_limit=1),
            tags=tags(args.cluster, "image"), opts=child(self))
        pipeline = aws.imagebuilder.ImagePipeline(
            f"{name}-pipeline", image_recipe_arn=recipe.arn, infrastructure_configuration_arn=infra.arn,
            description="slurmforge golden image (run it to rebake with new packages)",
            tags=tags(args.cluster, "image"), opts=child(self))
        self.pipeline_arn = pipeline.arn
        # the image this stack's nodes boot; Image Builder takes ~30 min the first time
        image = aws.imagebuilder.Image(
            f"{name}-image", image_recipe_arn=recipe.arn, infrastructure_configuration_arn=infra.arn,
            tags=tags(args.cluster, "image"), opts=child(self))
        return image.output_resources.apply(first_ami)

    def _upload(self, name: str, args: ImageArgs) -> tuple[pulumi.Output[str], pulumi.Output[str], pulumi.Output[str]]:
        bucket = aws.s3.Bucket(f"{name}-ansible", force_destroy=True, tags=tags(args.cluster, "image"),
                               opts=child(self))
        aws.s3.BucketPublicAccessBlock(f"{name}-ansible", bucket=bucket.id, block_public_acls=True,
                                       block_public_policy=True, ignore_public_acls=True,
                                       restrict_public_buckets=True, opts=child(self))
        obj = aws.s3.BucketObjectv2(f"{name}-ansible", bucket=bucket.id, key=ARCHIVE_KEY,
                                    source=archive(args.ansible_root), server_side_encryption="AES256",
                                    opts=child(self))
        url = pulumi.Output.concat("s3://", bucket.bucket, "/", ARCHIVE_KEY)
        return url, obj.etag, bucket.arn

    def _builder_profile(self, name: str, args: ImageArgs, bucket_arn: pulumi.Output[str]) -> pulumi.Output[str]:
        p = partition(args.region)
        role = aws.iam.Role(f"{name}-builder", assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
                            tags=tags(args.cluster, "image"), opts=child(self))
        for suffix, arn in (("imagebuilder", IMAGE_BUILDER_POLICY), ("ssm", SSM_CORE)):
            aws.iam.RolePolicyAttachment(f"{name}-builder-{suffix}", role=role.name,
                                         policy_arn=arn.format(partition=p), opts=child(self))
        aws.iam.RolePolicy(f"{name}-builder-archive", role=role.id, policy=bucket_arn.apply(lambda arn: policy_json({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"{arn}/{ARCHIVE_KEY}"}],
        })), opts=child(self))
        profile = aws.iam.InstanceProfile(f"{name}-builder", role=role.name, opts=child(self))
        return profile.name
