"""The golden image every node boots: the one image pipeline (slurmforge.image) run on a
plain EC2 instance from Debian's official AMI, made into an AMI by the Pulumi program.

Not EC2 Image Builder: Debian is not among the systems Image Builder supports, and Image
Builder drives its build instance through the SSM Agent, which Debian's AMIs do not carry
(and Debian does not package). A plain instance runs the build the way every node starts -
its user data, under cloud-init - so the AMI build is the local image build (the same
inputs in the same directory, the same build.sh) and the AWS rehearsal can run it on a box.

How (`bake`, a dynamic provider the program drives with the deployer's credentials):
the build's inputs go to a private bucket as one tarball; an instance from the pinned
parent AMI, with no instance role at all, fetches them through a presigned URL, runs
build.sh, puts its result (exit code, record, package list, log tail) through a second
presigned URL and powers off; the program checks the record as the local build does
(`read_record`: the Slurm release), makes the AMI (encrypted, like the instance's volume),
terminates the instance. A change of any input - a role's install task, the variables, the
parent AMI - bakes a new image and pool launch templates follow; head and Ceph hosts ignore
AMI changes (they are updated by the rollout). With `images.ami` pinned nothing is built.

The parent AMI is pinned by name (`Distro.parent_ami`): a new Debian AMI rebakes nothing
until someone moves the pin (docs/node-image.md, "Moving the parent image").
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider

from slurmforge.distro import Distro, distro
from slurmforge.errors import ProvisionError
from slurmforge.image import aws_user_data, prepare_inputs, read_record, tarball
from slurmforge.image_variant import ImageVariant
from slurmforge.state_dirs import state_root

from .common import ROOT_DEVICE, VOLUME_TYPE, all_egress_rules, child, s3_client, tags

# Debian's official AMIs are published by this account (https://wiki.debian.org/Cloud/AmazonEC2Image).
DEBIAN_OWNER = "136693071363"
INPUTS_KEY = "slurmforge-image-inputs.tar.gz"
RESULTS_PREFIX = "results/"
# The build instance only runs the build; the image works on every instance type.
BUILD_INSTANCE_TYPE = "m6i.large"
# The GPU stack (driver + CUDA) needs room; pools get at least this much root disk.
IMAGE_VOLUME_GB = 40
BUILD_TIMEOUT = 2 * 3600
"""Seconds a build may take (it takes ~5-10 min on the instance; apt mirrors can be slow)."""
URL_SECONDS = BUILD_TIMEOUT + 3600
POLL_SECONDS = 15.0


@dataclass(frozen=True)
class ImageArgs:
    cluster: str
    """Cluster name: tags."""
    region: str
    """The target region."""
    pinned_ami: str | None
    """The spec's images.ami: use it and build nothing."""
    vpc_id: pulumi.Input[str]
    """VPC of the build instance."""
    subnet_id: pulumi.Input[str]
    """A private subnet (with NAT) for the build instance: it reaches Debian's mirror and S3."""
    os: Distro
    """The spec's images.base: the parent AMI and the image playbook's vars."""
    variant: ImageVariant = ImageVariant.BASE
    """Which image variant this build bakes (slurmforge.image_variant)."""


def _wait(what: str, check: Callable[[], bool], timeout: float, poll: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise ProvisionError(f"the image build: {what} not after {int(timeout)} s")
        time.sleep(poll)


def _instance_state(ec2: Any, instance_id: str) -> str:
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(reservations[0]["Instances"][0]["State"]["Name"])


def bake(session: Any, props: dict[str, Any], poll: float = POLL_SECONDS) -> dict[str, Any]:
    """Build the node image on an instance and make it an AMI; returns the AMI id and the
    build's record. The instance is terminated whatever happens."""
    ec2, s3 = session.client("ec2"), s3_client(session, props["region"])
    bucket = props["bucket"]
    result_key = f"{RESULTS_PREFIX}{uuid.uuid4().hex}.json"
    inputs_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": props["inputs_key"]},
                                           ExpiresIn=URL_SECONDS)
    result_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": result_key,
                                                                 "ContentType": "application/json"},
                                           ExpiresIn=URL_SECONDS)
    tag_list = [{"Key": k, "Value": v} for k, v in sorted(props["tags"].items())]
    instance = ec2.run_instances(
        ImageId=props["parent_ami"], InstanceType=props["instance_type"], MinCount=1, MaxCount=1,
        SubnetId=props["subnet_id"], SecurityGroupIds=[props["security_group_id"]],
        UserData=aws_user_data(inputs_url, result_url), InstanceInitiatedShutdownBehavior="stop",
        MetadataOptions={"HttpTokens": "required", "HttpPutResponseHopLimit": 1, "HttpEndpoint": "enabled"},
        BlockDeviceMappings=[{"DeviceName": ROOT_DEVICE, "Ebs": {
            "VolumeSize": int(props["volume_gb"]), "VolumeType": VOLUME_TYPE, "Encrypted": True,
            "DeleteOnTermination": True}}],
        TagSpecifications=[{"ResourceType": rt, "Tags": tag_list} for rt in ("instance", "volume")],
    )["Instances"][0]["InstanceId"]
    try:
        _wait("the build instance powered off", lambda: _instance_state(ec2, instance) in ("stopped", "terminated"),
              float(props.get("timeout", BUILD_TIMEOUT)), poll)
        try:
            result = json.loads(s3.get_object(Bucket=bucket, Key=result_key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            raise ProvisionError(f"the image build instance {instance} stopped without a result "
                                 "(its console output has the build's log)") from None
        s3.delete_object(Bucket=bucket, Key=result_key)
        if result.get("rc") != 0:
            raise ProvisionError(f"the image build failed (exit {result.get('rc')}): "
                                 f"{build_failure([*result.get('failed', []), *result.get('log_tail', [])])}")
        record = read_record(result.get("record", ""), result.get("packages", ""), distro(props["base"]))
        ami = ec2.create_image(  # its name carries the inputs digest: `slurmforge upgrade` checks it
            InstanceId=instance, Name=f"{props['cluster']}-node-{record.get('inputs', 'x')}-{uuid.uuid4().hex[:6]}",
            Description=f"slurmforge node image of {props['cluster']}: Slurm {record['slurm']}",
            TagSpecifications=[{"ResourceType": "image", "Tags": tag_list}],
        )["ImageId"]
        _wait(f"AMI {ami} available", lambda: ec2.describe_images(ImageIds=[ami])["Images"][0]["State"] == "available",
              float(props.get("timeout", BUILD_TIMEOUT)), poll)
        if snapshots := _snapshots(ec2, ami):  # tagged like the rest of the cluster (billing, clean-up)
            ec2.create_tags(Resources=snapshots, Tags=tag_list)
        packages = str(record["packages_text"]).splitlines()
        return {"ami_id": ami, "slurm": str(record["slurm"]), "packages": len(packages),
                "build_seconds": int(str(record.get("seconds", 0)))}
    finally:
        ec2.terminate_instances(InstanceIds=[instance])


def build_failure(log_tail: list[str]) -> str:
    """What a failed build's log says went wrong: the task that failed and Ansible's error
    for it, else the log's last line (the recap alone names no task)."""
    lines = [line.strip() for line in log_tail if line.strip()]
    fatal = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith(("fatal:", "failed:"))), None)
    if fatal is None:
        return (lines[-1] if lines else "?")[:300]
    task = next((lines[i] for i in range(fatal, -1, -1) if lines[i].startswith("TASK [")), "")
    return f"{task.rstrip('*').strip()} {lines[fatal][:600]}".strip()


def _snapshots(ec2: Any, ami: str) -> list[str]:
    images = ec2.describe_images(ImageIds=[ami])["Images"]
    return [m["Ebs"]["SnapshotId"] for i in images for m in i.get("BlockDeviceMappings", [])
            if m.get("Ebs", {}).get("SnapshotId")]


def unbake(session: Any, ami: str) -> None:
    """Deregister the AMI and delete its snapshots."""
    ec2 = session.client("ec2")
    snapshots = _snapshots(ec2, ami)
    ec2.deregister_image(ImageId=ami)
    for snapshot in snapshots:
        ec2.delete_snapshot(SnapshotId=snapshot)


BUILD_INPUTS = ("region", "base", "parent_ami", "subnet_id", "security_group_id", "instance_type", "volume_gb",
                "bucket", "inputs_key", "inputs_digest")
"""A change of any of these bakes a new image."""


class Bakery(ResourceProvider):
    """The dynamic provider behind GoldenImage (runs in the Pulumi program's process)."""

    def _session(self, props: dict[str, Any]) -> Any:
        import boto3  # type: ignore[import-untyped]

        return boto3.Session(region_name=props["region"])

    def create(self, props: dict[str, Any]) -> CreateResult:
        out = bake(self._session(props), props)
        return CreateResult(id_=out["ami_id"], outs={**props, **out})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in BUILD_INPUTS if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed) or olds.get("tags") != news.get("tags"), replaces=changed,
                          delete_before_replace=False)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        unbake(self._session(props), _id)


class GoldenImage(Resource):
    ami_id: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(Bakery(), name, {**props, "ami_id": None, "slurm": None, "packages": None,
                                          "build_seconds": None}, opts)


def parent_ami(os: Distro, parent: pulumi.Resource) -> pulumi.Output[str]:
    """The pinned Debian AMI the build starts from (by name: the same image in every region).

    Deprecated images too: EC2 deprecates public AMIs two years after their creation at the
    latest, and DescribeImages then leaves them out unless asked (docs.aws.amazon.com/AWSEC2/
    latest/UserGuide/ami-deprecate.html) - every `pulumi preview` of a running stack would
    fail. A deprecated AMI still launches; `slurmforge preflight` says when the pin's
    deprecation comes (or came) so it is moved on purpose."""
    found = aws.ec2.get_ami_output(
        owners=[DEBIAN_OWNER], include_deprecated=True,
        filters=[aws.ec2.GetAmiFilterArgs(name="name", values=[os.parent_ami]),
                 aws.ec2.GetAmiFilterArgs(name="architecture", values=["x86_64"])],
        opts=pulumi.InvokeOutputOptions(parent=parent))
    return found.id


class Image(pulumi.ComponentResource):
    ami_id: pulumi.Output[str]

    def __init__(self, name: str, args: ImageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:Image", name, None, opts)
        if args.pinned_ami is not None:
            self.ami_id = pulumi.Output.from_input(args.pinned_ami)
        else:
            self.ami_id = self._build(name, args)
        self.register_outputs({"ami_id": self.ami_id})

    def _build(self, name: str, args: ImageArgs) -> pulumi.Output[str]:
        bucket = aws.s3.Bucket(f"{name}-image", force_destroy=True, tags=tags(args.cluster, "image"), opts=child(self))
        aws.s3.BucketPublicAccessBlock(f"{name}-image", bucket=bucket.id, block_public_acls=True,
                                       block_public_policy=True, ignore_public_acls=True,
                                       restrict_public_buckets=True, opts=child(self))
        tarball_path, digest = inputs_tarball(args)
        inputs = aws.s3.BucketObjectv2(f"{name}-image-inputs", bucket=bucket.id, key=INPUTS_KEY,
                                       source=pulumi.FileAsset(str(tarball_path)),
                                       server_side_encryption="AES256", opts=child(self))
        group = aws.ec2.SecurityGroup(f"{name}-image-build", vpc_id=args.vpc_id, ingress=[], egress=all_egress_rules(),
                                      description="slurmforge image build: outbound only",
                                      tags=tags(args.cluster, "image"), opts=child(self))
        image = GoldenImage(f"{name}-node-image", {
            "region": args.region, "cluster": args.cluster, "base": args.os.base, "variant": str(args.variant),
            "parent_ami": parent_ami(args.os, self), "subnet_id": args.subnet_id, "security_group_id": group.id,
            "instance_type": BUILD_INSTANCE_TYPE, "volume_gb": IMAGE_VOLUME_GB, "bucket": bucket.bucket,
            "inputs_key": inputs.key, "inputs_digest": digest,
            "tags": tags(args.cluster, "image", f"{args.cluster}-image-build-{args.variant}"),
        }, child(self))
        return image.ami_id


INPUTS_KEPT_DAYS = 7
"""Tarballs of other inputs are removed after this long (another stack may still upload its own)."""


def inputs_tarball(args: ImageArgs, cache: Path | None = None) -> tuple[Path, str]:
    """The build's inputs (slurmforge.image.prepare_inputs) as the tarball the instance
    fetches, and their digest. The tarball is kept by its content, `<variant>-<digest>.tar.gz`
    under the state root's `image-inputs/` (the engine may read it at any time the program
    runs, and every run of the same inputs writes the same file); the inputs themselves are
    prepared in a directory removed at once. Each program run once left a 45 MB temporary
    directory behind: 800 of them, 36 GB, filled a CI machine's disk."""
    cache = cache or state_root() / "image-inputs"
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="slurmforge-image-") as tmp:
        digest = prepare_inputs(Path(tmp) / "inputs", args.os, args.variant)
        out = cache / f"{args.variant}-{digest}.tar.gz"
        if out.exists():
            out.touch()  # in use: kept by the pruning below, here and in other runs
        else:
            partial = cache / f".{out.name}.{uuid.uuid4().hex}"  # atomic: readers never see half a file
            partial.write_bytes(tarball(Path(tmp) / "inputs"))
            partial.replace(out)
    cutoff = time.time() - INPUTS_KEPT_DAYS * 86400
    for old in cache.iterdir():
        if old != out and old.stat().st_mtime < cutoff:
            old.unlink(missing_ok=True)
    return out, digest
