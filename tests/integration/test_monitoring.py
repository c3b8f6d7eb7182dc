"""Issue 7's monitoring on the real local cluster: Debian's Prometheus on the controller
scrapes every node exporter and the scheduler service; a running job shows in the
service's /metrics and in Prometheus; `slurmforge report` draws real data; draining a node
makes SlurmNodeDrained pending then firing (the spec's short `for:`), and resuming clears it.

Names come from the spec under test (SLURMFORGE_TEST_SPEC or examples/local.yaml).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from slurmforge.contract import ALERTMANAGER_PORT, PROMETHEUS_PORT, SERVICE_PORT
from slurmforge.hosts import controller_name
from slurmforge.inventory import read_inventory
from slurmforge.monitoring import controller_address, render_monitoring, shared_mounts
from slurmforge.spec.nodes import node_names
from tests.harness.live import wait_until
from tests.integration.conftest import Cluster_

pytestmark = pytest.mark.integration


def ctl_address(cluster: Cluster_) -> str:
    return controller_address(read_inventory(cluster.report.inventory)[1])


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


def api(cluster: Cluster_, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    data = json.loads(get(f"http://{ctl_address(cluster)}:{PROMETHEUS_PORT}/api/v1/{path}{query}"))
    assert data["status"] == "success", data
    return data["data"]


def root(cluster: Cluster_, command: str) -> str:
    res = cluster.run(controller_name(cluster.spec), command, timeout=60)
    assert res.returncode == 0, f"{command}: {res.stderr or res.stdout}"
    return res.stdout


def static_cpu_node(cluster: Cluster_) -> str:
    pool = next(p for p in cluster.spec.pools if p.kind.value == "cpu" and p.min_nodes > 0)
    return node_names(cluster.spec, pool)[0]


def test_prometheus_scrapes_every_static_target(cluster: Cluster_) -> None:
    hosts = read_inventory(cluster.report.inventory)[1]
    want = {h.name for h in hosts if not h.dynamic} | {f"{cluster.spec.name}-service"}

    def all_up() -> bool:
        targets = api(cluster, "targets", state="active")["activeTargets"]
        return want <= {t["labels"]["instance"] for t in targets if t["health"] == "up"}

    wait_until(all_up, 90, f"targets {sorted(want)} up")
    # powered-down dynamic nodes are no targets at all (so never down targets)
    powered_down = {line.split()[0] for line in root(cluster, "sinfo -h -N -o '%N %t'").splitlines()
                    if line.split()[1].endswith("~")}
    listed = {t["labels"]["instance"] for t in api(cluster, "targets", state="active")["activeTargets"]}
    assert powered_down and not powered_down & listed, f"powered-down nodes scraped: {powered_down & listed}"


def dynamic_cpu_node(cluster: Cluster_) -> str:
    pool = next(p for p in cluster.spec.pools if p.kind.value == "cpu" and p.max_nodes > p.min_nodes)
    return node_names(cluster.spec, pool)[pool.min_nodes]


def target_health(cluster: Cluster_, instance: str) -> str:
    targets = api(cluster, "targets", state="active")["activeTargets"]
    return next((t["health"] for t in targets if t["labels"]["instance"] == instance), "absent")


@pytest.mark.long
def test_dynamic_node_scraped_only_while_powered(cluster: Cluster_) -> None:
    """Slurm powers a dynamic node up for a job: the service lists it, Prometheus scrapes
    it; once Slurm powers it down again it is no target at all (never a down target).
    `./dev.sh test-all` only: it waits out the pool's idle time and a power-down (~90 s);
    the static targets' scrape is test_prometheus_scrapes_every_static_target's."""
    node = dynamic_cpu_node(cluster)
    res = cluster.login(f"sbatch --parsable -A research -w {node} -o mon-%j.out --wrap 'sleep 20'")
    assert res.returncode == 0, res.stderr
    wait_until(lambda: target_health(cluster, node) == "up", 150, f"{node}'s node exporter scraped")
    idle = cluster.spec.pool(next(p.name for p in cluster.spec.pools if node in node_names(cluster.spec, p)))
    wait_until(lambda: target_health(cluster, node) == "absent", idle.idle_seconds + 180,
               f"{node} dropped from the targets after powering down")


def test_shared_storage_alert_sees_every_shared_mount(cluster: Cluster_) -> None:
    """SharedStorageNearlyFull's selector matches real node exporter series on every
    shared mount point (a typo in a path would leave the alert silent forever)."""
    mounts = shared_mounts(cluster.spec)
    selector = "|".join(mounts)
    query = f'count by (mountpoint) (node_filesystem_size_bytes{{mountpoint=~"{selector}"}})'
    found = wait_until(lambda: {r["metric"]["mountpoint"] for r in api(cluster, "query", query=query)["result"]}
                       >= set(mounts), 60, f"filesystem series for {mounts}")
    assert found


def test_running_job_in_service_metrics_and_prometheus(cluster: Cluster_) -> None:
    res = cluster.login("sbatch --parsable -A research -p ml-cpu -c 1 -o mon-%j.out --wrap 'sleep 90'")
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    try:
        wait_until(lambda: root(cluster, f"squeue -h -j {job} -o %T").strip() == "RUNNING", 60, f"job {job} running")
        metrics = f"http://{ctl_address(cluster)}:{SERVICE_PORT}/metrics"

        def charged() -> float:
            pattern = r'^slurmforge_account_cpus\{account="research",pool="[^"]+"\} (\S+)$'
            found = re.findall(pattern, get(metrics), re.M)
            return sum(float(v) for v in found)

        assert wait_until(charged, 30, "the job's CPUs charged to account research in /metrics") >= 1
        assert re.search(r'^slurmforge_partition_jobs\{partition="ml-cpu",state="running"\} [1-9]', get(metrics), re.M)

        def in_prometheus() -> float:
            result = api(cluster, "query", query='sum(slurmforge_account_cpus{account="research"})')["result"]
            return float(result[0]["value"][1]) if result else 0.0

        assert wait_until(in_prometheus, 60, "the allocation in Prometheus") >= 1
    finally:
        root(cluster, f"scancel {job}")


def test_report_draws_real_data(cluster: Cluster_, tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "slurmforge.cli", "report", "--inventory",
                          str(cluster.report.inventory), "--since", "30m", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    page = (tmp_path / "report.html").read_text()
    assert "mean" in page and "no data" not in page.split("CPU allocation", 1)[1].split("</section>", 1)[0]
    for png in ("allocation", "gpus", "queue_wait", "pending", "node_states"):
        data = (tmp_path / f"{png}.png").read_bytes()
        assert data[:4] == b"\x89PNG" and len(data) > 5000, png


def alert_states(cluster: Cluster_, node: str) -> set[str]:
    return {a["state"] for a in api(cluster, "alerts")["alerts"]
            if a["labels"].get("alertname") == "SlurmNodeDrained" and a["labels"].get("node") == node}


@pytest.mark.long
def test_drained_node_alert_fires_then_clears(cluster: Cluster_) -> None:
    node = static_cpu_node(cluster)
    root(cluster, f"scontrol update nodename={node} state=drain reason=monitoring-test")
    try:
        wait_until(lambda: alert_states(cluster, node) & {"pending", "firing"}, 90, f"SlurmNodeDrained for {node}")
        if cluster.spec.monitoring.alerts.node_drained_for in ("15s", "30s", "1m"):
            wait_until(lambda: "firing" in alert_states(cluster, node), 120, "the alert firing")
    finally:
        root(cluster, f"scontrol update nodename={node} state=resume")
    wait_until(lambda: not alert_states(cluster, node), 90, f"SlurmNodeDrained for {node} to clear")


def alerts_named(cluster: Cluster_, name: str) -> dict[str, str]:
    """pool/node -> state of the alerts with this name."""
    return {a["labels"].get("pool", a["labels"].get("node", "")): a["state"] for a in api(cluster, "alerts")["alerts"]
            if a["labels"].get("alertname") == name}


def alertmanager_pools(cluster: Cluster_, name: str) -> set[str]:
    """Pools of the active alerts with this name that Alertmanager holds."""
    query = urllib.parse.urlencode({"filter": f'alertname="{name}"', "active": "true"})
    alerts = json.loads(get(f"http://{ctl_address(cluster)}:{ALERTMANAGER_PORT}/api/v2/alerts?{query}"))
    return {a["labels"].get("pool", "") for a in alerts}


@pytest.mark.long
def test_job_waiting_on_a_full_pool_fires(cluster: Cluster_) -> None:
    """A GPU job waits behind another on the GPU pool, which is at max_nodes: once it has
    waited `pending_minutes`, SlurmJobsWaitingAtMaxSize fires for that pool."""
    minutes = cluster.spec.monitoring.alerts.pending_minutes
    if minutes > 2:
        pytest.skip(f"pending_minutes is {minutes} in this spec; the local example sets 1")
    part = next(p for p in cluster.spec.partitions if cluster.spec.pool(p.pools[0]).kind.value == "gpu")
    pool = cluster.spec.pool(part.pools[0])
    assert pool.hardware is not None and pool.hardware.gpus is not None
    gpus = pool.hardware.gpus.count * pool.max_nodes
    jobs = []
    try:
        for seconds in (300, 30):
            res = cluster.login(f"sbatch --parsable -A research -p {part.name} --gres=gpu:{gpus} "
                                f"-o mon-%j.out --wrap 'sleep {seconds}'")
            assert res.returncode == 0, res.stderr
            jobs.append(res.stdout.strip().split(";")[0])
        wait_until(lambda: alerts_named(cluster, "SlurmJobsWaitingAtMaxSize").get(pool.name) == "firing",
                   minutes * 60 + 90, f"SlurmJobsWaitingAtMaxSize for pool {pool.name}")
        assert float(api(cluster, "query", query=f'slurmforge_pool_oldest_pending_seconds{{pool="{pool.name}"}}')
                     ["result"][0]["value"][1]) > minutes * 60
        # Prometheus hands the firing alert to the controller's Alertmanager
        wait_until(lambda: pool.name in alertmanager_pools(cluster, "SlurmJobsWaitingAtMaxSize"), 60,
                   f"SlurmJobsWaitingAtMaxSize for pool {pool.name} in Alertmanager")
    finally:
        root(cluster, f"scancel {' '.join(jobs)}" if jobs else "true")
    wait_until(lambda: pool.name not in alerts_named(cluster, "SlurmJobsWaitingAtMaxSize"), 90, "the alert to clear")


def test_alertmanager_mails_and_posts_an_alert(cluster: Cluster_, tmp_path: Path) -> None:
    """The node image's Alertmanager with a config rendered from a spec naming a relay, mail
    addresses and a webhook delivers an alert to both: an SMTP sink and an HTTP sink stand
    in for them (tests/integration/alert_receivers.sh), reached by name (a spec may not name
    a loopback address: each machine would read it as itself), the names resolved to the
    container's own loopback by --add-host. The one change to the rendered config:
    group_wait 1s instead of 30s."""
    import yaml

    from slurmforge.spec import parse_spec
    from tests.integration.conftest import SPEC

    data = yaml.safe_load(SPEC.read_text())
    data["mail"] = {"domain": "example.org", "relay": "relay.example.org", "port": 2525}
    data.setdefault("monitoring", {}).setdefault("alerts", {}).update(
        email=["ml-oncall@example.org"], webhook="http://hooks.example.org:8099/hook")
    spec = parse_spec(yaml.safe_dump(data), "receivers.yaml")
    config = render_monitoring(spec, read_inventory(cluster.report.inventory)[1])["alertmanager.yml"]
    assert "group_wait: 30s" in config
    (tmp_path / "alertmanager.yml").write_text(config.replace("group_wait: 30s", "group_wait: 1s"))
    image = cluster.image()
    script = Path(__file__).parent / "alert_receivers.sh"
    mounts = ["-v", f"{tmp_path / 'alertmanager.yml'}:/etc/prometheus/alertmanager.yml:ro",
              "-v", f"{script}:/alert_receivers.sh:ro", "-v", f"{script.parent / 'smtp_sink.py'}:/smtp_sink.py:ro"]
    names = ["--add-host", "relay.example.org:127.0.0.1", "--add-host", "hooks.example.org:127.0.0.1"]
    res = subprocess.run(["podman", "run", "--rm", *names, *mounts, image, "sh", "/alert_receivers.sh"],
                         capture_output=True, text=True, timeout=120)
    out = res.stdout
    hook, mail = out.split("== webhook", 1)[1].split("== mail", 1)
    posted = json.loads(hook.strip().splitlines()[0])
    assert posted["status"] == "firing" and posted["receiver"] == "slurmforge", out
    assert posted["alerts"][0]["labels"] | {"alertname": "SlurmNodeDown", "node": "t-cpu-01"} == \
        posted["alerts"][0]["labels"], out
    assert "SlurmNodeDown" in mail and "To: ml-oncall@example.org'" in mail, out
    assert "From: alertmanager@example.org'" in mail, out
