"""Issue 12's proof that the scheduler service's venv holds its whole dependency closure:
the venv the rollout installed on each controller (offline, from the wheels the rollout
machine downloaded) imports the AWS provider and the SDK it runs on, as on an AWS
controller, although this cluster runs the local provider."""

from __future__ import annotations

import pytest

from slurmforge.contract import SERVICE_BIN
from slurmforge.hosts import controller_names
from tests.integration.conftest import Cluster_

pytestmark = pytest.mark.integration

IMPORT = "import boto3; from slurmforge.aws.provider import AwsProvider; print(boto3.__version__)"


def test_every_controllers_service_venv_imports_the_aws_provider(cluster: Cluster_) -> None:
    for controller in controller_names(cluster.spec):
        res = cluster.run(controller, f"{SERVICE_BIN}/python -c '{IMPORT}'")
        assert res.returncode == 0, f"{controller}: {res.stderr or res.stdout}"
        assert res.stdout.strip(), f"{controller}: no boto3 version printed"
