"""The node counts the spec allows are the ones the node image's slurmctld reads, and the
ones it refuses are ones slurmctld cannot start with: a config rendered from the spec at
each limit starts (every node there), one past it does not.

- A pool is one hostlist range (`NodeName=<prefix>-[00001-65536]`): Slurm reads at most
  65,536 hosts in a range (hostlist.c, MAX_RANGE); the models refuse a larger pool.
- slurmctld's node table: the pools together hold at most as many nodes (MAX_SLURM_NODES);
  the check node_count_slurm_holds refuses more.

The specs are examples/local.yaml reduced to one CLOUD pool (or two), validated by the
models; render_all writes them as for any cluster. slurm.conf is adapted only to run in a
temp dir (tests/slurm/daemons.py); every node is CLOUD, so slurmctld resolves none of them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from slurmforge.render import render_all
from slurmforge.spec import Cluster
from slurmforge.spec.checks.pools import node_count_slurm_holds
from slurmforge.spec.models import MAX_SLURM_NODES
from tests.judge import Judge, node_image
from tests.slurm.daemons import (
    AS_RENDERED,
    RunDir,
    adapt_for_tmp,
    free_port,
    power_stub_script,
    scontrol,
    start_munged,
    start_slurmctld,
)
from tests.slurm.specs import local_data

pytestmark = [pytest.mark.slurm]

START_TIMEOUT = 300.0
"""slurmctld makes 65,536 node records at start: half a minute on a busy machine."""


def pools_data(*sizes: int) -> dict[str, Any]:
    """local.yaml with CLOUD cpu pools of these sizes in one partition, nothing else."""
    data = local_data()
    cpu = data["pools"][0]
    cpu.pop("fallback")
    data["pools"] = [cpu | {"name": f"cpu{i}", "min_nodes": 0, "max_nodes": size} for i, size in enumerate(sizes)]
    data["partitions"] = [{"name": "all", "pools": [p["name"] for p in data["pools"]], "default": True}]
    data["scheduling"] = {"preemption": {"type": "none"}}
    data["head"] = {"backup_controller": False}
    return data


def unchecked(data: dict[str, Any]) -> Cluster:
    """The spec as the models take it (the cross-field checks are what is on trial)."""
    return Cluster.model_validate(data)


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(node_image()) as box:
        yield box


def slurmctld_starts(judge: Judge, spec: Cluster, refusal: str = "") -> tuple[bool, str]:
    """Does slurmctld come up on the rendered config, every node there? (False as soon as
    its log says `refusal`.) Its log either way."""
    rendered = render_all(spec, source="limits.yaml")
    run = RunDir.create()
    try:
        run.conf.write_text(adapt_for_tmp(rendered["slurm.conf"], run, judge.hostname, free_port(), free_port()))
        for name in AS_RENDERED:
            (run.root / name).write_text(rendered[name])
        for program in (run.power_stub, run.nodes_ready):
            program.write_text(power_stub_script())
            program.chmod(0o755)
        start_munged(judge, run)
        start_slurmctld(judge, run)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            log = run.ctld_log.read_text(errors="replace") if run.ctld_log.exists() else ""
            if (refusal and refusal in log) or not judge.is_running(f"slurmctld -D -c -f {run.conf}"):
                return False, log + (run.ctld_out.read_text(errors="replace") if run.ctld_out.exists() else "")
            if "is UP" in scontrol(judge, run, "ping")[1]:
                count = scontrol(judge, run, "show", "nodes", "-o")[1].count("NodeName=")
                assert count == sum(p.max_nodes for p in spec.pools), count
                return True, log
            time.sleep(1)
        raise AssertionError(f"slurmctld neither came up nor refused in {START_TIMEOUT:.0f} s")
    finally:
        for pid_file in (run.ctld_pid, run.root / "munged.pid"):
            judge.run(["sh", "-c", 'test -f "$1" && kill "$(cat "$1")"', "sh", str(pid_file)])
        run.remove()


def test_a_pool_is_at_most_one_hostlist_range(judge: Judge) -> None:
    at_cap = unchecked(pools_data(MAX_SLURM_NODES))
    assert not list(node_count_slurm_holds(at_cap))
    started, log = slurmctld_starts(judge, at_cap)
    assert started, log
    with pytest.raises(ValidationError, match="more nodes than one Slurm hostlist range holds"):
        unchecked(pools_data(MAX_SLURM_NODES + 1))
    over = at_cap.model_copy(update={"pools": [at_cap.pools[0].model_copy(update={"max_nodes": MAX_SLURM_NODES + 1})]})
    started, log = slurmctld_starts(judge, over, "Too many hosts in range")
    assert not started and "Too many hosts in range" in log, log[-3000:]


def test_the_pools_together_fit_slurmctlds_node_table(judge: Judge) -> None:
    """At the limit, the pools together hold as many nodes as the one pool above (which
    started); past it, slurmctld cannot make the node records."""
    half = MAX_SLURM_NODES // 2
    assert not list(node_count_slurm_holds(unchecked(pools_data(half, half))))
    over = unchecked(pools_data(half, half + 2))
    assert [p.line() for p in node_count_slurm_holds(over)] == [
        f"pools: 65,538 nodes in all; slurmctld holds at most 65,536; fix: lower max_nodes (pools[1], cpu1, has "
        f"{half + 2:,}), or run a second cluster"]
    started, log = slurmctld_starts(judge, over, "past max node limit")
    assert not started and "past max node limit" in log, log[-3000:]
