"""Patch day on AWS, rehearsed (docs/upgrade.md, "Patch day"; docs/rehearsal.md): the stack
phase with a static pool node (min_nodes 1: the scheduler service keeps it) and a dynamic one
a job powers up, then the admin's steps - `images.refresh` set in the spec, `pulumi up` again
(the stand-in's engine replaces the golden image with a new bake through the program's
dynamic provider and gives each pool's launch template a new default version on it),
`slurmforge inventory --from-stack-outputs` again, `slurmforge upgrade --inventory DIR --yes`
- with a two-node job running across it and a user submitting a job every few seconds from
the login node; then sacct must show every job completed and no submission refused, every
machine of the cluster must hold the new AMI's record, `slurmforge validate --inventory`
must pass, and `slurmforge down` and `pulumi destroy` must leave nothing.

Long (`./dev.sh test-all`, not CI's `./dev.sh test`): the golden image is baked again, the
head hosts are upgraded in place with apt and the image's playbook. Needs root and podman.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.harness.rehearsal import stack_phase, upgrade_phase
from tests.harness.rehearsal.stack import DYNAMIC
from tests.harness.rehearsal.stand_in import StandIn, stand_in
from tests.rehearsal.test_stack_phase import _held

pytestmark = [pytest.mark.rehearsal, pytest.mark.long]

STATIC_NODE, DYNAMIC_NODE = f"{stack_phase.CLUSTER}-cpu-01", f"{stack_phase.CLUSTER}-cpu-02"
LONG_JOB_SECONDS = 240


@dataclass
class Patched:
    aws: StandIn
    phase: stack_phase.StackPhase
    found: dict[str, Any]
    destroy_problems: list[str]
    left: dict[str, list[str]]


@pytest.fixture(scope="module")
def patched() -> Iterator[Patched]:
    reuse = os.environ.get("SLURMFORGE_REHEARSAL_REBAKE") != "1"
    with tempfile.TemporaryDirectory(prefix="slurmforge-rehearsal-", dir="/var/tmp") as tmp, stand_in() as aws:
        phase = stack_phase.run(aws, Path(tmp), reuse=reuse, static=1)
        found: dict[str, Any] = {"rollout": stack_phase.roll_out(phase)}
        found["jobs"] = stack_phase.first_jobs(phase, "alice")
        found["before"] = upgrade_phase.images(phase, aws)
        found["refreshed"] = upgrade_phase.refresh(phase, aws)
        found["upgrade"] = upgrade_phase.upgrade(phase, "alice", LONG_JOB_SECONDS)
        found["after"] = upgrade_phase.settled(phase, aws, found["refreshed"].digest)
        found["validate"] = upgrade_phase.validate(phase)
        found["down"] = stack_phase.down(phase)
        problems = [*found["refreshed"].problems, *stack_phase.destroy(phase)]
        aws.machines.wait("the machines gone", lambda: not aws.machines.machines, 120)
        print(f"\nthe upgrade phase's seconds: {phase.seconds}\n{found['upgrade']['printed']}")
        yield Patched(aws, phase, found, problems, _held(aws))


def test_pulumi_up_bakes_a_new_image_and_moves_the_launch_templates_to_it(patched: Patched) -> None:
    """The refresh label changed the build's inputs: the golden image is replaced (a new bake
    through the dynamic provider, the old AMI deregistered at the update's end), the inputs
    object uploaded again, each pool's launch template updated in place to a new default
    version on the new AMI; the head instances ignore the AMI change; nothing else moves."""
    refreshed = patched.found["refreshed"]
    assert refreshed.ami != refreshed.old_ami and refreshed.problems == []
    changed = {k: v for k, v in refreshed.steps.items() if v != "same"}
    assert changed == {f"{DYNAMIC} {stack_phase.CLUSTER}-node-image": "replace",
                       f"aws:s3/bucketObjectv2:BucketObjectv2 {stack_phase.CLUSTER}-image-inputs": "update",
                       **{f"aws:ec2/launchTemplate:LaunchTemplate {stack_phase.CLUSTER}-{pool}-template": "update"
                          for pool in ("cpu", stack_phase.SPOT_POOL)}}, changed
    for pool, template in refreshed.templates.items():
        assert template == {"default_ami": refreshed.ami, "versions": 2}, (pool, template)
    assert patched.phase.engine.baked["base"] is True


def test_the_first_jobs_ran_on_the_static_node_and_a_dynamic_one(patched: Patched) -> None:
    lines = sorted(patched.found["jobs"]["cold"].split("\n")[:2])
    assert [line.split()[1] for line in lines] == [STATIC_NODE, DYNAMIC_NODE], lines


def test_no_job_is_lost_and_no_submission_refused_across_the_upgrade(patched: Patched) -> None:
    done = patched.found["upgrade"]
    assert done["refused"] == []
    assert len(done["jobs"]) > 10, done["jobs"]
    lost = {job: states for job, states in done["states"].items() if states[-1:] != ["COMPLETED"]}
    assert lost == {} and set(done["states"]) == set(done["jobs"]), (lost, done["jobs"])


def test_every_machine_runs_the_new_image_and_validate_passes(patched: Patched) -> None:
    """Each machine's record (/usr/share/slurmforge/image.json) names the new AMI's inputs
    digest: the head hosts upgraded in place, the static node on a new instance from the
    launch template, a dynamic node powered up after the upgrade too."""
    found, digest = patched.found, patched.found["refreshed"].digest
    assert found["before"] and all(v != digest for v in found["before"].values()), found["before"]
    assert STATIC_NODE in found["after"] and {"rehearsal-controller", "rehearsal-login"} <= set(found["after"])
    assert found["after"] == {name: digest for name in found["after"]}, found["after"]
    assert "passed every check" in found["validate"]


def test_the_upgrade_replaced_the_static_node_and_said_each_steps_time(patched: Patched) -> None:
    printed = patched.found["upgrade"]["printed"]
    assert f"static nodes:{STATIC_NODE}:" in printed and "cluster rehearsal runs image" in printed, printed


def test_down_and_destroy_leave_nothing(patched: Patched) -> None:
    assert patched.destroy_problems == []
    assert {k: v for k, v in patched.left.items() if v} == {}
    assert patched.aws.machines.errors == []
