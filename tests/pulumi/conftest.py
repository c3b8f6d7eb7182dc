"""Run the Pulumi program under mocks, once per spec, and hand the tests what it made.

Pulumi's mock engine is process-global: each run resets the runtime settings, installs
fresh recording mocks, builds the whole cluster inside one `@pulumi.runtime.test`
function and resolves every stack output there (Output.future / Output.is_secret), so
the assertions work on plain values and an assertion can never sit in an `apply`
that does not run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime import MockCallArgs, MockResourceArgs, Mocks

from slurmforge.spec import Cluster, load_spec, validate_data
from stacks.cluster import build_cluster

ROOT = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).parent / "specs"
POOLS_AWS = ROOT / "examples" / "pools-aws.yaml"
LAB_AWS = SPECS / "lab-aws.yaml"

ACCOUNT = "123456789012"
DEBIAN_AMI = "ami-0debian12base0000"
GOLDEN_AMI = "ami-0golden000000000"
MUNGE_B64 = "bW9jay1tdW5nZS1rZXktYnl0ZXM="
DB_PASSWORD = "mock-db-password-0123456789"


SECRET_SIG = "4dabf18193072939515e22adb298388d"  # pulumi's marker of a secret value on the wire


def plain(value: Any) -> Any:
    """Inputs as the engine got them, with secret wrappers removed."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG) is not None and "value" in value:
            return plain(value["value"])
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def secret_keys(inputs: dict[str, Any]) -> set[str]:
    return {k for k, v in inputs.items() if isinstance(v, dict) and v.get(SECRET_SIG) is not None}


@dataclass(frozen=True)
class Registered:
    """One resource registration the mocks saw."""

    typ: str
    name: str
    inputs: dict[str, Any]
    custom: bool
    secret_inputs: frozenset[str]


class RecordingMocks(Mocks):
    """Returns inputs as outputs plus the computed fields the program reads, and
    records every resource and every invoke."""

    def __init__(self) -> None:
        self.resources: list[Registered] = []
        self.calls: list[MockCallArgs] = []
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
        if typ == "aws:imagebuilder/image:Image":
            return {"outputResources": [{"amis": [{"image": GOLDEN_AMI, "region": "mock"}]}]}
        if typ == "random:index/randomBytes:RandomBytes":
            return {"base64": MUNGE_B64, "hex": "00"}
        if typ == "random:index/randomPassword:RandomPassword":
            return {"result": DB_PASSWORD}
        return {}

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        self.calls.append(args)
        if args.token == "aws:ec2/getAmi:getAmi":
            return {"id": DEBIAN_AMI, "imageId": DEBIAN_AMI, "name": "debian-13-amd64-20250101-1", "architecture":
                    "x86_64", "ownerId": "136693071363"}, []
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT, "arn": f"arn:aws:iam::{ACCOUNT}:user/test", "id": ACCOUNT,
                    "userId": "TEST"}, []
        raise AssertionError(f"the program called an invoke the mocks do not know: {args.token}")


@dataclass
class StackRun:
    """One program run: the spec, what was registered, the resolved stack outputs."""

    spec: Cluster
    resources: list[Registered]
    calls: list[MockCallArgs]
    outputs: dict[str, Any] = field(default_factory=dict)
    secret: dict[str, bool] = field(default_factory=dict)

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


async def _resolve(outputs: dict[str, Any], run: StackRun) -> None:
    for key, value in outputs.items():
        output = pulumi.Output.from_input(value)
        run.outputs[key] = await output.future()
        run.secret[key] = await output.is_secret()


def _unpinned(data: dict[str, Any]) -> None:
    data["images"] = {"base": "debian-13"}


def _world_ssh(data: dict[str, Any]) -> None:
    data["network"] |= {"admin_cidrs": ["0.0.0.0/0"], "allow_ssh_from_anywhere": True}


# Variants of a spec file, validated again like a user's file.
VARIANTS: dict[str, Callable[[dict[str, Any]], None]] = {"unpinned": _unpinned, "world-ssh": _world_ssh}


def variant(spec_path: Path, name: str) -> Cluster:
    data = yaml.safe_load(spec_path.read_text())
    VARIANTS[name](data)
    return validate_data(data, f"{spec_path.name} ({name})")


@cache
def run_stack(spec_path: Path, variant_name: str | None = None) -> StackRun:
    """Build the cluster of a spec (or a variant of it) under fresh mocks."""
    spec = load_spec(spec_path) if variant_name is None else variant(spec_path, variant_name)
    return run_program(spec, RecordingMocks())


def run_program(spec: Cluster, mocks: RecordingMocks) -> StackRun:
    """Build the cluster of `spec` under `mocks` (a RecordingMocks or one that answers more)."""
    pulumi.runtime.settings.reset_options()
    pulumi.runtime.set_mocks(mocks, project="slurmforge", stack="test", preview=False)
    run = StackRun(spec, mocks.resources, mocks.calls)

    @pulumi.runtime.test
    def program() -> Any:
        return asyncio.ensure_future(_resolve(build_cluster(spec, ROOT), run))

    program()
    assert run.outputs, "the program ran but no output was resolved"
    return run


def stack_output_json(run: StackRun, show_secrets: bool = False) -> dict[str, Any]:
    """What `pulumi stack output --json` prints for this run."""
    shown = {k: v if show_secrets or not run.secret[k] else "[secret]" for k, v in run.outputs.items()}
    return json.loads(json.dumps(shown))


@pytest.fixture(scope="session")
def pools_aws() -> StackRun:
    return run_stack(POOLS_AWS)


@pytest.fixture(scope="session")
def lab_aws() -> StackRun:
    return run_stack(LAB_AWS)


@pytest.fixture(scope="session", params=["pools-aws", "lab-aws"])
def any_stack(request: pytest.FixtureRequest) -> StackRun:
    return run_stack(POOLS_AWS if request.param == "pools-aws" else LAB_AWS)
