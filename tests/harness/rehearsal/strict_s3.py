"""S3 as strict as AWS's where moto is lenient: what a real account does with a request
that moto serves.

- Signature Version 2 is refused. S3 accepts only SigV4 for buckets created after
  2020-06-24 ("AWS Signature Version 2 turned off", docs.aws.amazon.com/AmazonS3/latest/
  userguide/UsingAWSSDK.html#UsingAWSSDK-sig2-deprecation): every bucket of the stand-in is
  new, so a SigV2 request - a presigned URL with `AWSAccessKeyId`/`Signature` in its query,
  or an `Authorization: AWS <key>:<signature>` header - gets the 400 S3 answers.
- The global endpoint redirects a bucket of another region. A request for a bucket outside
  us-east-1 on `s3.amazonaws.com` (path style) or `<bucket>.s3.amazonaws.com` gets a 307
  Temporary Redirect to the bucket's regional host while DNS catches up with a new bucket
  (docs.aws.amazon.com/AmazonS3/latest/userguide/Redirects.html); `curl -f` does not follow
  it. The stand-in's buckets are always new.

Applied to the moto server of this process (`strict_s3()`), in front of moto's own S3.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

GLOBAL_HOST = re.compile(r"^(?:(?P<bucket>[a-z0-9.-]+)\.)?s3(?:-external-1)?\.amazonaws\.com(?::\d+)?$")
SIGV2_REFUSED = ("InvalidRequest", "The authorization mechanism you have provided is not supported. "
                 "Please use AWS4-HMAC-SHA256.")


def is_sigv2(environ: dict[str, Any]) -> bool:
    """A request signed with Signature Version 2: in the query (a presigned URL) or the header."""
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    if "AWSAccessKeyId" in query and "Signature" in query:
        return True
    return str(environ.get("HTTP_AUTHORIZATION", "")).startswith("AWS ")


def global_bucket(environ: dict[str, Any]) -> tuple[str, str] | None:
    """(bucket, key path) of a request on S3's global endpoint; None for any other host."""
    found = GLOBAL_HOST.match(str(environ.get("HTTP_HOST", "")))
    if found is None:
        return None
    path = str(environ.get("PATH_INFO", "/"))
    if found.group("bucket"):
        return found.group("bucket"), path
    bucket, _, rest = path.lstrip("/").partition("/")
    return (bucket, "/" + rest) if bucket else None


def bucket_region(bucket: str) -> str | None:
    from moto.s3.models import s3_backends

    for account in s3_backends.values():
        found = account["global"].buckets.get(bucket) if "global" in account else None
        if found is not None:
            return str(found.region_name)
    return None


def _error(start_response: Any, status: str, code: str, message: str,
           headers: Iterable[tuple[str, str]] = ()) -> list[bytes]:
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error>").encode()
    start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body))), *headers])
    return [body]


def refusal(environ: dict[str, Any], start_response: Any) -> list[bytes] | None:
    """AWS's answer to an S3 request moto would serve, or None to let moto serve it."""
    if is_sigv2(environ):
        return _error(start_response, "400 Bad Request", *SIGV2_REFUSED)
    found = global_bucket(environ)
    if found is not None:
        bucket, path = found
        region = bucket_region(bucket)
        if region is not None and region != "us-east-1":
            query = environ.get("QUERY_STRING", "")
            location = f"https://{bucket}.s3.{region}.amazonaws.com{path}" + (f"?{query}" if query else "")
            return _error(start_response, "307 Temporary Redirect", "TemporaryRedirect",
                          "Please re-send this request to the specified temporary endpoint.",
                          [("Location", location)])
    return None


@contextmanager
def strict_s3() -> Iterator[None]:
    """While open, this process's moto servers answer S3 requests as AWS does (above)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original = DomainDispatcherApplication.__call__

    def strict(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        app = self.get_application(environ)
        if app is self.app_instances.get("s3"):
            answer = refusal(environ, start_response)
            if answer is not None:
                return answer
        return app(environ, start_response)

    setattr(DomainDispatcherApplication, "__call__", strict)  # noqa: B010
    try:
        yield
    finally:
        setattr(DomainDispatcherApplication, "__call__", original)  # noqa: B010
