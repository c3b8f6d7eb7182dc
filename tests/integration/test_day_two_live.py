"""Day two on the running local cluster, with jobs in flight across each change and sacct
showing none lost:

- `slurmforge rotate munge-key --local`: a job runs across it; afterwards the store, every
  running node and a dynamic node powered up later hold the new key, the job finished.
- a user added to the spec and rolled out (`up --local` prints the plan first, which names
  the user) runs a job on a dynamic node that was up all along, with a job of its own, and
  no reboot; the spec as it was is rolled out again at the end.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmforge.inventory import read_inventory
from slurmforge.secrets import MUNGE_KEY
from slurmforge.state_dirs import secrets_dir
from tests.harness.live import LiveCluster, wait_until
from tests.integration.conftest import ROOT, SPEC, Cluster_

pytestmark = pytest.mark.integration

SPOT_PARTITION = "ml-spot"
NEW_USER = {"name": "dana", "uid": 3010, "groups": ["ml-users"], "accounts": ["research"],
            "default_account": "research"}


def cli(*args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmforge.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})


def spot_node(cluster: Cluster_) -> str:
    pool = next(p for p in cluster.spec.pools if p.name == "cpu-spot")
    return f"{cluster.spec.name}-{pool.name}-01"


def wait_state(live: LiveCluster, job: str, states: tuple[str, ...], timeout: float) -> str:
    return wait_until(lambda: next((s for s in [live.squeue_state(job)] if s in states), ""), timeout,
                      f"job {job} {'/'.join(states)}", every=1)


def wait_sacct(live: LiveCluster, jobs: list[str], timeout: float = 120) -> dict[str, str]:
    def finished() -> dict[str, str] | None:
        states = live.sacct_states(*jobs)
        return states if all(states.get(j, "").split()[:1] and states[j] not in ("RUNNING", "PENDING")
                             for j in jobs) else None

    return wait_until(finished, timeout, f"sacct records of {jobs}", every=2)


def key_digest(live: LiveCluster, node: str) -> str:
    return live.on(node, "md5sum < /etc/munge/munge.key").split()[0]


def test_rotate_munge_key_loses_no_job(cluster: Cluster_) -> None:
    live = cluster.live()
    store = secrets_dir(cluster.spec.name) / MUNGE_KEY
    before = store.read_bytes()
    job = live.submit("-o /dev/null -t 5 --mem=100 --wrap 'sleep 25'")
    wait_state(live, job, ("RUNNING",), 120)

    done = cli("rotate", "munge-key", "--local", "--cluster", cluster.spec.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rotated the munge key on" in done.stdout and "no Slurm daemon restarted" in done.stdout

    new = store.read_bytes()
    assert new != before and len(new) == 1024
    digest = hashlib.md5(new).hexdigest()
    _, hosts = read_inventory(cluster.report.inventory)
    running = live.running_containers()
    for host in hosts:
        if host.name in running and host.role.value != "ceph":
            assert key_digest(live, host.name) == digest, f"{host.name} kept the old munge key"
    assert live.squeue_state(job) == "RUNNING", "the job running across the rotation is gone"
    after = live.submit("-o /dev/null -t 2 --mem=100 --wrap true")
    # a dynamic node powered up after the rotation joins with the new key
    node = spot_node(cluster)
    live.power_down(node)
    spot = live.submit(f"-o /dev/null -t 2 --mem=100 -p {SPOT_PARTITION} -w {node} --wrap true")
    states = wait_sacct(live, [job, after, spot], timeout=300)
    assert set(states.values()) == {"COMPLETED"}, states
    assert key_digest(live, node) == digest


@pytest.fixture
def spec_with_user(cluster: Cluster_, tmp_path: Path) -> Any:
    data = yaml.safe_load(SPEC.read_text())
    data["users"].append(NEW_USER)
    edited = tmp_path / SPEC.name
    edited.write_text(yaml.safe_dump(data, sort_keys=False))
    yield edited
    back = cli("up", "--local", str(SPEC), "--no-job", "--no-validate")
    assert back.returncode == 0, back.stdout[-2000:] + back.stderr[-2000:]


# Its first run found slurmctld refusing dana ("User's group not permitted to use this
# partition") for up to GroupUpdateTime: the rollout now reconfigures when users or groups
# changed (roles/slurm_controller/tasks/service.yml), so the job below is accepted at once.
@pytest.mark.long
def test_added_user_runs_on_a_dynamic_node_up_all_along(cluster: Cluster_, spec_with_user: Path) -> None:
    live = cluster.live()
    node = spot_node(cluster)
    holder = live.submit(f"-o /dev/null -t 30 --mem=100 -n 1 -p {SPOT_PARTITION} -w {node} --wrap 'sleep 1500'")
    wait_state(live, holder, ("RUNNING",), 240)
    started = subprocess.run(["podman", "inspect", node, "--format", "{{.State.StartedAt}}"], capture_output=True,
                             text=True, check=True).stdout
    assert subprocess.run(["podman", "exec", node, "id", NEW_USER["name"]], capture_output=True).returncode != 0

    up = cli("up", "--local", str(spec_with_user), "--no-job", "--no-validate")
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    plan_part, _, _ = up.stdout.partition("roll out")
    assert NEW_USER["name"] in plan_part, f"the plan printed first does not name the new user:\n{plan_part}"
    assert f"users and groups changed on the running dynamic node(s) {node}" in up.stdout

    # no reboot: the same machine, the user there now, and a job of theirs runs on it
    assert subprocess.run(["podman", "inspect", node, "--format", "{{.State.StartedAt}}"], capture_output=True,
                          text=True, check=True).stdout == started
    assert live.squeue_state(holder) == "RUNNING"
    as_new = LiveCluster.of(cluster.spec, read_inventory(cluster.report.inventory)[1], user=NEW_USER["name"])
    theirs = as_new.submit(f"-o /dev/null -t 2 --mem=100 -n 1 -p {SPOT_PARTITION} -w {node} --wrap 'id -un'")
    live.root(f"scancel {holder}")
    states = wait_sacct(live, [holder, theirs], timeout=180)
    assert states[theirs] == "COMPLETED", states
    assert states[holder].startswith("CANCELLED"), states
