"""The AWS rehearsal's stack phase (tests.harness.rehearsal.stack_phase): `pulumi up` of
stacks/ with every resource made in the stand-in, the head nodes and Ceph hosts booted from
the golden image with their own user data, then the admin's steps of docs/aws.md - the
stack outputs, `slurmforge inventory --from-stack-outputs`, SSH to the login node's
Elastic IP with the key pair, every host reached through it with sudo, `slurmforge rollout
--inventory` - a user's first jobs on the pool's powered-down nodes, which the scheduler
service launches through EC2 Fleet and which join with their own user data, `slurmforge
validate --inventory`, a spot interruption EC2's way (the job moves to the fallback link),
`slurmforge down --inventory` and `pulumi destroy`, which must leave nothing of the stack in
the stand-in. Every call an instance role makes to Secrets Manager or SQS is checked
against the role's policies throughout.

The golden image is reused when one was baked from the same inputs (the quick mode);
SLURMFORGE_REHEARSAL_REBAKE=1 bakes it through the program's dynamic provider. Needs root
and podman.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from slurmforge.state_dirs import secrets_dir
from tests.harness.rehearsal import stack_phase
from tests.harness.rehearsal.machines import LABEL
from tests.harness.rehearsal.memory import memtotal_kib, type_memory_mib
from tests.harness.rehearsal.stack import DYNAMIC
from tests.harness.rehearsal.stand_in import StandIn, stand_in

pytestmark = pytest.mark.rehearsal


@dataclass
class Rehearsed:
    aws: StandIn
    phase: stack_phase.StackPhase
    before_destroy: dict[str, Any]
    """What the admin's side found while the stack stood."""
    destroy_problems: list[str]
    left: dict[str, list[str]]
    """What the stand-in still held after `destroy`, by kind."""


def _held(aws: StandIn) -> dict[str, list[str]]:
    s = aws.session
    ec2 = s.client("ec2")
    return {
        "instances": [i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
                      if i["State"]["Name"] != "terminated"],
        "vpcs": [v["VpcId"] for v in ec2.describe_vpcs()["Vpcs"] if not v.get("IsDefault")],
        "launch templates": [t["LaunchTemplateName"] for t in ec2.describe_launch_templates()["LaunchTemplates"]],
        "volumes": [v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]],
        "addresses": [a["PublicIp"] for a in ec2.describe_addresses()["Addresses"]],
        "golden images": [i["Name"] for i in ec2.describe_images(Owners=["self"])["Images"]
                          if i["Name"].startswith(stack_phase.CLUSTER)],
        "secrets": [x["Name"] for x in s.client("secretsmanager").list_secrets()["SecretList"]],
        "queues": s.client("sqs").list_queues().get("QueueUrls", []),
        "buckets": [b["Name"] for b in s.client("s3").list_buckets()["Buckets"]],
        "file systems": [f["FileSystemId"] for f in s.client("efs").describe_file_systems()["FileSystems"]],
        "roles": [r["RoleName"] for r in s.client("iam").list_roles()["Roles"]
                  if r["RoleName"].startswith(stack_phase.CLUSTER)],
        "rules": [r["Name"] for r in s.client("events").list_rules()["Rules"]],
        "containers": subprocess.run(["podman", "ps", "-aq", "--filter", f"label={LABEL}={aws.machines.ident}"],
                                     capture_output=True, text=True).stdout.split(),
    }


def _reads_as(aws: StandIn, role_name: str, secrets: dict[str, str]) -> dict[str, str]:
    """Each secret read with the role's credentials as IMDS hands them out: its value's
    length, or the error's code."""
    import boto3

    role = aws.session.client("iam").get_role(RoleName=role_name)["Role"]
    c = aws.imds.role_credentials("probe", role)
    client = boto3.client("secretsmanager", region_name=aws.region, aws_access_key_id=c["AccessKeyId"],
                          aws_secret_access_key=c["SecretAccessKey"], aws_session_token=c["Token"])
    found = {}
    for name, arn in secrets.items():
        try:
            found[name] = str(len(client.get_secret_value(SecretId=arn)["SecretString"]))
        except client.exceptions.ClientError as e:  # moto's IAM refusal is XML: botocore keeps the HTTP status
            found[name] = "AccessDenied" if "AccessDenied" in str(e) else e.response["Error"]["Code"]
    return found


def _measured_memory(aws: StandIn) -> dict[str, tuple[str, int]]:
    """Each running pool machine: its instance type and the memory its slurmd measures
    (`slurmd -C`'s RealMemory, what it registers with)."""
    found = {}
    for r in aws.session.client("ec2").describe_instances(Filters=[
            {"Name": "tag:slurmforge:pool", "Values": ["cpu"]},
            {"Name": "instance-state-name", "Values": ["running"]}])["Reservations"]:
        for i in r["Instances"]:
            machine = aws.machines.machines.get(i["InstanceId"])
            if machine is None:
                continue
            said = subprocess.run(["podman", "exec", machine.container, "slurmd", "-C"], capture_output=True,
                                  text=True).stdout
            real = re.search(r"RealMemory=(\d+)", said)
            found[i["InstanceId"]] = (i["InstanceType"], int(real.group(1)) if real else -1)
    return found


@pytest.fixture(scope="module")
def rehearsed() -> Iterator[Rehearsed]:
    reuse = os.environ.get("SLURMFORGE_REHEARSAL_REBAKE") != "1"
    with tempfile.TemporaryDirectory(prefix="slurmforge-rehearsal-", dir="/var/tmp") as tmp, stand_in() as aws:
        phase = stack_phase.run(aws, Path(tmp), reuse=reuse)
        rolled = stack_phase.roll_out(phase)
        jobs = stack_phase.first_jobs(phase, "alice")
        validated = stack_phase.validate(phase)
        login = next(h for h in phase.hosts if h.role == "login")
        found = {
            "authorized": subprocess.run(["podman", "exec", login.container, "cat", "/home/admin/.ssh/authorized_keys"],
                                         capture_output=True, text=True).stdout,
            "public key": (Path(tmp) / "home" / ".ssh" / f"{stack_phase.CLUSTER}-admin.pem.pub").read_text(),
            "munge key file": (secrets_dir(stack_phase.CLUSTER) / "munge.key").read_bytes(),
            "munge secret": aws.session.client("secretsmanager").get_secret_value(
                SecretId=phase.run.outputs["secret_arns"]["munge_key"])["SecretString"],
            "outputs file": json.loads(phase.outputs_file.read_text()),
            "held": _held(aws),
            "rollout": rolled,
            "jobs": jobs,
            "validate": validated,
            "pool instances": [i for r in aws.session.client("ec2").describe_instances(Filters=[
                {"Name": "tag:slurmforge:pool", "Values": ["cpu"]}])["Reservations"] for i in r["Instances"]],
            "fleets": aws.session.client("ec2").describe_fleets()["Fleets"],
            "measured memory": _measured_memory(aws),
            "imds": list(aws.imds.answered),
        }
        found["compute reads"] = _reads_as(aws, f"{stack_phase.CLUSTER}-compute", phase.run.outputs["secret_arns"])
        found["spot"] = stack_phase.spot_interruption(phase, aws, "alice")
        found["down"] = stack_phase.down(phase)
        found["after down"] = _held(aws)
        problems = stack_phase.destroy(phase)
        aws.machines.wait("the machines gone", lambda: not aws.machines.machines, 120)
        yield Rehearsed(aws, phase, found, problems, _held(aws))


def test_every_resource_of_the_program_is_made_in_the_stand_in(rehearsed: Rehearsed) -> None:
    phase = rehearsed.phase
    custom = [r for r in phase.run.resources if r.custom]
    assert len(phase.engine.seconds) == len(custom) > 50
    held = rehearsed.before_destroy["held"]
    assert len(phase.hosts) == 2  # controller, login (no Ceph: docs/rehearsal.md)
    assert len(held["instances"]) == 2 + 2  # and the pool's two nodes, launched for the first job
    assert held["vpcs"] and held["volumes"] and held["file systems"] and held["queues"] and held["rules"]
    assert sorted(held["launch templates"]) == sorted(f"{stack_phase.CLUSTER}-{pool}-template"
                                                      for pool in ("cpu", stack_phase.SPOT_POOL))
    # the stack outputs carry the stand-in's ids, as a real stack's carry AWS's
    outputs = phase.run.outputs
    assert outputs["efs"]["dns_name"].startswith(held["file systems"][0])
    assert outputs["spot_queue_url"] in held["queues"]
    assert any(r.typ == DYNAMIC for r in custom)  # the golden image, made by the program's own provider


def test_the_secrets_are_generated_not_fixed_and_reach_the_admin(rehearsed: Rehearsed) -> None:
    found = rehearsed.before_destroy
    key = base64.b64decode(found["munge secret"])
    assert len(key) == 1024 and len(set(key)) > 200  # pulumi_random's bytes, made here
    assert found["munge key file"] == key  # `slurmforge inventory` copied it from the stand-in's Secrets Manager
    assert found["outputs file"]["munge_key"] == "[secret]"  # `pulumi stack output --json` hides secrets


def test_every_head_node_boots_its_own_user_data_from_the_golden_image(rehearsed: Rehearsed) -> None:
    for host in rehearsed.phase.hosts:
        assert "extended_status: done" in host.cloud_init, (host.name, host.cloud_init)
        # its user data (the stack's cloud-config) named it; the inventory's way in, with sudo
        assert host.reached == f"{host.name} root", (host.name, host.reached)


def test_the_admin_reaches_the_login_node_with_the_key_pair_from_imds(rehearsed: Rehearsed) -> None:
    found = rehearsed.before_destroy
    assert found["public key"].split()[1] in found["authorized"]
    login = next(h for h in rehearsed.phase.hosts if h.role == "login")
    assert login.public_ip and login.public_ip.startswith("198.51.100.")


def test_destroy_leaves_nothing_of_the_stack(rehearsed: Rehearsed) -> None:
    assert rehearsed.destroy_problems == []
    assert {k: v for k, v in rehearsed.left.items() if v} == {}
    assert not secrets_dir(stack_phase.CLUSTER).exists()
    assert rehearsed.aws.machines.errors == []


def test_the_rollout_runs_as_docs_aws_md_says(rehearsed: Rehearsed) -> None:
    rolled = rehearsed.before_destroy["rollout"]
    assert "rollout changed" in rolled and "accounting: add user alice" in rolled


def test_a_first_job_launches_the_pool_through_ec2_fleet_and_its_ranks_find_each_other(rehearsed: Rehearsed) -> None:
    """Two ranks on the powered-down pool: the service's CreateFleet from the launch
    template, each instance a machine that joined with its user data (the munge key from
    Secrets Manager with the compute role's credentials from IMDS), each rank resolving
    every node of the job by name."""
    found = rehearsed.before_destroy
    nodes = [f"{stack_phase.CLUSTER}-cpu-01", f"{stack_phase.CLUSTER}-cpu-02"]
    for when in ("cold", "warm"):
        lines = sorted(found["jobs"][when].split("\n")[:2])
        assert lines == [f"0 {nodes[0]} {' '.join(nodes)}", f"1 {nodes[1]} {' '.join(nodes)}"], found["jobs"][when]
    pool = found["pool instances"]
    assert len(pool) == 2 and {i["State"]["Name"] for i in pool} == {"running"}
    assert found["fleets"] and all(f["Type"] == "instant" for f in found["fleets"])
    by_pool = {i["PrivateIpAddress"] for i in pool}
    ids = {i["InstanceId"] for i in pool}
    credentials = {who for who, method, path, status in found["imds"]
                   if path.endswith(f"security-credentials/{stack_phase.CLUSTER}-compute") and status == 200}
    assert credentials and credentials <= ids | by_pool


def test_a_pool_machine_measures_the_memory_its_type_has_not_the_boxs(rehearsed: Rehearsed) -> None:
    """slurmd on a pool machine registers its instance type's memory less the kernel's share
    (the stand-in's shim), as on EC2 - not this box's 24 GiB, which would let a RealMemory
    no instance of the type has pass here and drain the node there."""
    ec2 = rehearsed.aws.session.client("ec2")
    measured = rehearsed.before_destroy["measured memory"]
    assert measured, "no running pool machine to measure"
    for instance, (itype, real) in measured.items():
        want = memtotal_kib(type_memory_mib(ec2, itype)) // 1024
        assert real == want, f"{instance} ({itype}): slurmd measures {real} MiB, the type has {want}"


def test_down_releases_every_pool_machine_and_no_head_node(rehearsed: Rehearsed) -> None:
    found = rehearsed.before_destroy
    assert sorted(found["after down"]["instances"]) == sorted(h.instance_id for h in rehearsed.phase.hosts)


def test_the_live_cluster_checks_pass_on_the_rehearsed_aws_cluster(rehearsed: Rehearsed) -> None:
    """`slurmforge validate --inventory` through the login node, the pool's nodes up."""
    assert "passed every check" in rehearsed.before_destroy["validate"]


def test_an_instance_role_reads_its_own_secrets_only(rehearsed: Rehearsed) -> None:
    """The stand-in checks an instance role's Secrets Manager and SQS calls against its
    policies while the whole rehearsal runs (the pool nodes' joins and the scheduler
    service's queue read above went through it): the compute role reads the munge key,
    never the database password."""
    reads = rehearsed.before_destroy["compute reads"]
    assert reads["munge_key"].isdigit() and reads["db_password"] == "AccessDenied", reads


def test_a_spot_notice_moves_the_job_to_the_fallback_link(rehearsed: Rehearsed) -> None:
    """EC2's interruption warning as an EventBridge event through the stack's rule and
    queue: the service drains the node and signals the job - a plain loop that does not
    trap USR1, so the signal ends it - requeues it (once), cools the spot link, and the job
    runs again on the node, now an on-demand machine of the fallback link."""
    spot = rehearsed.before_destroy["spot"]
    assert "spot interruption notice" in spot["reason"]
    assert spot["states"].count("REQUEUED") == 1 and spot["states"][-1] == "RUNNING", spot["states"]
    assert spot["first"].get("InstanceLifecycle") == "spot"
    second = spot["second"]
    assert second.get("InstanceLifecycle") != "spot" and {"Key": "slurmforge:link", "Value": "cpu"} in second["Tags"]
