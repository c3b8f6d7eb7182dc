"""Prometheus config and alert rules from the spec, checked by the node image's promtool and
amtool (tests/judge.py: the binary that judges is the one that runs it): the config
loads (`promtool check config`), the rules load, and every alert fires on the series that
should make it fire and stays quiet otherwise (`promtool test rules`,
tests/unit/monitoring/alerts_test.yml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from test_service_world import SPEC as AWS_SPEC
from test_service_world import spec as aws_spec

from slurmforge.contract import ALERT_RULES_FILE, ALERTMANAGER_PORT, TARGETS_FILE
from slurmforge.hosts import Host, HostRole, controller_name, login_names
from slurmforge.monitoring import alert_rules, render_monitoring, shared_mounts
from slurmforge.spec import Cluster, load_spec, parse_spec
from slurmforge.spec.nodes import node_sets, pool_hardware
from tests.judge import Judge

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RULE_TESTS = Path(__file__).parent / "monitoring" / "alerts_test.yml"


def hosts_of(spec: Cluster) -> list[Host]:
    hosts = [Host(controller_name(spec), "10.1.0.2", HostRole.CONTROLLER)]
    hosts += [Host(name, f"10.1.0.{3 + i}", HostRole.LOGIN) for i, name in enumerate(login_names(spec))]
    for pool in spec.pools:
        for nodeset in node_sets(spec, pool):
            hosts += [Host(name, f"10.1.1.{len(hosts)}", HostRole.COMPUTE, pool.name, nodeset.dynamic)
                      for name in nodeset.names()]
    return hosts


def promtool(judge: Judge, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return judge.run(["promtool", *args], cwd=cwd)


def local_spec() -> Cluster:
    return load_spec(ROOT / "examples" / "local.yaml")


def test_alert_rules_fire_and_stay_quiet_as_tested(judge: Judge, tmp_path: Path) -> None:
    (tmp_path / "alerts.yml").write_text(render_monitoring(aws_spec(), hosts_of(aws_spec()))["alerts.yml"])
    shutil.copy(RULE_TESTS, tmp_path / "alerts_test.yml")
    checked = promtool(judge, "check", "rules", "alerts.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool(judge, "test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_broken_rule_fails_the_rule_tests(judge: Judge, tmp_path: Path) -> None:
    """The rule tests can fail: a threshold off by one minute is caught."""
    broken = render_monitoring(aws_spec(), hosts_of(aws_spec()))["alerts.yml"].replace("for: 5m", "for: 4m")
    (tmp_path / "alerts.yml").write_text(broken)
    shutil.copy(RULE_TESTS, tmp_path / "alerts_test.yml")
    assert promtool(judge, "test", "rules", "alerts_test.yml", cwd=tmp_path).returncode != 0


@pytest.mark.parametrize("which", ["local", "aws"])
def test_prometheus_config_passes_promtool(judge: Judge, tmp_path: Path, which: str) -> None:
    spec = local_spec() if which == "local" else aws_spec()
    files = render_monitoring(spec, hosts_of(spec))
    (tmp_path / "alerts.yml").write_text(files["alerts.yml"])
    # the one difference from the installed file: the rules' path on this machine
    rules = str(tmp_path / "alerts.yml")
    (tmp_path / "prometheus.yml").write_text(files["prometheus.yml"].replace(ALERT_RULES_FILE, rules))
    checked = promtool(judge, "check", "config", "prometheus.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 9 rules found" in checked.stdout


def scrape_jobs(spec: Cluster) -> dict[str, dict[str, object]]:
    config = yaml.safe_load(render_monitoring(spec, hosts_of(spec))["prometheus.yml"])
    return {job["job_name"]: job for job in config["scrape_configs"]}


def test_static_hosts_listed_dynamic_nodes_from_the_service() -> None:
    spec = local_spec()
    node = scrape_jobs(spec)["node"]
    instances = {g["labels"]["instance"] for g in node["static_configs"]}  # type: ignore[index, attr-defined]
    static = {h.name for h in hosts_of(spec) if not h.dynamic}
    assert instances == static and f"{spec.name}-controller" in instances
    assert not instances & {h.name for h in hosts_of(spec) if h.dynamic}
    assert node["file_sd_configs"] == [{"files": [TARGETS_FILE]}]


def test_only_what_the_nodes_run_is_scraped() -> None:
    """No job for an exporter nothing installs: NVIDIA's DCGM exporter is no Debian package,
    so GPU pools (real GPUs on AWS, fake ones locally) add no scrape job."""
    for spec in (local_spec(), aws_spec()):
        assert any(hw and hw.gpus for hw in map(pool_hardware, spec.pools)), spec.name
        assert set(scrape_jobs(spec)) == {"prometheus", "alertmanager", "slurmforge", "node"}, spec.name


def test_thresholds_and_shared_mounts_come_from_the_spec() -> None:
    text = AWS_SPEC.replace("storage: {nas: {kind: efs}}", "storage: {nas: {kind: efs}, ceph: {mount: /data}}")
    spec = parse_spec(text + "monitoring:\n  alerts: {node_drained_for: 30s, pending_minutes: 5, "
                      "storage_full_percent: 80}\n", "t")
    assert shared_mounts(spec) == ["/home", "/opt/software", "/var/spool/slurm-shared", "/data"]
    rules = {r["alert"]: r for r in alert_rules(spec)["groups"][0]["rules"]}
    assert rules["SlurmNodeDrained"]["for"] == "30s"
    assert "> 300 and" in rules["SlurmJobsWaitingAtMaxSize"]["expr"]
    storage = rules["SharedStorageNearlyFull"]["expr"]
    assert storage.endswith("> 80") and "/data" in storage


def amtool_check(judge: Judge, tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "alertmanager.yml").write_text(text)
    return judge.run(["amtool", "check-config", "alertmanager.yml"], cwd=tmp_path)


def test_prometheus_sends_alerts_to_the_controllers_alertmanager() -> None:
    spec = local_spec()
    config = yaml.safe_load(render_monitoring(spec, hosts_of(spec))["prometheus.yml"])
    target = f"10.1.0.2:{ALERTMANAGER_PORT}"
    assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": [target]}]}]}
    assert scrape_jobs(spec)["alertmanager"]["static_configs"] == [
        {"targets": [target], "labels": {"instance": f"{spec.name}-alertmanager"}}]


def test_alertmanager_without_receivers_only_gathers(judge: Judge, tmp_path: Path) -> None:
    """examples/local.yaml names no receiver: alerts gather in Alertmanager, nothing is sent."""
    text = render_monitoring(local_spec(), hosts_of(local_spec()))["alertmanager.yml"]
    checked = amtool_check(judge, tmp_path, text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = yaml.safe_load(text)
    assert config["receivers"] == [{"name": "slurmforge"}] and "smtp_smarthost" not in config["global"]


@pytest.mark.parametrize(("port", "tls"), [(25, False), (587, True), (465, False)])
def test_alertmanager_mails_through_the_relay_and_posts_to_the_webhook(judge: Judge, tmp_path: Path, port: int,
                                                                       tls: bool) -> None:
    spec = parse_spec(AWS_SPEC + f"mail: {{domain: example.org, relay: smtp.example.org, port: {port}}}\n"
                      "monitoring:\n  alerts: {email: [ops@example.org, ml@example.org], "
                      "webhook: 'https://hooks.example.org/slurm', repeat_interval: 1h}\n", "t")
    text = render_monitoring(spec, hosts_of(spec))["alertmanager.yml"]
    checked = amtool_check(judge, tmp_path, text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = yaml.safe_load(text)
    assert config["global"] | {"smtp_require_tls": tls} == config["global"]
    assert config["global"]["smtp_smarthost"] == f"smtp.example.org:{port}"
    assert config["global"]["smtp_from"] == "alertmanager@example.org"
    assert config["route"]["repeat_interval"] == "1h"
    (receiver,) = config["receivers"]
    assert receiver["email_configs"] == [{"to": "ops@example.org, ml@example.org", "send_resolved": True}]
    assert receiver["webhook_configs"] == [{"url": "https://hooks.example.org/slurm", "send_resolved": True}]
