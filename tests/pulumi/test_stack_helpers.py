"""The pure functions the components are made of: rules, scripts, documents."""

from __future__ import annotations

import base64
import gzip
import random

import pytest
import yaml

from slurmforge.aws.policy import SchedulerScope, partition, scheduler_policy
from slurmforge.errors import ProvisionError
from slurmforge.spec import validate_data
from slurmforge.spec.models import Ceph
from stacks.ceph import ceph_placements, osd_device
from stacks.cluster import aws_target, join_settings
from stacks.database import dns_name
from stacks.network import ssh_cidrs
from stacks.pool import USER_DATA_LIMIT, user_data
from tests.pulumi.conftest import POOLS_AWS

pytestmark = [pytest.mark.pulumi, pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]


def test_the_world_is_dropped_from_ssh_cidrs_without_the_flag() -> None:
    assert ssh_cidrs(["0.0.0.0/0", "10.1.0.0/16"], allow_anywhere=False) == ["10.1.0.0/16"]
    assert ssh_cidrs(["0.0.0.0/0"], allow_anywhere=True) == ["0.0.0.0/0"]


def test_user_data_is_the_program_plain_while_it_fits_ec2s_limit() -> None:
    program = "#!/bin/bash\necho joined\n"
    assert base64.b64decode(user_data(program)).decode() == program


def test_user_data_over_the_limit_goes_gzip_compressed_the_same_every_time() -> None:
    program = "#!/bin/bash\n" + "".join(f"echo {i}\n" for i in range(USER_DATA_LIMIT // 6))
    assert len(program) > USER_DATA_LIMIT
    raw = base64.b64decode(user_data(program))
    assert len(raw) <= USER_DATA_LIMIT and gzip.decompress(raw).decode() == program
    assert user_data(program) == user_data(program)  # no timestamp: no new template version


def test_user_data_that_does_not_fit_even_compressed_is_refused() -> None:
    program = "#!/bin/bash\n# " + base64.b64encode(random.Random(1).randbytes(2 * USER_DATA_LIMIT)).decode()
    with pytest.raises(ProvisionError, match="over EC2's 16384-byte user data limit"):
        user_data(program)


def test_pool_nodes_join_an_nfs_server_from_the_spec() -> None:
    data = yaml.safe_load(POOLS_AWS.read_text())
    data["storage"]["nas"] = {"kind": "nfs", "server": "nas.lab", "export": "/export/cluster/"}
    spec = validate_data(data, "pools-aws.yaml (nfs)")
    settings = join_settings(spec, aws_target(spec), ["10.0.0.5"], "arn:munge", None)
    assert settings.nas_source == "nas.lab:/export/cluster"
    assert (settings.target, settings.identity, settings.secrets) == ("aws", "aws-tag", "aws")
    assert settings.controllers == (("mlpools-controller", "10.0.0.5"),)
    assert join_settings(spec, aws_target(spec), ["10.0.0.5"], "arn:munge", "fs-1.efs").nas_source == (
        "nas.lab:/export/cluster")  # an EFS name matters only to an EFS spec


def test_scheduler_policy_uses_the_regions_partition() -> None:
    scope = SchedulerScope("c", "us-gov-west-1", "111122223333", ["arn:lt"], "arn:role", "arn:q")
    launch = scheduler_policy(scope)["Statement"][0]
    assert launch["Resource"][0] == "arn:aws-us-gov:ec2:us-gov-west-1:111122223333:*"
    assert (partition("cn-north-1"), partition("eu-west-1")) == ("aws-cn", "aws")


def test_database_dns_name() -> None:
    assert dns_name("acct.lab.internal") == ("lab.internal", "acct.lab.internal")
    assert dns_name("10.0.0.9") is None and dns_name("acct") is None


def test_ceph_hosts_round_robin_over_zones() -> None:
    placed = ceph_placements("c", Ceph(hosts=4, osds_per_host=3), ["z-a", "z-b"])
    assert [(p.name, p.zone) for p in placed] == [("c-ceph-1", "z-a"), ("c-ceph-2", "z-b"), ("c-ceph-3", "z-a"),
                                                  ("c-ceph-4", "z-b")]
    assert placed[0].devices == ["/dev/xvdba", "/dev/xvdbb", "/dev/xvdbc"] and osd_device(23) == "/dev/xvdbx"


