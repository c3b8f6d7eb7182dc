"""The AWS golden image: the one image pipeline on a plain instance (stacks/image.py).

Under the Pulumi mocks: what the program registers (the pinned parent AMI, the private
bucket with the build's inputs - exactly what the local build receives - and the bakery).
Against a moto server: the bakery itself, with a machine that does what the build
instance's user data does (fetch the inputs through the presigned URL, put a result through
the other, power off), so the presigned URLs, the waits, the record's check, the AMI and
the clean-up are the real code's.
"""

from __future__ import annotations

import json
import re
import tarfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import boto3
import pytest

from slurmforge.distro import DEBIAN_13
from slurmforge.errors import ProvisionError
from slurmforge.image import BUILD_SCRIPT, DIGEST_FILE, prepare_inputs, tarball
from stacks.image import DEBIAN_OWNER, IMAGE_VOLUME_GB, INPUTS_KEY, bake, unbake
from tests.pulumi.conftest import (
    DEBIAN_AMI,
    DYNAMIC,
    GOLDEN_AMI,
    LAB_AWS,
    POOLS_AWS,
    StackRun,
    moto_server,
    run_stack,
)

pytestmark = pytest.mark.pulumi
REGION = "us-east-1"


# --------------------------------------------------------------------------- the program


def test_the_build_starts_from_the_pinned_debian_ami(pools_aws: StackRun) -> None:
    amis = [c for c in pools_aws.calls if c.token == "aws:ec2/getAmi:getAmi"]
    assert len(amis) == 2  # one build per image variant, both from the same parent
    for ami in amis:
        assert ami.args["owners"] == [DEBIAN_OWNER] and not ami.args.get("mostRecent")
        assert {"name": "name", "values": [DEBIAN_13.parent_ami]} in ami.args["filters"]
    assert "*" not in DEBIAN_13.parent_ami  # a name, not a pattern: a new Debian AMI rebakes nothing
    images = pools_aws.of_type(DYNAMIC)
    assert sorted(i.inputs["variant"] for i in images) == ["base", "gpu"]  # pools-aws has GPU pools
    assert {i.inputs["parent_ami"] for i in images} == {DEBIAN_AMI}
    assert pools_aws.outputs["ami_id"] == GOLDEN_AMI
    assert {i.inputs["ami"] for i in pools_aws.of_type("aws:ec2/instance:Instance")} == {GOLDEN_AMI}


def test_the_build_receives_exactly_the_pipelines_inputs(pools_aws: StackRun, tmp_path: Path) -> None:
    """The tarball the instance fetches is what the local build copies into its builder,
    digest for digest."""
    (obj,) = [o for o in pools_aws.of_type("aws:s3/bucketObjectv2:BucketObjectv2") if o.name == "mlpools-image-inputs"]
    (image,) = [i for i in pools_aws.of_type(DYNAMIC) if i.inputs["variant"] == "base"]
    with tarfile.open(obj.inputs["source"].path) as tar:
        names = tar.getnames()
        digest = tar.extractfile(DIGEST_FILE).read().decode().strip()  # type: ignore[union-attr]
    assert {n.split("/")[0] for n in names} == {"playbooks", "roles", "wheels", "vars.json", BUILD_SCRIPT, DIGEST_FILE}
    assert digest == image.inputs["inputs_digest"] == prepare_inputs(tmp_path / "local", DEBIAN_13)
    for block in pools_aws.of_type("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"):
        assert all(block.inputs[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                                  "restrictPublicBuckets"))


def test_a_pinned_image_builds_nothing(lab_aws: StackRun) -> None:
    assert lab_aws.spec.images.ami is not None
    assert lab_aws.of_type(DYNAMIC) == [] and not [c for c in lab_aws.calls if c.token == "aws:ec2/getAmi:getAmi"]
    assert not [r for r in lab_aws.resources if r.typ.startswith("aws:imagebuilder/")]


def test_no_image_builder_anywhere() -> None:
    for spec in (POOLS_AWS, LAB_AWS):
        assert not [r for r in run_stack(spec).resources if r.typ.startswith("aws:imagebuilder/")]


# --------------------------------------------------------------------------- the bakery, in moto


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    with moto_server(REGION) as url:
        yield url


@pytest.fixture()
def account(moto_url: str, tmp_path: Path) -> dict[str, Any]:
    """A VPC, a subnet, a security group, a Debian AMI and the bucket with the inputs."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST"), timeout=10).close()
    session = boto3.Session(region_name=REGION)
    ec2, s3 = session.client("ec2"), session.client("s3")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(VpcId=vpc, GroupName="build", Description="build")["GroupId"]
    parent = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]  # moto's stand-in for Debian's
    s3.create_bucket(Bucket="mlpools-image")
    digest = prepare_inputs(tmp_path / "inputs", DEBIAN_13)
    s3.put_object(Bucket="mlpools-image", Key=INPUTS_KEY, Body=tarball(tmp_path / "inputs"))
    props = {"region": REGION, "cluster": "mlpools", "base": "debian-13", "parent_ami": parent, "subnet_id": subnet,
             "security_group_id": group, "instance_type": "m6i.large", "volume_gb": IMAGE_VOLUME_GB,
             "bucket": "mlpools-image", "inputs_key": INPUTS_KEY, "inputs_digest": digest, "timeout": 30,
             "tags": {"slurmforge:cluster": "mlpools", "Name": "mlpools-image-build"}}
    return {"session": session, "ec2": ec2, "props": props, "digest": digest}


URL = re.compile(r"'(http[^']+)'")


class BuildMachine(threading.Thread):
    """Does what the build instance does with its user data: the inputs from the first URL,
    `outcome(inputs)` as the result through the second, then powers off. Records what it
    fetched."""

    def __init__(self, ec2: Any, outcome: Callable[[tarfile.TarFile], dict[str, Any] | None]) -> None:
        super().__init__(daemon=True)
        self.ec2, self.outcome = ec2, outcome
        self.fetched: list[str] = []
        self.instance: dict[str, Any] = {}

    def run(self) -> None:
        for _ in range(200):
            found = [i for r in self.ec2.describe_instances(Filters=[
                {"Name": "tag:Name", "Values": ["mlpools-image-build"]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]}])["Reservations"]
                for i in r["Instances"]]
            if found:
                break
            time.sleep(0.05)
        self.instance = found[0]
        user_data = self.ec2.describe_instance_attribute(InstanceId=self.instance["InstanceId"], Attribute="userData")
        import base64

        inputs_url, result_url = URL.findall(base64.b64decode(user_data["UserData"]["Value"]).decode())
        with urllib.request.urlopen(inputs_url, timeout=10) as got, tarfile.open(fileobj=BytesIO(got.read())) as tar:
            self.fetched = tar.getnames()
            result = self.outcome(tar)
        if result is not None:
            put = urllib.request.Request(result_url, data=json.dumps(result).encode(), method="PUT",
                                         headers={"Content-Type": "application/json"})
            urllib.request.urlopen(put, timeout=10).close()
        self.ec2.stop_instances(InstanceIds=[self.instance["InstanceId"]])


def built(slurm: str = "24.11.5-4+deb13u1") -> Callable[[tarfile.TarFile], dict[str, Any]]:
    def outcome(tar: tarfile.TarFile) -> dict[str, Any]:
        digest = tar.extractfile(DIGEST_FILE).read().decode().strip()  # type: ignore[union-attr]
        record = {"base": "debian-13", "variant": "base", "slurm": slurm, "packages": 2, "inputs": digest,
                  "seconds": 300}
        return {"rc": 0, "record": json.dumps(record), "packages": f"slurm-client {slurm}\nmunge 0.5.16-1\n",
                "log_tail": ["slurmforge-image: built"]}
    return outcome


def run_bake(account: dict[str, Any], outcome: Callable[[tarfile.TarFile], dict[str, Any] | None]
             ) -> tuple[BuildMachine, Callable[[], dict[str, Any]]]:
    machine = BuildMachine(account["ec2"], outcome)
    machine.start()
    return machine, lambda: bake(account["session"], account["props"], poll=0.1)


def state(ec2: Any, instance_id: str) -> str:
    return str(ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"])


def test_a_build_becomes_an_encrypted_ami_and_its_instance_goes(account: dict[str, Any]) -> None:
    machine, go = run_bake(account, built())
    out = go()
    machine.join(5)
    ec2 = account["ec2"]
    assert BUILD_SCRIPT in machine.fetched and "vars.json" in machine.fetched
    (image,) = ec2.describe_images(ImageIds=[out["ami_id"]])["Images"]
    assert image["State"] == "available" and account["digest"] in image["Name"]
    assert (out["slurm"], out["packages"], out["build_seconds"]) == ("24.11.5-4+deb13u1", 2, 300)
    instance = machine.instance
    assert state(ec2, instance["InstanceId"]) == "terminated"
    assert instance["MetadataOptions"]["HttpTokens"] == "required"
    assert "IamInstanceProfile" not in instance  # the build has no AWS permissions: presigned URLs only
    (volume,) = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id",
                                               "Values": [instance["InstanceId"]]}])["Volumes"] or [None]
    if volume is not None:  # moto drops a terminated instance's volume
        assert volume["Encrypted"] and volume["Size"] == IMAGE_VOLUME_GB
    assert account["session"].client("s3").list_objects_v2(Bucket="mlpools-image", Prefix="results/").get(
        "KeyCount") == 0
    unbake(account["session"], out["ami_id"])
    assert ec2.describe_images(ImageIds=[out["ami_id"]])["Images"] == []


@pytest.mark.parametrize(("outcome", "error"), [
    (built("25.05.1-1"), r"installed Slurm 25\.05\.1-1, but slurmforge renders for Slurm 24\.11"),
    (lambda tar: {"rc": 100, "record": "", "packages": "", "log_tail": ["E: Unable to locate package slurmd", ""]},
     r"image build failed \(exit 100\): E: Unable to locate package slurmd"),
    (lambda tar: None, r"stopped without a result"),
], ids=["slurm-moved", "build-failed", "no-result"])
def test_a_failed_build_makes_no_ami_and_leaves_no_instance(account: dict[str, Any], outcome: Any,
                                                            error: str) -> None:
    machine, go = run_bake(account, outcome)
    with pytest.raises(ProvisionError, match=error):
        go()
    machine.join(5)
    ec2 = account["ec2"]
    assert state(ec2, machine.instance["InstanceId"]) == "terminated"
    assert ec2.describe_images(Owners=["self"])["Images"] == []


def test_the_inputs_tarball_is_kept_by_its_content_and_leaves_nothing_in_tmp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every program run once left a 45 MB temporary directory (800 of them filled a CI disk):
    the tarball is now one file per content, the inputs' directory removed at once."""
    import os

    from slurmforge.image_variant import ImageVariant
    from stacks.image import ImageArgs, inputs_tarball

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    cache = tmp_path / "image-inputs"
    stale = cache / "base-0000.tar.gz"
    cache.mkdir()
    stale.write_bytes(b"old")
    os.utime(stale, (time.time() - 8 * 86400,) * 2)
    args = ImageArgs("c", "us-east-1", None, "vpc", "subnet", DEBIAN_13, ImageVariant.BASE)
    first, digest = inputs_tarball(args, cache)
    again, same = inputs_tarball(args, cache)
    assert first == again == cache / f"base-{digest}.tar.gz" and same == digest
    assert list(scratch.iterdir()) == [] and not stale.exists()
    assert sorted(p.name for p in cache.iterdir()) == [first.name]
    with tarfile.open(first) as tar:
        assert BUILD_SCRIPT in tar.getnames() or any(n.endswith(BUILD_SCRIPT) for n in tar.getnames())
