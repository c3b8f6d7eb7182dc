"""`slurmforge preflight`: what only the AWS account can answer, asked before `pulumi up`
makes anything (and again before the first job, with the stack's outputs).

The spec's own checks know the instance catalog; they cannot know the account: whether the
key pair is there, whether Debian's parent AMI is in the region (and when EC2 deprecates
it), the vCPU quotas the pools need, whether each type is offered in each zone the spec
puts it in, and whether the scheduler service's EC2 calls are allowed by its policy under
the account's own rules (SCPs, permission boundaries included). Each check returns one
`Finding` per problem, with the fix; nothing is created or changed.

The service's calls are asked with EC2's DryRun: the session is a role the admin may assume
(`--role-arn`) narrowed by a session policy that is exactly the service's policy
(slurmforge.aws.policy, the document the stack attaches to the controller's role), so EC2
answers for that policy within what the account allows: `DryRunOperation` when the call
would be allowed, `UnauthorizedOperation` when not. The calls are the service's own
(AwsProvider.fleet_params), from the stack's launch templates into its subnets, so they
need the stack's outputs: before the first `pulumi up` there is no template to launch from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from slurmforge.aws.inventory import OUT_LAUNCH_TEMPLATES, OUT_REGION, OUT_SPOT_QUEUE_URL, OUT_SUBNETS
from slurmforge.aws.policy import SchedulerScope, partition, scheduler_policy
from slurmforge.distro import distro
from slurmforge.errors import ProvisionError
from slurmforge.instance_types import ec2_quota, lookup
from slurmforge.provider import LaunchRequest, Quota
from slurmforge.spec.models import AwsTarget, Cluster, Market

DEBIAN_OWNER = "136693071363"
"""The account Debian publishes its AMIs from (wiki.debian.org/Cloud/AmazonEC2Image)."""
BUILD_INSTANCE_TYPE = "m6i.large"
"""The image build's instance (stacks/image.py)."""
DEPRECATION_NOTICE = timedelta(days=90)
"""How long before EC2 deprecates the parent AMI preflight starts saying so."""


@dataclass(frozen=True)
class Finding:
    """One problem the account has for this spec, and what to do about it."""

    check: str
    problem: str
    fix: str

    def line(self) -> str:
        return f"{self.check}: {self.problem}; fix: {self.fix}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What was not checked, and why (not a problem)."""


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__))


# --------------------------------------------------------------------------- key pair, AMI


def key_pair(spec: Cluster, ec2: Any) -> list[Finding]:
    target = spec.target
    assert isinstance(target, AwsTarget)
    try:
        ec2.describe_key_pairs(KeyNames=[target.key_name])
        return []
    except Exception as exc:
        if _code(exc) != "InvalidKeyPair.NotFound":
            raise
    return [Finding("target.key_name", f"no key pair '{target.key_name}' in {target.region}",
                    f"aws ec2 import-key-pair --region {target.region} --key-name {target.key_name} "
                    "--public-key-material fileb://<your public key> (docs/aws.md, the real path)")]


def parent_image(spec: Cluster, ec2: Any, now: datetime) -> list[Finding]:
    """The pinned AMI (images.ami), or Debian's parent AMI by its pinned name, deprecated
    ones included (EC2 hides them otherwise; docs.aws.amazon.com/AWSEC2/latest/UserGuide/
    ami-deprecate.html); its deprecation date said ahead."""
    region = spec.target.region if isinstance(spec.target, AwsTarget) else ""
    if spec.images.ami:
        found = ec2.describe_images(Filters=[{"Name": "image-id", "Values": [spec.images.ami]}],
                                    IncludeDeprecated=True)["Images"]
        what, fix = f"images.ami {spec.images.ami}", "pin an AMI of this region in images.ami"
    else:
        name = distro(spec.images.base).parent_ami
        found = ec2.describe_images(Owners=[DEBIAN_OWNER], IncludeDeprecated=True, Filters=[
            {"Name": "name", "Values": [name]}, {"Name": "architecture", "Values": ["x86_64"]}])["Images"]
        what, fix = f"Debian's AMI {name}", "move the pin in slurmforge/distro.py (docs/node-image.md)"
    if not found:
        return [Finding("images", f"{what} is not in {region}", fix)]
    when = found[0].get("DeprecationTime")
    if when:
        at = datetime.fromisoformat(str(when).replace("Z", "+00:00"))
        if at - now < DEPRECATION_NOTICE:
            verb = "was" if at <= now else "will be"
            return [Finding("images", f"{what} {verb} deprecated by EC2 on {at.date()}", fix)]
    return []


# --------------------------------------------------------------------------- quotas


def _hosts(spec: Cluster) -> list[tuple[str, int]]:
    """(instance type, count) of every on-demand machine the stack itself runs."""
    head = spec.head
    hosts = [(head.controller.instance_type, 2 if head.backup_controller else 1),
             (head.login.instance_type, head.login_count)]
    if spec.storage.ceph:
        hosts.append((spec.storage.ceph.instance_type, spec.storage.ceph.hosts))
    if not spec.images.ami:
        hosts.append((BUILD_INSTANCE_TYPE, 1))
    return hosts


def vcpus_needed(spec: Cluster) -> dict[Quota, int]:
    """vCPUs each EC2 quota must allow: every pool at max_nodes of its largest type (in each
    quota its types draw on), the head nodes, the Ceph hosts and the image build."""
    need: dict[Quota, int] = {}
    for itype, count in _hosts(spec):
        known = lookup(itype)
        quota = ec2_quota(itype, "on-demand")
        need[quota] = need.get(quota, 0) + count * (known.vcpus if known else 0)
    for pool in spec.pools:
        market = "spot" if pool.market is Market.SPOT else "on-demand"
        largest: dict[Quota, int] = {}
        for itype in pool.instance_types:
            known = lookup(itype)
            quota = ec2_quota(itype, market)
            largest[quota] = max(largest.get(quota, 0), known.vcpus if known else 0)
        for quota, vcpus in largest.items():
            need[quota] = need.get(quota, 0) + pool.max_nodes * vcpus
    return need


def quotas(spec: Cluster, client: Any) -> list[Finding]:
    findings = []
    for quota, vcpus in sorted(vcpus_needed(spec).items(), key=lambda q: q[0].name):
        if not quota.code or not vcpus:
            continue
        try:
            value = float(client.get_service_quota(ServiceCode="ec2", QuotaCode=quota.code)["Quota"]["Value"])
        except Exception as exc:
            findings.append(Finding("quotas", f"{quota.name} ({quota.code}) could not be read: {_code(exc)}",
                                    "allow servicequotas:GetServiceQuota, or check it in the Service Quotas console"))
            continue
        if value < vcpus:
            findings.append(Finding("quotas", f"{quota.name} ({quota.code}) is {value:g} vCPUs, the spec needs "
                                    f"{vcpus} at its max nodes", f"request {vcpus} in the Service Quotas console "
                                    "(Amazon EC2, this region), or lower max_nodes"))
    return findings


# --------------------------------------------------------------------------- offerings


def placements(spec: Cluster) -> dict[str, tuple[str, set[str]]]:
    """Where the spec puts each instance type: {type: (field path, zones)}."""
    private = [s.zone for s in spec.network.private_subnets]
    public = [s.zone for s in spec.network.public_subnets]
    out: dict[str, tuple[str, set[str]]] = {}

    def put(itype: str, path: str, zones: Iterable[str]) -> None:
        out.setdefault(itype, (path, set()))[1].update(zones)

    put(spec.head.controller.instance_type, "head.controller.instance_type",
        private[:2] if spec.head.backup_controller else private[:1])
    put(spec.head.login.instance_type, "head.login.instance_type", public[:max(1, spec.head.login_count)])
    if spec.storage.ceph:
        put(spec.storage.ceph.instance_type, "storage.ceph.instance_type", private[:spec.storage.ceph.hosts])
    for i, pool in enumerate(spec.pools):
        for itype in pool.instance_types:
            put(itype, f"pools[{i}].instance_types", pool.zones or private)
    return out


def offerings(spec: Cluster, ec2: Any) -> list[Finding]:
    wanted = placements(spec)
    zones = sorted({z for _, zs in wanted.values() for z in zs})
    offered: set[tuple[str, str]] = set()
    for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=[{"Name": "location", "Values": zones},
                                                       {"Name": "instance-type", "Values": sorted(wanted)}]):
        offered |= {(o["InstanceType"], o["Location"]) for o in page["InstanceTypeOfferings"]}
    return [Finding(path, f"{itype} is not offered in {zone}", "pick a type EC2 offers there "
                    f"(aws ec2 describe-instance-type-offerings --location-type availability-zone "
                    f"--filters Name=location,Values={zone}), or another zone")
            for itype, (path, zs) in sorted(wanted.items()) for zone in sorted(zs) if (itype, zone) not in offered]


# --------------------------------------------------------------------------- the service's calls

DRY_RUN_OK = "DryRunOperation"
REFUSED = "UnauthorizedOperation"
POLICY_FIX = ("grant it to the role given with --role-arn (the service's own policy is slurmforge.aws.policy; "
              "an SCP or a permission boundary may refuse it too)")


def _queue_arn(url: str | None, region: str, account: str) -> str:
    name = (url or "").rstrip("/").rsplit("/", 1)[-1] or "*"
    return f"arn:{partition(region)}:sqs:{region}:{account}:{name}"


def service_policy(spec: Cluster, outputs: dict[str, Any], account: str) -> dict[str, Any]:
    """The policy the stack attached to the controller's role, for this stack's outputs."""
    region = str(outputs[OUT_REGION])
    base = f"arn:{partition(region)}:ec2:{region}:{account}:launch-template"
    return scheduler_policy(SchedulerScope(
        cluster=spec.name, region=region, account=account,
        launch_template_arns=[f"{base}/{t}" for t in outputs[OUT_LAUNCH_TEMPLATES].values()],
        # Pulumi names the role <cluster>-compute-<suffix> (stacks/iam.py)
        compute_role_arn=f"arn:{partition(region)}:iam::{account}:role/{spec.name}-compute*",
        queue_arn=_queue_arn(outputs.get(OUT_SPOT_QUEUE_URL), region, account)))


def _answer(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        call()
    except Exception as exc:
        message = str(getattr(exc, "response", {}).get("Error", {}).get("Message", exc))
        return _code(exc), message
    return "made", "the call was made, not dry-run"


def _fleet_calls(spec: Cluster, ec2: Any, outputs: dict[str, Any]) -> list[Finding]:
    from slurmforge.aws.provider import AwsProvider

    provider = AwsProvider(spec, ec2, outputs[OUT_LAUNCH_TEMPLATES], outputs[OUT_SUBNETS])
    findings = []
    for pool in spec.pools:
        node = f"{spec.name}-{pool.name}-preflight"
        request = LaunchRequest(pool=pool.name, nodes=(node,), token="sf-preflight")
        params = provider.fleet_params(request, pool, [node], f"sf-preflight-{pool.name}")
        subnet = params["LaunchTemplateConfigs"][0]["Overrides"][0]["SubnetId"]
        run = {"DryRun": True, "MinCount": 1, "MaxCount": 1, "SubnetId": subnet,
               "LaunchTemplate": params["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"],
               "TagSpecifications": params["TagSpecifications"]}
        for name, method, kwargs in (("CreateFleet", ec2.create_fleet, {"DryRun": True, **params}),
                                     ("RunInstances", ec2.run_instances, run)):
            code, message = _answer(partial(method, **kwargs))
            if code != DRY_RUN_OK:
                findings.append(Finding(f"pools[{spec.pools.index(pool)}]", f"the scheduler service's {name} from "
                                        f"the pool's launch template is refused ({code}): {message}", POLICY_FIX))
    return findings


def _terminations(spec: Cluster, admin_ec2: Any, ec2: Any) -> list[Finding]:
    """The service may terminate a pool machine of the cluster, never the controller."""
    from slurmforge.aws.provider import pool_machine_filters

    findings = []
    pool_machines = [i["InstanceId"] for r in admin_ec2.describe_instances(
        Filters=[*pool_machine_filters(spec.name), {"Name": "instance-state-name", "Values": ["pending", "running"]}]
    )["Reservations"] for i in r["Instances"]]
    controllers = [i["InstanceId"] for r in admin_ec2.describe_instances(Filters=[
        {"Name": "tag:slurmforge:cluster", "Values": [spec.name]}, {"Name": "tag:slurmforge:role",
                                                                    "Values": ["controller"]}])["Reservations"]
        for i in r["Instances"]]
    if pool_machines:
        code, message = _answer(lambda: ec2.terminate_instances(DryRun=True, InstanceIds=pool_machines[:1]))
        if code != DRY_RUN_OK:
            findings.append(Finding("scheduler service", f"TerminateInstances of pool machine {pool_machines[0]} "
                                    f"is refused ({code}): {message}", POLICY_FIX))
    if controllers:
        code, _ = _answer(lambda: ec2.terminate_instances(DryRun=True, InstanceIds=controllers[:1]))
        if code != REFUSED:
            findings.append(Finding("scheduler service", f"TerminateInstances of the controller {controllers[0]} "
                                    f"is not refused ({code})", "the service's policy must allow only instances "
                                    "tagged with the cluster and a pool (slurmforge.aws.policy)"))
    return findings


def service_calls(spec: Cluster, session: Any, outputs: dict[str, Any], role_arn: str) -> list[Finding]:
    """DryRun the scheduler service's EC2 calls with its policy, as `role_arn` narrowed by it."""
    account = str(session.client("sts").get_caller_identity()["Account"])
    policy = json.dumps(service_policy(spec, outputs, account))
    try:
        creds = session.client("sts").assume_role(RoleArn=role_arn, RoleSessionName="slurmforge-preflight",
                                                  Policy=policy, DurationSeconds=900)["Credentials"]
    except Exception as exc:
        return [Finding("--role-arn", f"{role_arn} cannot be assumed ({_code(exc)})",
                        "name a role you may assume (sts:AssumeRole) that allows what the service needs")]
    import boto3  # type: ignore[import-untyped]

    as_service = boto3.session.Session(
        region_name=str(outputs[OUT_REGION]), aws_access_key_id=creds["AccessKeyId"],
        aws_secret_access_key=creds["SecretAccessKey"], aws_session_token=creds["SessionToken"]).client("ec2")
    return [*_fleet_calls(spec, as_service, outputs), *_terminations(spec, session.client("ec2"), as_service)]


def preflight(spec: Cluster, session: Any, outputs: dict[str, Any] | None = None, role_arn: str | None = None,
              now: datetime | None = None) -> Report:
    """Every check, every problem at once."""
    ec2 = session.client("ec2")
    report = Report()
    report.findings += key_pair(spec, ec2)
    report.findings += parent_image(spec, ec2, now or datetime.now(UTC))
    report.findings += quotas(spec, session.client("service-quotas"))
    report.findings += offerings(spec, ec2)
    if outputs is None:
        report.notes.append("the scheduler service's calls: not dry-run - they launch from the stack's templates; "
                            "after `pulumi up`, run preflight with --stack-outputs and --role-arn")
    elif role_arn is None:
        report.notes.append("the scheduler service's calls: not dry-run - give --role-arn, a role you may assume")
    else:
        report.findings += service_calls(spec, session, outputs, role_arn)
    return report


def lines(report: Report) -> Sequence[str]:
    return [f.line() for f in report.findings]


def run(spec: Cluster, stack_outputs: Path | None, role_arn: str | None) -> int:
    """The `slurmforge preflight` command: one line per problem with its fix on stdout, what
    was not checked on stderr; the exit code (5: problems found)."""
    from slurmforge.console import fail, note, say
    from slurmforge.package_data import require

    if not isinstance(spec.target, AwsTarget):
        fail(f"preflight checks an AWS account; the spec's target is {spec.target.kind}")
    require("boto3", "aws", "preflight (it asks the AWS account)")
    import boto3

    outputs = None
    if stack_outputs is not None:
        from slurmforge.aws.inventory import read_stack_outputs

        outputs = read_stack_outputs(stack_outputs)
    from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

    try:
        report = preflight(spec, boto3.session.Session(region_name=spec.target.region), outputs, role_arn)
    except (BotoCoreError, ClientError) as exc:  # no credentials, no network, a call refused outright
        raise ProvisionError(f"preflight: the AWS account did not answer: {exc}") from None
    for line in lines(report):
        say(line)
    for text in report.notes:
        note(text)
    if report.findings:
        note(f"preflight: {len(report.findings)} problem(s) in the account for {spec.name}")
        return 5
    note(f"preflight: the account has what {spec.name} needs")
    return 0
