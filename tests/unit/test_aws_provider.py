"""The AWS provider against moto (in-process), with botocore event hooks that record every
call and inject what EC2 does on a bad day: InsufficientInstanceCapacity, partial fleets,
RequestLimitExceeded, spot interruption warnings on the SQS queue."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import moto.settings
import pytest
from moto import mock_aws
from moto.core.botocore_stubber import BotocoreStubber
from test_service_daemon import FakeSlurm
from test_service_world import POWERED_DOWN, POWERING_UP, SPEC, Clock, node, spec

from slurmforge.aws.provider import AwsProvider, TokenBucket, fleet_error, parse_interruption, pool_machine_filters
from slurmforge.contract import AwsProviderSettings, settings_json
from slurmforge.errors import ProvisionError, SpecError
from slurmforge.hosts import TAG_ACCOUNT, TAG_CLUSTER, TAG_JOB, TAG_LINK, TAG_NODE, TAG_POOL, TAG_TOKEN, TAG_USER
from slurmforge.provider import THROTTLED, InstanceState, LaunchRequest, build_provider
from slurmforge.service import handoff
from slurmforge.service.daemon import Daemon, DaemonConfig
from slurmforge.service.state import Store
from slurmforge.service.topology import topology
from slurmforge.slurm.client import Job
from slurmforge.spec import Cluster, load_spec

pytestmark = pytest.mark.unit

REGION = "us-east-1"
INTERRUPTION = {
    "version": "0", "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
    "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2", "account": "123456789012",
    "time": "2027-01-15T08:00:00Z", "region": REGION,
    "resources": ["arn:aws:ec2:us-east-1a:instance/i-0b662ef9931388ba0"],
    "detail": {"instance-id": "i-0b662ef9931388ba0", "instance-action": "terminate"},
}

NOTICE_AT = datetime(2027, 1, 15, 8, 0, tzinfo=UTC).timestamp()


class Response:
    """What a before-call hook returns to answer instead of EC2."""

    def __init__(self, status_code: int) -> None:
        self.status_code, self.headers, self.content = status_code, {}, b""


def error(code: str) -> tuple[Response, dict[str, Any]]:
    return Response(400 if code != "RequestLimitExceeded" else 503), {
        "Error": {"Code": code, "Message": f"injected {code}"}, "ResponseMetadata": {"HTTPStatusCode": 400}}


@dataclass
class Ec2:
    """moto's EC2 plus the recorded calls and the injections, for one test (its own
    cluster name, so its instances are its own)."""

    client: Any
    sqs: Any
    templates: dict[str, str]
    subnets: dict[str, str]
    cluster: Cluster
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    fail_next: list[str] = field(default_factory=list)
    """error codes the next CreateFleet calls answer with, one per call"""
    partial: int | None = None
    """launch only this many instances per CreateFleet, reporting InsufficientInstanceCapacity"""

    def fleets(self) -> list[dict[str, Any]]:
        return [params for op, params in self.calls if op == "CreateFleet"]


@pytest.fixture(scope="module")
def moto_ec2() -> Iterator[tuple[Any, Any, dict[str, str], dict[str, str]]]:
    """One moto for the module: starting it and making clients costs ~1 s a time."""
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION,
           "MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    validation = moto.settings.EC2_ENABLE_INSTANCE_TYPE_VALIDATION
    moto.settings.EC2_ENABLE_INSTANCE_TYPE_VALIDATION = True
    original, lock = BotocoreStubber.__call__, threading.Lock()

    def serialised(self: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> Any:
        with lock:  # moto is not thread-safe; the provider's batch and tag threads call it at once
            return original(self, event_name, request, **kwargs)

    BotocoreStubber.__call__ = serialised  # type: ignore[method-assign]
    with mock_aws():
        client = boto3.client("ec2", region_name=REGION)
        vpc = client.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnets = {zone: client.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]
                   for zone, cidr in (("us-east-1a", "10.0.16.0/20"), ("us-east-1b", "10.0.32.0/20"))}
        data = {"ImageId": "ami-12c6146b", "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}}
        templates = {pool: client.create_launch_template(LaunchTemplateName=f"t-{pool}", LaunchTemplateData=data)[
            "LaunchTemplate"]["LaunchTemplateId"] for pool in ("spot", "od", "cpu")}
        yield client, boto3.client("sqs", region_name=REGION), templates, subnets
    moto.settings.EC2_ENABLE_INSTANCE_TYPE_VALIDATION = validation
    BotocoreStubber.__call__ = original  # type: ignore[method-assign]
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def ec2(moto_ec2: tuple[Any, Any, dict[str, str], dict[str, str]], request: pytest.FixtureRequest) -> Iterator[Ec2]:
    client, sqs, templates, subnets = moto_ec2
    name = "c" + hashlib.sha256(request.node.name.encode()).hexdigest()[:8]
    state = Ec2(client, sqs, templates, subnets, spec().model_copy(update={"name": name}))
    registered = hooks(state)
    yield state
    for event, handler_id in registered:
        client.meta.events.unregister(event, unique_id=handler_id)


def hooks(state: Ec2) -> list[tuple[str, str]]:
    events = state.client.meta.events

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        state.calls.append((model.name, json.loads(json.dumps(params))))

    def inject(model: Any, **_: Any) -> tuple[Response, dict[str, Any]] | None:
        if model.name == "CreateFleet" and state.fail_next:
            return error(state.fail_next.pop(0))
        return None

    def shrink(params: dict[str, Any], model: Any, **_: Any) -> dict[str, Any] | None:
        if model.name == "CreateFleet" and state.partial is not None:
            spec = dict(params["TargetCapacitySpecification"], TotalTargetCapacity=state.partial)
            spec = {k: (state.partial if k.endswith("TargetCapacity") else v) for k, v in spec.items()}
            return {**params, "TargetCapacitySpecification": spec}
        return None

    def partial_errors(parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name == "CreateFleet" and state.partial is not None:
            parsed["Errors"] = [{"ErrorCode": "InsufficientInstanceCapacity", "Lifecycle": "spot",
                                 "ErrorMessage": "There is no Spot capacity available that matches your request."}]

    registered = [("provide-client-params.ec2.*", record), ("provide-client-params.ec2.CreateFleet", shrink),
                  ("before-call.ec2.*", inject), ("after-call.ec2.CreateFleet", partial_errors)]
    for n, (event, handler) in enumerate(registered):
        events.register_first(event, handler, unique_id=f"test-{id(state)}-{n}")
    return [(event, f"test-{id(state)}-{n}") for n, (event, _) in enumerate(registered)]


class Sleeps:
    def __init__(self) -> None:
        self.slept: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)


def provider(ec2: Ec2, **kw: Any) -> AwsProvider:
    queue_url = kw.pop("queue_url", None)
    return AwsProvider(ec2.cluster, ec2.client, ec2.templates, ec2.subnets, sqs=ec2.sqs, queue_url=queue_url,
                       sleep=kw.pop("sleep", Sleeps()), **kw)


def request(nodes: list[str], pool: str = "spot", link: str | None = None, token: str = "sf-abc") -> LaunchRequest:
    return LaunchRequest(pool=pool, nodes=tuple(nodes), token=token, jobs=(7,), link=link,
                         node_jobs=dict.fromkeys(nodes, 7), job_users={7: "alice"}, job_accounts={7: "vision"})


def tags_of(ec2: Ec2, iid: str) -> dict[str, str]:
    found = ec2.client.describe_tags(Filters=[{"Name": "resource-id", "Values": [iid]}])["Tags"]
    return {t["Key"]: t["Value"] for t in found}


# --------------------------------------------------------------------------- launching


def test_fleet_request_is_what_ec2_should_get(ec2: Ec2) -> None:
    aws = provider(ec2)
    result = aws.start(request(["t-spot-01", "t-spot-02", "t-spot-03"]))
    aws.flush_tags()
    assert sorted(result.launched) == ["t-spot-01", "t-spot-02", "t-spot-03"] and result.failed == {}
    (fleet,) = ec2.fleets()
    a, b = ec2.subnets["us-east-1a"], ec2.subnets["us-east-1b"]
    assert fleet == {
        "Type": "instant",
        "ClientToken": "sf-abc-0",
        "LaunchTemplateConfigs": [{
            "LaunchTemplateSpecification": {"LaunchTemplateId": ec2.templates["spot"], "Version": "$Latest"},
            "Overrides": [{"InstanceType": "g5.12xlarge", "SubnetId": a, "Priority": 0.0},
                          {"InstanceType": "g5.12xlarge", "SubnetId": b, "Priority": 0.0}]}],
        "TargetCapacitySpecification": {"TotalTargetCapacity": 3, "DefaultTargetCapacityType": "spot",
                                        "SpotTargetCapacity": 3},
        "SpotOptions": {"AllocationStrategy": "capacity-optimized-prioritized"},
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [
            {"Key": TAG_CLUSTER, "Value": ec2.cluster.name}, {"Key": TAG_POOL, "Value": "spot"},
            {"Key": TAG_LINK, "Value": "spot"}, {"Key": TAG_TOKEN, "Value": "sf-abc"}, {"Key": TAG_JOB, "Value": "7"},
            {"Key": TAG_USER, "Value": "alice"}, {"Key": TAG_ACCOUNT, "Value": "vision"}]}],
    }
    for name, inst in result.launched.items():
        assert tags_of(ec2, inst.id) == {"Name": name, TAG_NODE: name, TAG_CLUSTER: ec2.cluster.name, TAG_POOL: "spot",
                                         TAG_LINK: "spot", TAG_TOKEN: "sf-abc", TAG_JOB: "7", TAG_USER: "alice",
                                         TAG_ACCOUNT: "vision"}
    tagged = [p for op, p in ec2.calls if op == "CreateTags"]
    assert sorted(p["Resources"][0] for p in tagged) == sorted(i.id for i in result.launched.values())
    listed = {i.node: i for i in aws.list_instances()}
    assert set(listed) == {"t-spot-01", "t-spot-02", "t-spot-03"}
    assert all(i.pool == "spot" and i.address and i.state is InstanceState.RUNNING for i in listed.values())


def test_a_machine_listed_before_its_node_tag_is_written_names_its_node(ec2: Ec2) -> None:
    """The node tag is written after CreateFleet, by a thread (one fleet's tags are the same
    for all its machines): a listing in between must still name each machine's node, or the
    service would take a machine it just launched for an orphan."""
    import threading

    release = threading.Event()

    def held(model: Any, **_: Any) -> None:
        if model.name == "CreateTags":
            release.wait(10)

    ec2.client.meta.events.register_first("before-call.ec2.CreateTags", held, unique_id="held")
    aws = provider(ec2)
    try:
        aws.start(request(["t-spot-01", "t-spot-02"]))
        raw = ec2.client.describe_instances(Filters=pool_machine_filters("t"))["Reservations"]
        assert all("slurmforge:node" not in {t["Key"] for t in i.get("Tags", [])} for r in raw for i in r["Instances"])
        assert sorted(i.node or "" for i in aws.list_instances()) == ["t-spot-01", "t-spot-02"]
    finally:
        release.set()
        aws.flush_tags()
        ec2.client.meta.events.unregister("before-call.ec2.CreateTags", unique_id="held")
    assert sorted(i.node or "" for i in aws.list_instances()) == ["t-spot-01", "t-spot-02"]


def test_a_tag_written_while_a_listing_is_under_way_still_names_the_node(ec2: Ec2) -> None:
    """EC2 answered the listing before CreateTags, and the tag thread wrote the tag before
    the listing read what is still unwritten: the machine keeps its node (a listing that
    found neither would take it for an orphan). Tags are also eventually consistent: a
    listing right after the write may not show them either."""
    import threading

    release = threading.Event()

    def held(model: Any, **_: Any) -> None:
        if model.name == "CreateTags":
            release.wait(10)

    aws = provider(ec2)

    def written_meanwhile(**_: Any) -> None:  # after EC2 answered without the tags
        release.set()
        aws.flush_tags()

    ec2.client.meta.events.register_first("before-call.ec2.CreateTags", held, unique_id="held")
    try:
        aws.start(request(["t-spot-01", "t-spot-02"]))
        ec2.client.meta.events.register("after-call.ec2.DescribeInstances", written_meanwhile, unique_id="meanwhile")
        assert sorted(i.node or "" for i in aws.list_instances()) == ["t-spot-01", "t-spot-02"]
    finally:
        release.set()
        aws.flush_tags()
        ec2.client.meta.events.unregister("before-call.ec2.CreateTags", unique_id="held")
        ec2.client.meta.events.unregister("after-call.ec2.DescribeInstances", unique_id="meanwhile")
    assert sorted(i.node or "" for i in aws.list_instances()) == ["t-spot-01", "t-spot-02"]


def test_a_launch_returns_the_new_instances_addresses(ec2: Ec2) -> None:
    """Read right after CreateFleet, so the service publishes the nodes' names before the
    machines boot; an EC2 that does not know the fresh instances yet (eventual consistency)
    leaves them to the next listing, and the launch stands."""
    aws = provider(ec2)
    result = aws.start(request(["t-spot-01", "t-spot-02"]))
    listed = {i.id: i.address for i in aws.list_instances()}
    assert {i.id: i.address for i in result.launched.values()} == listed and all(listed.values())
    assert [p["InstanceIds"] for op, p in ec2.calls if op == "DescribeInstances" and "InstanceIds" in p] == [
        sorted(listed)]

    def not_yet(model: Any, **_: Any) -> tuple[Response, dict[str, Any]] | None:
        return error("InvalidInstanceID.NotFound") if model.name == "DescribeInstances" else None

    ec2.client.meta.events.register_first("before-call.ec2.DescribeInstances", not_yet, unique_id="not-yet")
    try:
        later = aws.start(request(["t-spot-03"], token="sf-later"))
    finally:
        ec2.client.meta.events.unregister("before-call.ec2.DescribeInstances", unique_id="not-yet")
    assert list(later.launched) == ["t-spot-03"] and later.launched["t-spot-03"].address is None
    assert {i.node: i.address for i in aws.list_instances()}["t-spot-03"]


def test_on_demand_fallback_link_uses_that_pools_template_and_flexible_types(ec2: Ec2) -> None:
    aws = provider(ec2)
    aws.start(request(["t-spot-01"], link="od"))
    aws.start(request(["t-cpu-01"], pool="cpu", token="sf-cpu"))
    od, cpu = ec2.fleets()
    assert od["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateId"] == ec2.templates["od"]
    assert od["OnDemandOptions"] == {"AllocationStrategy": "prioritized"}
    assert od["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "on-demand"
    assert {"Key": TAG_POOL, "Value": "spot"} in od["TagSpecifications"][0]["Tags"]
    assert {"Key": TAG_LINK, "Value": "od"} in od["TagSpecifications"][0]["Tags"]
    assert [(o["InstanceType"], o["Priority"]) for o in cpu["LaunchTemplateConfigs"][0]["Overrides"]] == [
        ("t3.medium", 0.0), ("t3.medium", 0.0), ("t2.medium", 1.0), ("t2.medium", 1.0)]


def test_batches_of_at_most_max_batch_each_with_its_own_token(ec2: Ec2) -> None:
    nodes = [f"t-cpu-{i:02d}" for i in range(1, 13)]
    result = provider(ec2, max_batch=5).start(request(nodes, pool="cpu"))
    fleets = ec2.fleets()
    assert [f["TargetCapacitySpecification"]["TotalTargetCapacity"] for f in fleets] == [5, 5, 2]
    assert sorted(f["ClientToken"] for f in fleets) == ["sf-abc-0", "sf-abc-1", "sf-abc-2"]
    assert len(result.launched) == 12 and len({i.id for i in result.launched.values()}) == 12


def test_insufficient_capacity_fails_every_node_of_the_batch(ec2: Ec2) -> None:
    ec2.fail_next = ["InsufficientInstanceCapacity"]
    aws = provider(ec2)
    result = aws.start(request(["t-spot-01", "t-spot-02"]))
    assert result.launched == {} and result.failed == {"t-spot-01": "InsufficientInstanceCapacity",
                                                       "t-spot-02": "InsufficientInstanceCapacity"}
    assert aws.list_instances() == [] and len(ec2.fleets()) == 1
    assert aws.run_bucket.available() == pytest.approx(1000, abs=1)  # nothing launched, nothing spent


def test_partial_fleet_is_handled_per_node(ec2: Ec2) -> None:
    ec2.partial = 2
    result = provider(ec2).start(request([f"t-spot-0{i}" for i in range(1, 6)]))
    assert sorted(result.launched) == ["t-spot-01", "t-spot-02"]
    assert result.failed == dict.fromkeys(["t-spot-03", "t-spot-04", "t-spot-05"], "InsufficientInstanceCapacity")


def test_throttled_once_backs_off_and_retries_with_the_same_token(ec2: Ec2) -> None:
    ec2.fail_next = ["RequestLimitExceeded"]
    sleeps = Sleeps()
    aws = provider(ec2, sleep=sleeps)
    result = aws.start(request(["t-spot-01"]))
    assert len(result.launched) == 1
    assert [f["ClientToken"] for f in ec2.fleets()] == ["sf-abc-0"] * 2
    assert len(sleeps.slept) == 1 and 0.5 <= sleeps.slept[0] <= 1.0


def test_throttled_twice_defers_the_batch_and_empties_the_model(ec2: Ec2) -> None:
    """A dry RunInstances bucket refills at 2/s: hammering it is pointless."""
    ec2.fail_next = ["RequestLimitExceeded"] * 20
    now = [0.0]
    aws = provider(ec2, run_bucket=TokenBucket(1000, 2.0, clock=lambda: now[0]))
    result = aws.start(request(["t-spot-01", "t-spot-02"]))
    assert result.failed == dict.fromkeys(["t-spot-01", "t-spot-02"], THROTTLED) and result.launched == {}
    assert len(ec2.fleets()) == 2 and aws.run_bucket.available() == 0
    again = aws.start(request(["t-spot-01", "t-spot-02"], token="sf-later"))
    assert again.failed == dict.fromkeys(["t-spot-01", "t-spot-02"], THROTTLED) and len(ec2.fleets()) == 2


def test_describe_throttling_backs_off_within_a_budget(ec2: Ec2) -> None:
    calls = [0]

    def throttle_describe(model: Any, **_: Any) -> tuple[Response, dict[str, Any]] | None:
        if model.name == "DescribeLaunchTemplateVersions" and calls[0] < 3:
            calls[0] += 1
            return error("RequestLimitExceeded")
        return None

    ec2.client.meta.events.register_first("before-call.ec2.DescribeLaunchTemplateVersions", throttle_describe,
                                          unique_id="throttle-describe")
    sleeps = Sleeps()
    try:
        provider(ec2, sleep=sleeps).start(request(["t-spot-01"]))
    finally:
        ec2.client.meta.events.unregister("before-call.ec2.DescribeLaunchTemplateVersions",
                                          unique_id="throttle-describe")
    assert calls[0] == 3 and len(sleeps.slept) == 3
    assert all(d <= s <= 1.5 * d for s, d in zip(sleeps.slept, (0.5, 1.0, 2.0), strict=True)), sleeps.slept


def test_client_side_bucket_holds_back_what_ec2_would_refuse(ec2: Ec2) -> None:
    now = [0.0]
    bucket = TokenBucket(10, 2.0, clock=lambda: now[0])
    aws = provider(ec2, max_batch=5, run_bucket=bucket, max_parallel=1)
    result = aws.start(request([f"t-cpu-{i:02d}" for i in range(1, 13)], pool="cpu"))
    assert len(result.launched) == 10 and list(result.failed.values()) == [THROTTLED, THROTTLED]
    assert len(ec2.fleets()) == 2  # the third batch was never sent
    now[0] += 1.0  # 2 tokens back: enough for the 2 held-back nodes
    again = aws.start(request(sorted(result.failed), pool="cpu", token="sf-def"))
    assert len(again.launched) == 2 and len(ec2.fleets()) == 3


def test_template_without_imdsv2_is_refused(ec2: Ec2) -> None:
    bad = ec2.client.create_launch_template(LaunchTemplateName=f"{ec2.cluster.name}-bad",
                                            LaunchTemplateData={"ImageId": "ami-12c6146b"})
    aws = AwsProvider(ec2.cluster, ec2.client, ec2.templates | {"spot": bad["LaunchTemplate"]["LaunchTemplateId"]},
                      ec2.subnets)
    with pytest.raises(ProvisionError, match="HttpTokens=required"):
        aws.start(request(["t-spot-01"]))
    assert ec2.fleets() == []


def test_missing_templates_and_subnets_are_reported_together(ec2: Ec2) -> None:
    with pytest.raises(SpecError) as err:
        AwsProvider(spec(), ec2.client, {"spot": "lt-1"}, {"us-east-1a": "subnet-1"})
    lines = [p.line() for p in err.value.problems]
    assert any("no launch template for pool od" in line for line in lines)
    assert any("no launch template for pool cpu" in line for line in lines)
    assert any("no subnet for zone" in line and "us-east-1b" in line for line in lines)


def test_terminate_removes_each_instance_once(ec2: Ec2) -> None:
    aws = provider(ec2)
    launched = aws.start(request(["t-spot-01", "t-spot-02", "t-spot-03"])).launched
    aws.flush_tags()
    aws.terminate([launched["t-spot-02"], launched["t-spot-01"], launched["t-spot-02"]])
    states = {i.node: i.state for i in aws.list_instances()}
    assert states["t-spot-01"] is states["t-spot-02"] is InstanceState.TERMINATED
    assert states["t-spot-03"] is not InstanceState.TERMINATED
    terminated = [p["InstanceIds"] for op, p in ec2.calls if op == "TerminateInstances"]
    assert terminated == [sorted([launched["t-spot-01"].id, launched["t-spot-02"].id])]


# --------------------------------------------------------------------------- spot interruptions


def test_spot_interruption_warnings_from_sqs(ec2: Ec2) -> None:
    queue_url = ec2.sqs.create_queue(QueueName=f"{ec2.cluster.name}-interruptions")["QueueUrl"]
    rebalance = dict(INTERRUPTION, **{"detail-type": "EC2 Instance Rebalance Recommendation"})
    for body in (INTERRUPTION, rebalance, "not json"):
        ec2.sqs.send_message(QueueUrl=queue_url, MessageBody=body if isinstance(body, str) else json.dumps(body))
    aws = provider(ec2, queue_url=queue_url)
    (notice,) = aws.interruptions()
    assert notice.instance == "i-0b662ef9931388ba0" and notice.noticed_at == NOTICE_AT and notice.receipt
    aws.acknowledge([notice])
    left = ec2.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages",
                                                                           "ApproximateNumberOfMessagesNotVisible"])
    assert left["Attributes"] == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_interruption_time_is_the_events() -> None:
    notice = parse_interruption(json.dumps(INTERRUPTION), "r-1", now=5.0)
    assert notice is not None and notice.receipt == "r-1" and notice.noticed_at == NOTICE_AT
    assert parse_interruption("[]", "r", 5.0) is None


def test_no_queue_no_notices(ec2: Ec2) -> None:
    assert provider(ec2).interruptions() == []


def test_from_settings_builds_clients_without_io(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings = AwsProviderSettings(region="us-east-1", launch_templates={"spot": "lt-1", "od": "lt-2", "cpu": "lt-3"},
                                   subnets={"us-east-1a": "subnet-a", "us-east-1b": "subnet-b"},
                                   spot_queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/t-spot")
    aws = AwsProvider.from_settings(spec(), settings)
    assert aws.ec2.meta.region_name == "us-east-1" and aws.queue_url == settings.spot_queue_url
    assert aws.templates["od"] == "lt-2" and aws.subnets["us-east-1b"] == "subnet-b"
    assert aws.ec2.meta.config.retries["total_max_attempts"] == 1  # retries are the provider's own
    with pytest.raises(ProvisionError, match="settings are for region eu-west-1"):
        AwsProvider.from_settings(spec(), replace(settings, region="eu-west-1"))
    built = build_provider(spec(), settings_json(settings))  # as the daemon and `down` build it
    assert isinstance(built, AwsProvider) and built.templates == aws.templates and built.queue_url == aws.queue_url
    with pytest.raises(ProvisionError, match="unknown"):
        build_provider(spec(), settings_json(settings) | {"subnet": "x"})


# --------------------------------------------------------------------------- with the daemon


def test_daemon_launches_through_ec2_and_handles_a_notice(ec2: Ec2, tmp_path: Path) -> None:
    """The whole path on moto: a node powering up gets an instance, a later spot warning
    on the queue drains its node and signals its job."""
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(SPEC.replace("name: t\n", f"name: {ec2.cluster.name}\n"))
    queue_url = ec2.sqs.create_queue(QueueName=f"{ec2.cluster.name}-q")["QueueUrl"]
    prefix = ec2.cluster.name
    states = {f"{prefix}-od-01": ("idle", "CLOUD"), f"{prefix}-spot-01": POWERING_UP}
    nodes = [node(n, states.get(n, POWERED_DOWN)) for n in topology(ec2.cluster).nodes]
    slurm = FakeSlurm(nodes, [Job(31, "CONFIGURING", f"{prefix}-spot-01", "carol")])
    clock = Clock(time.time())
    aws = provider(ec2, queue_url=queue_url)
    od = aws.start(request([f"{prefix}-od-01"], pool="od", token="sf-static")).launched[f"{prefix}-od-01"]
    config = DaemonConfig(spec_path=spec_file, spool=tmp_path, heartbeat=tmp_path / "beat")
    daemon = Daemon(config, slurm, aws, Store(tmp_path / "state.db"), load_spec, clock)
    daemon.loop_once()
    aws.flush_tags()
    spot = next(i for i in aws.list_instances() if i.node == f"{prefix}-spot-01")
    assert spot.pool == "spot" and spot.tags[TAG_LINK] == "spot" and spot.id != od.id
    assert daemon.store.bindings()[f"{prefix}-spot-01"].instance == spot.id
    slurm.state[f"{prefix}-spot-01"] = node(f"{prefix}-spot-01", ("allocated", "CLOUD"))
    slurm.job_list = [Job(31, "RUNNING", f"{prefix}-spot-01", "carol")]
    warning = dict(INTERRUPTION, detail={"instance-id": spot.id, "instance-action": "terminate"})
    ec2.sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(warning))
    clock.advance(10)
    daemon.loop_once()
    assert slurm.called("drain") == [((f"{prefix}-spot-01",), "slurmforge: spot interruption notice")]
    assert slurm.called("signal") == [((31,), "USR1")]
    assert len([op for op, _ in ec2.calls if op == "CreateFleet"]) == 2  # od-01 by hand, spot-01 by the daemon


def test_daemon_tags_a_launched_instance_with_its_jobs_account(ec2: Ec2, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path on moto: Slurm resumes two nodes for two jobs of different accounts
    (SLURM_RESUME_FILE), the daemon launches them with EC2 Fleet, and each instance
    carries its own job's id, user and account; the fleet's tags list both accounts."""
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(SPEC.replace("name: t\n", f"name: {ec2.cluster.name}\n"))
    prefix = ec2.cluster.name
    s1, s2 = f"{prefix}-spot-01", f"{prefix}-spot-02"
    nodes = [node(n, POWERING_UP if n in (s1, s2) else POWERED_DOWN) for n in topology(ec2.cluster).nodes]
    slurm = FakeSlurm(nodes, [Job(41, "CONFIGURING", s1, "dana", account="vision"),
                              Job(42, "CONFIGURING", s2, "erik", account="nlp")])
    resume_file = tmp_path / "resume-file"
    resume_file.write_text(json.dumps({"jobs": [{"job_id": 41, "nodes": s1}, {"job_id": 42, "nodes": s2}]}))
    monkeypatch.setenv("SLURM_RESUME_FILE", str(resume_file))
    spool = tmp_path / "spool"
    spool.mkdir()
    handoff.record(handoff.HandoffKind.RESUME, [f"{prefix}-spot-[01-02]"], spool)
    aws = provider(ec2)
    config = DaemonConfig(spec_path=spec_file, spool=spool, heartbeat=tmp_path / "beat")
    daemon = Daemon(config, slurm, aws, Store(tmp_path / "state.db"), load_spec, Clock(time.time()))
    assert daemon.loop_once().launched == 2
    aws.flush_tags()
    by_node = {i.node: i for i in aws.list_instances()}
    for name, job, user, account in ((s1, "41", "dana", "vision"), (s2, "42", "erik", "nlp")):
        tags = tags_of(ec2, by_node[name].id)
        assert (tags[TAG_JOB], tags[TAG_USER], tags[TAG_ACCOUNT], tags[TAG_NODE]) == (job, user, account, name)
    (fleet,) = ec2.fleets()
    fleet_tags = {t["Key"]: t["Value"] for t in fleet["TagSpecifications"][0]["Tags"]}
    assert fleet_tags[TAG_ACCOUNT] == "nlp,vision" and fleet_tags[TAG_JOB] == "41,42"


def test_daemon_replaces_a_dead_static_node_with_an_instance_of_its_pools_template(ec2: Ec2, tmp_path: Path) -> None:
    """Static nodes kept alive, the AWS half on moto: the static node's instance is
    terminated under a job. Once the verdict held the node is set DOWN (the job requeued),
    then a new instance is launched with EC2 Fleet from the pool's launch template and
    tagged with the node, Slurm learns its address, and when its slurmd registers the
    node is back, with its event and its count."""
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(SPEC.replace("name: t\n", f"name: {ec2.cluster.name}\n"))
    od1 = f"{ec2.cluster.name}-od-01"
    clock = Clock(time.time())
    aws = provider(ec2, clock=clock)
    old = aws.start(request([od1], pool="od", token="sf-static")).launched[od1]
    aws.flush_tags()
    slurm = FakeSlurm([node(n, ("allocated", "CLOUD") if n == od1 else POWERED_DOWN)
                       for n in topology(ec2.cluster).nodes], [Job(51, "RUNNING", od1, "dana")])
    daemon = Daemon(DaemonConfig(spec_path=spec_file, spool=tmp_path, heartbeat=tmp_path / "beat"), slurm, aws,
                    Store(tmp_path / "state.db"), load_spec, clock)
    daemon.loop_once()
    assert slurm.calls == []
    ec2.client.terminate_instances(InstanceIds=[old.id])
    for _ in range(3):
        clock.advance(10)
        daemon.loop_once()
    assert slurm.called("mark_down") == [((od1,), f"slurmforge: instance {old.id} of {od1} is terminated")]
    assert slurm.job_list == [] and len(ec2.fleets()) == 1  # slurmctld ended the job; nothing launched yet
    clock.advance(10)
    daemon.loop_once()
    aws.flush_tags()
    fleet = ec2.fleets()[-1]
    assert fleet["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]["LaunchTemplateId"] == ec2.templates["od"]
    (new,) = [i for i in aws.list_instances() if i.node == od1 and i.id != old.id]
    assert new.state in (InstanceState.PENDING, InstanceState.RUNNING) and new.pool == "od"
    assert tags_of(ec2, new.id)[TAG_NODE] == od1 and daemon.store.bindings()[od1].instance == new.id
    clock.advance(10)
    daemon.loop_once()
    assert slurm.called("set_address") == [(od1, new.address)] and len(ec2.fleets()) == 2
    # registered: ReturnToService=2 ends the DOWN, and the node takes jobs at once - the service
    # held no drain on it (the dead machine's jobs, not the node, are kept off it for a while)
    slurm.state[od1] = replace(slurm.state[od1], state="idle", flags=slurm.state[od1].flags - {"DRAIN"}, reason="",
                               slurmd_started_at=clock.now)
    assert not [c for c in slurm.commands if c[:3] == ("scontrol", "update", f"nodename={od1}") and "state=drain" in c]
    clock.advance(10)
    daemon.loop_once()
    (event,) = [e for e in daemon.store.events() if e.kind == "replaced"]
    assert event.pool == "od" and event.detail.startswith(f"{od1} in service again on {new.id}")
    assert ("slurmforge_replaced_nodes_total", {"pool": "od"}, 1.0) in daemon.store.counters()
    assert [op for op, _ in ec2.calls].count("TerminateInstances") == 1  # the test's: the service had none to stop


# --------------------------------------------------------------------------- a list that fails


def fail_describe(ec2: Ec2, code: str, after: int = 0) -> list[int]:
    """DescribeInstances answers `code` from its (after+1)-th call on; returns the call count."""
    calls = [0]

    def hook(model: Any, **_: Any) -> tuple[Response, dict[str, Any]] | None:
        calls[0] += 1
        return error(code) if calls[0] > after else None

    ec2.client.meta.events.register_first("before-call.ec2.DescribeInstances", hook, unique_id="fail-describe")
    return calls


@pytest.fixture
def unhook(ec2: Ec2) -> Iterator[None]:
    yield
    ec2.client.meta.events.unregister("before-call.ec2.DescribeInstances", unique_id="fail-describe")


@pytest.mark.usefixtures("unhook")
@pytest.mark.parametrize("code", ["RequestLimitExceeded", "InternalError", "UnauthorizedOperation"])
def test_a_list_ec2_refuses_is_an_error_not_an_empty_list(ec2: Ec2, code: str) -> None:
    aws = provider(ec2)
    aws.start(request(["t-spot-01"]))
    fail_describe(ec2, code)
    with pytest.raises(ProvisionError, match=f"DescribeInstances failed after 0 page.*{code}"):
        aws.list_instances()


@pytest.mark.usefixtures("unhook")
def test_a_page_that_fails_fails_the_whole_list(ec2: Ec2) -> None:
    aws = provider(ec2, list_page_size=5, max_batch=1)  # one reservation per instance: moto pages those
    aws.start(request([f"t-cpu-0{i}" for i in range(1, 8)], pool="cpu"))
    aws.flush_tags()
    before = len(ec2.calls)
    assert len(aws.list_instances()) == 7
    assert [op for op, _ in ec2.calls[before:]] == ["DescribeInstances"] * 2  # two pages
    calls = fail_describe(ec2, "RequestLimitExceeded", after=1)
    with pytest.raises(ProvisionError, match="after 1 page"):
        aws.list_instances()
    assert calls[0] == 2


@pytest.mark.usefixtures("unhook")
def test_daemon_on_ec2_holds_while_describe_is_throttled(ec2: Ec2, tmp_path: Path) -> None:
    """The issue's failure on AWS: while the list fails, nothing is launched or
    terminated, though every Slurm node is up and one is waiting for a machine."""
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(SPEC.replace("name: t\n", f"name: {ec2.cluster.name}\n"))
    prefix = ec2.cluster.name
    aws = provider(ec2)
    od = aws.start(request([f"{prefix}-od-01"], pool="od", token="sf-static")).launched[f"{prefix}-od-01"]
    states = {f"{prefix}-od-01": ("allocated", "CLOUD"), f"{prefix}-spot-01": POWERING_UP}
    slurm = FakeSlurm([node(n, states.get(n, POWERED_DOWN)) for n in topology(ec2.cluster).nodes])
    clock = Clock(time.time())
    daemon = Daemon(DaemonConfig(spec_path=spec_file, spool=tmp_path, heartbeat=tmp_path / "beat"), slurm, aws,
                    Store(tmp_path / "state.db"), load_spec, clock)
    fail_describe(ec2, "RequestLimitExceeded")
    for _ in range(6):
        daemon.loop_once()
        clock.advance(10)
    ops = {op for op, _ in ec2.calls}
    assert "TerminateInstances" not in ops and len([op for op, _ in ec2.calls if op == "CreateFleet"]) == 1
    assert slurm.calls == [] and [h.reason.value for h in daemon.snapshot.holds] == ["cloud-view"]  # type: ignore[union-attr]
    assert "RequestLimitExceeded" in daemon.snapshot.holds[0].detail  # type: ignore[union-attr]
    ec2.client.meta.events.unregister("before-call.ec2.DescribeInstances", unique_id="fail-describe")
    daemon.loop_once()
    assert daemon.snapshot.holds == () and od.id not in [p["InstanceIds"][0] for op, p in ec2.calls  # type: ignore[union-attr]
                                                          if op == "TerminateInstances"]
    assert len([op for op, _ in ec2.calls if op == "CreateFleet"]) == 2  # spot-01's machine, now


# --------------------------------------------------------------------------- an account's quota


def refuse_for_quota(ec2: Ec2) -> list[str]:
    """A new account's zero GPU quotas, as EC2 says them: a spot fleet answers with an error
    entry per override (MaxSpotInstanceCountExceeded) and no instance; an on-demand fleet is
    refused outright (VcpuLimitExceeded). Returns the market of every CreateFleet call."""
    asked: list[dict[str, Any]] = []
    markets: list[str] = []

    def ask(params: dict[str, Any], **_: Any) -> None:
        asked.append(params)
        markets.append(params["TargetCapacitySpecification"]["DefaultTargetCapacityType"])

    def answer(**_: Any) -> tuple[Response, dict[str, Any]]:
        params = asked[-1]
        if markets[-1] == "on-demand":
            return error("VcpuLimitExceeded")
        config = params["LaunchTemplateConfigs"][0]
        return Response(200), {"FleetId": "fleet-quota", "Instances": [], "Errors": [
            {"ErrorCode": "MaxSpotInstanceCountExceeded", "Lifecycle": "spot",
             "ErrorMessage": "Max spot instance count exceeded",
             "LaunchTemplateAndOverrides": {"LaunchTemplateSpecification": config["LaunchTemplateSpecification"],
                                            "Overrides": override}}
            for override in config["Overrides"]]}

    for hook, (event, unique_id) in zip((ask, answer), QUOTA_HOOKS, strict=True):
        ec2.client.meta.events.register_first(event, hook, unique_id=unique_id)
    return markets


QUOTA_HOOKS = (("provide-client-params.ec2.CreateFleet", "quota-ask"), ("before-call.ec2.CreateFleet", "quota-answer"))


def quota_raised(ec2: Ec2) -> None:
    for event, unique_id in QUOTA_HOOKS:
        ec2.client.meta.events.unregister(event, unique_id=unique_id)


@pytest.fixture
def unhook_quota(ec2: Ec2) -> Iterator[None]:
    yield
    quota_raised(ec2)


SPOT_G = ("All G and VT Spot Instance Requests", "L-3819A6DF")
ON_DEMAND_G = ("Running On-Demand G and VT instances", "L-DB2E81BA")


@pytest.mark.usefixtures("unhook_quota")
def test_a_new_accounts_zero_gpu_quota_is_named_and_not_hammered(ec2: Ec2, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A job for the spot GPU pool (g5, falls back to on-demand g5) on an account whose G
    quotas are 0. Both links fail for their quota, not for capacity: the node goes back
    to power save with a reason naming both quotas, the pool page and /metrics name them,
    the log says it once, and for the next 10 minutes, while Slurm powers the node up
    again every loop for the requeued job, no CreateFleet is sent; once the quota is
    raised the job's node launches and the block is gone."""
    from slurmforge.service.web import metrics_text, render_page

    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text(SPEC.replace("name: t\n", f"name: {ec2.cluster.name}\n").replace("min_nodes: 1, ", ""))
    s1 = f"{ec2.cluster.name}-spot-01"
    slurm = FakeSlurm([node(n, POWERING_UP if n == s1 else POWERED_DOWN) for n in topology(ec2.cluster).nodes],
                      [Job(61, "CONFIGURING", s1, "fay")])
    clock = Clock(time.time())
    aws = provider(ec2, clock=clock)
    daemon = Daemon(DaemonConfig(spec_path=spec_file, spool=tmp_path, heartbeat=tmp_path / "beat"), slurm, aws,
                    Store(tmp_path / "state.db"), load_spec, clock)
    markets = refuse_for_quota(ec2)
    caplog.set_level("INFO")
    for _ in range(60):  # 10 minutes of loops
        daemon.loop_once()
        if slurm.state[s1].is_powering_down():  # Slurm powers it up again for the requeued job
            slurm._set(s1, "idle", "POWERING_UP", "NOT_RESPONDING")
        clock.advance(10)

    assert markets == ["spot", "on-demand"]  # once each, in the first loop
    why = "slurmforge: EC2 quota reached: {} ({}) on spot, {} ({}) on od".format(*SPOT_G, *ON_DEMAND_G)
    assert {reason for _, reason in slurm.called("power_down")} == {why}
    page = render_page(daemon.snapshot)  # type: ignore[arg-type]
    for link, (name, code) in (("spot", SPOT_G), ("od", ON_DEMAND_G)):
        assert f'data-link="{link}" data-quota="{code}">EC2 quota reached: <b>{name}</b> ({code})' in page
        line = f'slurmforge_link_quota_blocked{{link="{link}",quota="{name}",quota_code="{code}"}} 1'
        assert line in metrics_text(daemon.snapshot).splitlines()  # type: ignore[arg-type]
        said = [r.getMessage() for r in caplog.records if code in r.getMessage()]
        assert len(said) == 1 and said[0].startswith(f"EC2 quota {name} ({code}) stops launches on link {link}")

    quota_raised(ec2)
    clock.advance(15 * 60)
    daemon.loop_once()
    assert [i.node for i in aws.list_instances()] == [s1]
    assert "slurmforge_link_quota_blocked{" not in metrics_text(daemon.snapshot)  # type: ignore[arg-type]
    assert 'class="quota"' not in render_page(daemon.snapshot)  # type: ignore[arg-type]


def test_a_fleets_quota_error_stands_for_it_before_capacity() -> None:
    """The quota is the account's: whatever capacity a zone or type had, it stops them all."""
    entries = [{"ErrorCode": "InsufficientInstanceCapacity"}, {"ErrorCode": "VcpuLimitExceeded"}]
    assert fleet_error({"Errors": entries}) == "VcpuLimitExceeded"
    assert fleet_error({"Errors": entries[:1]}) == "InsufficientInstanceCapacity"
    assert fleet_error({"Errors": [{"ErrorCode": "InvalidParameterValue"}]}) == "InvalidParameterValue"
    assert fleet_error({}) == "UnfulfilledCapacity"


def test_every_catalog_type_names_its_service_quota_in_both_markets() -> None:
    from slurmforge.instance_types import ec2_quota, load_instance_types

    for name in load_instance_types():
        for market in ("on-demand", "spot"):
            assert ec2_quota(name, market).code.startswith("L-"), (name, market)
    assert str(ec2_quota("p5.48xlarge", "spot")) == "All P5 Spot Instance Requests (L-C4BD4855)"
    assert str(ec2_quota("p4d.24xlarge", "spot")) == "All P4, P3 and P2 Spot Instance Requests (L-7212CCBC)"
    assert str(ec2_quota("p5.48xlarge", "on-demand")) == "Running On-Demand P instances (L-417A185B)"
    assert str(ec2_quota("t3.medium", "spot")) == ("All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests "
                                                   "(L-34B43A08)")
    assert str(ec2_quota("u-6tb1.metal", "on-demand")) == "EC2 vCPU quota of u-6tb1 on-demand instances"


def test_the_upgrade_tells_a_pool_nodes_image_by_its_instances_ami(ec2: Ec2) -> None:
    """`slurmforge upgrade` on AWS: a pool machine runs the new image when its instance boots
    the AMI the inventory names (the one `pulumi up` baked from the spec's inputs, its name
    carrying their digest); another AMI is another image; a node without a live machine has
    none. An inventory whose AMI was not baked from these inputs is refused before anything."""
    from slurmforge.upgrade.fleet import aws_machine_image
    from slurmforge.upgrade_start import image_name

    aws = provider(ec2)
    aws.start(request(["t-spot-01"]))
    template_ami = "ami-12c6146b"  # the fixture's launch templates boot it
    image = aws_machine_image(aws, template_ami, "digest-new")
    assert image("t-spot-01") == "digest-new" and image("t-spot-02") is None
    assert aws_machine_image(aws, "ami-other", "digest-new")("t-spot-01") == template_ami
    baked = ec2.client.register_image(Name="c-node-digest-new-a1b2c3", Architecture="x86_64")["ImageId"]
    assert "digest-new" in image_name(ec2.client, baked) and image_name(ec2.client, "ami-00000000") == ""
