"""The scheduler service's provider settings, end to end, on one machine: the Pulumi
program under mocks whose VPC, subnets, launch templates, roles and secrets are real in moto -> `pulumi
stack output --json` -> `slurmforge inventory` -> the scheduler_service role's settings
tasks (real ansible-playbook, connection local, into a temporary directory) -> the
daemon's own loader -> the AWS provider -> a launch on moto: instances of the pool's
launch template in the pool's subnets.

Each hop is the code that runs for a real cluster; only EC2 is moto and the node is a
directory here."""

from __future__ import annotations

import grp
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws
from typer.testing import CliRunner

from slurmforge import state_dirs
from slurmforge.aws.provider import AwsProvider
from slurmforge.cli import app
from slurmforge.hosts import TAG_NODE, controller_name, controller_names
from slurmforge.provider import LaunchRequest
from slurmforge.rollout import run_playbook
from slurmforge.service.main import load_provider
from slurmforge.spec import Cluster, load_spec
from tests.pulumi.conftest import GOLDEN_AMI, POOLS_AWS, MotoMocks, StackRun, run_program, stack_output_json

pytestmark = [pytest.mark.pulumi, pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

REGION = "us-east-1"  # examples/pools-aws.yaml's


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": REGION, "MOTO_IAM_LOAD_MANAGED_POLICIES": "true"}.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def settings_rendered_by_the_role(inventory_dir: Path, host: str, etc: Path, log: Path) -> None:
    """The scheduler_service role's settings tasks, as the rollout runs them on `host`, with
    the node's /etc/slurmforge a temporary directory."""
    playbook = log.with_name("settings.yml")
    playbook.write_text(yaml.safe_dump([{
        "name": "The scheduler service's settings", "hosts": "slurm_controller", "gather_facts": False,
        "tasks": [{"name": "Settings", "ansible.builtin.include_role": {
            "name": "scheduler_service", "tasks_from": "settings"}}]}], sort_keys=False))
    run_playbook(str(playbook), str(inventory_dir), log, limit=host, extravars={
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
        "scheduler_service_etc": str(etc), "scheduler_service_user": grp.getgrgid(os.getgid()).gr_name,
        "scheduler_service_paused": True})  # the restart handler stays away from this machine's systemd


def stack_to_service(ec2: Any, spec: Cluster, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch) -> tuple[StackRun, Path, AwsProvider]:
    """The stack under mocks -> its outputs -> `slurmforge inventory` -> the role's settings
    -> the provider the daemon loads: the run, the inventory directory, the provider."""
    run = run_program(spec, MotoMocks(REGION), POOLS_AWS.name)
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(stack_output_json(run)))

    # `slurmforge inventory`, as an admin runs it (the Ceph keys it makes go to a temporary root)
    monkeypatch.setattr(state_dirs, "SECRETS_ROOT", tmp_path / "secrets")
    inventory_dir = tmp_path / "inventory"
    res = CliRunner().invoke(app, ["inventory", str(POOLS_AWS), "--from-stack-outputs", str(outputs),
                                   "--out", str(inventory_dir), "--no-fetch-secrets"])
    assert res.exit_code == 0, res.output

    etc = tmp_path / "etc"
    etc.mkdir()
    settings_rendered_by_the_role(inventory_dir, controller_name(spec), etc, tmp_path / "run.log")

    provider = load_provider(load_spec(etc / "cluster.yaml"), etc / "provider.json")  # what the daemon does
    assert isinstance(provider, AwsProvider)
    return run, inventory_dir, provider


@pytest.mark.skipif(os.geteuid() != 0, reason="the role's settings files belong to root, as on a node")
def test_stack_outputs_reach_a_launch_in_the_pools_subnets(ec2: Any, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(POOLS_AWS)
    run, _, provider = stack_to_service(ec2, spec, tmp_path, monkeypatch)
    fleets: list[dict[str, Any]] = []
    provider.ec2.meta.events.register("provide-client-params.ec2.CreateFleet",
                                      lambda params, **_: fleets.append(params))
    nodes = ("mlpools-cpu-01", "mlpools-cpu-02")
    result = provider.start(LaunchRequest(pool="cpu", nodes=nodes, token="sf-round-trip", jobs=(1,)))
    provider.flush_tags()

    assert sorted(result.launched) == list(nodes) and result.failed == {}
    template = run.outputs["launch_templates"]["cpu"]
    assert [c["LaunchTemplateSpecification"]["LaunchTemplateId"] for f in fleets
            for c in f["LaunchTemplateConfigs"]] == [template]
    pool = spec.pool("cpu")
    subnets = {run.outputs["private_subnets"][zone]: zone for zone in pool.zones}
    private_cidrs = {s.zone: s.cidr for s in spec.network.private_subnets}
    found = ec2.describe_instances(InstanceIds=[i.id for i in result.launched.values()])["Reservations"]
    instances = [i for r in found for i in r["Instances"]]
    assert len(instances) == len(nodes)
    for instance in instances:
        assert instance["ImageId"] == GOLDEN_AMI  # the golden image, from the pool's template
        assert instance["InstanceType"] in pool.instance_types
        zone = subnets[instance["SubnetId"]]
        assert instance["Placement"]["AvailabilityZone"] == zone
        subnet = ec2.describe_subnets(SubnetIds=[instance["SubnetId"]])["Subnets"][0]
        assert subnet["CidrBlock"] == private_cidrs[zone]  # the stack's private subnet of that zone
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        assert tags[TAG_NODE] in nodes


def ec2_states(ec2: Any) -> dict[str, str]:
    return {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"]}


def ec2_tags(ec2: Any, instance_id: str) -> dict[str, str]:
    (reservation,) = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return {t["Key"]: t["Value"] for t in reservation["Instances"][0].get("Tags", [])}


def condition_holds(condition: dict[str, dict[str, Any]], tags: dict[str, str]) -> bool:
    """An IAM condition block on `ec2:ResourceTag/...` keys, evaluated as IAM does for an
    instance carrying `tags` (the operators the scheduler policy uses; moto ignores conditions)."""
    def tag(key: str) -> str | None:
        assert key.startswith("ec2:ResourceTag/"), key
        return tags.get(key.removeprefix("ec2:ResourceTag/"))

    for operator, entries in condition.items():
        for key, wanted in entries.items():
            if operator == "StringEquals" and tag(key) not in ([wanted] if isinstance(wanted, str) else wanted):
                return False
            if operator == "Null" and (tag(key) is None) != (wanted == "true"):
                return False
            assert operator in ("StringEquals", "Null"), operator
    return True


@pytest.mark.skipif(os.geteuid() != 0, reason="the role's settings files belong to root, as on a node")
def test_down_terminates_the_pool_machines_and_nothing_else(ec2: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`pulumi destroy` knows nothing of the pool machines the service launched (CreateFleet):
    `slurmforge down --inventory` stops the service on every controller, then terminates
    them through the provider the service runs with. The stack's own instances (controller,
    login, Ceph hosts, made here in moto with the tags the program gives them, and with them
    the accounting database on the controller) and another cluster's pool machine stay; the
    service's IAM policy would refuse it a head node or a Ceph host too."""
    from slurmforge.aws import teardown
    from slurmforge.hosts import Host
    from tests.pulumi.test_secure_defaults import scheduler_statements

    spec = load_spec(POOLS_AWS)
    run, inventory_dir, provider = stack_to_service(ec2, spec, tmp_path, monkeypatch)
    stacks = ec2_states(ec2)  # the program's instances, as the stack made them
    roles = sorted(ec2_tags(ec2, i)["slurmforge:role"] for i in stacks)
    assert roles == ["ceph", "ceph", "ceph", "controller", "login"]
    assert len(stacks) == len(run.of_type("aws:ec2/instance:Instance"))
    launched = provider.start(LaunchRequest(pool="cpu", nodes=("mlpools-cpu-01", "mlpools-cpu-02"),
                                            token="sf-down", jobs=(1,))).launched
    provider.flush_tags()
    ec2.stop_instances(InstanceIds=[i.id for i in launched.values()][:1])  # still holds its volume and ENI
    another = AwsProvider(spec.model_copy(update={"name": "another"}), provider.ec2, provider.templates,
                          provider.subnets)
    (theirs,) = another.start(LaunchRequest(pool="cpu", nodes=("another-cpu-01",), token="sf-theirs")).launched.values()
    terminated: list[str] = []
    terminate = AwsProvider.terminate  # `down` builds its own provider from the inventory: record its calls

    def recorded(self: AwsProvider, instances: Any) -> None:
        terminated.extend(i.id for i in instances)
        terminate(self, instances)

    monkeypatch.setattr(AwsProvider, "terminate", recorded)

    # a controller that cannot be reached: nothing is terminated, one line says why
    monkeypatch.setattr(teardown, "stop_service_over_connection", lambda host: "cannot reach it over ssh")
    res = CliRunner().invoke(app, ["down", "--inventory", str(inventory_dir), "--yes"])
    assert res.exit_code != 0 and "could not stop the scheduler service" in res.output, res.output
    assert "Traceback" not in res.output
    assert all(ec2_states(ec2)[i.id] in ("running", "stopped") for i in launched.values())

    asked: list[str] = []

    def stop(host: Host) -> None:
        asked.append(host.name)
        return None

    monkeypatch.setattr(teardown, "stop_service_over_connection", stop)
    res = CliRunner().invoke(app, ["down", "--inventory", str(inventory_dir), "--yes"])
    assert res.exit_code == 0, res.output
    assert asked == controller_names(spec)
    assert "terminated 2 pool machine(s) (cpu: 2)" in res.output, res.output
    states = ec2_states(ec2)
    assert all(states[i.id] == "terminated" for i in launched.values()), states
    assert {i: states[i] for i in stacks} == dict.fromkeys(stacks, "running")  # head nodes, Ceph hosts
    assert states[theirs.id] == "running"  # another cluster's pool machine
    assert set(terminated) == {i.id for i in launched.values()}

    # the policy the stack gives the service agrees: its pool machines, none of the stack's
    manage = scheduler_statements(run)["ManageClusterInstances"]
    assert "ec2:TerminateInstances" in manage["Action"]
    assert all(condition_holds(manage["Condition"], ec2_tags(ec2, i)) for i in terminated)
    assert not any(condition_holds(manage["Condition"], ec2_tags(ec2, i)) for i in [*stacks, theirs.id])


# What an API call needs granted beyond its own action: an instant fleet runs instances and
# tags them on creation; a batch delete is authorized as DeleteMessage.
IMPLIES = {"ec2:CreateFleet": {"ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateTags"},
           "sqs:DeleteMessageBatch": {"sqs:DeleteMessage"}}
BEYOND_THE_API = {"iam:PassRole", "iam:CreateServiceLinkedRole"}
"""Granted for what EC2 does on the service's behalf (the node role handed to the fleet, the
spot service-linked role on a first spot launch): no API call of the service names them."""


@pytest.mark.skipif(os.geteuid() != 0, reason="the role's settings files belong to root, as on a node")
def test_the_services_policy_grants_what_it_calls_and_nothing_more(ec2: Any, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Every AWS call the service's provider makes in a whole cycle (launch, tag, list, spot
    notices read and acknowledged, terminate) is granted by the scheduler policy the stack
    gives the controller, and the policy allows nothing the provider never calls."""
    from tests.pulumi.test_secure_defaults import scheduler_statements

    spec = load_spec(POOLS_AWS)
    run, _, provider = stack_to_service(ec2, spec, tmp_path, monkeypatch)
    called: set[str] = set()
    for service, client in (("ec2", provider.ec2), ("sqs", provider.sqs)):
        assert client is not None, service
        client.meta.events.register(f"before-call.{service}",
                                    lambda model, _s=service, **_: called.add(f"{_s}:{model.name}"))
    launched = provider.start(LaunchRequest(pool="cpu", nodes=("mlpools-cpu-01",), token="sf-iam", jobs=(1,)))
    provider.flush_tags()
    instance = launched.launched["mlpools-cpu-01"]
    boto3.client("sqs", region_name=REGION).send_message(QueueUrl=provider.queue_url, MessageBody=json.dumps({
        "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "detail": {"instance-id": instance.id, "instance-action": "terminate"}}))
    notices = provider.interruptions()
    assert [n.instance for n in notices] == [instance.id]
    provider.acknowledge(notices)
    provider.terminate(provider.list_instances())

    needed = set().union(*(IMPLIES.get(call, {call}) for call in called))
    granted = {action for s in scheduler_statements(run).values() if s["Effect"] == "Allow"
               for action in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert needed - granted == set(), f"called but not granted: {sorted(needed - granted)}"
    assert granted - needed - BEYOND_THE_API == set(), f"granted but never called: {sorted(granted - needed)}"
