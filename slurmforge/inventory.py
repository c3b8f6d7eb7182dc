"""The generated Ansible inventory: the one hand-off from provisioning to rollout.

<state root>/inventories/<cluster>/ (default_inventory: /var/lib/slurmforge/inventories/<cluster>
for root, ~/.local/state/slurmforge/inventories/<cluster> for anyone else)
  hosts.yml                      groups computed once from the spec + provisioned hosts
  group_vars/all/slurmforge.yml  spec-derived variables the roles read (no secrets)
  rendered/*.conf                the renderer's output, shipped verbatim by the roles
  rendered/monitoring/*.yml      Prometheus config and alert rules (slurmforge.monitoring)
  rendered/accounting.json       QoS, accounts, users and limits (slurmforge.accounting)
                                 (ceph.conf too when the spec has Ceph)
  cluster.yaml                   the spec it was made from

The local provider and `inventory --from-stack-outputs` both write it, so rollout and
validation run unchanged on any target.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from slurmforge.accounting import desired_state
from slurmforge.ceph import CEPH_CONF, ceph_hosts, ceph_vars, mds_hosts, monitors, render_ceph_conf
from slurmforge.contract import DIGEST_FILE, JWT_KEY_FILE, SLURMRESTD_USER
from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host, HostRole, controller_name, controller_names
from slurmforge.monitoring import render_monitoring
from slurmforge.node.kit import kit_dir, kit_files, pool_hosts_file, slurmd_failures_dir
from slurmforge.node.program import lmod_paths, local_settings, render_join
from slurmforge.node.steps import join_vars
from slurmforge.render import CONFIG_FILES, SLURMCTLD_LOG, render_all, service_shared_dir, state_save_location
from slurmforge.spec import Cluster, load_spec
from slurmforge.spec.nodes import pool_hardware
from slurmforge.state_dirs import secrets_dir
from slurmforge.takeover import BEFORE_MARKER, STATE_FILES, STATE_MARKER

HOSTS_FILE = "hosts.yml"
VARS_FILE = Path("group_vars/all/slurmforge.yml")
RENDERED = "rendered"
MONITORING = "monitoring"
"""rendered/monitoring/: prometheus.yml and alerts.yml (slurmforge.monitoring)"""
KIT = "kit"
"""The node kit's files in the rendered dir (roles/storage_client publishes them on the NAS)."""
JOIN = "join.sh"
"""The join program in the rendered dir (roles/slurm_node installs and runs it)."""
SPEC_COPY = "cluster.yaml"
ACCOUNTING_JSON = "accounting.json"
"""rendered/accounting.json: QoS, accounts and users as slurmdbd must have them (slurmforge.accounting)"""
NODE_PART = "node"
"""The rollout's part every host runs: what playbooks/cluster.yml does on every host (the join
program, users, mounts, Lmod, slurmd, the login node) and ceph.yml on the Ceph hosts."""
CONTROLLER_PARTS: dict[str, tuple[str, ...]] = {
    "kit": (f"{RENDERED}/{KIT}/",),
    "slurmdbd": (f"{RENDERED}/slurmdbd.conf",),
    "accounting": (f"{RENDERED}/{ACCOUNTING_JSON}", f"{RENDERED}/slurm.conf"),
    "slurmctld": tuple(f"{RENDERED}/{name}" for name in CONFIG_FILES if name != "slurmdbd.conf"),
    "spec": (SPEC_COPY,),
    "service": (),
    "monitoring": (f"{RENDERED}/{MONITORING}/",),
}
"""The rollout's parts that run on the controllers alone, each a tag of playbooks/cluster.yml's
plays, with the inventory's files (a name, or a folder ending in /) only that part reads: the
node kit the controller publishes on the NAS (its sources, users and hosts, are in files every
host reads), slurmdbd and MariaDB, slurmdbd's accounting (sacctmgr reads slurm.conf too),
Slurm's configs (every other Slurm host is configless: slurmd and sackd take them from
slurmctld, which pushes each new one at its reconfigure), the spec the scheduler service
re-reads, the service itself (slurmforge's own package: its wheel), Prometheus's files. Each
part also reads what the node part reads. A change to one part's files rolls out that part on
the controllers and nothing else (slurmforge.rollout); tests/unit/test_rollout_scope.py holds
the playbooks and roles to this table."""


def is_controller_input(name: str) -> bool:
    """Whether the inventory file `name` (relative to the inventory) is read by one of the
    controllers' own parts only (CONTROLLER_PARTS), not by every host."""
    return any(name == scoped or (scoped.endswith("/") and name.startswith(scoped))
               for files in CONTROLLER_PARTS.values() for scoped in files)


HOST_USER_FIELDS = {"name", "uid", "groups", "ssh_keys", "admin"}
"""A spec user's fields the roles read on a host (roles/common, the CephFS directories)."""


def group_name(pool: str) -> str:
    """Ansible group names may not contain '-'."""
    return "pool_" + pool.replace("-", "_")


def host_vars(spec: Cluster, host: Host) -> dict[str, Any]:
    hv: dict[str, Any] = {"ansible_host": host.address, "slurmforge_address": host.address,
                          "slurmforge_role": host.role.value, **host.connection,
                          # what the host's join runs, from the one table (roles/slurm_node)
                          "slurmforge_join": join_vars(host.role)}
    if host.pool is not None:
        hw = pool_hardware(spec.pool(host.pool))
        hv |= {"slurmforge_pool": host.pool, "slurmforge_dynamic": host.dynamic,
               "slurmforge_gpus": hw.gpus if hw else 0, "slurmforge_gpu_kind": hw.gpu_kind if hw else None}
    return hv


def hosts_document(spec: Cluster, hosts: list[Host]) -> dict[str, Any]:
    by_role: dict[HostRole, dict[str, Any]] = {role: {} for role in HostRole}
    pools: dict[str, dict[str, Any]] = {}
    gpu: dict[str, Any] = {}
    for host in hosts:
        by_role[host.role][host.name] = host_vars(spec, host)
        if host.pool is not None:
            pools.setdefault(group_name(host.pool), {"hosts": {}})["hosts"][host.name] = None
            if (by_role[host.role][host.name].get("slurmforge_gpus") or 0) > 0:
                gpu[host.name] = None
    # slurmdbd (and MariaDB when local) live on the primary controller only
    controller = {name: None for name in by_role[HostRole.CONTROLLER] if name == controller_name(spec)}
    children: dict[str, Any] = {
        "slurm_controller": {"hosts": by_role[HostRole.CONTROLLER]},
        "slurm_login": {"hosts": by_role[HostRole.LOGIN]},
        "slurm_compute": {"hosts": by_role[HostRole.COMPUTE], "children": pools},
        "slurm_gpu": {"hosts": gpu},
    }
    if spec.accounting.enabled:  # slurmdbd runs on the controller; MariaDB too when local
        children["slurm_dbd"] = {"hosts": controller}
    top: dict[str, Any] = {"slurm_cluster": {"children": children}}
    if by_role[HostRole.CEPH]:
        top["ceph"] = ceph_groups(hosts, by_role[HostRole.CEPH])
    return {"all": {"children": top}}


def ceph_groups(hosts: list[Host], storage_vars: dict[str, Any]) -> dict[str, Any]:
    """Ceph hosts are not Slurm nodes: their own group, with one child per daemon kind
    (managers run where the monitors do)."""
    mons = {h.name: None for h in monitors(hosts)}
    return {"hosts": storage_vars, "children": {
        "ceph_mon": {"hosts": mons}, "ceph_mgr": {"hosts": dict(mons)},
        "ceph_mds": {"hosts": {h.name: None for h in mds_hosts(hosts)}},
        "ceph_osd": {"hosts": {h.name: None for h in ceph_hosts(hosts)}}}}


def cluster_vars(spec: Cluster, inventory_dir: Path, hosts: list[Host],
                 provider_settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the roles need from the spec, as plain data (no secrets), the on-node
    paths and ports of slurmforge.contract, and the scheduler service's provider settings
    (`provider_settings`: what the target's provisioning knows - the local provider's, an
    AWS stack's outputs -; none: empty, which the service's loader refuses for a target
    that needs them)."""
    nas = spec.storage.nas
    os = spec.images.distro()
    return {
        "slurmforge_cluster_name": spec.name,
        "slurmforge_target": spec.target.kind,
        "slurmforge_controller": controller_name(spec),
        # every slurmctld host, primary first: slurmd's --conf-server list, the service's leader rule
        "slurmforge_controllers": controller_names(spec),
        "slurmforge_service_shared_dir": service_shared_dir(spec),
        "slurmforge_rendered_dir": str((inventory_dir / RENDERED).resolve()),
        "slurmforge_secrets_dir": str(secrets_dir(spec.name)),
        "slurmforge_groups": [g.model_dump() for g in spec.groups],
        # what a host does with a user (the account, its homes and keys); their Slurm accounts are
        # accounting's (rendered/accounting.json), a change the controllers alone roll out
        "slurmforge_users": [u.model_dump(include=HOST_USER_FIELDS) for u in spec.users],
        "slurmforge_accounting": spec.accounting.enabled,
        "slurmforge_db": spec.accounting.database.model_dump(),
        "slurmforge_nas": {"kind": nas.kind, "server": nas.server, "export": nas.export,
                           "mounts": nas.mounts.model_dump()},
        "slurmforge_ceph": ceph_vars(spec, hosts),
        "slurmforge_scratch": spec.storage.scratch.path if spec.storage.scratch else None,
        "slurmforge_kit_dir": kit_dir(spec),
        "slurmforge_pool_hosts_file": pool_hosts_file(spec),
        "slurmforge_slurmd_failures_dir": slurmd_failures_dir(spec),
        "slurmforge_lmod": lmod_paths(spec),
        "slurmforge_modules_root": spec.modules.root,
        "slurmforge_mail": spec.mail.model_dump(),
        "slurmforge_monitoring": {"retention_days": spec.monitoring.retention_days,
                                  "retention_gb": spec.monitoring.retention_gb},
        "slurmforge_rollout_digest_file": DIGEST_FILE,
        "slurmforge_rest_api": {"port": spec.rest_api.port, "user": SLURMRESTD_USER},
        # what the image's install tasks got too (the venv's Python, paths, ports, requirements)
        **os.image_vars(),
        "slurmforge_service_provider_settings": provider_settings or {},
        # what the node image runs and what it takes over (slurmforge/takeover.py)
        "slurmforge_slurm": {"release": os.slurm_release, "upgrades_from": os.upgrades_from,
                             "state_dir": state_save_location(spec), "state_marker": STATE_MARKER,
                             "before_marker": BEFORE_MARKER, "state_files": list(STATE_FILES),
                             "ctld_log": SLURMCTLD_LOG, "jwt_key": JWT_KEY_FILE},
    }


GENERATED = "# generated by slurmforge; do not edit (re-run the command that made it)"


def write_yaml(path: Path, data: Any, header: str = GENERATED) -> None:
    """The one writer of an inventory's YAML files (every target's: hosts.yml, group_vars,
    the AWS stack's aws.yml and ceph.yml): `header`, then the data in its own order, written
    only when it differs from the file there (a converged inventory is not touched)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = f"{header}\n" + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_inventory(spec: Cluster, spec_path: Path, hosts: list[Host], inventory_dir: Path,
                    secrets: Path | None = None, provider_settings: dict[str, Any] | None = None,
                    efs_dns: str | None = None) -> Path:
    """Write (or converge) the inventory directory; unchanged files are not touched.
    `secrets`: the cluster's secrets directory (default secrets_dir), where the Ceph fsid
    is made once when the spec has Ceph; `provider_settings`: the scheduler service's
    (AWS: from the stack's outputs), default the target's own; `efs_dns`: an AWS stack's
    EFS, which the rollout's join program mounts."""
    inventory_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(inventory_dir / HOSTS_FILE, hosts_document(spec, hosts))
    write_yaml(inventory_dir / VARS_FILE, cluster_vars(spec, inventory_dir, hosts, provider_settings))
    rendered = render_all(spec, source=spec_path.name) | {
        f"{MONITORING}/{name}": text for name, text in render_monitoring(spec, hosts, spec_path.name).items()}
    # the node kit every rollout publishes on the NAS; the join program for the machines the
    # rollout reaches, head nodes on every target (AWS pool nodes get theirs from the stack,
    # as user data: the same program, other inputs)
    rendered |= {f"{KIT}/{name}": text for name, text in kit_files(spec, hosts).items()}
    rendered[JOIN] = render_join(spec, local_settings(spec, hosts, efs_dns), source=spec_path.name)
    if spec.accounting.enabled:  # what roles/slurmdbd makes slurmdbd's accounting equal to
        rendered[ACCOUNTING_JSON] = json.dumps(desired_state(spec), indent=1) + "\n"
    if spec.storage.ceph is not None:
        if not ceph_hosts(hosts):
            raise ProvisionError(f"storage.ceph: no Ceph hosts among the {spec.target.kind} target's machines "
                                 "(slurmforge deploys Ceph on the aws and local targets); fix: remove storage.ceph "
                                 "or use one of those targets")
        from slurmforge.secrets import ceph_fsid, ensure_ceph_secrets  # secrets imports this module

        directory = secrets or secrets_dir(spec.name)
        ensure_ceph_secrets(directory)
        rendered[CEPH_CONF] = render_ceph_conf(spec, hosts, ceph_fsid(directory), source=spec_path.name)
    for name, text in rendered.items():
        target = inventory_dir / RENDERED / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_text() != text:
            target.write_text(text)  # in place: a node that bind-mounts the file sees the new one
    # a local pool node runs the join program straight from here (a read-only bind mount)
    if (join := inventory_dir / RENDERED / JOIN).exists():
        join.chmod(0o755)
    copy = inventory_dir / SPEC_COPY
    spec_text = spec_path.read_text()
    if not copy.exists() or copy.read_text() != spec_text:
        copy.write_text(spec_text)
    return inventory_dir


def read_provider_settings(inventory_dir: Path) -> dict[str, Any] | None:
    """The scheduler service's provider settings the inventory hands the controllers (VARS_FILE's
    `slurmforge_service_provider_settings`); None when the inventory names none (no such file:
    an inventory of hosts and spec alone)."""
    path = inventory_dir / VARS_FILE
    data = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    settings = data.get("slurmforge_service_provider_settings")
    return settings if isinstance(settings, dict) and settings else None


def read_inventory(inventory_dir: Path) -> tuple[Cluster, list[Host]]:
    """The spec and hosts an inventory was written from."""
    return load_spec(inventory_dir / SPEC_COPY), read_hosts(inventory_dir)


def read_hosts(inventory_dir: Path) -> list[Host]:
    """The hosts of an inventory, each with how to reach it."""
    doc = yaml.safe_load((inventory_dir / HOSTS_FILE).read_text())
    groups = doc["all"]["children"]["slurm_cluster"]["children"]
    hosts = []
    groups = {**groups, "ceph": doc["all"]["children"].get("ceph") or {}}
    for group, role in (("slurm_controller", HostRole.CONTROLLER), ("slurm_login", HostRole.LOGIN),
                        ("slurm_compute", HostRole.COMPUTE), ("ceph", HostRole.CEPH)):
        for name, hv in (groups[group].get("hosts") or {}).items():
            address = hv["slurmforge_address"]
            connection = {k: str(v) for k, v in hv.items() if k.startswith(("ansible_", "slurmforge_container"))
                          and not (k == "ansible_host" and v == address)}
            hosts.append(Host(name, hv["slurmforge_address"], role, hv.get("slurmforge_pool"),
                              bool(hv.get("slurmforge_dynamic", False)), connection))
    return hosts
