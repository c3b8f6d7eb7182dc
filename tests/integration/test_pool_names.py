"""Pool node names resolve on the real local cluster through slurmforge's own mechanism,
the one every target has (docs/node-lifecycle.md, "Names"), and through nothing else:

- podman's network has no DNS and the node kit names no dynamic node, so a dynamic node's
  name resolves only while the scheduler service publishes it in the kit's pool hosts (a
  powered-down one resolves nowhere);
- a 2-node job on freshly launched dynamic nodes finds both of its nodes by the names
  `scontrol show hostnames` gives, on each node (the Prolog added them to /etc/hosts before
  the job started), at their machines' addresses, and reaches slurmd there by name;
- the login node resolves them within the timer's period (slurmforge-hosts.timer, 30 s)
  after they were published, and stops resolving a node within it after its release (the
  head nodes run the join program, and with it the timer).

Node plan (examples/local.yaml): dev-cpu-03 and dev-cpu-04 (the cpu pool's dynamic nodes)
run the job; dev-cpu-fallback-01 is powered down and must not resolve.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from slurmforge.contract import HOSTS_REFRESH
from slurmforge.hosts import controller_name
from slurmforge.inventory import read_inventory
from slurmforge.local.container import ADDRESS_LABEL
from slurmforge.local.provider import LocalProvider
from slurmforge.node.kit import kit_dir, pool_hosts_file
from tests.harness.live import LiveCluster, wait_until
from tests.integration.conftest import Cluster_

pytestmark = pytest.mark.integration

PEERS = ("dev-cpu-03", "dev-cpu-04")
DOWN = "dev-cpu-fallback-01"
TIMER_PERIOD = 30
"""slurmforge-hosts.timer's period (templates/node/join.sh.j2: OnUnitActiveSec)."""
SLACK = 5


def address_of(node: str) -> str:
    """The node's container address, from podman's label (not from anything slurmforge resolves)."""
    out = subprocess.run(["podman", "inspect", node, "--format", f'{{{{index .Config.Labels "{ADDRESS_LABEL}"}}}}'],
                         capture_output=True, text=True, check=True).stdout
    return out.strip()


def resolves(cluster: Cluster_, host: str, name: str) -> str:
    """What `getent hosts NAME` gives on `host` ("" when it does not resolve)."""
    res = cluster.run(host, f"getent hosts {name} || true", timeout=30)
    return res.stdout.strip()


@pytest.fixture(scope="module")
def live(cluster: Cluster_) -> LiveCluster:
    return cluster.live()


@pytest.fixture(scope="module")
def job_output(cluster: Cluster_, live: LiveCluster) -> Iterator[str]:
    """A 2-node job on the dynamic nodes, powered down first so that their machines are new:
    each rank resolves every node of the job by its Slurm name and connects to its slurmd."""
    for node in (*PEERS, DOWN):
        live.power_down(node)
    rank = ('for n in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do getent hosts "$n" || echo "MISSING $n"; '
            'if timeout 3 bash -c "</dev/tcp/$n/6818"; then echo "REACHED $n"; else echo "UNREACHED $n"; fi; done')
    script = f"srun -l bash -c {shlex.quote(rank)}"
    job = live.submit(f"-p ml-cpu -N 2 --ntasks-per-node=1 -w {','.join(PEERS)} -o names-%j.out "
                      f"--wrap {shlex.quote(script)}")
    wait_until(lambda: live.sacct_states(job).get(job, "").startswith(("COMPLETED", "FAILED", "CANCELLED")), 180,
               f"job {job}", every=1)
    assert live.sacct_states(job)[job] == "COMPLETED", cluster.login(f"cat names-{job}.out").stdout
    yield cluster.login(f"cat names-{job}.out").stdout


def test_podman_resolves_no_names(cluster: Cluster_) -> None:
    network = LocalProvider(cluster.spec, "img").network
    info = json.loads(subprocess.run(["podman", "network", "inspect", network], capture_output=True, text=True,
                                     check=True).stdout)
    assert info[0]["dns_enabled"] is False, info
    # from a node, DNS alone (not /etc/hosts) knows no container of the cluster
    asked = cluster.run("dev-cpu-01", f"getent -s dns hosts {cluster.report.login}", timeout=30)
    assert asked.returncode == 2, asked.stdout


def test_the_kit_names_no_dynamic_node(cluster: Cluster_) -> None:
    _, hosts = read_inventory(cluster.report.inventory)
    listed = cluster.run(controller_name(cluster.spec), f"cat {kit_dir(cluster.spec)}/hosts").stdout
    names = {line.split()[1] for line in listed.splitlines() if line.strip()}
    assert names == {h.name for h in hosts if not h.dynamic and h.address}


def test_a_two_node_job_finds_its_nodes_by_name(job_output: str) -> None:
    for rank in (0, 1):
        lines = {line.split(": ", 1)[1].strip() for line in job_output.splitlines() if line.startswith(f"{rank}: ")}
        for peer in PEERS:
            assert f"{address_of(peer)} {peer}" in {" ".join(line.split()) for line in lines}, job_output
            assert f"REACHED {peer}" in lines, job_output


def test_the_service_publishes_the_pool_nodes(cluster: Cluster_, job_output: str) -> None:
    published = cluster.run(controller_name(cluster.spec), f"cat {pool_hosts_file(cluster.spec)}").stdout
    lines = {line for line in published.splitlines() if not line.startswith("#")}
    assert {f"{address_of(peer)} {peer}" for peer in PEERS} <= lines
    assert not any(line.endswith(f" {DOWN}") for line in lines)


def test_the_login_node_follows_within_the_timer_period(cluster: Cluster_, live: LiveCluster, job_output: str) -> None:
    login = cluster.report.login
    assert cluster.run(login, f"systemctl is-active {HOSTS_REFRESH}.timer").stdout.strip() == "active"

    def within_period(what: str, check: Callable[[], bool], since: float, period: float = TIMER_PERIOD) -> float:
        wait_until(check, period + SLACK - (time.monotonic() - since), what, every=1)
        return time.monotonic() - since

    # the job ran on the peers, so they were published before it started; DOWN was released before it
    published = time.monotonic()
    within_period(f"{DOWN} not to resolve on {login}", lambda: resolves(cluster, login, DOWN) == "", published)
    for peer in PEERS:
        within_period(f"{peer} to resolve on {login}",
                      lambda peer=peer: resolves(cluster, login, peer).split() == [address_of(peer), peer], published)
    # released: the service drops the node on that loop (10 s), the login node within the period
    live.power_down(PEERS[0])
    took = within_period(f"{PEERS[0]} to stop resolving on {login}",
                         lambda: resolves(cluster, login, PEERS[0]) == "", time.monotonic(), TIMER_PERIOD + 10)
    print(f"{PEERS[0]} stopped resolving on {login} {took:.1f} s after its machine was gone")
