"""The AWS rehearsal's first phase (tests.harness.rehearsal.image_phase): the stack's golden
image built by `bake` (stacks/image.py) with a real build instance - a podman container
booted from the Debian AMI stand-in, running its own user data under cloud-init - against
a moto server; the AMI it made boots as another machine that holds the build's record.

An image baked before from the same inputs is reused (the quick mode, as `./dev.sh test`
runs it); SLURMFORGE_REHEARSAL_REBAKE=1 bakes again (`make aws-rehearsal` always does).
Needs root and podman.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.harness.rehearsal import image_phase
from tests.harness.rehearsal.imds import TOKEN_PATH
from tests.harness.rehearsal.machines import LABEL, PREFIX
from tests.harness.rehearsal.stand_in import StandIn, stand_in

pytestmark = pytest.mark.rehearsal


@dataclass
class Rehearsed:
    aws: StandIn
    phase: image_phase.ImagePhase
    ident: str


@pytest.fixture(scope="module")
def rehearsed() -> Iterator[Rehearsed]:
    with stand_in() as aws:
        phase = image_phase.run(aws, reuse=os.environ.get("SLURMFORGE_REHEARSAL_REBAKE") != "1")
        yield Rehearsed(aws, phase, aws.machines.ident)


def test_the_machine_from_the_ami_holds_the_builds_record(rehearsed: Rehearsed) -> None:
    phase = rehearsed.phase
    assert phase.record["inputs"] == phase.digest and phase.record["base"] == "debian-13"
    assert str(phase.record["slurm"]).startswith("24.11.")
    assert "extended_status: done" in phase.cloud_init, phase.cloud_init  # no error, no warning


def test_its_boot_enables_nothing_the_image_leaves_disabled(rehearsed: Rehearsed) -> None:
    """Not systemd's "first boot", which applies Debian's presets: slurmctld, slurmdbd,
    MariaDB, ceph-mon... on every node from the AMI."""
    assert rehearsed.phase.enabled_at_boot == []


def test_its_own_user_data_ran_under_cloud_init_and_read_imdsv2_from_its_address(rehearsed: Rehearsed) -> None:
    phase, imds = rehearsed.phase, rehearsed.aws.imds
    assert phase.probe == phase.instance_id
    asked = [(method, path, status) for who, method, path, status in imds.answered if who == phase.instance_id]
    assert ("PUT", TOKEN_PATH, 200) in asked
    assert ("GET", "/latest/meta-data/instance-id", 200) in asked
    assert not [a for a in asked if a[2] == 401]


def test_the_build_instance_powered_off_was_imaged_and_went(rehearsed: Rehearsed) -> None:
    phase, machines = rehearsed.phase, rehearsed.aws.machines
    if not phase.baked:
        pytest.skip("the image was reused (SLURMFORGE_REHEARSAL_REBAKE=1 bakes)")
    events = [what for _, who, what in machines.events if who == phase.build_instance]
    assert events[:2] == ["machine booting", "powered off: instance stopped"], events
    assert events[2].startswith(f"committed as {phase.ami}") and events[-1] == "machine removed", events
    assert str(phase.bake["slurm"]).startswith("24.11.") and phase.bake["packages"] > 100
    ec2 = rehearsed.aws.session.client("ec2")
    state = ec2.describe_instances(InstanceIds=[phase.build_instance])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] == "terminated"


def test_nothing_of_the_rehearsal_outlives_it(rehearsed: Rehearsed) -> None:
    assert rehearsed.aws.machines.errors == []
    rehearsed.aws.machines.close()
    for kind in ("ps", "network"):
        listed = subprocess.run(["podman", kind, *(["-a"] if kind == "ps" else ["ls"]), "--filter",
                                 f"label={LABEL}={rehearsed.ident}", "--format", "{{.Name}}" if kind == "network"
                                 else "{{.Names}}"], capture_output=True, text=True, check=True).stdout.split()
        assert listed == [], (kind, listed)
    assert subprocess.run(["podman", "image", "exists", rehearsed.phase.image]).returncode == 0  # kept for reuse
    assert PREFIX in rehearsed.phase.image
