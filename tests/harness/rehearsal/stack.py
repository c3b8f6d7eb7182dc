"""The Pulumi program (stacks/) on the stand-in: `pulumi up` and `pulumi destroy` without
the Pulumi CLI or the AWS provider, with Pulumi's own mock engine as the bridge.

`StandInEngine` is the mocks the program runs under: every resource it registers is made
in the moto server, from the program's own inputs, as the AWS provider would make it -
the VPC and everything in it, IAM, secrets with their values, the bucket and the build's
inputs in it, EFS and its mount targets, EBS volumes and their attachments, launch
templates, the spot queue and its EventBridge rules, the head nodes and Ceph hosts with
their user data, key pair, profile and metadata options. Ids, ARNs, addresses and DNS
names in the stack outputs are the stand-in's, as a real stack's are AWS's. The golden
image is the program's dynamic provider, run as Pulumi's engine runs it: unpickled from
the resource's inputs, `create` called with them (stacks/image.py's `bake`: a real build
instance on the stand-in). A resource type this engine does not know fails the run with
its name: a new kind of resource in the program is a red rehearsal, not a silent gap.

`update` is a second `pulumi up` of the stack: the program runs again and each resource it
registers is diffed with what the stack holds, as Pulumi's engine does - its inputs but
those its `ignore_changes` names (read from the registration, as the engine reads it),
assets by their content: the same, it is left alone (its id and outputs kept); changed, it
is updated in place where the AWS provider updates that property (a launch template's data:
a new version, made the default with `update_default_version`; an S3 object's source:
uploaded again), the dynamic provider asked for its `diff` and replaced when it says so
(created first, the old one deleted at the end of the update: Pulumi's create-before-delete),
and refused with its name otherwise; a resource the program no longer registers is
deleted.

`destroy` removes what `up` made, newest first (a resource is registered after
everything it depends on, so the reverse order is a valid deletion order), as `pulumi
destroy` does; the dynamic provider's `delete` deregisters the golden image.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import pickle
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmforge.errors import ProvisionError

log = logging.getLogger(__name__)

DYNAMIC = "pulumi-python:dynamic:Resource"
SECRET_SIG = "4dabf18193072939515e22adb298388d"
"""Pulumi's marker of a secret value on the wire."""
CONFIG_NAMESPACE, SPEC_KEY = "slurmforge", "spec"
"""stacks/program.py's stack config key of the spec path."""
GONE_TIMEOUT = 300


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


def ec2_shape(value: Any) -> Any:
    """Pulumi's inputs (camelCase keys, numbers as floats, booleans of launch templates as
    strings) as EC2's API takes them."""
    if isinstance(value, dict):
        return {k[:1].upper() + k[1:]: ec2_shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [ec2_shape(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value in ("true", "false"):
        return value == "true"
    return value


def tag_list(tags: dict[str, str] | None) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in (tags or {}).items()]


def launch_template_data(inputs: dict[str, Any]) -> dict[str, Any]:
    """A LaunchTemplate resource's inputs as EC2's LaunchTemplateData."""
    data: dict[str, Any] = {"ImageId": inputs["imageId"], "UserData": inputs.get("userData", "")}
    for key in ("instanceType", "metadataOptions", "blockDeviceMappings", "instanceMarketOptions", "placement",
                "iamInstanceProfile"):
        if inputs.get(key) is not None:
            data[key[:1].upper() + key[1:]] = ec2_shape(inputs[key])
    data["NetworkInterfaces"] = [
        {**{k: v for k, v in ec2_shape(n).items() if k != "SecurityGroups"}, "Groups": n.get("securityGroups", [])}
        for n in inputs.get("networkInterfaces", [])]
    data["TagSpecifications"] = [{"ResourceType": t["resourceType"], "Tags": tag_list(t.get("tags"))}
                                 for t in inputs.get("tagSpecifications", [])]
    return data


@dataclass(frozen=True)
class Registered:
    """One resource registration the engine saw."""

    typ: str
    name: str
    inputs: dict[str, Any]
    custom: bool
    secret_inputs: frozenset[str]


@dataclass
class Made:
    """A resource made in the stand-in: what `destroy` removes."""

    typ: str
    name: str
    id: str
    inputs: dict[str, Any]
    state: dict[str, Any]


@dataclass
class StackRun:
    """One program run: what was registered and made, and the resolved stack outputs."""

    resources: list[Registered]
    outputs: dict[str, Any] = field(default_factory=dict)
    secret: dict[str, bool] = field(default_factory=dict)


class StandInEngine:
    """Pulumi's mocks (pulumi.runtime.Mocks) making every resource in the stand-in that
    `session` (boto3's, pointed at the moto server) reaches."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.region = str(session.region_name)
        names = ("ec2", "iam", "sqs", "secretsmanager", "s3", "efs", "events", "sts")
        self.ec2, self.iam, self.sqs, self.secrets, self.s3, self.efs, self.events, self.sts = (
            session.client(n) for n in names)
        self.resources: list[Registered] = []
        self.made: list[Made] = []
        self.seconds: dict[str, float] = {}
        """'<type> <name>' -> seconds it took to make (the golden image's bake most of all)."""
        self.ignore_changes: dict[tuple[str, str], frozenset[str]] = {}
        """(type, name) -> the properties its registration's `ignore_changes` names."""
        self.stack: dict[tuple[str, str], Made] = {}
        """An update's starting point: what the stack held before it (empty: a first `up`)."""
        self.steps: dict[str, str] = {}
        """'<type> <name>' -> what the last update did to it: same, update, replace or create."""
        self.replaced: list[Made] = []
        """Resources an update replaced, deleted when it ends."""

    # ------------------------------------------------------------------ Pulumi's mocks

    def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
        inputs = plain(args.inputs)
        self.resources.append(Registered(args.typ, args.name, inputs, bool(args.custom),
                                         frozenset(secret_keys(args.inputs))))
        if not args.custom:
            return f"{args.name}-id", dict(args.inputs)
        old = self.stack.get((args.typ, args.name))
        if old is not None:
            return self._update(old, args, inputs)
        if self.stack:
            self.steps[f"{args.typ} {args.name}"] = "create"
        maker = MAKERS.get(args.typ)
        if maker is None:
            raise ProvisionError(f"the AWS rehearsal cannot make a {args.typ} ({args.name}): the stand-in's engine "
                                 "(tests/harness/rehearsal/stack.py) needs a maker for it")
        started = time.monotonic()
        made_id, outs = maker(self, args.name, inputs)
        self.seconds[f"{args.typ} {args.name}"] = time.monotonic() - started
        state = {**dict(args.inputs), **outs}
        self.made.append(Made(args.typ, args.name, made_id, inputs, outs))
        log.info("made %s %s: %s", args.typ, args.name, made_id)
        return made_id, state

    def call(self, args: Any) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        if args.token == "aws:ec2/getAmi:getAmi":
            filters = [{"Name": f["name"], "Values": f["values"]} for f in args.args.get("filters", [])]
            # moto keeps no architecture for an image registered without a snapshot: that
            # filter is applied here, to the images that have one
            by_name = [f for f in filters if f["Name"] != "architecture"]
            arch = next((f["Values"] for f in filters if f["Name"] == "architecture"), None)
            images = sorted((i for i in self.ec2.describe_images(Filters=by_name)["Images"]
                             if arch is None or i.get("Architecture", arch[0]) in arch),
                            key=lambda i: i["CreationDate"])
            if not images:
                raise ProvisionError(f"the stand-in has no AMI matching {filters}")
            image = images[-1]
            return {"id": image["ImageId"], "imageId": image["ImageId"], "name": image["Name"],
                    "architecture": image.get("Architecture", "x86_64"), "ownerId": image["OwnerId"]}, []
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            me = self.sts.get_caller_identity()
            return {"accountId": me["Account"], "arn": me["Arn"], "id": me["Account"], "userId": me["UserId"]}, []
        raise ProvisionError(f"the AWS rehearsal cannot answer the invoke {args.token}: the stand-in's engine "
                             "(tests/harness/rehearsal/stack.py) needs an answer for it")

    def _update(self, old: Made, args: Any, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A resource the stack holds, registered again: left alone, updated or replaced."""
        key = f"{args.typ} {args.name}"
        ignored = self.ignore_changes.get((args.typ, args.name), frozenset())
        changed = sorted(k for k in set(inputs) | set(old.inputs)
                         if k not in ignored and comparable(inputs.get(k)) != comparable(old.inputs.get(k)))
        started = time.monotonic()
        if not changed:
            self.steps[key] = "same"
            return old.id, {**dict(args.inputs), **old.state}
        if args.typ == DYNAMIC:
            made_id, outs = self._update_dynamic(old, inputs, key)
        else:
            updater = UPDATERS.get(args.typ)
            refused = [k for k in changed if updater is None or k not in updater[0]]
            if refused:
                raise ProvisionError(f"the AWS rehearsal cannot update {key}: its {', '.join(refused)} changed, which "
                                     "the stand-in's engine (tests/harness/rehearsal/stack.py) does not update in "
                                     "place")
            assert updater is not None
            made_id, outs = old.id, updater[1](self, old, inputs)
            self.steps[key] = "update"
        self.seconds[key] = time.monotonic() - started
        made = Made(args.typ, args.name, made_id, inputs, outs)
        self.made[self.made.index(old)] = made
        log.info("%s %s %s: %s", self.steps[key], args.typ, args.name, made_id)
        return made_id, {**dict(args.inputs), **outs}

    def _update_dynamic(self, old: Made, inputs: dict[str, Any], key: str) -> tuple[str, dict[str, Any]]:
        """The dynamic provider's own diff (olds: the outputs it returned; news: the inputs),
        then its update, or a replacement made before the old one goes."""
        provider = pickle.loads(base64.b64decode(inputs["__provider"]))
        news = {k: v for k, v in inputs.items() if k != "__provider"}
        diff = provider.diff(old.id, {**old.inputs, **old.state}, news)
        if not diff.changes and not diff.replaces:
            self.steps[key] = "same"
            return old.id, dict(old.state)
        if diff.replaces:
            self.replaced.append(old)
            self.steps[key] = "replace"
            return self.create_dynamic(old.name, provider, news)
        self.steps[key] = "update"
        result = provider.update(old.id, {**old.inputs, **old.state}, news)
        return old.id, dict(result.outs or old.state)

    def begin_update(self) -> None:
        """A second `pulumi up`: the program's registrations are diffed with what the stack holds."""
        self.stack = {(m.typ, m.name): m for m in self.made}
        self.resources, self.steps, self.replaced = [], {}, []

    def end_update(self) -> list[str]:
        """What an update leaves to its end, as Pulumi does: the replaced resources deleted,
        and those the program no longer registers. Problems, one line each."""
        registered = {(r.typ, r.name) for r in self.resources}
        gone = [*self.replaced, *(m for m in reversed(self.made) if (m.typ, m.name) not in registered)]
        self.made = [m for m in self.made if (m.typ, m.name) in registered]
        problems = []
        for made in gone:
            remover = REMOVERS.get(made.typ)
            try:
                if remover is not None:
                    remover(self, made)
            except Exception as e:  # the rest goes on; the caller reports what stayed
                problems.append(f"{made.typ} {made.name} ({made.id}): {e}")
        self.stack, self.replaced = {}, []
        return problems

    def create_dynamic(self, name: str, provider: Any, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """What Pulumi's engine does with a dynamic resource: its provider, pickled by the
        program into the inputs, unpickled and asked to create."""
        result = provider.create(props)
        return str(result.id), dict(result.outs or {})

    # ------------------------------------------------------------------ destroy

    def destroy(self) -> list[str]:
        """Remove everything made, newest first; the problems (one line each)."""
        problems = []
        while self.made:
            made = self.made.pop()
            remover = REMOVERS.get(made.typ)
            if remover is None:
                continue
            try:
                remover(self, made)
            except Exception as e:  # the rest goes on; the caller reports what stayed
                problems.append(f"{made.typ} {made.name} ({made.id}): {e}")
        return problems

    def wait_instances_gone(self, ids: list[str]) -> None:
        deadline = time.monotonic() + GONE_TIMEOUT
        while ids:
            found = self.ec2.describe_instances(InstanceIds=ids)["Reservations"]
            if all(i["State"]["Name"] == "terminated" for r in found for i in r["Instances"]):
                return
            if time.monotonic() > deadline:
                raise ProvisionError(f"instances {ids} not terminated after {GONE_TIMEOUT} s")
            time.sleep(0.5)


def comparable(value: Any) -> Any:
    """An input as Pulumi's diff sees it: an asset by its content (a FileAsset's file's
    digest), everything else as it is."""
    path = getattr(value, "path", None)
    if isinstance(path, str):
        return ("asset", hashlib.sha256(Path(path).read_bytes()).hexdigest())
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


# ---------------------------------------------------------------------- makers

Maker = Callable[[StandInEngine, str, dict[str, Any]], tuple[str, dict[str, Any]]]
Remover = Callable[[StandInEngine, Made], None]


def _vpc(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    vpc = e.ec2.create_vpc(CidrBlock=i["cidrBlock"], TagSpecifications=[
        {"ResourceType": "vpc", "Tags": tag_list(i.get("tags"))}])["Vpc"]["VpcId"]
    for attribute in ("enableDnsSupport", "enableDnsHostnames"):
        if i.get(attribute) is not None:
            e.ec2.modify_vpc_attribute(VpcId=vpc, **{attribute[:1].upper() + attribute[1:]: {"Value": i[attribute]}})
    group = e.ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc]},
                                                    {"Name": "group-name", "Values": ["default"]}])
    return vpc, {"defaultSecurityGroupId": group["SecurityGroups"][0]["GroupId"]}


def _subnet(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    subnet = e.ec2.create_subnet(VpcId=i["vpcId"], CidrBlock=i["cidrBlock"], AvailabilityZone=i["availabilityZone"],
                                 TagSpecifications=[{"ResourceType": "subnet", "Tags": tag_list(i.get("tags"))}])
    return str(subnet["Subnet"]["SubnetId"]), {}


def _default_group(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    group = e.ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [i["vpcId"]]},
                                                    {"Name": "group-name", "Values": ["default"]}])
    return str(group["SecurityGroups"][0]["GroupId"]), {}


def _permission(rule: dict[str, Any], own: str) -> dict[str, Any]:
    permission: dict[str, Any] = {"IpProtocol": rule["protocol"], "FromPort": int(rule.get("fromPort", 0)),
                                  "ToPort": int(rule.get("toPort", 0))}
    description = {"Description": rule["description"]} if rule.get("description") else {}
    if rule.get("cidrBlocks"):
        permission["IpRanges"] = [{"CidrIp": c, **description} for c in rule["cidrBlocks"]]
    groups = [*rule.get("securityGroups", []), *([own] if rule.get("self") else [])]
    if groups:
        permission["UserIdGroupPairs"] = [{"GroupId": g, **description} for g in groups]
    return permission


def _security_group(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    group = str(e.ec2.create_security_group(
        GroupName=i.get("name", name), Description=i.get("description", "Managed by Pulumi"), VpcId=i["vpcId"],
        TagSpecifications=[{"ResourceType": "security-group", "Tags": tag_list(i.get("tags"))}])["GroupId"])
    if i.get("ingress"):
        e.ec2.authorize_security_group_ingress(GroupId=group,
                                               IpPermissions=[_permission(r, group) for r in i["ingress"]])
    egress = e.ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"][0]["IpPermissionsEgress"]
    if egress:  # EC2 gives a new group "all out"; the AWS provider replaces it with the program's rules
        e.ec2.revoke_security_group_egress(GroupId=group, IpPermissions=egress)
    if i.get("egress"):
        e.ec2.authorize_security_group_egress(GroupId=group, IpPermissions=[_permission(r, group) for r in i["egress"]])
    return group, {}


def _internet_gateway(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    gateway = str(e.ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"])
    e.ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=i["vpcId"])
    return gateway, {}


def _eip(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    address = e.ec2.allocate_address(Domain="vpc")
    if i.get("instance"):
        e.ec2.associate_address(AllocationId=address["AllocationId"], InstanceId=i["instance"])
    return str(address["AllocationId"]), {"publicIp": address["PublicIp"], "allocationId": address["AllocationId"]}


def _nat_gateway(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    nat = e.ec2.create_nat_gateway(SubnetId=i["subnetId"], AllocationId=i["allocationId"])["NatGateway"]
    return str(nat["NatGatewayId"]), {}


def _route_table(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    table = str(e.ec2.create_route_table(VpcId=i["vpcId"])["RouteTable"]["RouteTableId"])
    for route in i.get("routes", []):
        target = {"GatewayId": route["gatewayId"]} if route.get("gatewayId") else {
            "NatGatewayId": route["natGatewayId"]}
        e.ec2.create_route(RouteTableId=table, DestinationCidrBlock=route["cidrBlock"], **target)
    return table, {}


def _route_table_association(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    made = e.ec2.associate_route_table(RouteTableId=i["routeTableId"], SubnetId=i["subnetId"])
    return str(made["AssociationId"]), {}


def _role(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    role = e.iam.create_role(RoleName=name, AssumeRolePolicyDocument=i["assumeRolePolicy"])["Role"]
    for arn in i.get("managedPolicyArns", []):
        e.iam.attach_role_policy(RoleName=name, PolicyArn=arn)
    return name, {"arn": role["Arn"], "name": name, "uniqueId": role["RoleId"]}  # a role's id is its name


def _role_policy(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    e.iam.put_role_policy(RoleName=i["role"], PolicyName=name, PolicyDocument=i["policy"])
    return f"{i['role']}:{name}", {}


def _role_policy_attachment(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    e.iam.attach_role_policy(RoleName=i["role"], PolicyArn=i["policyArn"])
    return f"{i['role']}-{name}", {}


def _instance_profile(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    profile = e.iam.create_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    e.iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=i["role"])
    return name, {"arn": profile["Arn"], "name": name}


def _secret(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    arn = e.secrets.create_secret(Name=i.get("name", name), Description=i.get("description", ""),
                                  Tags=tag_list(i.get("tags")))["ARN"]
    return str(arn), {"arn": arn}  # a secret's id is its ARN


def _secret_version(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    version = e.secrets.put_secret_value(SecretId=i["secretId"], SecretString=i["secretString"])["VersionId"]
    return f"{i['secretId']}|{version}", {"versionId": version}


def _random_bytes(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    raw = secrets.token_bytes(int(i["length"]))
    return "none", {"base64": base64.b64encode(raw).decode(), "hex": raw.hex()}


def _random_password(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return "none", {"result": "".join(secrets.choice(alphabet) for _ in range(int(i["length"])))}


def _bucket(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    bucket = i.get("bucket", name)
    e.s3.create_bucket(Bucket=bucket)
    return bucket, {"bucket": bucket, "arn": f"arn:aws:s3:::{bucket}"}


def _public_access_block(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    keys = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    e.s3.put_public_access_block(Bucket=i["bucket"], PublicAccessBlockConfiguration={
        k[:1].upper() + k[1:]: bool(i.get(k, False)) for k in keys})
    return str(i["bucket"]), {}


def _bucket_object(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    source = i["source"]
    path = getattr(source, "path", None)
    if path is None:
        raise ProvisionError(f"{name}: the rehearsal uploads file assets only, got {source!r}")
    extra = {"ServerSideEncryption": i["serverSideEncryption"]} if i.get("serverSideEncryption") else {}
    e.s3.put_object(Bucket=i["bucket"], Key=i["key"], Body=Path(path).read_bytes(), **extra)
    return str(i["key"]), {}


def _queue(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    attributes = {"SqsManagedSseEnabled": str(bool(i.get("sqsManagedSseEnabled"))).lower()}
    if i.get("messageRetentionSeconds"):
        attributes["MessageRetentionPeriod"] = str(int(i["messageRetentionSeconds"]))
    url = e.sqs.create_queue(QueueName=i.get("name", name), Attributes=attributes)["QueueUrl"]
    arn = e.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return str(url), {"url": url, "arn": arn}  # a queue's id is its URL


def _queue_policy(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    e.sqs.set_queue_attributes(QueueUrl=i["queueUrl"], Attributes={"Policy": i["policy"]})
    return str(i["queueUrl"]), {}


def _event_rule(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    rule_name = i.get("name", name)
    arn = e.events.put_rule(Name=rule_name, EventPattern=i["eventPattern"],
                            Description=i.get("description", ""))["RuleArn"]
    return str(rule_name), {"arn": arn, "name": rule_name}


def _event_target(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    target = i.get("targetId", name)
    e.events.put_targets(Rule=i["rule"], Targets=[{"Id": target, "Arn": i["arn"]}])
    return f"{i['rule']}-{target}", {"targetId": target}


def _file_system(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    fs = e.efs.create_file_system(CreationToken=name, Encrypted=bool(i.get("encrypted")),
                                  PerformanceMode=i.get("performanceMode", "generalPurpose"),
                                  ThroughputMode=i.get("throughputMode", "bursting"), Tags=tag_list(i.get("tags")))
    fs_id = str(fs["FileSystemId"])
    return fs_id, {"dnsName": f"{fs_id}.efs.{e.region}.amazonaws.com", "arn": fs["FileSystemArn"]}


def _mount_target(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    target = e.efs.create_mount_target(FileSystemId=i["fileSystemId"], SubnetId=i["subnetId"],
                                       SecurityGroups=i.get("securityGroups", []))
    return str(target["MountTargetId"]), {"ipAddress": target["IpAddress"]}


def _volume(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    volume = e.ec2.create_volume(AvailabilityZone=i["availabilityZone"], Size=int(i["size"]),
                                 VolumeType=i.get("type", "gp3"), Encrypted=bool(i.get("encrypted")),
                                 TagSpecifications=[{"ResourceType": "volume", "Tags": tag_list(i.get("tags"))}])
    return str(volume["VolumeId"]), {}


def _volume_attachment(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    e.ec2.attach_volume(Device=i["deviceName"], InstanceId=i["instanceId"], VolumeId=i["volumeId"])
    return f"vai-{i['volumeId']}", {}


def _launch_template(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    template = e.ec2.create_launch_template(
        LaunchTemplateName=i.get("name", name), LaunchTemplateData=launch_template_data(i),
        TagSpecifications=[{"ResourceType": "launch-template", "Tags": tag_list(i.get("tags"))}])["LaunchTemplate"]
    template_id = str(template["LaunchTemplateId"])
    return template_id, {"arn": f"arn:aws:ec2:{e.region}:{template['CreatedBy'].split(':')[4]}:launch-template/"
                                f"{template_id}", "latestVersion": template["LatestVersionNumber"],
                         "defaultVersion": template["DefaultVersionNumber"]}


def _instance(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    options: dict[str, Any] = {}
    if i.get("rootBlockDevice"):
        root = ec2_shape(i["rootBlockDevice"])
        options["BlockDeviceMappings"] = [{"DeviceName": "/dev/xvda", "Ebs": root}]
    if i.get("iamInstanceProfile"):
        options["IamInstanceProfile"] = {"Name": i["iamInstanceProfile"]}
    if i.get("keyName"):
        options["KeyName"] = i["keyName"]
    if i.get("metadataOptions"):
        options["MetadataOptions"] = ec2_shape(i["metadataOptions"])
    if i.get("userData"):
        options["UserData"] = i["userData"]
    made = e.ec2.run_instances(
        ImageId=i["ami"], InstanceType=i["instanceType"], SubnetId=i["subnetId"], MinCount=1, MaxCount=1,
        SecurityGroupIds=i.get("vpcSecurityGroupIds", []),
        TagSpecifications=[{"ResourceType": "instance", "Tags": tag_list(i.get("tags"))}], **options)["Instances"][0]
    return str(made["InstanceId"]), {"privateIp": made["PrivateIpAddress"], "privateDns": made.get("PrivateDnsName"),
                                     "arn": f"arn:aws:ec2:{e.region}::instance/{made['InstanceId']}"}


def _dynamic(e: StandInEngine, name: str, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return e.create_dynamic(name, pickle.loads(base64.b64decode(i["__provider"])),
                            {k: v for k, v in i.items() if k != "__provider"})


MAKERS: dict[str, Maker] = {
    "pulumi:providers:aws": lambda e, name, i: (f"{name}-provider", {}),
    "pulumi:providers:random": lambda e, name, i: (f"{name}-provider", {}),
    "aws:ec2/vpc:Vpc": _vpc,
    "aws:ec2/subnet:Subnet": _subnet,
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup": _default_group,
    "aws:ec2/securityGroup:SecurityGroup": _security_group,
    "aws:ec2/internetGateway:InternetGateway": _internet_gateway,
    "aws:ec2/eip:Eip": _eip,
    "aws:ec2/natGateway:NatGateway": _nat_gateway,
    "aws:ec2/routeTable:RouteTable": _route_table,
    "aws:ec2/routeTableAssociation:RouteTableAssociation": _route_table_association,
    "aws:iam/role:Role": _role,
    "aws:iam/rolePolicy:RolePolicy": _role_policy,
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": _role_policy_attachment,
    "aws:iam/instanceProfile:InstanceProfile": _instance_profile,
    "aws:secretsmanager/secret:Secret": _secret,
    "aws:secretsmanager/secretVersion:SecretVersion": _secret_version,
    "random:index/randomBytes:RandomBytes": _random_bytes,
    "random:index/randomPassword:RandomPassword": _random_password,
    "aws:s3/bucket:Bucket": _bucket,
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": _public_access_block,
    "aws:s3/bucketObjectv2:BucketObjectv2": _bucket_object,
    "aws:sqs/queue:Queue": _queue,
    "aws:sqs/queuePolicy:QueuePolicy": _queue_policy,
    "aws:cloudwatch/eventRule:EventRule": _event_rule,
    "aws:cloudwatch/eventTarget:EventTarget": _event_target,
    "aws:efs/fileSystem:FileSystem": _file_system,
    "aws:efs/mountTarget:MountTarget": _mount_target,
    "aws:ebs/volume:Volume": _volume,
    "aws:ec2/volumeAttachment:VolumeAttachment": _volume_attachment,
    "aws:ec2/launchTemplate:LaunchTemplate": _launch_template,
    "aws:ec2/instance:Instance": _instance,
    DYNAMIC: _dynamic,
}


# ---------------------------------------------------------------------- updaters

def _update_launch_template(e: StandInEngine, m: Made, i: dict[str, Any]) -> dict[str, Any]:
    """aws.ec2.LaunchTemplate's update: a change of the template's data is a new version
    (CreateLaunchTemplateVersion), made the default one when `update_default_version` says
    so (ModifyLaunchTemplate), as the AWS provider does (resource_aws_launch_template's
    update); the old versions stay."""
    version = e.ec2.create_launch_template_version(LaunchTemplateId=m.id, LaunchTemplateData=launch_template_data(i))
    number = int(version["LaunchTemplateVersion"]["VersionNumber"])
    default = m.state.get("defaultVersion")
    if i.get("updateDefaultVersion"):
        e.ec2.modify_launch_template(LaunchTemplateId=m.id, DefaultVersion=str(number))
        default = number
    return {**m.state, "latestVersion": number, "defaultVersion": default}


def _update_bucket_object(e: StandInEngine, m: Made, i: dict[str, Any]) -> dict[str, Any]:
    """aws.s3.BucketObjectv2's source changed: the object uploaded again under its key."""
    _bucket_object(e, m.name, i)
    return dict(m.state)


LAUNCH_TEMPLATE_DATA = frozenset({"imageId", "userData", "instanceType", "metadataOptions", "blockDeviceMappings",
                                  "instanceMarketOptions", "placement", "iamInstanceProfile", "networkInterfaces",
                                  "tagSpecifications", "updateDefaultVersion"})
UPDATERS: dict[str, tuple[frozenset[str], Callable[[StandInEngine, Made, dict[str, Any]], dict[str, Any]]]] = {
    "aws:ec2/launchTemplate:LaunchTemplate": (LAUNCH_TEMPLATE_DATA, _update_launch_template),
    "aws:s3/bucketObjectv2:BucketObjectv2": (frozenset({"source", "serverSideEncryption"}), _update_bucket_object),
}
"""Per type: the properties the AWS provider updates in place, and how; any other change
is refused (a replacement the engine would have to make)."""


# ---------------------------------------------------------------------- removers

def _remove_instance(e: StandInEngine, m: Made) -> None:
    e.ec2.terminate_instances(InstanceIds=[m.id])
    e.wait_instances_gone([m.id])


def _remove_eip(e: StandInEngine, m: Made) -> None:
    if m.inputs.get("instance"):
        for address in e.ec2.describe_addresses(AllocationIds=[m.id])["Addresses"]:
            if address.get("AssociationId"):
                e.ec2.disassociate_address(AssociationId=address["AssociationId"])
    e.ec2.release_address(AllocationId=m.id)


def _remove_role(e: StandInEngine, m: Made) -> None:
    for policy in e.iam.list_attached_role_policies(RoleName=m.id)["AttachedPolicies"]:
        e.iam.detach_role_policy(RoleName=m.id, PolicyArn=policy["PolicyArn"])
    e.iam.delete_role(RoleName=m.id)


def _remove_profile(e: StandInEngine, m: Made) -> None:
    e.iam.remove_role_from_instance_profile(InstanceProfileName=m.id, RoleName=m.inputs["role"])
    e.iam.delete_instance_profile(InstanceProfileName=m.id)


def _remove_bucket(e: StandInEngine, m: Made) -> None:
    for page in e.s3.get_paginator("list_objects_v2").paginate(Bucket=m.id):
        for item in page.get("Contents", []):
            e.s3.delete_object(Bucket=m.id, Key=item["Key"])
    e.s3.delete_bucket(Bucket=m.id)


def _remove_dynamic(e: StandInEngine, m: Made) -> None:
    provider = pickle.loads(base64.b64decode(m.inputs["__provider"]))
    provider.delete(m.id, {**{k: v for k, v in m.inputs.items() if k != "__provider"}, **m.state})


def _remove_gateway(e: StandInEngine, m: Made) -> None:
    e.ec2.detach_internet_gateway(InternetGatewayId=m.id, VpcId=m.inputs["vpcId"])
    e.ec2.delete_internet_gateway(InternetGatewayId=m.id)


def _remove_nat(e: StandInEngine, m: Made) -> None:
    e.ec2.delete_nat_gateway(NatGatewayId=m.id)


REMOVERS: dict[str, Remover] = {
    "aws:ec2/vpc:Vpc": lambda e, m: e.ec2.delete_vpc(VpcId=m.id),
    "aws:ec2/subnet:Subnet": lambda e, m: e.ec2.delete_subnet(SubnetId=m.id),
    "aws:ec2/securityGroup:SecurityGroup": lambda e, m: e.ec2.delete_security_group(GroupId=m.id),
    "aws:ec2/internetGateway:InternetGateway": _remove_gateway,
    "aws:ec2/eip:Eip": _remove_eip,
    "aws:ec2/natGateway:NatGateway": _remove_nat,
    "aws:ec2/routeTable:RouteTable": lambda e, m: e.ec2.delete_route_table(RouteTableId=m.id),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": lambda e, m: e.ec2.disassociate_route_table(
        AssociationId=m.id),
    "aws:iam/role:Role": _remove_role,
    "aws:iam/rolePolicy:RolePolicy": lambda e, m: e.iam.delete_role_policy(RoleName=m.inputs["role"],
                                                                          PolicyName=m.name),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": lambda e, m: e.iam.detach_role_policy(
        RoleName=m.inputs["role"], PolicyArn=m.inputs["policyArn"]),
    "aws:iam/instanceProfile:InstanceProfile": _remove_profile,
    "aws:secretsmanager/secret:Secret": lambda e, m: e.secrets.delete_secret(SecretId=m.id,
                                                                            ForceDeleteWithoutRecovery=True),
    "aws:s3/bucket:Bucket": _remove_bucket,
    "aws:s3/bucketObjectv2:BucketObjectv2": lambda e, m: e.s3.delete_object(Bucket=m.inputs["bucket"], Key=m.id),
    "aws:sqs/queue:Queue": lambda e, m: e.sqs.delete_queue(QueueUrl=m.id),
    "aws:cloudwatch/eventRule:EventRule": lambda e, m: e.events.delete_rule(Name=m.id),
    "aws:cloudwatch/eventTarget:EventTarget": lambda e, m: e.events.remove_targets(
        Rule=m.inputs["rule"], Ids=[m.state["targetId"]]),
    "aws:efs/fileSystem:FileSystem": lambda e, m: e.efs.delete_file_system(FileSystemId=m.id),
    "aws:efs/mountTarget:MountTarget": lambda e, m: e.efs.delete_mount_target(MountTargetId=m.id),
    "aws:ebs/volume:Volume": lambda e, m: e.ec2.delete_volume(VolumeId=m.id),
    "aws:ec2/volumeAttachment:VolumeAttachment": lambda e, m: e.ec2.detach_volume(
        VolumeId=m.inputs["volumeId"], InstanceId=m.inputs["instanceId"]),
    "aws:ec2/launchTemplate:LaunchTemplate": lambda e, m: e.ec2.delete_launch_template(LaunchTemplateId=m.id),
    "aws:ec2/instance:Instance": _remove_instance,
    DYNAMIC: _remove_dynamic,
}


# ---------------------------------------------------------------------- running the program

async def resolve_outputs(outputs: dict[str, Any], values: dict[str, Any], secret: dict[str, bool]) -> None:
    import pulumi

    for key, value in outputs.items():
        output = pulumi.Output.from_input(value)
        values[key] = await output.future()
        secret[key] = await output.is_secret()


def options_monitor(mocks: Any) -> Any:
    """Pulumi's mock monitor, handing each registration's `ignore_changes` to `mocks` (a
    StandInEngine) before the resource is made: what Pulumi's engine reads from it."""
    from pulumi.runtime.mocks import MockMonitor

    class Monitor(MockMonitor):
        def RegisterResource(self, request: Any) -> Any:
            if isinstance(mocks, StandInEngine):
                mocks.ignore_changes[(request.type, request.name)] = frozenset(request.ignoreChanges)
            return super().RegisterResource(request)  # type: ignore[no-untyped-call]

    return Monitor(mocks)


def run_main(config: dict[str, str], mocks: Any, stack: str = "rehearsal") -> StackRun:
    """What `pulumi up` runs - stacks/program.py's main() - under `mocks` (a
    StandInEngine, or the tests' recording mocks) with this stack config; its exports
    resolved. A problem of the program's (a spec error: pulumi.RunError) is raised. Run
    again after StandInEngine.begin_update, it is a second `pulumi up` of the stack."""
    import pulumi

    from stacks import program  # the rehearsal runs from a checkout

    exported: dict[str, Any] = {}
    run = StackRun(mocks.resources)
    export = pulumi.export
    pulumi.runtime.settings.reset_options()
    pulumi.runtime.set_mocks(mocks, project="slurmforge", stack=stack, preview=False, monitor=options_monitor(mocks))
    pulumi.runtime.set_all_config(config)
    setattr(pulumi, "export", lambda key, value: exported.__setitem__(key, value))  # noqa: B010

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def main() -> Any:
        program.main()
        return asyncio.ensure_future(resolve_outputs(exported, run.outputs, run.secret))

    try:
        main()
    finally:
        setattr(pulumi, "export", export)  # noqa: B010
        pulumi.runtime.set_all_config({})
    return run


def stack_config(spec: Path, region: str) -> dict[str, str]:
    """The stack config docs/aws.md has the user set: the spec's path and the region."""
    return {f"{CONFIG_NAMESPACE}:{SPEC_KEY}": str(spec), "aws:region": region}


def stack_output_json(run: StackRun, show_secrets: bool = False) -> dict[str, Any]:
    """What `pulumi stack output --json [--show-secrets]` prints for this run."""
    shown = {k: v if show_secrets or not run.secret[k] else "[secret]" for k, v in run.outputs.items()}
    return dict(json.loads(json.dumps(shown)))
