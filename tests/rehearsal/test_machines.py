"""The rehearsal's machines (tests.harness.rehearsal.machines) follow their instances in moto,
and moto follows the machines: stopped, started again (the metadata service reachable
again), terminated; a machine that powers itself off stops or terminates its instance as
its shutdown behaviour says. Machines from the Debian AMI stand-in (no build)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from slurmforge.distro import DEBIAN_13
from slurmforge.local.podman import Podman
from tests.harness.rehearsal.imds import ADDRESS
from tests.harness.rehearsal.machines import PREFIX
from tests.harness.rehearsal.parent import ensure_parent
from tests.harness.rehearsal.stand_in import StandIn, stand_in

pytestmark = pytest.mark.rehearsal


@dataclass
class World:
    aws: StandIn
    ec2: Any
    ami: str
    subnet: str
    podman: Podman

    def launch(self, user_data: str = "", behaviour: str = "stop") -> str:
        return str(self.ec2.run_instances(
            ImageId=self.ami, InstanceType="t3.micro", MinCount=1, MaxCount=1, SubnetId=self.subnet,
            UserData=user_data, InstanceInitiatedShutdownBehavior=behaviour,
            MetadataOptions={"HttpTokens": "required"})["Instances"][0]["InstanceId"])

    def state(self, instance_id: str) -> str:
        found = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
        return str(found["State"]["Name"])

    def container_state(self, instance_id: str) -> str:
        info = self.podman.container(f"{PREFIX}-{instance_id}")
        return info.state if info else "gone"

    def imds(self, instance_id: str, path: str) -> str:
        """`path` read through IMDSv2 with curl from the machine, as its programs do."""
        script = (f"t=$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' http://{ADDRESS}/latest/api/token)"
                  f" && curl -fsS -H \"X-aws-ec2-metadata-token: $t\" http://{ADDRESS}{path}")
        return self.podman.exec(f"{PREFIX}-{instance_id}", ["bash", "-c", script], timeout=30).stdout


def until(what: str, check: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    podman = Podman()
    with stand_in() as aws:
        ec2 = aws.session.client("ec2")
        ami = ec2.register_image(Name=DEBIAN_13.parent_ami, Architecture="x86_64")["ImageId"]
        aws.machines.images[ami] = ensure_parent(podman)
        vpc = ec2.create_vpc(CidrBlock="10.214.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.214.1.0/24")["Subnet"]["SubnetId"]
        yield World(aws, ec2, ami, subnet, podman)
        assert aws.machines.errors == []


def test_the_machine_follows_stop_start_and_terminate(world: World) -> None:
    instance_id = world.launch()
    until("the machine running", lambda: world.container_state(instance_id) == "running")
    status = world.podman.exec(f"{PREFIX}-{instance_id}", ["cloud-init", "status", "--wait", "--long"], timeout=180,
                               check=False)
    assert status.returncode == 0 and "extended_status: done" in status.stdout, status.stdout  # no error, warning
    assert world.imds(instance_id, "/latest/meta-data/instance-id") == instance_id
    world.ec2.stop_instances(InstanceIds=[instance_id])
    until("the machine stopped", lambda: world.container_state(instance_id) == "exited")
    assert world.state(instance_id) == "stopped"  # the machine's stop is not taken for a power-off
    world.ec2.start_instances(InstanceIds=[instance_id])
    until("the machine running again", lambda: world.container_state(instance_id) == "running")
    assert world.imds(instance_id, "/latest/meta-data/local-ipv4") == world.aws.imds.instance(instance_id)[
        "PrivateIpAddress"]
    world.ec2.terminate_instances(InstanceIds=[instance_id])
    until("the machine removed", lambda: world.container_state(instance_id) == "gone")


@pytest.mark.parametrize(("behaviour", "after"), [("stop", "stopped"), ("terminate", "terminated")])
def test_a_machine_that_powers_itself_off(world: World, behaviour: str, after: str) -> None:
    """Its user data (cloud-init) powers it off: the instance stops or terminates."""
    instance_id = world.launch("#!/bin/bash\npoweroff\n", behaviour)
    until(f"the instance {after}", lambda: world.state(instance_id) == after, timeout=180)
    if after == "terminated":
        until("the machine removed", lambda: world.container_state(instance_id) == "gone")
    else:
        world.ec2.terminate_instances(InstanceIds=[instance_id])
