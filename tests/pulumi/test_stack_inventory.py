"""Stack outputs -> `pulumi stack output --json` -> the generated inventory -> back:
the same hosts and groups, Ansible reaching private hosts through the login node, and
no secret value anywhere in the inventory directory. Plus the program's entry point:
the spec path from stack config, one line per spec problem."""

from __future__ import annotations

import base64
import json
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from slurmforge.aws import inventory as aws_inventory
from slurmforge.aws.inventory import fetch_stack_secrets, inventory_from_stack_outputs, read_stack_outputs
from slurmforge.connection import close_control
from slurmforge.contract import AwsProviderSettings, read_settings
from slurmforge.errors import ProvisionError
from slurmforge.hosts import HostRole, controller_name, controller_names
from slurmforge.inventory import HOSTS_FILE, VARS_FILE, read_inventory
from slurmforge.node.program import render_join
from slurmforge.spec import load_spec
from slurmforge.validation.conftest import InventorySsh, connect
from tests.pulumi.conftest import (
    DB_PASSWORD,
    LAB_AWS,
    MUNGE_B64,
    POOLS_AWS,
    ROOT,
    RecordingMocks,
    StackRun,
    launch_template_user_data,
    pool_join_settings,
    run_main,
    stack_output_json,
    user_data_program,
)

pytestmark = [pytest.mark.pulumi, pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]


def spec_path(run: StackRun) -> Path:
    return POOLS_AWS if run.spec.name == "mlpools" else LAB_AWS


@pytest.fixture
def written(any_stack: StackRun, tmp_path: Path) -> tuple[StackRun, Path]:
    out = tmp_path / "inventories" / any_stack.spec.name
    assert inventory_from_stack_outputs(stack_output_json(any_stack), spec_path(any_stack), out,
                                        tmp_path / "secrets") == out
    return any_stack, out


def test_round_trip_gives_the_same_hosts(written: tuple[StackRun, Path]) -> None:
    run, out = written
    spec, hosts = read_inventory(out)
    assert spec == run.spec
    assert sorted(hosts, key=lambda h: h.name) == sorted(
        aws_inventory.hosts_from_outputs(stack_output_json(run)), key=lambda h: h.name)
    assert [(h.name, h.role.value) for h in hosts] == [(h["name"], h["role"]) for h in run.outputs["hosts"]] + [
        (h["name"], "ceph") for h in run.outputs.get("ceph_hosts") or []]


def test_round_trip_gives_the_same_groups(written: tuple[StackRun, Path]) -> None:
    run, out = written
    groups = yaml.safe_load((out / HOSTS_FILE).read_text())["all"]["children"]["slurm_cluster"]["children"]
    by_role = {role: sorted(h["name"] for h in run.outputs["hosts"] if h["role"] == role.value) for role in HostRole}
    assert sorted(groups["slurm_controller"]["hosts"]) == by_role[HostRole.CONTROLLER]
    assert sorted(groups["slurm_login"]["hosts"]) == by_role[HostRole.LOGIN]
    # both controllers run slurmctld (primary first in slurm.conf); slurmdbd only the primary,
    # whether MariaDB is local or RDS
    assert sorted(groups["slurm_dbd"]["hosts"]) == [controller_name(run.spec)]
    assert sorted(groups["slurm_controller"]["hosts"]) == sorted(controller_names(run.spec))


def test_private_hosts_are_reached_through_the_login_node(written: tuple[StackRun, Path]) -> None:
    run, out = written
    _, hosts = read_inventory(out)
    login = next(h for h in run.outputs["hosts"] if h["role"] == "login")
    for host in hosts:
        assert host.address.startswith("10.99.0.")  # the private address, what the cluster uses
        assert host.connection["ansible_user"] == "admin"
        if host.role is HostRole.LOGIN:
            assert host.connection["ansible_host"].startswith("198.51.100.")  # Ansible's way in
            assert "ansible_ssh_common_args" not in host.connection
        else:
            assert "ansible_host" not in host.connection
            assert host.connection["ansible_ssh_common_args"] == f"-o ProxyJump=admin@{login['public_ip']}"


def test_validation_reaches_every_host_the_way_ansible_does(written: tuple[StackRun, Path]) -> None:
    """`slurmforge validate --inventory`'s checks run on each host through the inventory's
    connection: the login node on its public address, every other host through it
    (ProxyJump), as the stack's ssh user with sudo (the checks read root-only state), one
    shared connection per host."""
    run, out = written
    _, hosts = read_inventory(out)
    public = {h["name"]: h.get("public_ip") for h in run.outputs["hosts"]}
    jump = next(h["public_ip"] for h in run.outputs["hosts"] if h["role"] == "login")  # the first login node
    control = Path("/run/sf-ssh")
    shared = ["-o", "ControlMaster=auto", "-o", "ControlPersist=60s", "-o", f"ControlPath={control}/%C"]
    for host in hosts:
        backend = connect(host, control).backend
        assert isinstance(backend, InventorySsh), host.name
        argv = backend.command("cat %s", "/etc/munge/munge.key")
        remote = "sudo -n /bin/sh -c 'cat /etc/munge/munge.key'"
        if host.role is HostRole.LOGIN:
            assert argv == ["ssh", "-o", "BatchMode=yes", *shared, f"admin@{public[host.name]}", "--", remote]
        else:
            assert argv == ["ssh", "-o", "BatchMode=yes", "-o", f"ProxyJump=admin@{jump}", *shared,
                            f"admin@{host.address}", "--", remote], host.name
        assert close_control(backend.argv)[-3:] == ["-O", "exit", backend.argv[-1]]


def test_aws_vars_and_ceph_hosts_are_written(written: tuple[StackRun, Path]) -> None:
    run, out = written
    aws_vars = yaml.safe_load((out / aws_inventory.AWS_VARS_FILE).read_text())
    assert aws_vars["slurmforge_aws_launch_templates"] == run.outputs["launch_templates"]
    assert not any("pool_parameters" in key for key in aws_vars)
    assert aws_vars["slurmforge_aws_spot_queue_url"] == run.outputs["spot_queue_url"]
    assert aws_vars["slurmforge_aws_secret_arns"] == run.outputs["secret_arns"]
    assert aws_vars["slurmforge_aws_efs_dns"] == run.outputs["efs"]["dns_name"]
    # what `slurmforge upgrade` reads back: the AMI `pulumi up` baked (the AWS rehearsal's upgrade read none)
    assert aws_inventory.inventory_ami(out) == run.outputs["ami_id"] and aws_inventory.inventory_ami(out.parent) is None
    settings = yaml.safe_load((out / VARS_FILE).read_text())["slurmforge_service_provider_settings"]
    assert read_settings(AwsProviderSettings, settings) == AwsProviderSettings(
        region=run.spec.target.region, launch_templates=run.outputs["launch_templates"],
        subnets={s.zone: f"{run.spec.name}-private-{i + 1}-id" for i, s in enumerate(run.spec.network.private_subnets)},
        spot_queue_url=run.outputs["spot_queue_url"])
    ceph = yaml.safe_load((out / aws_inventory.CEPH_FILE).read_text())["all"]["children"]["ceph"]["hosts"]
    assert sorted(ceph) == [h["name"] for h in run.outputs["ceph_hosts"]]
    assert all(v["ansible_ssh_common_args"].startswith("-o ProxyJump=admin@") for v in ceph.values())


def test_no_secret_value_in_the_inventory_even_with_show_secrets(any_stack: StackRun, tmp_path: Path) -> None:
    out, secrets = tmp_path / "inventory", tmp_path / "secrets"
    inventory_from_stack_outputs(stack_output_json(any_stack, show_secrets=True), spec_path(any_stack), out, secrets)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) >= 6
    ceph_keys = [p.read_text() for p in secrets.glob("ceph.*.key")]
    assert len(ceph_keys) == (3 if any_stack.spec.storage.ceph else 0)
    for path in files:
        text = path.read_text()
        assert MUNGE_B64 not in text and DB_PASSWORD not in text, path
        assert not any(key in text for key in ceph_keys), path


def test_writing_twice_changes_nothing(written: tuple[StackRun, Path]) -> None:
    run, out = written
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    inventory_from_stack_outputs(stack_output_json(run), spec_path(run), out, out.parents[1] / "secrets")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before


def test_outputs_of_another_cluster_are_refused(pools_aws: StackRun, tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="cluster 'mlpools', the spec is 'lab'"):
        inventory_from_stack_outputs(stack_output_json(pools_aws), LAB_AWS, tmp_path)


def test_outputs_that_are_not_a_slurmforge_stack_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match=r"lack .*hosts"):
        inventory_from_stack_outputs({"cluster": "mlpools"}, POOLS_AWS, tmp_path)


def test_the_spec_is_the_one_the_outputs_name(tmp_path: Path) -> None:
    assert aws_inventory.spec_of_outputs({"spec": "examples/pools-aws.yaml"}, ROOT) == POOLS_AWS
    assert aws_inventory.spec_of_outputs({"spec": str(LAB_AWS)}, tmp_path) == LAB_AWS
    with pytest.raises(ProvisionError, match=re.escape("fix: `pulumi up`, or pass the spec: slurmforge inventory")):
        aws_inventory.spec_of_outputs({"cluster": "mlpools"}, ROOT)
    # relative to the Pulumi project: elsewhere, one line says where to run it
    with pytest.raises(ProvisionError, match=re.escape(f"examples/pools-aws.yaml, which is not in {tmp_path}; "
                                                       "fix: run this in the Pulumi project's directory")):
        aws_inventory.spec_of_outputs({"spec": "examples/pools-aws.yaml"}, tmp_path)


def test_read_stack_outputs(tmp_path: Path, pools_aws: StackRun) -> None:
    path = tmp_path / "outputs.json"
    with pytest.raises(ProvisionError, match="no such file"):
        read_stack_outputs(path)
    path.write_text("{not json")
    with pytest.raises(ProvisionError, match="not the JSON"):
        read_stack_outputs(path)
    path.write_text(json.dumps(stack_output_json(pools_aws)))
    assert read_stack_outputs(path)["cluster"] == "mlpools"


# --------------------------------------------------------------------------- the entry point


def test_main_reads_the_spec_path_from_stack_config() -> None:
    run = run_main({"slurmforge:spec": "examples/pools-aws.yaml", "aws:region": "us-east-1"}, RecordingMocks())
    assert set(run.outputs) >= {"hosts", "launch_templates", "spot_queue_url", "secret_arns", "efs"}
    assert run.outputs["cluster"] == "mlpools"
    # ... and names it for `slurmforge inventory`, as the config does (relative to the project root)
    assert run.outputs["spec"] == "examples/pools-aws.yaml" and not run.secret["spec"]
    assert aws_inventory.spec_of_outputs(run.outputs, ROOT) == POOLS_AWS
    # the pools' join program is rendered from the spec file the config names
    spec = load_spec(POOLS_AWS)
    assert run.spec == spec
    assert user_data_program(launch_template_user_data(run, "cpu")) == render_join(
        spec, pool_join_settings(run), "pools-aws.yaml")


def test_main_reports_every_spec_problem_on_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(POOLS_AWS.read_text().replace("max_nodes: 4", "max_nodes: 0").replace(
        "region: us-east-1", "region: us-east"))
    with pytest.raises(pulumi.RunError) as info:
        run_main({"slurmforge:spec": str(bad)}, RecordingMocks())
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid cluster spec:"
    assert [line.split(": ")[1] for line in lines[1:]] == [
        "target.region", "pools[0].max_nodes", "pools[1].max_nodes", "pools[2].max_nodes"]
    assert all(line.startswith(f"{bad}: ") for line in lines[1:])


def test_main_refuses_a_region_other_than_the_specs() -> None:
    with pytest.raises(pulumi.RunError, match=re.escape("aws:region is eu-central-1 but pools-aws.yaml says")):
        run_main({"slurmforge:spec": "examples/pools-aws.yaml", "aws:region": "eu-central-1"}, RecordingMocks())


def test_main_refuses_a_target_that_is_not_aws() -> None:
    with pytest.raises(pulumi.RunError, match=re.escape("target.kind: the Pulumi program builds AWS clusters only")):
        run_main({"slurmforge:spec": "examples/local.yaml"}, RecordingMocks())


# --------------------------------------------------------------------------- secrets for the rollout


@pytest.fixture
def secretsmanager() -> Iterator[Any]:
    from moto import mock_aws

    with mock_aws():
        import boto3

        yield boto3.client("secretsmanager", region_name="us-east-1")


def test_stack_secrets_reach_the_rollout_machine_private(secretsmanager: Any, tmp_path: Path) -> None:
    key = bytes(range(256)) * 4
    munge = secretsmanager.create_secret(Name="munge", SecretString=base64.b64encode(key).decode())["ARN"]
    db = secretsmanager.create_secret(Name="db", SecretString=DB_PASSWORD)["ARN"]
    jwt_key = bytes(range(32))
    jwt = secretsmanager.create_secret(Name="jwt", SecretString=base64.b64encode(jwt_key).decode())["ARN"]
    outputs = {"cluster": "mlpools", "secret_arns": {"munge_key": munge, "db_password": db, "jwt_key": jwt}}
    directory = fetch_stack_secrets(outputs, secretsmanager, tmp_path / "secrets")
    assert (directory / "munge.key").read_bytes() == key
    assert (directory / "slurmdbd.password").read_text() == DB_PASSWORD
    assert (directory / "jwt_hs256.key").read_bytes() == jwt_key
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()} == {0o600}
    assert sorted(p.name for p in directory.iterdir()) == ["jwt_hs256.key", "munge.key", "slurmdbd.password"]


def test_missing_stack_secret_is_one_line(secretsmanager: Any, tmp_path: Path) -> None:
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:gone"
    with pytest.raises(ProvisionError, match=re.escape(f"cannot read {arn} from Secrets Manager")):
        fetch_stack_secrets({"cluster": "c", "secret_arns": {"munge_key": arn, "db_password": arn, "jwt_key": arn}},
                            secretsmanager, tmp_path)
