"""EC2 calls with a role's credentials, authorized as AWS does (ec2_requests.py names what
each call is authorized on, authorization.py evaluates it against the Service Authorization
Reference's condition keys): the scheduler service's CreateFleet, tags and terminations, and
`slurmforge preflight`'s DryRuns. moto evaluates no condition at all, and the stand-in
used to let every EC2 call of an instance role pass.

A refused call gets EC2's own answer, `UnauthorizedOperation` (HTTP 403); an allowed call
with `DryRun=true` gets `DryRunOperation` (HTTP 412) without being made, as EC2 answers
("Request would have succeeded, but DryRun flag is set":
docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html).
"""

from __future__ import annotations

import json
from typing import Any

from werkzeug.exceptions import HTTPException

from tests.harness.rehearsal.authorization import decide
from tests.harness.rehearsal.ec2_requests import Ec2Account, calls


class Ec2Error(HTTPException):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(description=(
            f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error></Errors><RequestID>stand-in</RequestID></Response>"))
        self.code = status

    def get_headers(self, *args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        return [("Content-Type", "text/xml")]


def _document(policy: Any) -> dict[str, Any]:
    """A policy document from moto's IAM: an inline policy's JSON, or a managed policy."""
    if isinstance(policy, str):
        return dict(json.loads(policy))
    text = getattr(policy, "document", None) or policy.default_version.document
    return dict(json.loads(text) if isinstance(text, str) else text)


def policy_sets(account: str, access_key: str) -> tuple[str, list[list[dict[str, Any]]]] | None:
    """(the principal's ARN, its policy sets) for an assumed role's access key: the role's
    policies, and the session policy it was assumed with (the intersection of both
    applies); None for a key that is not an assumed role's."""
    from moto.iam.models import iam_backends
    from moto.sts.models import sts_backends

    for assumed in sts_backends[account]["aws"].assumed_roles:
        if assumed.access_key_id == access_key:
            role = assumed.role_arn.split("/")[-1]
            iam = iam_backends[account]["aws"]
            inline = [iam.get_role_policy(role, name)[1] for name in iam.list_role_policies(role)]
            attached, _ = iam.list_attached_role_policies(role)
            sets = [[_document(p) for p in [*inline, *attached]]]
            if assumed.policy:
                sets.append([_document(assumed.policy)])
            return f"arn:aws:sts::{account}:assumed-role/{role}/{assumed.session_name}", sets
    return None


def authorize(response: Any, access_key: str) -> None:
    """Raise EC2's answer when the call is refused, or when it was a DryRun."""
    found = policy_sets(response.current_account, access_key)
    if found is None:
        return
    principal, sets = found
    acct = Ec2Account(response.current_account, response.region)
    action = response._get_action()
    for name, targets in calls(acct, action, response.querystring):
        why = decide(sets, name, targets)
        if why is not None:
            raise Ec2Error(403, "UnauthorizedOperation", f"You are not authorized to perform this operation. "
                           f"User: {principal} is not authorized to perform: {name} ({why})")
    if str(response.querystring.get("DryRun", ["false"])[0]).lower() == "true":
        raise Ec2Error(412, "DryRunOperation", "Request would have succeeded, but DryRun flag is set.")
