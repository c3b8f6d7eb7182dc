"""EC2's instance metadata service for every instance of a moto server, IMDSv2 only.

A request is about the instance whose private address it comes from (the machines'
containers have their instance's address; a caller on this machine can be given one with
`addresses`). PUT /latest/api/token hands out a token for that instance (the TTL header is
required, as EC2's); every GET must carry a live token of the same instance, else 401.
Served, live from moto:

- meta-data/: ami-id, instance-id, instance-type, local-ipv4, local-hostname, hostname,
  public-keys/ (the launch's key pair: `0=<name>`, then 0/openssh-key, as cloud-init reads it),
  mac, network/interfaces/macs/<mac>/, placement/, tags/instance/<key> (only with InstanceMetadataTags enabled, as on
  EC2), iam/info and iam/security-credentials/<role>: credentials of the role of the
  instance's profile, assumed in moto (EC2 does that for a real instance);
- user-data (404 without), dynamic/instance-identity/document;
- any API version (`latest`, `2021-03-23`, ...), directories as listings - cloud-init's
  EC2 datasource walks the tree.

moto does not copy a launch template's profile and metadata options onto the instances an
EC2 Fleet launches from it (EC2 does): for those, the template's apply.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

ADDRESS = "169.254.169.254"
"""Where an instance reaches the service (EC2's link-local address)."""
TOKEN_PATH = "/latest/api/token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
MAX_TTL = 21600
VERSION = re.compile(r"^/(latest|\d{4}-\d{2}-\d{2})(/.*)?$")
REFRESH_SECONDS = 300
"""Role credentials are assumed again this long before they expire."""

SERVICE_USER = "slurmforge-rehearsal-aws"
Tree = dict[str, "Tree | str"]


def service_session(session: Any) -> Any:
    """A boto3 session for AWS's own side of the stand-in (the metadata service, the
    machines): an IAM user of the account allowed everything. When moto enforces IAM on the
    instances' calls (`enable_iam_authentication`) it checks every request, and the test
    credentials are nobody's; this user's calls still pass, as EC2's own do on AWS."""
    import boto3  # type: ignore[import-untyped]

    iam = session.client("iam")
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_user(UserName=SERVICE_USER)
    iam.put_user_policy(UserName=SERVICE_USER, PolicyName="everything", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName=SERVICE_USER)["AccessKey"]
    return boto3.Session(aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"],
                         region_name=session.region_name)


def _utc(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Imds:
    def __init__(self, session: Any, bind: tuple[str, int] = ("127.0.0.1", 0),
                 addresses: Mapping[str, str] | None = None) -> None:
        """`session`: boto3's, pointed at the moto server (`service_session` for one that
        works while moto enforces IAM); `addresses`: source address -> instance id, for
        callers that are not an instance's container."""
        self.ec2, self.iam, self.sts = (session.client(s) for s in ("ec2", "iam", "sts"))
        self.region = str(session.region_name)
        self.addresses = dict(addresses or {})
        self.tokens: dict[str, tuple[str, float]] = {}
        """token -> (instance id, expiry)"""
        self.credentials: dict[tuple[str, str], dict[str, str]] = {}
        self.answered: list[tuple[str, str, str, int]] = []
        """(instance id or source address, method, path, status) of every request."""
        self.lock = threading.Lock()
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                imds._answer(self, "PUT")

            def do_GET(self) -> None:
                imds._answer(self, "GET")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(bind, Handler)
        self.server.daemon_threads = True
        self.host, self.port = str(self.server.server_address[0]), int(self.server.server_address[1])
        self.url = f"http://{self.host}:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True, name="imds")
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    # ------------------------------------------------------------------ HTTP

    def _answer(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        source = handler.client_address[0]
        try:
            instance_id = self.instance_at(source)
            if instance_id is None:
                status, body = 404, b""
            elif method == "PUT":
                status, body = self.put(instance_id, handler.path, handler.headers.get(TTL_HEADER))
            else:
                status, body = self.get(instance_id, handler.path, handler.headers.get(TOKEN_HEADER))
        except Exception:
            log.exception("IMDS %s %s from %s", method, handler.path, source)
            instance_id, status, body = None, 500, b""
        with self.lock:
            self.answered.append((instance_id or source, method, handler.path, status))
        handler.send_response(status)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        try:
            handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the caller gave up waiting (its timeout): its loss
            log.debug("IMDS %s %s from %s: the caller left before the answer", method, handler.path, source)

    def instance_at(self, address: str) -> str | None:
        """The instance a request from `address` is about: the one with that private address
        (not terminated)."""
        if address in self.addresses:
            return self.addresses[address]
        found = [i for r in self.ec2.describe_instances(Filters=[
            {"Name": "private-ip-address", "Values": [address]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping"]}])["Reservations"]
            for i in r["Instances"]]
        return str(found[0]["InstanceId"]) if found else None

    def put(self, instance_id: str, path: str, ttl: str | None) -> tuple[int, bytes]:
        if path != TOKEN_PATH:
            return 405, b""
        if ttl is None or not ttl.isdigit() or not 1 <= int(ttl) <= MAX_TTL:
            return 400, b""
        token = secrets.token_urlsafe(32)
        with self.lock:
            self.tokens[token] = (instance_id, time.monotonic() + int(ttl))
        return 200, token.encode()

    def get(self, instance_id: str, path: str, token: str | None) -> tuple[int, bytes]:
        with self.lock:
            holder, expiry = self.tokens.get(token or "", ("", 0.0))
        if holder != instance_id or time.monotonic() > expiry:
            return 401, b""
        match = VERSION.match(path.split("?", 1)[0])
        if match is None:
            return 404, b""
        parts = [p for p in (match.group(2) or "").split("/") if p]
        if not parts:
            return 200, b"dynamic\nmeta-data\nuser-data"
        if parts == ["user-data"]:
            data = self.user_data(instance_id)
            return (200, data) if data else (404, b"")
        node: Tree | str = {"meta-data": self.meta_data(instance_id), "dynamic": {
            "instance-identity": {"document": json.dumps(self.identity(instance_id), indent=2)}}}
        for part in parts:
            if not isinstance(node, dict) or part not in node:
                return 404, b""
            node = node[part]
        if isinstance(node, dict) and parts[-2:] == ["meta-data", "public-keys"]:
            # EC2 lists a key as <index>=<key name>; its formats are under <index>/
            keys = self.key_names(instance_id)
            return 200, "\n".join(f"{index}={keys[int(index)]}" for index in node).encode()
        if isinstance(node, dict):
            return 200, "\n".join(k + "/" if isinstance(v, dict) else k for k, v in node.items()).encode()
        return 200, node.encode()

    # ------------------------------------------------------------------ what is served

    def instance(self, instance_id: str) -> dict[str, Any]:
        """The instance as DescribeInstances has it, with its reservation's OwnerId."""
        reservation = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]
        return {**reservation["Instances"][0], "OwnerId": reservation.get("OwnerId", "")}

    def user_data(self, instance_id: str) -> bytes:
        value = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        raw = value.get("UserData", {}).get("Value")
        return base64.b64decode(raw) if raw else b""

    def launch_settings(self, instance: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
        """The instance's profile ARN and metadata options - for an instance launched by an
        EC2 Fleet, its launch template's."""
        profile = instance.get("IamInstanceProfile", {}).get("Arn")
        options = dict(instance.get("MetadataOptions") or {})
        for fleet in self.ec2.describe_fleets()["Fleets"]:
            if any(instance["InstanceId"] in i.get("InstanceIds", []) for i in fleet.get("Instances", [])):
                spec = fleet["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]
                data = self.ec2.describe_launch_template_versions(
                    LaunchTemplateId=spec["LaunchTemplateId"], Versions=[str(spec.get("Version", "$Default"))],
                )["LaunchTemplateVersions"][0]["LaunchTemplateData"]
                profile = data.get("IamInstanceProfile", {}).get("Arn", profile)
                options |= data.get("MetadataOptions") or {}
        return profile, options

    def role(self, profile_arn: str) -> dict[str, Any]:
        profile = self.iam.get_instance_profile(InstanceProfileName=profile_arn.rsplit("/", 1)[1])["InstanceProfile"]
        return dict(profile["Roles"][0])

    def role_credentials(self, instance_id: str, role: dict[str, Any]) -> dict[str, str]:
        """Credentials of `role` as IMDS serves them, assumed in moto, renewed before they
        expire."""
        key = (instance_id, str(role["RoleName"]))
        with self.lock:
            cached = self.credentials.get(key)
        if cached and datetime.fromisoformat(cached["Expiration"]).timestamp() - time.time() > REFRESH_SECONDS:
            return cached
        assumed = self.sts.assume_role(RoleArn=role["Arn"], RoleSessionName=instance_id)["Credentials"]
        fresh = {"Code": "Success", "LastUpdated": _utc(datetime.now(UTC)), "Type": "AWS-HMAC",
                 "AccessKeyId": assumed["AccessKeyId"], "SecretAccessKey": assumed["SecretAccessKey"],
                 "Token": assumed["SessionToken"], "Expiration": _utc(assumed["Expiration"])}
        with self.lock:
            self.credentials[key] = fresh
        return fresh

    def meta_data(self, instance_id: str) -> Tree:
        i = self.instance(instance_id)
        profile, options = self.launch_settings(i)
        ip = str(i["PrivateIpAddress"])
        hostname = str(i.get("PrivateDnsName") or f"ip-{ip.replace('.', '-')}.ec2.internal")
        mac = str(i["NetworkInterfaces"][0]["MacAddress"])
        subnet = self.ec2.describe_subnets(SubnetIds=[i["SubnetId"]])["Subnets"][0]
        vpc = self.ec2.describe_vpcs(VpcIds=[i["VpcId"]])["Vpcs"][0]
        groups = i.get("SecurityGroups", [])
        tree: Tree = {
            "ami-id": str(i["ImageId"]), "ami-launch-index": str(i.get("AmiLaunchIndex", 0)),
            "hostname": hostname, "instance-id": instance_id, "instance-type": str(i["InstanceType"]),
            "local-hostname": hostname, "local-ipv4": ip, "mac": mac,
            "placement": {"availability-zone": str(i["Placement"]["AvailabilityZone"]), "region": self.region},
            "network": {"interfaces": {"macs": {mac: {
                "device-number": "0", "interface-id": str(i["NetworkInterfaces"][0]["NetworkInterfaceId"]),
                "local-hostname": hostname, "local-ipv4s": ip, "mac": mac, "owner-id": str(i["OwnerId"]),
                "security-group-ids": "\n".join(str(g["GroupId"]) for g in groups),
                "subnet-id": str(subnet["SubnetId"]), "subnet-ipv4-cidr-block": str(subnet["CidrBlock"]),
                "vpc-id": str(vpc["VpcId"]), "vpc-ipv4-cidr-block": str(vpc["CidrBlock"]),
                "vpc-ipv4-cidr-blocks": str(vpc["CidrBlock"])}}}},
            "security-groups": "\n".join(str(g["GroupName"]) for g in groups),
            "services": {"domain": "amazonaws.com", "partition": "aws"},
        }
        keys = self.key_names(instance_id)
        if keys:
            found = {str(k["KeyName"]): str(k.get("PublicKey", "")) for k in self.ec2.describe_key_pairs(
                KeyNames=keys, IncludePublicKey=True)["KeyPairs"]}
            tree["public-keys"] = {str(index): {"openssh-key": found[name].strip() + "\n"}
                                   for index, name in enumerate(keys)}
        if options.get("InstanceMetadataTags") == "enabled":
            tree["tags"] = {"instance": {str(t["Key"]): str(t["Value"]) for t in i.get("Tags", [])}}
        if profile:
            role = self.role(profile)
            credentials = self.role_credentials(instance_id, role)
            tree["iam"] = {
                "info": json.dumps({"Code": "Success", "LastUpdated": credentials["LastUpdated"],
                                    "InstanceProfileArn": profile, "InstanceProfileId": profile.rsplit("/", 1)[1]}),
                "security-credentials": {str(role["RoleName"]): json.dumps(credentials, indent=2)}}
        return tree

    def key_names(self, instance_id: str) -> list[str]:
        """The key pair the instance was launched with (EC2 serves one)."""
        name = self.instance(instance_id).get("KeyName")
        return [str(name)] if name else []

    def identity(self, instance_id: str) -> dict[str, Any]:
        i = self.instance(instance_id)
        return {"accountId": str(i["OwnerId"]), "architecture": "x86_64",
                "availabilityZone": i["Placement"]["AvailabilityZone"], "imageId": i["ImageId"],
                "instanceId": instance_id, "instanceType": i["InstanceType"], "privateIp": i["PrivateIpAddress"],
                "region": self.region, "version": "2017-09-30",
                "pendingTime": _utc(i["LaunchTime"])}
