"""A pool node joining on AWS, end to end on one machine: the Pulumi program under mocks
whose secrets, roles, instance profiles and launch templates are made in a moto server ->
the stack outputs -> the scheduler service's AWS provider launches a node from the pool's
launch template (EC2 Fleet, in moto) -> the instance's user data, read from the AWS
rehearsal's IMDSv2 stand-in (tests.harness.rehearsal.imds; this machine's requests are the
instance's), is exactly `render_join` for those outputs -> the program's own AWS steps,
sourced and called one at a time in bash:

- `node_name` reads the `slurmforge:node` tag the service put on the instance, through
  IMDSv2 (the stand-in refuses a GET without a token), and waits for a tag not there yet;
  `node_address` is the instance's private address;
- `secret munge.key` gets the key the stack stored in Secrets Manager with python3-boto3,
  using the credentials IMDS hands out for the role of the launch template's instance
  profile, with moto enforcing IAM (resource-level for Secrets Manager, taught below);
  the same credentials are refused the database password: the pool nodes' role reads the
  munge key and nothing else.

What is not AWS's here: the node is this machine's bash and python3 (the venv's boto3
standing in for Debian's python3-boto3), and nothing runs as root.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from moto.core.authorization import enable_iam_authentication
from moto.secretsmanager.responses import SecretsManagerResponse

from slurmforge.aws.provider import AwsProvider
from slurmforge.contract import AwsProviderSettings
from slurmforge.hosts import TAG_NODE
from slurmforge.node.program import render_join
from slurmforge.provider import LaunchRequest
from slurmforge.spec import load_spec
from tests.harness.rehearsal.imds import Imds, service_session
from tests.harness.rehearsal.stand_in import secret_arn
from tests.pulumi.conftest import (
    POOLS_AWS,
    MotoMocks,
    StackRun,
    moto_server,
    pool_join_settings,
    run_program,
    user_data_program,
)

pytestmark = [pytest.mark.pulumi, pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

REGION = "us-east-1"  # examples/pools-aws.yaml's
POOL, NODE = "cpu", "mlpools-cpu-01"
TAGS = "/latest/meta-data/tags/instance/"
CREDENTIALS = "/latest/meta-data/iam/security-credentials/"
NODE_PYTHON = Path(sys.executable).parent
"""The node's python3: this venv's (its boto3 stands in for the image's python3-boto3)."""


def imds_get(imds: Imds, path: str) -> tuple[int, bytes]:
    """GET `path` from this machine as the instance's program does (IMDSv2: token first)."""
    put = urllib.request.Request(f"{imds.url}/latest/api/token", method="PUT",
                                 headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    with urllib.request.urlopen(put, timeout=5) as response:
        token = response.read().decode()
    get = urllib.request.Request(f"{imds.url}{path}", headers={"X-aws-ec2-metadata-token": token})
    with urllib.request.urlopen(get, timeout=5) as response:
        return int(response.status), bytes(response.read())


@dataclass
class AwsNode:
    """One pool node launched by the service from the stack's template, and its IMDS."""

    run: StackRun
    instance_id: str
    imds: Imds
    """The metadata service stand-in, which takes this machine's requests for the instance's."""
    program: Path
    env: dict[str, str]
    """The node's environment: no credentials but IMDS's, AWS's APIs in moto."""
    moto: str

    def step(self, script: str) -> subprocess.CompletedProcess[str]:
        """Source the join program (runs nothing) and run `script` in that bash."""
        return subprocess.run(["bash", "-c", f'source "$0"\n{script}', str(self.program)],
                              env=self.env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def aws_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AwsNode]:
    tmp = tmp_path_factory.mktemp("aws-node")
    with moto_server(REGION) as moto:  # every boto3 client of this process, and the node's
        imds = None
        try:
            spec = load_spec(POOLS_AWS)
            run = run_program(spec, MotoMocks(REGION), POOLS_AWS.name)
            outputs = run.outputs
            provider = AwsProvider.from_settings(spec, AwsProviderSettings(
                region=REGION, launch_templates=outputs["launch_templates"], subnets=outputs["private_subnets"],
                spot_queue_url=outputs["spot_queue_url"]))
            launched = provider.start(LaunchRequest(pool=POOL, nodes=(NODE,), token="sf-join", jobs=(1,)))
            provider.flush_tags()
            instance_id = launched.launched[NODE].id
            imds = Imds(service_session(boto3.Session(region_name=REGION)), addresses={"127.0.0.1": instance_id})
            program = tmp / "slurmforge-join"
            program.write_text(user_data_program(imds_get(imds, "/latest/user-data")[1]))  # what cloud-init runs
            home = tmp / "home"
            home.mkdir()
            env = {"PATH": f"{NODE_PYTHON}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
                   "SLURMFORGE_JOIN_SOURCE_ONLY": "1", "IMDS": imds.url,
                   # the SDK's own settings: IMDS here, AWS APIs in moto, no other credentials
                   "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url, "AWS_ENDPOINT_URL": moto,
                   "AWS_CONFIG_FILE": str(home / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(home / "none")}
            yield AwsNode(run, instance_id, imds, program, env, moto)
        finally:
            if imds:
                imds.close()


def test_the_instance_gets_the_join_program_for_the_stacks_outputs(aws_node: AwsNode) -> None:
    run = aws_node.run
    expected = render_join(run.spec, pool_join_settings(run), POOLS_AWS.name)
    assert user_data_program(imds_get(aws_node.imds, "/latest/user-data")[1]) == expected


def test_the_node_name_comes_from_the_services_tag_through_imdsv2(aws_node: AwsNode) -> None:
    before = len(aws_node.imds.answered)
    name, address = aws_node.step("node_name"), aws_node.step("node_address")
    assert name.returncode == 0 and address.returncode == 0, name.stderr + address.stderr
    assert name.stdout.strip() == NODE
    assert address.stdout.strip() == aws_node.imds.instance(aws_node.instance_id)["PrivateIpAddress"]
    asked = aws_node.imds.answered[before:]
    assert (aws_node.instance_id, "GET", TAGS + TAG_NODE, 200) in asked
    assert all(status != 401 for *_, status in asked), asked  # a token on every GET


def test_the_node_name_waits_for_a_tag_the_service_has_not_put_yet(aws_node: AwsNode) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.delete_tags(Resources=[aws_node.instance_id], Tags=[{"Key": TAG_NODE}])
    before = len(aws_node.imds.answered)
    try:
        with subprocess.Popen(["bash", "-c", 'source "$0"\nnode_name', str(aws_node.program)],
                              env=aws_node.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as node:
            deadline = time.monotonic() + 20
            while (aws_node.instance_id, "GET", TAGS + TAG_NODE, 404) not in aws_node.imds.answered[before:]:
                assert node.poll() is None, node.communicate()
                assert time.monotonic() < deadline, "the program never asked IMDS for its tag"
                time.sleep(0.05)
            assert node.poll() is None  # still waiting
            ec2.create_tags(Resources=[aws_node.instance_id], Tags=[{"Key": TAG_NODE, "Value": NODE}])
            out, err = node.communicate(timeout=30)
    finally:
        ec2.create_tags(Resources=[aws_node.instance_id], Tags=[{"Key": TAG_NODE, "Value": NODE}])
    assert node.returncode == 0, err
    assert out.strip() == NODE


def test_the_munge_key_is_the_one_the_stack_stored_read_with_the_pool_nodes_role_only(
        aws_node: AwsNode, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = aws_node.run
    versions = {v.name: v.inputs["secretString"] for v in run.of_type(
        "aws:secretsmanager/secretVersion:SecretVersion")}
    key = tmp_path / "munge.key"
    monkeypatch.setattr(SecretsManagerResponse, "_determine_resource", secret_arn, raising=False)
    role = imds_get(aws_node.imds, CREDENTIALS)[1].decode()
    credentials = json.loads(imds_get(aws_node.imds, CREDENTIALS + role)[1])
    node_role = boto3.client("secretsmanager", region_name=REGION, endpoint_url=aws_node.moto,
                             aws_access_key_id=credentials["AccessKeyId"],
                             aws_secret_access_key=credentials["SecretAccessKey"],
                             aws_session_token=credentials["Token"])
    with enable_iam_authentication():  # from here on moto checks every call against IAM
        done = aws_node.step(f'secret munge.key > "{key}"')
        with pytest.raises(node_role.exceptions.ClientError, match="AccessDenied"):
            node_role.get_secret_value(SecretId=run.outputs["secret_arns"]["db_password"])
    assert done.returncode == 0, done.stderr
    assert key.read_bytes() == base64.b64decode(versions["mlpools-munge-key"])
    # the program's credentials came from IMDS: the role of the pool's launch template
    assert (aws_node.instance_id, "GET", CREDENTIALS + role, 200) in aws_node.imds.answered
    assert role == f"{run.spec.name}-compute"
    assert not any(k.startswith("AWS_ACCESS") or k == "AWS_SESSION_TOKEN" for k in aws_node.env)
