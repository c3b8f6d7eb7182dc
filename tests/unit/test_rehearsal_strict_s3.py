"""The AWS rehearsal's S3 (tests.harness.rehearsal.strict_s3) against a moto server in this
process: it refuses Signature Version 2 and redirects the global endpoint for a bucket of
another region, as S3 does for a new bucket; SigV4 on the regional endpoint is served."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config

from stacks.common import s3_client
from tests.harness.rehearsal.strict_s3 import strict_s3
from tests.pulumi.conftest import moto_server

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with moto_server("us-east-1") as server, strict_s3():
        session = boto3.Session(region_name="us-east-1")
        session.client("s3").create_bucket(Bucket="east", ACL="private")
        s3_client(session, "eu-west-1").create_bucket(
            Bucket="west", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        for bucket in ("east", "west"):
            session.client("s3", config=Config(signature_version="s3v4")).put_object(Bucket=bucket, Key="k", Body=b"x")
        yield server


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:  # curl -f: a 3xx is the answer
        return None


def status(request: urllib.request.Request | str) -> tuple[int, str]:
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=10) as got:
            return got.status, got.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode() + e.headers.get("Location", "")


def test_a_sigv2_presigned_url_is_refused_and_sigv4_served(url: str) -> None:
    default = boto3.Session(region_name="us-east-1").client("s3")  # botocore's default: SigV2
    v2 = default.generate_presigned_url("get_object", Params={"Bucket": "east", "Key": "k"})
    assert "AWSAccessKeyId=" in v2
    code, body = status(v2)
    assert code == 400 and "AWS4-HMAC-SHA256" in body
    v4 = s3_client(boto3.Session(region_name="us-east-1"), "us-east-1").generate_presigned_url(
        "get_object", Params={"Bucket": "east", "Key": "k"})
    assert status(v4) == (200, "x")


def test_the_global_endpoint_redirects_a_bucket_of_another_region(url: str) -> None:
    for host, path in (("s3.amazonaws.com", "/west/k"), ("west.s3.amazonaws.com", "/k")):
        code, body = status(urllib.request.Request(url + path, headers={"Host": host}))
        assert code == 307 and body.endswith("https://west.s3.eu-west-1.amazonaws.com/k"), (host, code, body)
    # us-east-1's own buckets answer on the global host
    code, _ = status(urllib.request.Request(url + "/east/k", headers={"Host": "s3.amazonaws.com"}))
    assert code != 307
