"""AWS on this machine: a moto server, the metadata service of its instances and their
machines, all on this machine's own address (the machines' containers reach it; 127.0.0.1
would be their own loopback).

While `stand_in()` is open, this process's boto3 clients use the moto server
(AWS_ENDPOINT_URL and test credentials in the environment), as the Pulumi program's and the
scheduler service's do in the rehearsal; the environment is restored on exit.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from slurmforge.errors import ProvisionError
from tests.harness.rehearsal.ec2_iam import authorize
from tests.harness.rehearsal.imds import Imds, service_session
from tests.harness.rehearsal.machines import Machines
from tests.harness.rehearsal.strict_s3 import strict_s3

REGION = "us-east-1"


def host_address() -> str:
    """This machine's address on its default route: the containers reach it through their
    gateway (no packet is sent to find it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
        except OSError:
            raise ProvisionError("the AWS rehearsal needs an address the containers reach: this machine "
                                 "has no default route") from None
        address = str(probe.getsockname()[0])
    return address


PUBLIC_ADDRESSES = "198.51.100.0/24"
"""Where the stand-in's Elastic IPs come from: a documentation range, routed nowhere, so
this machine can send an address of it to its instance (machines.py); moto's own are
loopback addresses (127.x.y.z), which no rule can send elsewhere."""


@contextmanager
def public_addresses() -> Iterator[None]:
    """moto's Elastic IP addresses from PUBLIC_ADDRESSES while open."""
    import itertools

    from moto.ec2.models import elastic_ip_addresses

    hosts = itertools.cycle(str(a) for a in ipaddress.ip_network(PUBLIC_ADDRESSES).hosts())
    saved = elastic_ip_addresses.random_ip  # type: ignore[attr-defined]
    setattr(elastic_ip_addresses, "random_ip", lambda: next(hosts))  # noqa: B010
    try:
        yield
    finally:
        setattr(elastic_ip_addresses, "random_ip", saved)  # noqa: B010


ENFORCED_SERVICES = ("secretsmanager", "sqs")
"""The services whose calls by an instance role moto's own IAM checks against the role's
policies (Action and Resource; their statements have no conditions). EC2's calls, whose
statements have conditions moto does not evaluate, are authorized by ec2_iam.py with AWS's
resource types and condition keys per action."""


IAM_ACTIONS = {"sqs": {"DeleteMessageBatch": "DeleteMessage", "SendMessageBatch": "SendMessage",
                       "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}}
"""Calls AWS authorizes under another action's name: SQS's batch calls need the single
call's permission (there is no sqs:DeleteMessageBatch); moto checks the call's own name."""


def secret_arn(response: Any) -> str:
    """The secret a Secrets Manager call names, for the IAM check (moto's own checks every
    call against "*", which a policy naming its secrets never allows)."""
    secret_id = response._get_param("SecretId")
    try:
        return str(response.backend.describe_secret(secret_id).arn) if secret_id else "*"
    except Exception:  # an unknown secret: the call fails on its own after the check
        return "*"


@contextmanager
def instance_roles_enforced() -> Iterator[None]:
    """While open, moto checks every call signed with temporary credentials (an instance
    role's, served by the metadata service) to ENFORCED_SERVICES against that role's
    policies, as AWS does: a permission the stack forgot fails here as it would there. Calls
    with an IAM user's or the test keys (the admin, the stand-in's own side) are the
    account's and pass."""
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.secretsmanager.responses import SecretsManagerResponse

    original = ActionAuthenticatorMixin._authenticate_and_authorize_action

    def checked(self: Any, iam_request_cls: type, resource: str = "*") -> None:
        scope = self.headers.get("Authorization", "").partition("Credential=")[2].split("/")
        if len(scope) >= 4 and scope[0].startswith("ASIA") and scope[3] == "ec2":
            authorize(self, scope[0])  # with conditions, from AWS's reference (ec2_iam.py)
            original(self, iam_request_cls, resource)
            return
        if len(scope) < 4 or not scope[0].startswith("ASIA") or scope[3] not in ENFORCED_SERVICES:
            original(self, iam_request_cls, resource)
            return
        if isinstance(self, SecretsManagerResponse):
            resource = secret_arn(self)
        query = urllib.parse.urlparse(self.uri).query
        path = self.raw_path + (f"?{query}" if query else "")
        action = self._get_action()
        request = iam_request_cls(account_id=self.current_account, method=self.method, path=path,
                                  data=self.data, body=self.raw_body, headers=self.headers,
                                  action=IAM_ACTIONS.get(scope[3], {}).get(action, action))
        request.check_signature()
        request.check_action_permitted(resource)

    setattr(ActionAuthenticatorMixin, "_authenticate_and_authorize_action", checked)  # noqa: B010
    try:
        yield
    finally:
        setattr(ActionAuthenticatorMixin, "_authenticate_and_authorize_action", original)  # noqa: B010


def reset(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=30).close()


@dataclass
class StandIn:
    url: str
    """The moto server."""
    region: str
    session: Any
    imds: Imds
    machines: Machines


@contextmanager
def stand_in(region: str = REGION) -> Iterator[StandIn]:
    import boto3  # type: ignore[import-untyped]
    from moto.server import ThreadedMotoServer

    address = host_address()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the moto server's line per request
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": region}
    saved = {key: os.environ.get(key) for key in [*env, "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"]}
    os.environ.update(env)
    os.environ.pop("AWS_SESSION_TOKEN", None)
    server = ThreadedMotoServer(ip_address=address, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    imds = machines = None
    addresses, enforced, s3 = public_addresses(), instance_roles_enforced(), strict_s3()
    addresses.__enter__()
    enforced.__enter__()
    s3.__enter__()
    try:
        os.environ["AWS_ENDPOINT_URL"] = url
        reset(url)  # moto's backends are this process's: nothing from an earlier stand-in
        service = service_session(boto3.Session(region_name=region))
        imds = Imds(service, bind=(address, 0))
        machines = Machines(service, url, (imds.host, imds.port))
        machines.start()
        yield StandIn(url, region, boto3.Session(region_name=region), imds, machines)
    finally:
        if machines is not None:
            machines.close()
        if imds is not None:
            imds.close()
        reset(url)
        server.stop()
        s3.__exit__(None, None, None)
        enforced.__exit__(None, None, None)
        addresses.__exit__(None, None, None)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
