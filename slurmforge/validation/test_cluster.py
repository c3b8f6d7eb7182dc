"""What a working slurmforge cluster looks like from the inside."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from slurmforge.accounting import desired_state
from slurmforge.contract import (
    ACCOUNTING_DESIRED,
    ACCOUNTING_PROGRAM,
    ALERTMANAGER_PORT,
    JWT_KEY_FILE,
    NODE_EXPORTER_PORT,
    PROMETHEUS_PORT,
    SERVICE_PORT,
    TARGETS_FILE,
)
from slurmforge.hosts import HostRole, controller_name
from slurmforge.monitoring import alert_rules, controller_address
from slurmforge.nodes import node_names, node_sets, pool_hardware
from slurmforge.render import MAIL_PROGRAM, render
from slurmforge.service.slurm import NODES_COMMAND, parse_nodes
from slurmforge.validation.conftest import LiveCluster, digest
from slurmforge.validation.node_states import hardware_problem, state_problem


def scontrol_records(text: str) -> list[dict[str, str]]:
    """`scontrol show ... -o`: one record per line of Key=Value pairs."""
    records = []
    for line in text.splitlines():
        if line.strip():
            records.append(dict(re.findall(r"(\w+)=(\S*)", line)))
    return records


def expand(live: LiveCluster, hostlist: str) -> set[str]:
    if not hostlist or hostlist == "(null)":
        return set()
    out = live.controller().check_output(f"scontrol show hostnames {hostlist}")
    return set(out.split())


def test_munge_key_identical_private_and_running(live: LiveCluster) -> None:
    digests = {}
    for host in live.up_hosts:
        node = live.connect(host)
        key = node.file("/etc/munge/munge.key")
        assert key.user == "munge" and key.mode == 0o400, f"{host.name}: munge.key {oct(key.mode)} {key.user}"
        assert node.service("munge").is_running, f"{host.name}: munged not running"
        digests[host.name] = node.check_output("sha256sum /etc/munge/munge.key").split()[0]
    assert len(set(digests.values())) == 1, f"munge keys differ: {digests}"


def test_jwt_key_identical_private_and_only_on_the_controllers(live: LiveCluster) -> None:
    """The key slurmctld and slurmdbd verify REST API tokens with: the same on every
    controller, 0600 slurm; no other host holds it (slurmrestd passes tokens on)."""
    digests, wrong = {}, []
    for host in live.up_hosts:
        node = live.connect(host)
        key = node.file(JWT_KEY_FILE)
        if host.role is not HostRole.CONTROLLER:
            if key.exists:
                wrong.append(f"{host.name}: {JWT_KEY_FILE} present")
            continue
        if not key.exists or key.user != "slurm" or key.mode != 0o600:
            wrong.append(f"{host.name}: {JWT_KEY_FILE} missing or not 0600 slurm")
            continue
        digests[host.name] = node.check_output(f"sha256sum {JWT_KEY_FILE}").split()[0]
    assert not wrong, ", ".join(wrong)
    assert len(set(digests.values())) == 1, f"JWT keys differ between the controllers: {sorted(digests)}"


def test_daemons_run_only_where_they_belong(live: LiveCluster) -> None:
    accounting = live.spec.accounting.enabled
    local_db = accounting and live.spec.accounting.database.kind == "local"
    wanted = {
        HostRole.CONTROLLER: {"slurmctld": True, "slurmdbd": accounting, "mariadb": local_db, "slurmd": False,
                              "sackd": False, "slurmrestd": False, "prometheus": True,
                              "prometheus-alertmanager": True},
        # the login node's clients are served by sackd (configless), never by a slurmd; it
        # answers Slurm's REST API
        HostRole.LOGIN: {"slurmctld": False, "slurmdbd": False, "mariadb": False, "slurmd": False,
                         "sackd": True, "slurmrestd": True, "prometheus": False, "prometheus-alertmanager": False},
        HostRole.COMPUTE: {"slurmctld": False, "slurmdbd": False, "mariadb": False, "slurmd": True,
                           "sackd": False, "slurmrestd": False, "prometheus": False,
                           "prometheus-alertmanager": False},
    }
    # a backup controller runs slurmctld only: slurmdbd, MariaDB and monitoring live on the primary
    backup = {"slurmctld": True, "slurmdbd": False, "mariadb": False, "slurmd": False, "sackd": False,
              "slurmrestd": False, "prometheus": False, "prometheus-alertmanager": False}
    wrong = []
    for host in live.up_hosts:
        node = live.connect(host)
        daemons = backup if host.role is HostRole.CONTROLLER and host.name != controller_name(live.spec) \
            else wanted[host.role]
        for daemon, should_run in daemons.items():
            if node.service(daemon).is_running != should_run:
                wrong.append(f"{host.name}:{daemon} {'not running' if should_run else 'running'}")
    assert not wrong, ", ".join(wrong)


def test_daemons_restart_after_a_failure(live: LiveCluster) -> None:
    """Every Slurm daemon, munge and MariaDB a host runs comes back by itself after a crash
    (Debian's units say Restart=no)."""
    wrong = []
    for host in live.up_hosts:
        node = live.connect(host)
        for daemon in ("munge", "slurmctld", "slurmd", "slurmdbd", "mariadb", "sackd", "slurmrestd"):
            if node.service(daemon).is_running:
                restart = node.check_output(f"systemctl show -p Restart --value {daemon}").strip()
                if restart not in ("on-failure", "always"):
                    wrong.append(f"{host.name}:{daemon} Restart={restart}")
    assert not wrong, ", ".join(wrong)


def test_no_unit_failed_on_any_host(live: LiveCluster) -> None:
    """systemd has no failed unit anywhere: a join that did not succeed, a daemon that gave
    up, a mount that failed stand out instead of hiding in an always-degraded system."""
    failed = {}
    for host in live.up_hosts:
        units = live.connect(host).check_output("systemctl list-units --failed --no-legend --plain").split("\n")
        if names := [u.split()[0] for u in units if u.strip()]:
            failed[host.name] = names
    assert not failed, f"failed units: {failed} (systemctl status <unit> on the host says why)"


def test_login_clients_read_the_controllers_config(live: LiveCluster) -> None:
    """The login node keeps no slurm.conf of its own (a stale one would win over sackd's);
    its clients read the copy sackd fetched from slurmctld, which is the controller's."""
    served = live.controller().file("/etc/slurm/slurm.conf").content_string
    for host in live.by_role(HostRole.LOGIN):
        login = live.connect(host)
        assert not login.file("/etc/slurm/slurm.conf").exists, f"{host.name}: /etc/slurm/slurm.conf"
        assert login.file("/run/slurm/conf/slurm.conf").content_string == served, host.name
        # the clients really find it there: sinfo answers without SLURM_CONF
        assert login.run("env -u SLURM_CONF sinfo -h -o %P").rc == 0, host.name


def test_partitions_exactly_as_the_spec(live: LiveCluster) -> None:
    ctl = live.controller()
    partitions = {p["PartitionName"]: p for p in scontrol_records(ctl.check_output("scontrol show partition -o"))}
    assert set(partitions) == {p.name for p in live.spec.partitions}
    for part in live.spec.partitions:
        got = partitions[part.name]
        want = {n for pool in part.pools for n in node_names(live.spec, live.spec.pool(pool))}
        assert expand(live, got["Nodes"]) == want, part.name
        assert got["Default"] == ("YES" if part.default else "NO"), part.name
        assert got["State"] == part.state.value, part.name
        if part.allow_groups:
            assert got["AllowGroups"] == ",".join(part.allow_groups), part.name


def test_nodes_have_the_spec_hardware_and_state(live: LiveCluster) -> None:
    """Every node of the spec: its hardware as the spec says, and a state a working cluster
    has - busy, powering up or down, drained by an admin (slurmforge/validation/node_states.py).
    One line per node that is not, naming what it has and what it should have."""
    found = {n.name: n for n in parse_nodes(live.controller().check_output(" ".join(NODES_COMMAND)))}
    # from the spec, not the inventory's hosts: on AWS no pool node is a host of the
    # inventory (the service launches them), and an idle pool's powered-down nodes are fine
    dynamic = {name for pool in live.spec.pools for nodes in node_sets(live.spec, pool) if nodes.dynamic
               for name in nodes.names()}
    wrong = []
    for pool in live.spec.pools:
        hw = pool_hardware(pool)
        assert hw is not None
        for name in node_names(live.spec, pool):
            node = found.get(name)
            if node is None:
                wrong.append(f"{name}: unknown to Slurm; should be a node of pool {pool.name}")
                continue
            wrong += [p for p in (hardware_problem(node, hw, hw.gres_name), state_problem(node, name in dynamic))
                      if p is not None]
    assert not wrong, "\n".join(wrong)


def test_shared_mounts_present_and_shared(live: LiveCluster) -> None:
    """Home and software are the same on every host; Slurm's state on every controller
    (only they mount it, on every target)."""
    mounts = live.spec.storage.nas.mounts
    controllers = [h for h in live.up_hosts if h.role is HostRole.CONTROLLER]
    for path, hosts in ((mounts.home, live.up_hosts), (mounts.software, live.up_hosts),
                        (mounts.slurm_state, controllers)):
        writer, readers = live.connect(hosts[0]), hosts[1:]
        probe = f"{path.rstrip('/')}/.slurmforge-validate-{hosts[0].name}"
        writer.check_output(f"echo shared > {probe}")
        try:
            for host in readers:
                node = live.connect(host)
                assert node.mount_point(path).exists, f"{host.name}: {path} is not a mount"
                assert node.file(probe).content_string.strip() == "shared", f"{host.name} can't see {probe}"
        finally:
            writer.run(f"rm -f {probe}")


def test_module_command_works_everywhere(live: LiveCluster) -> None:
    outputs = {}
    for host in live.up_hosts:
        res = live.connect(host).run("bash -lc 'module -t avail 2>&1; echo rc=$?'")
        assert "rc=0" in res.stdout, f"{host.name}: {res.stdout} {res.stderr}"
        outputs[host.name] = res.stdout
    assert len(set(outputs.values())) == 1, "module avail differs between nodes"


def test_module_spider_cache_is_shared_and_current(live: LiveCluster) -> None:
    """Nodes answer `module avail` from the one spider cache on the shared tree
    (roles/lmod); `slurmforge modules` refreshes it after every change, so it lists
    exactly what a walk of the tree finds."""
    cache = f"{live.spec.modules.root}/.cache"
    for host in live.up_hosts:
        node = live.connect(host)
        assert cache in node.file("/etc/lmod/lmodrc.lua").content_string, f"{host.name}: no shared spider cache"
        cached = node.run("bash -lc 'module -t avail 2>&1'")
        walked = node.run("bash -lc 'module -t --ignore_cache avail 2>&1'")
        assert cached.stdout == walked.stdout, f"{host.name}: stale spider cache (fix: slurmforge modules publish)"


@pytest.mark.parametrize("command", ["sacct -a -X -n --starttime now-1days", "sacctmgr -n show cluster"])
def test_accounting_answers(live: LiveCluster, command: str) -> None:
    if not live.spec.accounting.enabled:
        pytest.skip("accounting disabled in the spec")
    login = live.connect(live.by_role(HostRole.LOGIN)[0])
    res = login.run(command)
    assert res.rc == 0, res.stderr
    if "cluster" in command:
        assert live.spec.name in res.stdout


def test_accounting_is_what_the_spec_says(live: LiveCluster) -> None:
    """slurmdbd's QoS, accounts, users and limits are the spec's: the rollout's program,
    asked for its plan on the controller, has nothing left to change (docs/accounting.md)."""
    if not live.spec.accounting.enabled:
        pytest.skip("accounting disabled in the spec")
    controller = live.controller()
    shipped = json.loads(controller.file(ACCOUNTING_DESIRED).content_string)
    assert shipped == desired_state(live.spec), "the controller's accounting.json is not this spec's (roll out)"
    res = controller.run(f"{ACCOUNTING_PROGRAM} --desired {ACCOUNTING_DESIRED} --dry-run")
    assert res.rc == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["changes"] == [] and plan["deferred"] == [], f"slurmdbd differs from the spec: {plan}"


def test_the_local_database_runs_as_slurmdbd_needs(live: LiveCluster) -> None:
    """MariaDB 11.8's snapshot isolation off (slurmdbd cannot recover from ER_CHECKREAD) and
    Slurm's lock wait timeout: roles/slurmdbd/tasks/install.yml."""
    if not live.spec.accounting.enabled or live.spec.accounting.database.kind != "local":
        pytest.skip("no local accounting database")
    host = next(h for h in live.up_hosts if h.name == controller_name(live.spec))
    got = live.connect(host).check_output(
        "mysql -N -B -e 'SELECT @@GLOBAL.innodb_snapshot_isolation, @@GLOBAL.innodb_lock_wait_timeout'")
    assert got.split() == ["0", "900"], got


def test_every_node_has_the_identical_package_set(live: LiveCluster) -> None:
    sets = {h.name: digest(live.connect(h).check_output("dpkg-query -W -f='${Package} ${Version}\\n'"))
            for h in live.up_hosts}
    assert len(set(sets.values())) == 1, f"package sets differ: {sets}"


# --------------------------------------------------------------------------- monitoring


def prometheus_get(live: LiveCluster, path: str) -> dict[str, Any]:
    """Prometheus' API, asked from the controller (it listens on the cluster address only)."""
    address = controller_address(live.hosts)
    res = live.controller().run(f"curl -sf --max-time 10 http://{address}:{PROMETHEUS_PORT}{path}")
    assert res.rc == 0, f"Prometheus on {address}:{PROMETHEUS_PORT} does not answer {path}: rc {res.rc}"
    return dict(json.loads(res.stdout))


def powered_nodes(live: LiveCluster) -> set[str]:
    """Nodes Slurm has powered now (not powered down, not on the way down)."""
    out = live.controller().check_output("sinfo -h -N -o '%N %T'")
    return {name for name, state in (line.split() for line in out.splitlines())
            if not state.endswith(("~", "%")) and "POWER" not in state.upper()}


def test_every_prometheus_target_that_should_be_up_is_up(live: LiveCluster) -> None:
    """Static hosts (node exporter), the scheduler service, Prometheus and Alertmanager: up.
    Dynamic nodes are targets only while Slurm has them powered (the service's file_sd)."""
    exporters = [*live.up_hosts, *live.ceph_hosts]
    want = {("node", h.name) for h in exporters} | {("slurmforge", f"{live.spec.name}-service"),
                                                    ("prometheus", f"{live.spec.name}-prometheus"),
                                                    ("alertmanager", f"{live.spec.name}-alertmanager")}
    deadline = time.monotonic() + 90  # a Prometheus restarted by the rollout scrapes within one interval
    while True:
        targets = prometheus_get(live, "/api/v1/targets?state=active")["data"]["activeTargets"]
        health = {(t["labels"]["job"], t["labels"]["instance"]): t["health"] for t in targets}
        not_up = {k: health.get(k, "missing") for k in want if health.get(k) != "up"}
        if not not_up or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert not not_up, f"targets not up: {not_up}"
    stray = stray_targets(live, persist=20)
    assert not stray, f"powered-down nodes listed as scrape targets: {sorted(stray)}"


def stray_targets(live: LiveCluster, persist: float) -> set[str]:
    """Dynamic nodes Prometheus scrapes although Slurm has them powered down, for longer
    than `persist` seconds (a node powering down leaves the file within a loop)."""
    stray: set[str] | None = None
    deadline = time.monotonic() + persist
    while stray is None or (stray and time.monotonic() < deadline):
        targets = prometheus_get(live, "/api/v1/targets?state=active")["data"]["activeTargets"]
        listed = {t["labels"]["instance"] for t in targets if t["labels"]["job"] == "node"}
        now = listed - {h.name for h in live.hosts if not h.dynamic} - powered_nodes(live)
        stray = now if stray is None else stray & now
        if stray:
            time.sleep(5)
    return stray


def test_prometheus_reads_the_dynamic_targets(live: LiveCluster) -> None:
    """The service's file_sd is readable by Prometheus' user (else dynamic nodes are never
    scraped, silently: Prometheus only logs it)."""
    res = live.controller().run(f"runuser -u prometheus -- cat {TARGETS_FILE}")
    assert res.rc == 0, f"prometheus cannot read {TARGETS_FILE}: {res.stderr.strip()}"
    assert isinstance(json.loads(res.stdout), list)


def test_alert_rules_loaded(live: LiveCluster) -> None:
    groups = prometheus_get(live, "/api/v1/rules?type=alert")["data"]["groups"]
    loaded = {r["name"] for g in groups if g["name"] == "slurmforge" for r in g["rules"]}
    wanted = {r["alert"] for r in alert_rules(live.spec)["groups"][0]["rules"]}
    assert loaded == wanted, f"missing {wanted - loaded}, unexpected {loaded - wanted}"
    unhealthy = [r["name"] for g in groups for r in g["rules"] if r.get("health") == "err"]
    assert not unhealthy, f"rules failing to evaluate: {unhealthy}"


def test_prometheus_sends_alerts_to_alertmanager(live: LiveCluster) -> None:
    """Alertmanager is Prometheus' active alertmanager, on the controller's cluster address
    only, without its HA gossip port."""
    address = controller_address(live.hosts)
    active = prometheus_get(live, "/api/v1/alertmanagers")["data"]["activeAlertmanagers"]
    assert [a["url"] for a in active] == [f"http://{address}:{ALERTMANAGER_PORT}/api/v2/alerts"], active
    ctl = live.controller()
    assert ctl.socket(f"tcp://{address}:{ALERTMANAGER_PORT}").is_listening
    assert not ctl.socket(f"tcp://0.0.0.0:{ALERTMANAGER_PORT}").is_listening
    assert not ctl.socket("tcp://0.0.0.0:9094").is_listening


def test_exporters_listen_on_the_cluster_address_only(live: LiveCluster) -> None:
    wrong = []
    for host in [*live.up_hosts, *live.ceph_hosts]:
        node = live.connect(host)
        if not node.socket(f"tcp://{host.address}:{NODE_EXPORTER_PORT}").is_listening:
            wrong.append(f"{host.name}: node exporter not on {host.address}")
        if node.socket(f"tcp://0.0.0.0:{NODE_EXPORTER_PORT}").is_listening:
            wrong.append(f"{host.name}: node exporter on every interface")
    assert not wrong, "; ".join(wrong)


def test_the_scheduler_service_listens_on_the_cluster_address_only(live: LiveCluster) -> None:
    """Its pool page and /metrics: for Prometheus, `slurmforge pools` and admins' tunnels,
    not for every interface of the controller (a public one on some sites)."""
    ctl = live.controller()
    address = controller_address(live.hosts)
    assert ctl.socket(f"tcp://{address}:{SERVICE_PORT}").is_listening
    assert not ctl.socket(f"tcp://0.0.0.0:{SERVICE_PORT}").is_listening


def test_job_mail_has_a_mailer_configured_as_rendered(live: LiveCluster) -> None:
    """slurmctld's MailProg is there and hands mail to dma, configured from the spec's
    `mail:` (its relay, or local delivery on the controller)."""
    ctl = live.controller()
    config = dict(re.findall(r"^(\w+)\s+=\s+(.*?)\s*$", ctl.check_output("scontrol show config"), re.M))
    assert config.get("MailProg") == MAIL_PROGRAM, config.get("MailProg")
    assert ctl.exists("bsd-mailx") and ctl.file(MAIL_PROGRAM).exists
    assert ctl.check_output("readlink -f /usr/sbin/sendmail") == "/usr/sbin/dma"

    def settings(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]

    assert settings(ctl.file("/etc/dma/dma.conf").content_string) == settings(render(live.spec, "dma.conf"))
