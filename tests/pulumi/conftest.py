"""Run the Pulumi program under mocks, once per spec, and hand the tests what it made.

Pulumi's mock engine is process-global: each run resets the runtime settings, installs
fresh recording mocks, builds the whole cluster inside one `@pulumi.runtime.test`
function and resolves every stack output there (Output.future / Output.is_secret), so
the assertions work on plain values and an assertion can never sit in an `apply`
that does not run.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime import MockCallArgs, MockResourceArgs, Mocks
from pulumi.runtime.mocks import MockMonitor

from slurmforge.distro import DEBIAN_13
from slurmforge.node.program import JoinSettings
from slurmforge.spec import Cluster, load_spec, validate_data
from stacks.cluster import build_cluster
from tests.harness.rehearsal import stack
from tests.harness.rehearsal.stack import DYNAMIC, Registered, ec2_shape, plain, secret_keys

ROOT = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).parent / "specs"
POOLS_AWS = ROOT / "examples" / "pools-aws.yaml"
LAB_AWS = SPECS / "lab-aws.yaml"

ACCOUNT = "123456789012"
DEBIAN_AMI = "ami-0debian13base0000"
GOLDEN_AMI = "ami-0golden000000000"
GPU_AMI = "ami-0goldengpu000000"
"""What the program's bakery returns under the recording mocks: the base variant, and the
gpu variant (its images are named <cluster>-image-gpu, slurmforge.image_variant)."""
MUNGE_B64 = "bW9jay1tdW5nZS1rZXktYnl0ZXM="
JWT_B64 = "bW9jay1qd3Qta2V5LWJ5dGVz"
DB_PASSWORD = "mock-db-password-0123456789"


class RecordingMocks(Mocks):
    """Returns inputs as outputs plus the computed fields the program reads, and
    records every resource and every invoke."""

    def __init__(self) -> None:
        self.resources: list[Registered] = []
        self.calls: list[MockCallArgs] = []
        self.dependencies: dict[str, set[str]] = {}
        """Resource name -> the names of the resources it waits for (its inputs' and its
        depends_on), as the engine is told them."""
        self._ips = 10

    def new_resource(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append(Registered(args.typ, args.name, plain(args.inputs), bool(args.custom),
                                         frozenset(secret_keys(args.inputs))))
        state = dict(args.inputs)
        if args.custom:
            state.setdefault("name", args.name)
            state.setdefault("arn", f"arn:aws:mock:{args.typ}:{ACCOUNT}:{args.name}")
            state |= self._computed(args)
        return f"{args.name}-id", state

    def _computed(self, args: MockResourceArgs) -> dict[str, Any]:
        typ, name = args.typ, args.name
        if typ == "aws:ec2/instance:Instance":
            self._ips += 1
            return {"privateIp": f"10.99.0.{self._ips}"}
        if typ == "aws:ec2/eip:Eip":
            self._ips += 1
            return {"publicIp": f"198.51.100.{self._ips}"}
        if typ == "aws:ec2/launchTemplate:LaunchTemplate":
            return {"arn": f"arn:aws:ec2:mock:{ACCOUNT}:launch-template/{name}-id"}
        if typ == "aws:sqs/queue:Queue":
            return {"url": f"https://sqs.mock.amazonaws.com/{ACCOUNT}/{name}"}
        if typ == "aws:efs/fileSystem:FileSystem":
            return {"dnsName": f"{name}-id.efs.mock.amazonaws.com"}
        if typ == "aws:rds/instance:Instance":
            return {"address": f"{name}.mock.rds.amazonaws.com"}
        if typ == "aws:route53/zone:Zone":
            return {"zoneId": f"Z{name}"}
        if typ == "aws:s3/bucket:Bucket":
            return {"bucket": f"{name}-bucket"}
        if typ == DYNAMIC:  # the golden image's bakery (stacks/image.py): tests/pulumi/test_golden_image.py
            ami = GPU_AMI if args.inputs.get("variant") == "gpu" else GOLDEN_AMI
            return {"ami_id": ami, "slurm": "24.11.5-4+deb13u1", "packages": 700, "build_seconds": 300}
        if typ == "random:index/randomBytes:RandomBytes":
            return {"base64": JWT_B64 if args.name.endswith("-jwt-key") else MUNGE_B64, "hex": "00"}
        if typ == "random:index/randomPassword:RandomPassword":
            return {"result": DB_PASSWORD}
        return {}

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        self.calls.append(args)
        if args.token == "aws:ec2/getAmi:getAmi":
            return {"id": DEBIAN_AMI, "imageId": DEBIAN_AMI, "name": DEBIAN_13.parent_ami, "architecture":
                    "x86_64", "ownerId": "136693071363"}, []
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT, "arn": f"arn:aws:iam::{ACCOUNT}:user/test", "id": ACCOUNT,
                    "userId": "TEST"}, []
        raise AssertionError(f"the program called an invoke the mocks do not know: {args.token}")


class MotoMocks(RecordingMocks):
    """The recording mocks, except that what the scheduler service and the pool nodes touch
    is made in moto (in-process `mock_aws` or a moto server through AWS_ENDPOINT_URL) from
    the program's inputs: the VPC and its subnets, the spot queue, the secrets and their
    values, the node roles with their policies and instance profiles, the pool launch
    templates with their user data and profile, the head nodes and Ceph hosts with their
    tags. Their ids, ARNs and addresses in the stack outputs are moto's, as a real stack's
    are AWS's. The roles' managed policies need moto to load AWS's
    (MOTO_IAM_LOAD_MANAGED_POLICIES=true)."""

    def __init__(self, region: str) -> None:
        import boto3

        super().__init__()
        self.ec2, self.sqs, self.iam, self.secrets = (boto3.client(service, region_name=region) for service in (
            "ec2", "sqs", "iam", "secretsmanager"))

    def new_resource(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:
        name, state = super().new_resource(args)
        made = self._make(args.typ, args.name, self.resources[-1].inputs, state)
        return made or name, state

    def _make(self, typ: str, name: str, inputs: dict[str, Any], state: dict[str, Any]) -> str | None:
        """Make the resource in moto; its id when moto's differs from the mocks' (state gets
        moto's ARN and URL)."""
        if typ == "aws:ec2/vpc:Vpc":
            return str(self.ec2.create_vpc(CidrBlock=inputs["cidrBlock"])["Vpc"]["VpcId"])
        if typ == "aws:ec2/subnet:Subnet":
            return str(self.ec2.create_subnet(VpcId=inputs["vpcId"], CidrBlock=inputs["cidrBlock"],
                                              AvailabilityZone=inputs["availabilityZone"])["Subnet"]["SubnetId"])
        if typ == "aws:sqs/queue:Queue":
            state["url"] = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        elif typ == "aws:secretsmanager/secret:Secret":
            state["arn"] = self.secrets.create_secret(Name=name, Description=inputs["description"])["ARN"]
            return str(state["arn"])  # a secret's id is its ARN
        elif typ == "aws:secretsmanager/secretVersion:SecretVersion":
            self.secrets.put_secret_value(SecretId=inputs["secretId"], SecretString=inputs["secretString"])
        elif typ == "aws:iam/role:Role":
            state["arn"] = self.iam.create_role(RoleName=name, AssumeRolePolicyDocument=inputs["assumeRolePolicy"])[
                "Role"]["Arn"]
            return name  # a role's id is its name
        elif typ == "aws:iam/rolePolicy:RolePolicy":
            self.iam.put_role_policy(RoleName=inputs["role"], PolicyName=name, PolicyDocument=inputs["policy"])
        elif typ == "aws:iam/rolePolicyAttachment:RolePolicyAttachment":
            self.iam.attach_role_policy(RoleName=inputs["role"], PolicyArn=inputs["policyArn"])
        elif typ == "aws:iam/instanceProfile:InstanceProfile":
            state["arn"] = self.iam.create_instance_profile(InstanceProfileName=name)["InstanceProfile"]["Arn"]
            self.iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=inputs["role"])
        elif typ == "aws:ec2/instance:Instance":
            # head nodes and Ceph hosts, with the program's own tags: what `down` must leave alone
            made = self.ec2.run_instances(
                ImageId=inputs["ami"], InstanceType=inputs["instanceType"], SubnetId=inputs["subnetId"],
                MinCount=1, MaxCount=1, TagSpecifications=[{"ResourceType": "instance", "Tags": [
                    {"Key": k, "Value": v} for k, v in inputs["tags"].items()]}])["Instances"][0]
            state["privateIp"] = made["PrivateIpAddress"]
            return str(made["InstanceId"])
        elif typ == "aws:ec2/launchTemplate:LaunchTemplate":
            data = {"ImageId": inputs["imageId"], "InstanceType": inputs["instanceType"],
                    "MetadataOptions": ec2_shape(inputs["metadataOptions"]), "UserData": inputs["userData"],
                    "IamInstanceProfile": {"Arn": inputs["iamInstanceProfile"]["arn"]}}
            return str(self.ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData=data)[
                "LaunchTemplate"]["LaunchTemplateId"])
        return None


class RecordingMonitor(MockMonitor):
    """The mocks' monitor, also recording what each registration depends on (the
    dependencies the engine orders creation by; MockResourceArgs does not carry them)."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.recording = mocks

    def RegisterResource(self, request: Any) -> Any:
        names = {urn.rsplit("::", 1)[-1] for urn in request.dependencies}
        for deps in request.propertyDependencies.values():
            names |= {urn.rsplit("::", 1)[-1] for urn in deps.urns}
        self.recording.dependencies[request.name] = names
        return super().RegisterResource(request)


@dataclass
class StackRun:
    """One program run: the spec, what was registered, the resolved stack outputs."""

    spec: Cluster
    resources: list[Registered]
    calls: list[MockCallArgs]
    outputs: dict[str, Any] = field(default_factory=dict)
    secret: dict[str, bool] = field(default_factory=dict)
    dependencies: dict[str, set[str]] = field(default_factory=dict)

    def waits_for(self, name: str) -> set[str]:
        """Every resource `name` waits for, directly or through others."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            for dep in self.dependencies.get(todo.pop(), set()) - seen:
                seen.add(dep)
                todo.append(dep)
        return seen

    def of_type(self, token: str) -> list[Registered]:
        return [r for r in self.resources if r.typ == token]

    def custom(self) -> Iterator[Registered]:
        return (r for r in self.resources if r.custom)

    def one(self, token: str, name: str) -> Registered:
        found = [r for r in self.of_type(token) if r.name == name]
        assert len(found) == 1, f"{token} {name}: {[r.name for r in self.of_type(token)]}"
        return found[0]

    @staticmethod
    def json(resource: Registered, key: str = "policy") -> Any:
        return json.loads(resource.inputs[key])


def _unpinned(data: dict[str, Any]) -> None:
    """Image Builder bakes the images; NVSwitch types (p4d) then give way to g5.48xlarge,
    the same size of EFA pool the gpu image variant can run."""
    data["images"] = {"base": "debian-13"}
    for pool in data["pools"]:
        pool["instance_types"] = ["g5.48xlarge" if t == "p4d.24xlarge" else t for t in pool["instance_types"]]


def _world_ssh(data: dict[str, Any]) -> None:
    data["network"] |= {"admin_cidrs": ["0.0.0.0/0"], "allow_ssh_from_anywhere": True}


def _login_without_efs(data: dict[str, Any]) -> None:
    data["network"]["public_subnets"][1]["zone"] = "eu-west-1d"


def _rest_port(data: dict[str, Any]) -> None:
    data["rest_api"] = {"port": 8443}


# Variants of a spec file, validated again like a user's file.
VARIANTS: dict[str, Callable[[dict[str, Any]], None]] = {"unpinned": _unpinned, "world-ssh": _world_ssh,
                                                         "login-without-efs": _login_without_efs,
                                                         "rest-port": _rest_port}


def variant(spec_path: Path, name: str) -> Cluster:
    data = yaml.safe_load(spec_path.read_text())
    VARIANTS[name](data)
    return validate_data(data, f"{spec_path.name} ({name})")


@cache
def run_stack(spec_path: Path, variant_name: str | None = None) -> StackRun:
    """Build the cluster of a spec (or a variant of it) under fresh mocks."""
    spec = load_spec(spec_path) if variant_name is None else variant(spec_path, variant_name)
    return run_program(spec, RecordingMocks(), spec_path.name)


def run_program(spec: Cluster, mocks: RecordingMocks, source: str) -> StackRun:
    """Build the cluster of `spec` (read from the file named `source`) under `mocks` (a
    RecordingMocks or one that answers more)."""
    pulumi.runtime.settings.reset_options()
    pulumi.runtime.set_mocks(mocks, project="slurmforge", stack="test", preview=False,
                             monitor=RecordingMonitor(mocks))
    run = StackRun(spec, mocks.resources, mocks.calls, dependencies=mocks.dependencies)

    @pulumi.runtime.test
    def program() -> Any:
        return asyncio.ensure_future(stack.resolve_outputs(build_cluster(spec, source), run.outputs, run.secret))

    program()
    assert run.outputs, "the program ran but no output was resolved"
    return run


def run_main(config: dict[str, str], mocks: RecordingMocks) -> StackRun:
    """What `pulumi up` runs - stacks/program.py's main() - under `mocks` with this stack
    config, its exports resolved (a spec problem: main's pulumi.RunError)."""
    from stacks import program

    ran = stack.run_main(config, mocks, stack="test")
    spec = load_spec(program.spec_path(config[f"{program.CONFIG_NAMESPACE}:{program.SPEC_KEY}"]))
    return StackRun(spec, mocks.resources, mocks.calls, ran.outputs, ran.secret)


@contextmanager
def moto_server(region: str) -> Iterator[str]:
    """A moto server on this machine, fresh, AWS's managed policies loaded (the stack's
    roles attach some), its S3 as strict as AWS's (strict_s3), with every boto3 client of
    this process pointed at it; its URL."""
    from moto.server import ThreadedMotoServer

    from tests.harness.rehearsal.strict_s3 import strict_s3

    with pytest.MonkeyPatch.context() as mp, strict_s3():
        for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                           "AWS_DEFAULT_REGION": region, "MOTO_IAM_LOAD_MANAGED_POLICIES": "true"}.items():
            mp.setenv(key, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        mp.setenv("AWS_ENDPOINT_URL", url)
        reset = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
        urllib.request.urlopen(reset, timeout=10).close()  # fresh backends, the managed policies loaded
        try:
            yield url
        finally:
            urllib.request.urlopen(reset, timeout=10).close()
            server.stop()


def pool_join_settings(run: StackRun) -> JoinSettings:
    """The join settings a pool node of this stack needs, read from the stack outputs (as
    an admin would: controllers from `hosts`, the secret's ARN, the EFS DNS name)."""
    outputs = run.outputs
    efs = outputs["efs"]
    return JoinSettings(
        target="aws", identity="aws-tag", secrets="aws", region=outputs["region"],
        controllers=tuple((h["name"], h["private_ip"]) for h in outputs["hosts"] if h["role"] == "controller"),
        munge_key_arn=outputs["secret_arns"]["munge_key"], nas_source=f"{efs['dns_name']}:" if efs else None)


def launch_template_user_data(run: StackRun, pool: str) -> bytes:
    """The user data of `pool`'s launch template, as the program registered it, decoded."""
    template = run.one("aws:ec2/launchTemplate:LaunchTemplate", f"{run.spec.name}-{pool}-template")
    return base64.b64decode(template.inputs["userData"], validate=True)


def user_data_program(raw: bytes) -> str:
    """The program in EC2 user data, as cloud-init finds it (gzip-compressed or not)."""
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def stack_output_json(run: StackRun, show_secrets: bool = False) -> dict[str, Any]:
    """What `pulumi stack output --json` prints for this run."""
    return stack.stack_output_json(stack.StackRun(run.resources, run.outputs, run.secret), show_secrets)


@pytest.fixture(scope="session")
def pools_aws() -> StackRun:
    return run_stack(POOLS_AWS)


@pytest.fixture(scope="session")
def lab_aws() -> StackRun:
    return run_stack(LAB_AWS)


@pytest.fixture(scope="session", params=["pools-aws", "lab-aws"])
def any_stack(request: pytest.FixtureRequest) -> StackRun:
    return run_stack(POOLS_AWS if request.param == "pools-aws" else LAB_AWS)
