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
from slurmforge.render import MAIL_PROGRAM, render
from slurmforge.slurm.client import NODES_COMMAND, parse_nodes
from slurmforge.spec.nodes import node_names, node_sets, pool_hardware
from slurmforge.validation.conftest import (
    DMA_CONF,
    LMODRC,
    MUNGE_KEY,
    RESTARTED,
    SACKD_CONF,
    SENDMAIL,
    SLURM_CONF,
    CheckedCluster,
    Facts,
    probe_problems,
    shared_paths,
)
from slurmforge.validation.facts import found_wanted, listening, listens
from slurmforge.validation.images import image_problems, upgrade_fix
from slurmforge.validation.node_states import hardware_problem, state_problem


def scontrol_records(text: str) -> list[dict[str, str]]:
    """`scontrol show ... -o`: one record per line of Key=Value pairs."""
    records = []
    for line in text.splitlines():
        if line.strip():
            records.append(dict(re.findall(r"(\w+)=(\S*)", line)))
    return records


def expand(live: CheckedCluster, hostlist: str) -> set[str]:
    if not hostlist or hostlist == "(null)":
        return set()
    out = live.controller().check_output(f"scontrol show hostnames {hostlist}")
    return set(out.split())


def test_munge_key_identical_private_and_running(live: CheckedCluster, facts: Facts) -> None:
    wrong = facts.unreachable(live.up_hosts)
    primary = facts[controller_name(live.spec)].text(f"stat {MUNGE_KEY}").split()[-1:] or ["nothing"]
    for host in facts.reachable(live.up_hosts):
        node = facts[host.name]
        if not node.ok(f"stat {MUNGE_KEY}"):
            wrong.append(found_wanted(host.name, MUNGE_KEY, "nothing", "the cluster's key"))
            continue
        mode, user, sha = node.text(f"stat {MUNGE_KEY}").split()
        if (mode, user) != ("400", "munge"):
            wrong.append(found_wanted(host.name, f"{MUNGE_KEY} mode and owner", f"{mode} {user}", "400 munge"))
        if sha != primary[0]:
            wrong.append(found_wanted(host.name, f"{MUNGE_KEY} sha256", sha[:12],
                                      f"{primary[0][:12]} (the controller's)"))
        if not node.ok("active munge"):
            wrong.append(found_wanted(host.name, "munged", "not running", "running"))
    assert not wrong, "\n".join(wrong)


def test_jwt_key_identical_private_and_only_on_the_controllers(live: CheckedCluster, facts: Facts) -> None:
    """The key slurmctld and slurmdbd verify REST API tokens with: the same on every
    controller, 0600 slurm; no other host holds it (slurmrestd passes tokens on)."""
    wrong = facts.unreachable(live.up_hosts)
    digests = {}
    for host in facts.reachable(live.up_hosts):
        node = facts[host.name]
        held = node.ok(f"stat {JWT_KEY_FILE}")
        if host.role is not HostRole.CONTROLLER:
            if held:
                wrong.append(found_wanted(host.name, JWT_KEY_FILE, "a file", "none (only the controllers hold it)"))
            continue
        if not held:
            wrong.append(found_wanted(host.name, JWT_KEY_FILE, "nothing", "the cluster's key, 0600 slurm"))
            continue
        mode, user, sha = node.text(f"stat {JWT_KEY_FILE}").split()
        if (mode, user) != ("600", "slurm"):
            wrong.append(found_wanted(host.name, f"{JWT_KEY_FILE} mode and owner", f"{mode} {user}", "600 slurm"))
        digests[host.name] = sha
    if len(set(digests.values())) > 1:
        wrong.append(f"{JWT_KEY_FILE} sha256 found {', '.join(f'{h} {d[:12]}' for h, d in sorted(digests.items()))}, "
                     "wanted one key on every controller")
    assert not wrong, "\n".join(wrong)


def test_daemons_run_only_where_they_belong(live: CheckedCluster, facts: Facts) -> None:
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
    wrong = facts.unreachable(live.up_hosts)
    for host in facts.reachable(live.up_hosts):
        node = facts[host.name]
        daemons = backup if host.role is HostRole.CONTROLLER and host.name != controller_name(live.spec) \
            else wanted[host.role]
        for daemon, should_run in daemons.items():
            if node.ok(f"active {daemon}") != should_run:
                found, want = ("not running", "running") if should_run else ("running", "not running here")
                wrong.append(found_wanted(host.name, daemon, found, want))
    assert not wrong, "\n".join(wrong)


def test_daemons_restart_after_a_failure(live: CheckedCluster, facts: Facts) -> None:
    """Every Slurm daemon, munge and MariaDB a host runs comes back by itself after a crash
    (Debian's units say Restart=no)."""
    wrong = facts.unreachable(live.up_hosts)
    for host in facts.reachable(live.up_hosts):
        node = facts[host.name]
        for daemon in RESTARTED:
            if node.ok(f"active {daemon}"):
                value = node.text(f"restart {daemon}").strip()
                if value not in ("on-failure", "always"):
                    wrong.append(found_wanted(host.name, f"{daemon}'s Restart=", value or "nothing",
                                              "on-failure or always"))
    assert not wrong, "\n".join(wrong)


def test_no_unit_failed_on_any_host(live: CheckedCluster, facts: Facts) -> None:
    """systemd has no failed unit anywhere: a join that did not succeed, a daemon that gave
    up, a mount that failed stand out instead of hiding in an always-degraded system."""
    wrong = facts.unreachable(live.up_hosts)
    for host in facts.reachable(live.up_hosts):
        if names := [u.split()[0] for u in facts[host.name].text("failed units").splitlines() if u.strip()]:
            wrong.append(found_wanted(host.name, "failed units", " ".join(names),
                                      "none (systemctl status <unit> on the host says why)"))
    assert not wrong, "\n".join(wrong)


def test_login_clients_read_the_controllers_config(live: CheckedCluster, facts: Facts) -> None:
    """The login node keeps no slurm.conf of its own (a stale one would win over sackd's);
    its clients read the copy sackd fetched from slurmctld, which is the controller's."""
    served = facts[controller_name(live.spec)].text(f"stat {SLURM_CONF}").split()[-1:] or ["nothing"]
    wrong = facts.unreachable(live.by_role(HostRole.LOGIN))
    for host in facts.reachable(live.by_role(HostRole.LOGIN)):
        login = facts[host.name]
        if login.ok(f"stat {SLURM_CONF}"):
            wrong.append(found_wanted(host.name, SLURM_CONF, "a file", "none (sackd's copy serves the clients)"))
        fetched = login.text(f"stat {SACKD_CONF}").split()[-1:] if login.ok(f"stat {SACKD_CONF}") else ["nothing"]
        if fetched != served:
            wrong.append(found_wanted(host.name, f"{SACKD_CONF} sha256", fetched[0][:12],
                                      f"{served[0][:12]} (the controller's slurm.conf)"))
        # the clients really find it there: sinfo answers without SLURM_CONF
        if not login.ok("sinfo"):
            wrong.append(found_wanted(host.name, "sinfo without SLURM_CONF", login.text("sinfo").strip()[-200:],
                                      "an answer"))
    assert not wrong, "\n".join(wrong)


def test_partitions_exactly_as_the_spec(live: CheckedCluster) -> None:
    ctl, name = live.controller(), controller_name(live.spec)
    partitions = {p["PartitionName"]: p for p in scontrol_records(ctl.check_output("scontrol show partition -o"))}
    wanted = {p.name for p in live.spec.partitions}
    wrong = [] if set(partitions) == wanted else [
        found_wanted(name, "partitions", " ".join(sorted(partitions)), f"the spec's {' '.join(sorted(wanted))}")]
    for part in live.spec.partitions:
        got = partitions.get(part.name)
        if got is None:
            continue
        nodes = {n for pool in part.pools for n in node_names(live.spec, live.spec.pool(pool))}
        for what, found, want in (
                ("nodes", expand(live, got.get("Nodes", "")), nodes),
                ("Default", got.get("Default"), "YES" if part.default else "NO"),
                ("State", got.get("State"), part.state.value),
                *([("AllowGroups", got.get("AllowGroups"), ",".join(part.allow_groups))] if part.allow_groups else [])):
            if found != want:
                shown = (" ".join(sorted(found)), " ".join(sorted(want))) \
                    if isinstance(found, set) and isinstance(want, set) else (found, want)
                wrong.append(found_wanted(name, f"partition {part.name}'s {what}", *shown))
    assert not wrong, "\n".join(wrong)


def test_nodes_have_the_spec_hardware_and_state(live: CheckedCluster) -> None:
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
                wrong.append(found_wanted(name, "Slurm node", "unknown to Slurm", f"a node of pool {pool.name}"))
                continue
            wrong += [p for p in (hardware_problem(node, hw, hw.gres_name), state_problem(node, name in dynamic))
                      if p is not None]
    assert not wrong, "\n".join(wrong)


def test_shared_mounts_present_and_shared(live: CheckedCluster, facts: Facts) -> None:
    """Home and software are the same on every host; Slurm's state on every controller
    (only they mount it, on every target)."""
    wrong = []
    for shared in shared_paths(live)[:3]:
        wrong += probe_problems(shared, facts)
        for host in facts.reachable(shared.readers):
            if not facts[host.name].text(f"mounted {shared.path}").strip():
                wrong.append(found_wanted(host.name, shared.path, "no mount", "a shared mount"))
    assert not wrong, "\n".join(wrong)


def test_module_command_works_everywhere(live: CheckedCluster, facts: Facts) -> None:
    wrong = facts.unreachable(live.up_hosts)
    first = (facts.reachable(live.up_hosts) or live.up_hosts)[0].name
    for host in facts.reachable(live.up_hosts):
        node = facts[host.name]
        if not node.ok("modules"):
            wrong.append(found_wanted(host.name, "module -t avail", node.text("modules").strip()[-200:], "a list"))
        elif node.text("modules") != facts[first].text("modules"):
            wrong.append(found_wanted(host.name, "module -t avail", f"{len(node.text('modules').split())} lines",
                                      f"{first}'s list ({len(facts[first].text('modules').split())} lines)"))
    assert not wrong, "\n".join(wrong)


def test_module_spider_cache_is_shared_and_current(live: CheckedCluster, facts: Facts) -> None:
    """Nodes answer `module avail` from the one spider cache on the shared tree
    (roles/lmod); `slurmforge modules` refreshes it after every change, so it lists
    exactly what a walk of the tree finds."""
    cache = f"{live.spec.modules.root}/.cache"
    wrong = facts.unreachable(live.up_hosts)
    for host in facts.reachable(live.up_hosts):
        node = facts[host.name]
        if cache not in node.text(f"read {LMODRC}"):
            wrong.append(found_wanted(host.name, f"{LMODRC}'s spider cache", "another or none", cache))
        if node.text("modules") != node.text("modules walked"):
            wrong.append(found_wanted(host.name, "the spider cache", "stale",
                                      "what a walk of the tree finds (fix: slurmforge modules publish)"))
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("command", ["sacct -a -X -n --starttime now-1days", "sacctmgr -n show cluster"])
def test_accounting_answers(live: CheckedCluster, command: str) -> None:
    if not live.spec.accounting.enabled:
        pytest.skip("accounting disabled in the spec")
    host = live.by_role(HostRole.LOGIN)[0]
    res = live.connect(host).run(command)
    assert res.rc == 0, found_wanted(host.name, command, f"rc {res.rc}: {res.stderr.strip()[-200:]}", "an answer")
    if "cluster" in command:
        assert live.spec.name in res.stdout, found_wanted(host.name, command, res.stdout.strip(), live.spec.name)


def test_accounting_is_what_the_spec_says(live: CheckedCluster) -> None:
    """slurmdbd's QoS, accounts, users and limits are the spec's: the rollout's program,
    asked for its plan on the controller, has nothing left to change (docs/accounting.md)."""
    if not live.spec.accounting.enabled:
        pytest.skip("accounting disabled in the spec")
    controller, name = live.controller(), controller_name(live.spec)
    shipped = json.loads(controller.file(ACCOUNTING_DESIRED).content_string)
    assert shipped == desired_state(live.spec), found_wanted(name, ACCOUNTING_DESIRED, "another spec's",
                                                             "this spec's (fix: slurmforge rollout)")
    res = controller.run(f"{ACCOUNTING_PROGRAM} --desired {ACCOUNTING_DESIRED} --dry-run")
    assert res.rc == 0, found_wanted(name, ACCOUNTING_PROGRAM, f"rc {res.rc}: {res.stderr.strip()[-200:]}", "a plan")
    plan = json.loads(res.stdout)
    left = [*plan["changes"], *plan["deferred"]]
    assert not left, found_wanted(name, "slurmdbd's accounting", f"changes left: {'; '.join(left)}",
                                  "the spec's (fix: slurmforge rollout)")


def test_every_host_runs_the_clusters_current_image(live: CheckedCluster, facts: Facts,
                                                   current_image: str | None) -> None:
    """Each running Slurm host's RECORD names the node image the cluster runs now (given by
    the command line: slurmforge.upgrade_start.current_image): a host left on another is
    named with the fix (docs/upgrade.md, "Which hosts run which image"). Powered-down dynamic
    nodes boot the current one."""
    if current_image is None:
        pytest.skip(f"no current image to hold the hosts to (target {live.spec.target.kind}: machines you own "
                    "are not made from the node image; slurmforge validate gives it on the others)")
    fix = upgrade_fix(live.spec.target.kind == "local", live.spec.name, str(live.inventory))
    wrong = image_problems(live.up_hosts, facts.hosts, current_image, fix)
    assert not wrong, "\n".join(wrong)


def test_the_local_database_runs_as_slurmdbd_needs(live: CheckedCluster) -> None:
    """MariaDB 11.8's snapshot isolation off (slurmdbd cannot recover from ER_CHECKREAD) and
    Slurm's lock wait timeout: roles/slurmdbd/tasks/install.yml."""
    if not live.spec.accounting.enabled or live.spec.accounting.database.kind != "local":
        pytest.skip("no local accounting database")
    host = next(h for h in live.up_hosts if h.name == controller_name(live.spec))
    got = live.connect(host).check_output(
        "mysql -N -B -e 'SELECT @@GLOBAL.innodb_snapshot_isolation, @@GLOBAL.innodb_lock_wait_timeout'")
    assert got.split() == ["0", "900"], found_wanted(host.name, "MariaDB's snapshot isolation and lock wait timeout",
                                                     " ".join(got.split()), "0 900")


def test_every_node_has_the_identical_package_set(live: CheckedCluster, facts: Facts) -> None:
    first = (facts.reachable(live.up_hosts) or live.up_hosts)[0].name
    want = facts[first].text("packages").strip()
    wrong = facts.unreachable(live.up_hosts)
    wrong += [found_wanted(h.name, "the package set (sha256 of dpkg-query -W)", got[:12], f"{first}'s {want[:12]}")
              for h in facts.reachable(live.up_hosts) if (got := facts[h.name].text("packages").strip()) != want]
    assert not wrong, "\n".join(wrong)




# --------------------------------------------------------------------------- monitoring


def prometheus_get(live: CheckedCluster, path: str) -> dict[str, Any]:
    """Prometheus' API, asked from the controller (it listens on the cluster address only)."""
    address = controller_address(live.hosts)
    res = live.controller().run(f"curl -sf --max-time 10 http://{address}:{PROMETHEUS_PORT}{path}")
    assert res.rc == 0, found_wanted(controller_name(live.spec), f"Prometheus on {address}:{PROMETHEUS_PORT}{path}",
                                     f"no answer (curl rc {res.rc})", "an answer")
    return dict(json.loads(res.stdout))


def powered_nodes(live: CheckedCluster) -> set[str]:
    """Nodes Slurm has powered now (not powered down, not on the way down)."""
    out = live.controller().check_output("sinfo -h -N -o '%N %T'")
    return {name for name, state in (line.split() for line in out.splitlines())
            if not state.endswith(("~", "%")) and "POWER" not in state.upper()}


def test_every_prometheus_target_that_should_be_up_is_up(live: CheckedCluster) -> None:
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
    wrong = [found_wanted(instance, f"Prometheus target ({job})", health, "up")
             for (job, instance), health in sorted(not_up.items())]
    wrong += [found_wanted(node, "Prometheus target", "listed while powered down", "not listed")
              for node in sorted(stray_targets(live, persist=20))]
    assert not wrong, "\n".join(wrong)


def stray_targets(live: CheckedCluster, persist: float) -> set[str]:
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


def test_prometheus_reads_the_dynamic_targets(live: CheckedCluster) -> None:
    """The service's file_sd is readable by Prometheus' user (else dynamic nodes are never
    scraped, silently: Prometheus only logs it)."""
    res = live.controller().run(f"runuser -u prometheus -- cat {TARGETS_FILE}")
    assert res.rc == 0, found_wanted(controller_name(live.spec), f"user prometheus reading {TARGETS_FILE}",
                                     res.stderr.strip()[-200:], "its JSON list")
    assert isinstance(json.loads(res.stdout), list), found_wanted(controller_name(live.spec), TARGETS_FILE,
                                                                  res.stdout[:80], "a JSON list")


def test_alert_rules_loaded(live: CheckedCluster) -> None:
    groups = prometheus_get(live, "/api/v1/rules?type=alert")["data"]["groups"]
    loaded = {r["name"] for g in groups if g["name"] == "slurmforge" for r in g["rules"]}
    wanted = {r["alert"] for r in alert_rules(live.spec)["groups"][0]["rules"]}
    name = controller_name(live.spec)
    differ = f"missing {sorted(wanted - loaded)}, unexpected {sorted(loaded - wanted)}"
    wrong = [] if loaded == wanted else [found_wanted(name, "Prometheus' alert rules", differ, "the spec's")]
    wrong += [found_wanted(name, f"alert rule {r['name']}", f"failing to evaluate: {r.get('lastError', '?')}",
                           "evaluating") for g in groups for r in g["rules"] if r.get("health") == "err"]
    assert not wrong, "\n".join(wrong)


def test_prometheus_sends_alerts_to_alertmanager(live: CheckedCluster, facts: Facts) -> None:
    """Alertmanager is Prometheus' active alertmanager, on the controller's cluster address
    only, without its HA gossip port."""
    address = controller_address(live.hosts)
    active = prometheus_get(live, "/api/v1/alertmanagers")["data"]["activeAlertmanagers"]
    name, url = controller_name(live.spec), f"http://{address}:{ALERTMANAGER_PORT}/api/v2/alerts"
    urls = [a["url"] for a in active]
    wrong = [] if urls == [url] else [found_wanted(name, "Prometheus' alertmanagers", " ".join(urls) or "none", url)]
    wrong += listen_problems(name, facts, "Alertmanager", address, ALERTMANAGER_PORT)
    if listens(listening(facts[name].text("listening")), "0.0.0.0", 9094):
        wrong.append(found_wanted(name, "Alertmanager's HA gossip port 9094", "listening", "closed"))
    assert not wrong, "\n".join(wrong)


def listen_problems(host: str, facts: Facts, what: str, address: str, port: int) -> list[str]:
    """A daemon listening on the host's cluster address and not on every interface."""
    sockets = listening(facts[host].text("listening"))
    wrong = [] if listens(sockets, address, port) else [found_wanted(host, what, "not listening",
                                                                     f"listening on {address}:{port}")]
    if listens(sockets, "0.0.0.0", port):
        wrong.append(found_wanted(host, what, "listening on every interface", f"{address}:{port} only"))
    return wrong


def test_exporters_listen_on_the_cluster_address_only(live: CheckedCluster, facts: Facts) -> None:
    hosts = [*live.up_hosts, *live.ceph_hosts]
    wrong = facts.unreachable(hosts)
    wrong += [line for host in facts.reachable(hosts)
              for line in listen_problems(host.name, facts, "node exporter", host.address, NODE_EXPORTER_PORT)]
    assert not wrong, "\n".join(wrong)


def test_the_scheduler_service_listens_on_the_cluster_address_only(live: CheckedCluster, facts: Facts) -> None:
    """Its pool page and /metrics: for Prometheus, `slurmforge pools` and admins' tunnels,
    not for every interface of the controller (a public one on some sites)."""
    wrong = listen_problems(controller_name(live.spec), facts, "the scheduler service", controller_address(live.hosts),
                            SERVICE_PORT)
    assert not wrong, "\n".join(wrong)


def test_job_mail_has_a_mailer_configured_as_rendered(live: CheckedCluster, facts: Facts) -> None:
    """slurmctld's MailProg is there and hands mail to dma, configured from the spec's
    `mail:` (its relay, or local delivery on the controller)."""
    name = controller_name(live.spec)
    ctl = facts[name]
    config = dict(re.findall(r"^(\w+)\s+=\s+(.*?)\s*$", ctl.text("scontrol show config"), re.M))
    wrong = [] if config.get("MailProg") == MAIL_PROGRAM else [
        found_wanted(name, "slurmctld's MailProg", config.get("MailProg"), MAIL_PROGRAM)]
    if not (ctl.ok("bsd-mailx") and ctl.ok(f"stat {MAIL_PROGRAM}")):
        wrong.append(found_wanted(name, "bsd-mailx", "missing", f"installed, with {MAIL_PROGRAM}"))
    if (sendmail := ctl.text("sendmail").strip()) != "/usr/sbin/dma":
        wrong.append(found_wanted(name, SENDMAIL, sendmail, "/usr/sbin/dma"))

    def settings(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]

    if settings(ctl.text(f"read {DMA_CONF}")) != settings(render(live.spec, "dma.conf")):
        wrong.append(found_wanted(name, DMA_CONF, "other settings", "the spec's mail: as rendered"))
    assert not wrong, "\n".join(wrong)
