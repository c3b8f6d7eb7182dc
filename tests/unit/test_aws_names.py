"""target.tags against what AWS enforces, where moto enforces it: every tag set moto's EC2
(RunInstances: 50 tags a resource) or IAM (CreateRole: keys of 128 characters, values of
256, its key characters, 50 tags, no two keys that differ only in case) refuses, the spec
refuses too. Each set is tried as the most a resource carries: the spec's tags plus every
key slurmforge sets itself. The rules moto leaves out (EC2's 127-character keys, the aws:
prefix, instance metadata's key characters, RDS's names) are the published ones, cited in
the checks' docstrings (slurmforge/spec/checks/site.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError
from moto import mock_aws

from slurmforge.errors import SpecError
from slurmforge.hosts import OWN_TAG_KEYS
from slurmforge.spec import validate_data
from slurmforge.spec.checks.site import MAX_USER_TAGS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
AMI = "ami-12c6146b"  # one of moto's own images
TRUST = '{"Version": "2012-10-17", "Statement": []}'

SAMPLES: dict[str, dict[str, str]] = {
    "a few": {"team": "ml-platform", "cost-center": "4711", "project": "vision 2025"},
    "as many as allowed": {f"tag{i}": "x" for i in range(MAX_USER_TAGS)},
    "one too many": {f"tag{i}": "x" for i in range(MAX_USER_TAGS + 1)},
    "longest key": {"k" * 127: "v"},
    "key of 128": {"k" * 128: "v"},
    "key of 129": {"k" * 129: "v"},
    "longest value": {"k": "v" * 256},
    "value of 257": {"k": "v" * 257},
    "key with #": {"team#1": "ml"},
    "key with ,": {"a,b": "c"},
    "keys differing in case": {"team": "ml", "Team": "ml"},
    "aws: prefix": {"aws:team": "ml"},
    "unicode value": {"owner": "José Núñez"},
}


def spec_accepts(tags: dict[str, str]) -> bool:
    data: dict[str, Any] = yaml.safe_load((ROOT / "examples/pools-aws.yaml").read_text())
    data["target"]["tags"] = tags
    try:
        validate_data(data, "tags")
    except SpecError as exc:
        assert all(p.path.startswith("target.tags") for p in exc.problems), [p.line() for p in exc.problems]
        return False
    return True


@pytest.fixture()
def aws() -> Iterator[tuple[Any, Any]]:
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1"), boto3.client("iam", region_name="us-east-1")


def moto_accepts(aws: tuple[Any, Any], tags: dict[str, str], n: int) -> bool:
    """An instance and an IAM role with these tags and slurmforge's own."""
    ec2, iam = aws
    every = [{"Key": k, "Value": v} for k, v in {**tags, **dict.fromkeys(OWN_TAG_KEYS, "x")}.items()]
    try:
        ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1,
                          TagSpecifications=[{"ResourceType": "instance", "Tags": every}])
        iam.create_role(RoleName=f"role{n}", AssumeRolePolicyDocument=TRUST, Tags=every)
    except ClientError:
        return False
    return True


def test_a_tag_set_moto_refuses_the_spec_refuses(aws: tuple[Any, Any]) -> None:
    verdicts = {name: (spec_accepts(tags), moto_accepts(aws, tags, n))
                for n, (name, tags) in enumerate(SAMPLES.items())}
    assert not [name for name, (spec, moto) in verdicts.items() if spec and not moto], verdicts
    refused_by_moto = {name for name, (_, moto) in verdicts.items() if not moto}
    assert refused_by_moto == {"one too many", "key of 129", "value of 257", "key with #", "key with ,",
                               "keys differing in case"}
    accepted = {name for name, (spec, _) in verdicts.items() if spec}
    assert accepted == {"a few", "as many as allowed", "longest key", "longest value", "unicode value"}
