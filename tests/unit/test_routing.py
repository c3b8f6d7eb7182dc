"""Default pools: which partition a default pool stands for, and what the renderer makes of
it (JobSubmitPlugins and job_submit.lua). What slurmctld does with the script is proven in
tests/slurm/test_job_routing.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmforge.errors import SpecError
from slurmforge.render import lua_string, render_all
from slurmforge.spec import validate_data
from slurmforge.spec.models import Cluster
from slurmforge.spec.routing import pool_partition, pool_partitions, routing

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def local(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "examples/local.yaml").read_text())
    data.update(changes)
    return data


def test_one_partition_listing_the_pool_is_its_partition() -> None:
    spec = validate_data(local(), "local")
    assert pool_partition(spec, "gpu") == "ml-gpu"
    # the cpu pool is in ml-cpu (default) and scavenger: the default partition wins
    assert [p.name for p in pool_partitions(spec, "cpu")] == ["ml-cpu"]
    assert routing(spec).cpu_partition == "ml-cpu"


def test_of_several_the_one_with_fewest_pools_wins_and_a_tie_is_ambiguous() -> None:
    data = local()
    data["partitions"].append({"name": "all", "pools": ["cpu", "gpu"], "allow_groups": ["ml-users"]})
    data["pools"][1]["weight"] = 10
    spec = validate_data(data, "mixed")
    assert pool_partition(spec, "gpu") == "ml-gpu"
    data["partitions"].append({"name": "gpu-low", "pools": ["gpu"], "priority_tier": 0})
    with pytest.raises(SpecError) as refused:
        validate_data(data, "tie")
    assert [p.line().split(" (got")[0] for p in refused.value.problems] == [
        "scheduling.default_gpu_pool: pool is in partitions ml-gpu, gpu-low, each with 1 pool(s): which one takes "
        "jobs that name no partition is not clear"]
    spec = Cluster.model_validate(data)  # fields only: what the renderer does if it ever sees one
    assert [p.name for p in pool_partitions(spec, "gpu")] == ["ml-gpu", "gpu-low"]
    assert pool_partition(spec, "gpu") is None


def test_unset_and_unknown_pools_have_no_partition() -> None:
    spec = validate_data(local(), "local")
    assert pool_partition(spec, None) is None
    assert pool_partition(spec, "nope") is None


def test_without_default_pools_the_plugin_is_not_loaded() -> None:
    data = local()
    data["scheduling"] = {k: v for k, v in data["scheduling"].items() if not k.startswith("default_")}
    rendered = render_all(validate_data(data, "plain"))
    assert "JobSubmitPlugins" not in rendered["slurm.conf"]
    lua = rendered["job_submit.lua"]
    assert "slurm.conf does not load this script" in lua
    assert "local GPU_PARTITION = nil" in lua and "local CPU_PARTITION = nil" in lua


def test_one_default_pool_sends_only_its_jobs() -> None:
    data = local()
    del data["scheduling"]["default_cpu_pool"]
    rendered = render_all(validate_data(data, "gpu-only"))
    assert "JobSubmitPlugins=lua" in rendered["slurm.conf"].splitlines()
    lua = rendered["job_submit.lua"]
    assert 'local GPU_PARTITION = "ml-gpu"' in lua and "local CPU_PARTITION = nil" in lua


def test_gpu_gres_names_come_from_the_gpu_pools() -> None:
    data = yaml.safe_load((ROOT / "examples/pools-aws.yaml").read_text())
    spec = validate_data(data, "aws")
    assert "gpu" in routing(spec).gpu_gres
    lua = render_all(spec)["job_submit.lua"]
    assert 'local GPU_GRES = { ["gpu"] = true' in lua


def test_lua_string() -> None:
    assert lua_string(None) == "nil"
    assert lua_string("ml-gpu") == '"ml-gpu"'
    assert lua_string('a"b\\c') == '"a\\"b\\\\c"'
