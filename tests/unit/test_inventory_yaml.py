"""Every target's inventory YAML (hosts.yml, group_vars, the AWS stack's aws.yml and ceph.yml)
is written by one writer: its header, the data in its own order, and a file already equal is
left untouched (a converged inventory does not change under a running rollout)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from slurmforge.aws.inventory import FROM_STACK
from slurmforge.inventory import GENERATED, write_yaml

pytestmark = pytest.mark.unit


def test_header_data_in_order_and_an_equal_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "group_vars" / "all" / "aws.yml"
    write_yaml(path, {"b": 1, "a": [1, 2]}, FROM_STACK)
    text = path.read_text()
    assert text.splitlines()[:3] == [FROM_STACK, "b: 1", "a:"]
    assert yaml.safe_load(text) == {"b": 1, "a": [1, 2]}
    os.utime(path, ns=(0, 0))
    write_yaml(path, {"b": 1, "a": [1, 2]}, FROM_STACK)
    assert path.stat().st_mtime_ns == 0  # converged: not written again
    write_yaml(path, {"b": 2})
    assert path.read_text() == f"{GENERATED}\nb: 2\n" and path.stat().st_mtime_ns != 0
