"""A pool node joining on AWS, end to end on one machine: the Pulumi program under mocks
whose secrets, roles, instance profiles and launch templates are made in a moto server ->
the stack outputs -> the scheduler service's AWS provider launches a node from the pool's
launch template (EC2 Fleet, in moto) -> the instance's user data, read from a fake IMDSv2
for that instance, is exactly `render_join` for those outputs -> the program's own AWS
steps, sourced and called one at a time in bash:

- `node_name` reads the `slurmforge:node` tag the service put on the instance, through
  IMDSv2 (the fake IMDS refuses a GET without a token), and waits for a tag not there yet;
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
import secrets
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.core.authorization import enable_iam_authentication
from moto.secretsmanager.responses import SecretsManagerResponse

from slurmforge.contract import AwsProviderSettings
from slurmforge.hosts import TAG_NODE
from slurmforge.join import render_join
from slurmforge.providers.aws import AwsProvider
from slurmforge.providers.base import LaunchRequest
from slurmforge.spec import load_spec
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


class FakeImds:
    """EC2's instance metadata service for one instance in moto, IMDSv2 only (the launch
    templates say http_tokens required): PUT /latest/api/token hands out a token every GET
    must carry, else 401. It serves the instance's tags and user data live from moto, and
    the credentials of its role: the role of the instance profile in the instance's launch
    template, assumed in moto (EC2 does that for a real instance)."""

    def __init__(self, ec2: Any, instance_id: str, role: str, credentials: dict[str, Any]) -> None:
        self.ec2, self.instance_id, self.role, self.credentials = ec2, instance_id, role, credentials
        self.tokens: set[str] = set()
        self.answered: list[tuple[str, str, int]] = []
        """(method, path, status) of every request."""
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                imds.reply(self, *imds.put(self.path, self.headers))

            def do_GET(self) -> None:
                imds.reply(self, *imds.get(self.path, self.headers))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def reply(self, handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        self.answered.append((handler.command, handler.path, status))
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def put(self, path: str, headers: Message) -> tuple[int, bytes]:
        if path != "/latest/api/token" or "X-aws-ec2-metadata-token-ttl-seconds" not in headers:
            return 400, b""
        token = secrets.token_urlsafe(24)
        self.tokens.add(token)
        return 200, token.encode()

    def get(self, path: str, headers: Message) -> tuple[int, bytes]:
        """Header names in any case, as HTTP has them."""
        if headers.get("X-aws-ec2-metadata-token") not in self.tokens:
            return 401, b""
        if path == "/latest/meta-data/local-ipv4":
            return 200, str(self.instance()["PrivateIpAddress"]).encode()
        if path.startswith(TAGS):
            tags = self.instance()["Tags"]
            found = [t["Value"] for t in tags if t["Key"] == path[len(TAGS):]]
            return (200, found[0].encode()) if found else (404, b"")
        if path == "/latest/user-data":
            value = self.ec2.describe_instance_attribute(InstanceId=self.instance_id, Attribute="userData")
            return 200, base64.b64decode(value["UserData"]["Value"])
        if path == CREDENTIALS:
            return 200, self.role.encode()
        if path == CREDENTIALS + self.role:
            return 200, json.dumps(self.credentials).encode()
        return 404, b""

    def instance(self) -> dict[str, Any]:
        found = self.ec2.describe_instances(InstanceIds=[self.instance_id])["Reservations"][0]["Instances"][0]
        return dict(found)

    def user_data(self) -> bytes:
        """The user data as the instance reads it (IMDSv2, token first)."""
        put = urllib.request.Request(f"{self.url}/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        with urllib.request.urlopen(put, timeout=5) as response:
            token = response.read().decode()
        get = urllib.request.Request(f"{self.url}/latest/user-data", headers={"X-aws-ec2-metadata-token": token})
        with urllib.request.urlopen(get, timeout=5) as response:
            return bytes(response.read())

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join()


def role_credentials(ec2: Any, launch_template: str, instance_id: str) -> tuple[str, dict[str, Any]]:
    """The role of the instance profile the launch template names, and credentials of it in
    the form IMDS serves them."""
    version = ec2.describe_launch_template_versions(LaunchTemplateId=launch_template, Versions=["$Default"])
    profile_arn = version["LaunchTemplateVersions"][0]["LaunchTemplateData"]["IamInstanceProfile"]["Arn"]
    profile = boto3.client("iam", region_name=REGION).get_instance_profile(
        InstanceProfileName=profile_arn.rsplit("/", 1)[1])["InstanceProfile"]
    (role,) = profile["Roles"]
    assumed = boto3.client("sts", region_name=REGION).assume_role(
        RoleArn=role["Arn"], RoleSessionName=instance_id)["Credentials"]
    return role["RoleName"], {
        "Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": assumed["AccessKeyId"],
        "SecretAccessKey": assumed["SecretAccessKey"], "Token": assumed["SessionToken"],
        "LastUpdated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "Expiration": assumed["Expiration"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def secret_resource(response: SecretsManagerResponse) -> str:
    """The secret a Secrets Manager call is about, for moto's IAM check (moto checks its
    calls against "*" otherwise, and a policy naming one secret would allow nothing)."""
    secret_id = response._get_param("SecretId")
    try:
        return str(response.backend.describe_secret(secret_id).arn) if secret_id else "*"
    except Exception:  # an unknown secret: the call fails on its own after the check
        return "*"


@dataclass
class AwsNode:
    """One pool node launched by the service from the stack's template, and its IMDS."""

    run: StackRun
    instance_id: str
    imds: FakeImds
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
            ec2 = boto3.client("ec2", region_name=REGION)
            role, credentials = role_credentials(ec2, outputs["launch_templates"][POOL], instance_id)
            imds = FakeImds(ec2, instance_id, role, credentials)
            program = tmp / "slurmforge-join"
            program.write_text(user_data_program(imds.user_data()))  # what cloud-init runs
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
                imds.stop()


def test_the_instance_gets_the_join_program_for_the_stacks_outputs(aws_node: AwsNode) -> None:
    run = aws_node.run
    expected = render_join(run.spec, pool_join_settings(run), POOLS_AWS.name)
    assert user_data_program(aws_node.imds.user_data()) == expected


def test_the_node_name_comes_from_the_services_tag_through_imdsv2(aws_node: AwsNode) -> None:
    before = len(aws_node.imds.answered)
    name, address = aws_node.step("node_name"), aws_node.step("node_address")
    assert name.returncode == 0 and address.returncode == 0, name.stderr + address.stderr
    assert name.stdout.strip() == NODE
    assert address.stdout.strip() == aws_node.imds.instance()["PrivateIpAddress"]
    asked = aws_node.imds.answered[before:]
    assert ("GET", TAGS + TAG_NODE, 200) in asked
    assert all(status != 401 for _, _, status in asked), asked  # a token on every GET


def test_the_node_name_waits_for_a_tag_the_service_has_not_put_yet(aws_node: AwsNode) -> None:
    ec2 = aws_node.imds.ec2
    ec2.delete_tags(Resources=[aws_node.instance_id], Tags=[{"Key": TAG_NODE}])
    before = len(aws_node.imds.answered)
    try:
        with subprocess.Popen(["bash", "-c", 'source "$0"\nnode_name', str(aws_node.program)],
                              env=aws_node.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as node:
            deadline = time.monotonic() + 20
            while ("GET", TAGS + TAG_NODE, 404) not in aws_node.imds.answered[before:]:
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
    monkeypatch.setattr(SecretsManagerResponse, "_determine_resource", secret_resource, raising=False)
    credentials = aws_node.imds.credentials
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
    assert ("GET", CREDENTIALS + aws_node.imds.role, 200) in aws_node.imds.answered
    assert aws_node.imds.role == f"{run.spec.name}-compute"
    assert not any(k.startswith("AWS_ACCESS") or k == "AWS_SESSION_TOKEN" for k in aws_node.env)
