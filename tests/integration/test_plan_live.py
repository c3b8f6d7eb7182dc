"""Issue 26, item 1 on the running local cluster, read-only: `slurmforge plan` of the spec its
controller runs says "no changes" (exit 0); of an edited copy (a new partition, a shorter
MaxTime, a grown pool) it lists exactly those, what they cost the daemons, and the jobs in
flight they touch (exit 12). Nothing is applied; the only things this test does to the
cluster are a running and a pending job of its user, cancelled at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmforge.errors import SpecError
from slurmforge.hosts import HostRole
from slurmforge.inventory import read_hosts
from slurmforge.plan import deployed
from slurmforge.spec import parse_spec
from tests.harness.live import LiveCluster, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NEW_MAX_TIME = "01:00:00"
JOB_LIMIT = "02:00:00"
"""Over NEW_MAX_TIME: the running job runs past it, the pending one waits."""


def plan(spec: Path, inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmforge.cli", "plan", str(spec), "--inventory", str(inventory),
                           *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def deployed_spec(running_inventory: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The spec the running cluster's last rollout shipped, as its controller has it."""
    state = deployed.read(deployed.inventory_controllers(running_inventory))
    assert state.spec_text is not None, "the running cluster was never rolled out"
    try:
        parse_spec(state.spec_text, "deployed")
    except SpecError as exc:
        if os.environ.get("SLURMFORGE_TEST_INVENTORY"):  # a cluster another checkout rolled out
            pytest.skip(f"the running cluster's spec is not valid for this checkout: {exc.problems[0].line()}")
        raise
    data: dict[str, Any] = yaml.safe_load(state.spec_text)
    return data


@pytest.fixture
def jobs_in_flight(running_inventory: Path, deployed_spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """A running and a pending job (it begins in an hour) in ml-cpu, each asking for 2 hours."""
    hosts = read_hosts(running_inventory)
    controller = next(h for h in hosts if h.role is HostRole.CONTROLLER)
    login = next(h.name for h in hosts if h.role is HostRole.LOGIN)
    live = LiveCluster(deployed_spec["name"], controller.name, login, deployed_spec["users"][0]["name"],
                       controller.address)
    base = f"-p ml-cpu -t {JOB_LIMIT} -o /dev/null"
    running = live.submit(f"{base} --wrap 'sleep 300'")
    waiting = live.submit(f"{base} --begin=now+3600 --wrap 'sleep 5'")
    try:
        wait_until(lambda: live.squeue_state(running) == "RUNNING", 60, f"job {running} to run")
        yield running, waiting
    finally:
        live.root(f"scancel {running} {waiting}")


def test_the_running_spec_plans_no_change(running_inventory: Path, deployed_spec: dict[str, Any],
                                          tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(deployed_spec, sort_keys=False))
    started = time.monotonic()
    done = plan(spec, running_inventory, "--format", "json")
    seconds = time.monotonic() - started
    rows = json.loads(done.stdout)["rows"] if done.stdout else []
    assert [r for r in rows if r["cause"] != "drift"] == [], done.stdout
    if rows and os.environ.get("SLURMFORGE_TEST_INVENTORY"):
        pytest.skip(f"another slurmforge rolled the cluster out: {len(rows)} line(s) of its files differ")
    assert (done.returncode, rows) == (0, []), done.stdout + done.stderr
    assert done.stderr.startswith("plan for cluster dev: no changes")
    assert seconds < 10, seconds  # bench/plan_bench.py holds it to 3 s


def test_an_edit_plans_exactly_its_changes_and_counts_the_jobs(
        running_inventory: Path, deployed_spec: dict[str, Any], jobs_in_flight: tuple[str, str],
        tmp_path: Path) -> None:
    running, waiting = jobs_in_flight
    data = json.loads(json.dumps(deployed_spec))
    cpu = next(p for p in data["pools"] if p["name"] == "cpu")
    cpu["max_nodes"] += 2
    ml_cpu = next(p for p in data["partitions"] if p["name"] == "ml-cpu")
    ml_cpu["max_time"] = NEW_MAX_TIME
    data["partitions"].append({"name": "plan-test", "pools": ["cpu"], "max_time": "00:30:00"})
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    done = plan(spec, running_inventory, "--format", "json", "--detailed-exitcode")
    assert done.returncode == 12, done.stdout + done.stderr
    rows = [r for r in json.loads(done.stdout)["rows"] if r["cause"] != "drift"]
    first, last = cpu["max_nodes"] - 1, cpu["max_nodes"]
    assert [(r["kind"], r["name"], r["change"]) for r in rows if r["kind"] not in ("daemon", "jobs")] == [
        ("pool", "cpu", "grow"), ("node", f"dev-cpu-[{first:02d}-{last:02d}]", "add"),
        ("partition", "ml-cpu", "change"), ("partition", "scavenger", "change"), ("partition", "plan-test", "add")]
    assert f"MaxTime 1-00:00:00 -> {NEW_MAX_TIME}" in next(r["detail"] for r in rows if r["name"] == "ml-cpu")
    assert {(r["name"], r["change"]) for r in rows if r["kind"] == "daemon"} == {
        ("slurmctld", "reconfigure"), ("slurmctld", "restart"), ("slurmd", "reconfigure")}
    jobs = {r["change"]: r["jobs"].split(",") for r in rows if r["kind"] == "jobs"}
    assert running in jobs["run-past"] and waiting in jobs["wait"], rows
    # the table a person reads
    table = plan(spec, running_inventory, "--format", "table")  # it could plan: exit 0 without the flag
    title = table.stdout.splitlines()[0]
    assert table.returncode == 0 and title.startswith("plan for cluster dev: ") and "job(s) affected" in title
