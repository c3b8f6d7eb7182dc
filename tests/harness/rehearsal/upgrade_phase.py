"""Patch day on the stand-in (docs/upgrade.md, "Patch day"), after the stack phase: the
admin sets the spec's `images.refresh`, runs `pulumi up` again (the stand-in's engine updates
the stack: the golden image replaced by a new bake through its dynamic provider, each pool's
launch template given a new default version on the new AMI, the head instances left alone by
their `ignore_changes`), `slurmforge inventory --from-stack-outputs` again, then `slurmforge
upgrade --inventory DIR --yes` - while a user submits a job every few seconds from the login
node and a two-node job runs across it. What happened, for the caller to judge.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from slurmforge.errors import ProvisionError
from slurmforge.image import RECORD
from tests.harness.rehearsal.stack import run_main, stack_config, stack_output_json
from tests.harness.rehearsal.stack_phase import (
    CLUSTER,
    JOB_TIMEOUT,
    ROLLOUT_TIMEOUT,
    StackPhase,
    _admin,
    _wait,
    login_shell,
)
from tests.harness.rehearsal.stand_in import StandIn

REFRESH = "2026-11-29"
SUBMIT_EVERY = 5.0
"""Seconds between the user's submissions while the upgrade runs."""
UPGRADE_TIMEOUT = 3600
SETTLE_TIMEOUT = 600
"""Seconds the jobs and the dynamic nodes get to finish after the upgrade."""


@dataclass
class Refreshed:
    ami: str
    """The new golden image's AMI (the stack output)."""
    digest: str
    """Its inputs digest (the bake's)."""
    old_ami: str
    steps: dict[str, str]
    """'<type> <name>' -> what the update did to it (same, update, replace, create)."""
    problems: list[str]
    templates: dict[str, dict[str, Any]]
    """Each pool's launch template after the update: its default version's AMI, and versions."""


def refresh(phase: StackPhase, aws: StandIn, label: str = REFRESH) -> Refreshed:
    """The admin's patch day up to the upgrade: images.refresh set, `pulumi up`, the stack
    outputs saved again, `slurmforge inventory --from-stack-outputs` again."""
    started = time.monotonic()
    data = yaml.safe_load(phase.spec.read_text())
    data.setdefault("images", {})["refresh"] = label
    phase.spec.write_text(yaml.safe_dump(data, sort_keys=False))
    old_ami = str(phase.run.outputs["ami_id"])
    engine = phase.engine
    engine.reuse, engine.keep = False, False  # a new bake, kept for no other test
    engine.begin_update()
    phase.run = run_main(stack_config(phase.spec, aws.region), engine)
    problems = engine.end_update()
    phase.seconds["pulumi up (refresh)"] = time.monotonic() - started
    phase.outputs_file.write_text(json.dumps(stack_output_json(phase.run), indent=2))
    started = time.monotonic()
    _admin(["slurmforge", "inventory", "--from-stack-outputs", str(phase.outputs_file), "--out", str(phase.inventory)],
           phase.env, phase.workdir)
    phase.seconds["inventory (refresh)"] = time.monotonic() - started
    ec2 = aws.session.client("ec2")
    templates = {}
    for pool, template in phase.run.outputs["launch_templates"].items():
        versions = ec2.describe_launch_template_versions(LaunchTemplateId=template)["LaunchTemplateVersions"]
        default = next(v for v in versions if v["DefaultVersion"])
        templates[pool] = {"default_ami": default["LaunchTemplateData"]["ImageId"], "versions": len(versions)}
    ami = str(phase.run.outputs["ami_id"])
    digest = next(str(m.state.get("inputs_digest")) for m in engine.made if m.id == ami)
    return Refreshed(ami, digest, old_ami, dict(engine.steps), problems, templates)


@dataclass
class Submissions:
    """A user submitting a short job every SUBMIT_EVERY s from the login node."""

    phase: StackPhase
    user: str
    jobs: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """What sbatch said when it gave no job id."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._submit, daemon=True, name="rehearsal-submissions")
        self._thread.start()

    def _submit(self) -> None:
        while not self._stop.is_set():
            try:
                said = login_shell(self.phase, self.user, "sbatch --parsable -o /dev/null --wrap 'sleep 3'", 300)
                job = said.strip().split(";")[0]
                (self.jobs if job.isdigit() else self.refused).append(job if job.isdigit() else said.strip())
            except ProvisionError as e:
                self.refused.append(str(e)[-300:])
            self._stop.wait(SUBMIT_EVERY)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=320)


def upgrade(phase: StackPhase, user: str, long_job_seconds: int) -> dict[str, Any]:
    """`slurmforge upgrade --inventory DIR --yes` as the admin runs it, with a two-node job
    started before it and a user's submissions throughout; then the jobs left to finish.
    What it printed, the jobs and their states in sacct."""
    long_job = login_shell(phase, user, f"sbatch --parsable -N2 --ntasks-per-node=1 -o long-%j.out "
                           f"--wrap 'srun sleep {long_job_seconds}'").strip().split(";")[0]
    state = f"squeue -h -j {long_job} -o %T"
    _wait(f"job {long_job} running", lambda: login_shell(phase, user, state).strip() == "RUNNING", JOB_TIMEOUT, 2)
    submissions = Submissions(phase, user)
    submissions.start()
    started = time.monotonic()
    try:
        printed = _admin(["slurmforge", "upgrade", "--inventory", str(phase.inventory), "--yes"], phase.env,
                         phase.workdir, timeout=UPGRADE_TIMEOUT)
    finally:
        submissions.stop()
        phase.seconds["slurmforge upgrade"] = time.monotonic() - started
    started = time.monotonic()
    _wait("every job ended", lambda: not login_shell(phase, user, "squeue -h -u $USER -o %i").strip(),
          SETTLE_TIMEOUT, 5)
    phase.seconds["jobs ended after the upgrade"] = time.monotonic() - started
    ids = [long_job, *submissions.jobs]
    rows = login_shell(phase, user, f"sacct -X -n -P -D -o JobID,State -j {','.join(ids)}").split()
    states: dict[str, list[str]] = {}
    for row in rows:
        job, _, st = row.partition("|")
        states.setdefault(job, []).append(st.split()[0] if st else "")
    return {"printed": printed, "long job": long_job, "jobs": ids, "refused": submissions.refused,
            "states": states}


def images(phase: StackPhase, aws: StandIn) -> dict[str, str]:
    """Every running machine of the cluster: its node name (or instance id) and the inputs
    digest its RECORD names."""
    found = {}
    for r in aws.session.client("ec2").describe_instances(Filters=[
            {"Name": "tag:slurmforge:cluster", "Values": [CLUSTER]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]}])["Reservations"]:
        for i in r["Instances"]:
            machine = aws.machines.machines.get(i["InstanceId"])
            tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
            name = tags.get("slurmforge:node") or tags.get("Name") or i["InstanceId"]
            if machine is None:
                found[name] = "no machine"
                continue
            said = aws.machines.podman.run(["exec", machine.container, "cat", RECORD], check=False)
            try:
                found[name] = str(json.loads(said).get("inputs"))
            except ValueError:
                found[name] = f"no record: {said[-200:]}"
    return found


def settled(phase: StackPhase, aws: StandIn, digest: str) -> dict[str, str]:
    """Wait until every running machine of the cluster is on the image `digest` (a dynamic
    node Slurm powers down when its jobs end has its old machine until then); what each runs."""
    found: dict[str, str] = {}

    def on_image() -> bool:
        found.clear()
        found.update(images(phase, aws))
        return all(v == digest for v in found.values())

    started = time.monotonic()
    with contextlib.suppress(ProvisionError):  # the caller judges what runs
        _wait("every machine on the new image", on_image, SETTLE_TIMEOUT, 10)
    phase.seconds["machines on the new image"] = time.monotonic() - started
    return dict(found)


def validate(phase: StackPhase) -> str:
    """`slurmforge validate --inventory` after the upgrade (every host's record checked)."""
    return _admin(["slurmforge", "validate", "--inventory", str(phase.inventory)], phase.env, phase.workdir,
                  timeout=ROLLOUT_TIMEOUT)
