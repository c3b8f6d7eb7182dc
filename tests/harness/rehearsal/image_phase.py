"""The stack's golden image, rehearsed: `bake` (stacks/image.py, what the Pulumi program's
bakery runs) against the stand-in, with a real build instance.

The parent AMI (registered under Debian's AMI name) maps to the Debian AMI stand-in
(parent.py). `bake` puts nothing on the machine itself: the instance it launches boots with
its own user data (slurmforge.image.aws_user_data) under cloud-init, fetches the build's
inputs through the presigned URL with curl, runs build.sh, PUTs its result through the
other URL and powers off; the machines stop the instance, `bake` checks the record and
calls CreateImage, the machines commit the container as the AMI's image, `bake`
terminates the instance. Then an instance from that AMI boots with its own user data (a
probe that reads its instance id through IMDSv2) and must hold the build's record.

The baked image is kept as <NODE_REPOSITORY>:<key> (the inputs' digest, the parent image,
the build's user data): `reuse=True` registers an AMI for it instead of baking again when
nothing changed (the quick mode), as a stack with `images.ami` pinned builds nothing.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmforge.distro import DEBIAN_13
from slurmforge.image import RECORD, aws_user_data, prepare_inputs, tarball
from slurmforge.local.image_cache import prune_older
from slurmforge.local.podman import Podman
from tests.harness.rehearsal.imds import ADDRESS
from tests.harness.rehearsal.machines import PREFIX
from tests.harness.rehearsal.parent import ensure_parent
from tests.harness.rehearsal.stand_in import StandIn

NODE_REPOSITORY = f"localhost/{PREFIX}-node"
CLUSTER = "rehearsal"
VPC_CIDR, SUBNET_CIDR = "10.213.0.0/16", "10.213.1.0/24"
"""Not the local target's (10.88/16 podman's own, 10.89/16 the local clusters')."""
BUCKET = f"{CLUSTER}-image"
INSTANCE_TYPE = "m6i.large"
BAKE_TIMEOUT = 1800
BOOT_TIMEOUT = 300
ENABLED = ["sh", "-c", "systemctl --root=/ list-unit-files --state=enabled --no-legend | cut -d' ' -f1"]
"""The unit files a machine (or an image) has enabled."""
PROBE = "/var/lib/slurmforge-rehearsal/instance-id"
PROBE_USER_DATA = f"""#!/bin/bash
# the rehearsal's probe: this instance's id, read through IMDSv2
set -euo pipefail
token=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' http://{ADDRESS}/latest/api/token)
mkdir -p "$(dirname {PROBE})"
curl -fsS -H "X-aws-ec2-metadata-token: $token" http://{ADDRESS}/latest/meta-data/instance-id > {PROBE}
"""


@dataclass
class ImagePhase:
    ami: str
    image: str
    """The podman image of the AMI, kept for reuse (<NODE_REPOSITORY>:<key>)."""
    digest: str
    """The build inputs' digest."""
    baked: bool
    """False: an image baked from the same inputs before was reused."""
    bake_seconds: float
    """Inputs, bake (or reuse) until the AMI's image is on this machine."""
    boot_seconds: float
    """RunInstances from the AMI until cloud-init has run the instance's user data."""
    record: dict[str, Any]
    """RECORD in the machine from the AMI."""
    probe: str
    """What the machine from the AMI read as its instance id through IMDS."""
    instance_id: str
    """The machine from the AMI."""
    cloud_init: str
    """`cloud-init status --long` there."""
    enabled_at_boot: list[str]
    """Unit files enabled in the machine from the AMI that the AMI's image leaves disabled."""
    bake: dict[str, Any] = field(default_factory=dict)
    """`bake`'s result (baked only)."""
    build_instance: str = ""


def cache_tag(digest: str, parent: str) -> str:
    h = hashlib.sha256()
    for part in (digest, parent, aws_user_data("", "")):
        h.update(hashlib.sha256(part.encode()).digest())
    return f"{NODE_REPOSITORY}:{h.hexdigest()[:12]}"


def run(aws: StandIn, reuse: bool, podman: Podman | None = None) -> ImagePhase:
    from stacks.image import IMAGE_VOLUME_GB, INPUTS_KEY, bake  # the rehearsal runs from a checkout

    podman = podman or Podman()
    ec2, s3, machines = aws.session.client("ec2"), aws.session.client("s3"), aws.machines
    parent = ensure_parent(podman)
    parent_ami = ec2.register_image(Name=DEBIAN_13.parent_ami, Architecture="x86_64")["ImageId"]
    machines.images[parent_ami] = parent
    vpc = ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=SUBNET_CIDR)["Subnet"]["SubnetId"]
    group = ec2.create_security_group(VpcId=vpc, GroupName="image-build", Description="image build")["GroupId"]
    # the build reaches Debian's mirror and S3: its subnet needs a route out (routes.py), here
    # straight to an internet gateway (the stack's private subnets go through its NAT gateway)
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway)
    ec2.associate_route_table(RouteTableId=table, SubnetId=subnet)

    started = time.monotonic()
    s3.create_bucket(Bucket=BUCKET)
    with tempfile.TemporaryDirectory(prefix="slurmforge-rehearsal-") as tmp:
        digest = prepare_inputs(Path(tmp) / "inputs", DEBIAN_13)
        s3.put_object(Bucket=BUCKET, Key=INPUTS_KEY, Body=tarball(Path(tmp) / "inputs"))
    kept = cache_tag(digest, parent)
    baked: dict[str, Any] = {}
    build_instance = ""
    if reuse and podman.image_exists(kept):
        ami = ec2.register_image(Name=f"{CLUSTER}-node-{digest}", Architecture="x86_64")["ImageId"]
        machines.images[ami] = kept
    else:
        props = {"region": aws.region, "cluster": CLUSTER, "base": DEBIAN_13.base, "parent_ami": parent_ami,
                 "subnet_id": subnet, "security_group_id": group, "instance_type": INSTANCE_TYPE,
                 "volume_gb": IMAGE_VOLUME_GB, "bucket": BUCKET, "inputs_key": INPUTS_KEY, "inputs_digest": digest,
                 "timeout": BAKE_TIMEOUT, "tags": {"slurmforge:cluster": CLUSTER, "Name": f"{CLUSTER}-image-build"}}
        baked = bake(aws.session, props, poll=1.0)
        ami = str(baked["ami_id"])
        machines.wait(f"AMI {ami}'s image", lambda: ami in machines.images, BOOT_TIMEOUT)
        podman.run(["tag", machines.images[ami], kept])
        prune_older(podman, kept)
        build_instance = next(i for _, i, what in machines.events if what == f"committed as {ami} "
                              f"({machines.images[ami]})")
    bake_seconds = time.monotonic() - started

    started = time.monotonic()
    instance_id = ec2.run_instances(
        ImageId=ami, InstanceType=INSTANCE_TYPE, MinCount=1, MaxCount=1, SubnetId=subnet, SecurityGroupIds=[group],
        UserData=PROBE_USER_DATA, MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled"},
    )["Instances"][0]["InstanceId"]
    machines.wait(f"a machine for {instance_id}", lambda: instance_id in machines.machines, BOOT_TIMEOUT)
    container = machines.machines[instance_id].container
    status = podman.exec(container, ["cloud-init", "status", "--wait", "--long"], timeout=BOOT_TIMEOUT, check=False)
    boot_seconds = time.monotonic() - started
    record = json.loads(podman.exec(container, ["cat", RECORD], check=False).stdout or "{}")
    enabled = set(podman.exec(container, ENABLED).stdout.split()) - set(podman.run(["run", "--rm", "--network=none",
                                                                                  kept, *ENABLED]).split())
    probe = podman.exec(container, ["cat", PROBE], check=False).stdout.strip()
    ec2.terminate_instances(InstanceIds=[instance_id])
    machines.wait(f"{instance_id}'s machine removed", lambda: instance_id not in machines.machines, BOOT_TIMEOUT)
    return ImagePhase(ami, kept, digest, bool(baked), bake_seconds, boot_seconds, record, probe,
                      instance_id, (status.stdout + status.stderr).strip(), sorted(enabled), baked, build_instance)
