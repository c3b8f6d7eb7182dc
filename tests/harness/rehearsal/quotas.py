"""An account's EC2 Service Quotas for the stand-in: moto's Service Quotas knows VPC's
defaults only, and an account's applied quotas are its own (a new account has 0 vCPUs for P
and G instances: docs/aws.md, "A new account's GPU quota"). While `ec2_quotas(values)` is
open, GetServiceQuota for ServiceCode ec2 answers the given value per quota code, and a code
not given as AWS answers an unknown one (NoSuchResourceException)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


@contextmanager
def ec2_quotas(values: Mapping[str, float]) -> Iterator[None]:
    from moto.servicequotas.exceptions import NoSuchResource
    from moto.servicequotas.models import ServiceQuotasBackend

    original = ServiceQuotasBackend.get_service_quota

    def answer(self: Any, service_code: str, quota_code: str) -> dict[str, Any]:
        if service_code != "ec2":
            return original(self, service_code, quota_code)
        if quota_code not in values:
            raise NoSuchResource
        return {"ServiceCode": "ec2", "QuotaCode": quota_code, "Value": float(values[quota_code]),
                "Unit": "None", "Adjustable": True, "GlobalQuota": False}

    setattr(ServiceQuotasBackend, "get_service_quota", answer)  # noqa: B010
    try:
        yield
    finally:
        setattr(ServiceQuotasBackend, "get_service_quota", original)  # noqa: B010
