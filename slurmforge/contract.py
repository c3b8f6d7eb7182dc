"""The contract between the Python code and the Ansible roles, defined once.

- Every on-node path and port both sides use: the service's venv, config, state and spool
  directories, the hold file, the Prometheus file_sd targets, the ports of Prometheus,
  Alertmanager, the exporters and the service, the service's account.
- What the service's venv holds: the project's run-time requirements plus its `service`
  extra (boto3 for the AWS provider), read from the installed package's metadata.
- The scheduler service's provider settings: one dataclass per target, the keys the
  inventory writes and the only keys the daemon's loader accepts.

The generated inventory hands the values to the roles (`node_vars`, in
group_vars/all/slurmforge.yml; the image playbook gets the same through
`Distro.image_vars`). Role defaults only name them (`scheduler_service_venv: "{{
slurmforge_paths.service_venv }}"`); tests/unit/test_contract.py fails when a role spells
one of these values again.

Standard library only: the power-saving programs (service/handoff.py) import it and
slurmctld waits for them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from functools import cache
from typing import Any, TypeVar

from slurmforge.errors import ProvisionError

# ------------------------------------------------------------------ ports (cluster address)

PROMETHEUS_PORT = 9090
ALERTMANAGER_PORT = 9093
NODE_EXPORTER_PORT = 9100
SERVICE_PORT = 9110
"""The scheduler service's pool page, /pools.json and /metrics."""
SLURM_PORTS: Mapping[int, str] = {6817: "slurmctld", 6818: "slurmd and sackd", 6819: "slurmdbd"}
"""Slurm's own daemons (its defaults, which slurm.conf and slurmdbd.conf keep)."""

# ------------------------------------------------------------------ the service's account

SERVICE_UNIT = "slurmforge-service"
"""The scheduler service's systemd unit (roles/scheduler_service writes it)."""
SERVICE_USER = "slurmforge"
SERVICE_UID = 9110
SERVICE_GID = 9110
"""Fixed: on the local target this group owns the host's podman API socket, so the service
needs no root to start and stop node containers."""

# ------------------------------------------------------------------ paths on the nodes

ETC_DIR = "/etc/slurmforge"
"""The service's spec copy and provider settings (the role names the files), the rollout
mark, the hold file."""
HOLD_FILE = f"{ETC_DIR}/hold"
"""While it exists the join program leaves slurmd stopped (its drop-in too): a machine an admin
wants configured but not registered. slurmforge itself no longer makes one (pool nodes are not
rolled out: they join when the service makes their machine)."""
DIGEST_FILE = f"{ETC_DIR}/rollout.digest"
"""Each host's rollout mark (playbooks/rollout_mark.yml)."""
SERVICE_VENV = "/opt/slurmforge/venv"
SERVICE_BIN = f"{SERVICE_VENV}/bin"
SERVICE_STATE_DIR = "/var/lib/slurmforge/service"
"""The service's own files on its host (heartbeat, the local target's fail-pools file)."""
HEARTBEAT_FILE = f"{SERVICE_STATE_DIR}/heartbeat"
FAIL_POOLS_FILE = f"{SERVICE_STATE_DIR}/fail-pools"
INTERRUPT_FILE = f"{SERVICE_STATE_DIR}/interrupt"
"""The local target's spot notices: a node name a line, each a notice that the machine of
that node - on a spot link - will be taken away (what EC2's two-minute warning says)."""
SPOOL_DIR = "/var/spool/slurmforge/handoff"
"""slurmforge-resume/-suspend write here (as SlurmUser), the service reads."""
TARGETS_DIR = "/var/lib/slurmforge-targets"
"""Not under /var/lib/slurmforge (0750, the service's own): Prometheus' user must traverse it."""
TARGETS_FILE = f"{TARGETS_DIR}/nodes.json"
"""Prometheus file_sd of the powered dynamic nodes' exporters, rewritten by the service."""
ALERT_RULES_FILE = "/etc/prometheus/slurmforge-alerts.yml"
NODES_READY_PROGRAM = "/usr/local/sbin/slurmforge-nodes-ready"
"""PrologSlurmctld (roles/slurm_controller/files/slurmforge-nodes-ready)."""
CTLD_IN_CONTROL_PROGRAM = "/usr/local/sbin/slurmforge-ctld-in-control"
"""SlurmctldPrimaryOnProg with a backup controller: marks that this slurmctld process held
control (roles/slurm_controller/files/slurmforge-ctld-in-control)."""
CONTROL_PROGRAM = f"{SERVICE_BIN}/slurmforge-control"
"""The scheduler service's hand-off for a slurmctld that took control (service.handoff,
CONTROL), run by CTLD_IN_CONTROL_PROGRAM."""
CTLD_STANDBY_PROGRAM = "/usr/local/sbin/slurmforge-ctld-standby"
"""SlurmctldPrimaryOffProg with a backup controller: a backup that held control and went back
to standby asks systemd to restart it (roles/slurm_controller/files/slurmforge-ctld-standby)."""
JOIN_PROGRAM = "/usr/local/sbin/slurmforge-join"
"""The join program on a node (slurmforge.node.program: templates/node/join.sh.j2)."""
HEALTH_PROGRAM = "/usr/local/sbin/slurmforge-health"
"""slurm.conf's HealthCheckProgram on every node with a slurmd: a link to the join program
(its slurmd step makes it), which checks what the join set up and drains the node with a
`health:` reason when something is broken (templates/node/join.sh.j2, "health")."""
JOINED_MARK = "/run/slurmforge-joined"
"""Written when a node's join ran to the end (in /run: gone at reboot); until then the
health check has nothing to judge (mounts and munge are the join's to make)."""
HEALTH_DRAINED_MARK = "/var/lib/slurmforge-health-drained"
"""Written when the health check drains its node (kept over a reboot): the check asks
slurmctld about the node, and lifts its own drain, only while this exists."""
JOIN_UNIT = "slurmforge-join.service"
"""Runs the join program at every boot where it is installed, again until it succeeds (the
node image: roles/slurm_node/tasks/install.yml)."""
JOIN_UNIT_FILE = f"/etc/systemd/system/{JOIN_UNIT}"
JOIN_LOCK = "/run/slurmforge-join.lock"
JOIN_STEPS_FILE = f"{ETC_DIR}/join-steps"
"""The steps a host's join runs when none are given (the boot's run): written by the rollout
on head nodes (every step but slurmd); absent on compute nodes (every step)."""
"""One join at a time on a node: the boot's (which tries again) and the rollout's."""
JOIN_SECRETS_DIR = "/etc/slurmforge/secrets"
"""Where the join program reads the munge key on the local target (the host's 0600 file,
mounted read-only) and on machines you own (the munge role's copy)."""
KIT_SUBDIR = ".slurmforge/kit"
"""The node kit, under the NAS's software mount (slurmforge.node.kit.kit_dir)."""
KIT_POOL_HOSTS = "pool/hosts"
"""In the node kit: `address name` of every pool node the scheduler service has a machine
for (service.pool_hosts), which the join program's hosts step adds to /etc/hosts. In a
directory of the service's own: the service's user may replace this file, not the kit's
accounts (slurmforge.node.kit.pool_hosts_file)."""
KIT_SLURMD_FAILURES = "slurmd"
"""In the node kit: one file per node whose slurmd stopped on an error, `<epoch> <its last
fatal or error line>`, written by the node (the join program's ExecStopPost of slurmd) and
read by the scheduler service every loop (service.slurmd_failures): a machine that cannot
start slurmd is reported with its reason within a loop, not at ResumeTimeout."""
NVIDIA_DEVICES_UNIT = "slurmforge-nvidia-devices.service"
"""The gpu image variant's unit that makes the NVIDIA device files (roles/gpu); the join
program's gpus step starts it where it exists."""
GPU_STAND_INS_FILE = "/etc/tmpfiles.d/slurmforge-gpus.conf"
"""The local target's stand-in GPU devices (the join program's gpus step), made again at
every boot by systemd-tmpfiles."""
HOSTS_REFRESH = "slurmforge-hosts"
"""The timer (and its service) the join program installs: `slurmforge-join --only hosts`
every 30 s, so shells outside a job (the login node's) resolve pool nodes that came since."""
NFS_OPTIONS = "nfsvers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,_netdev"
"""Every NFS/EFS mount of the NAS, by the join program and the storage_client role: NFS 4.1,
1 MiB transfers, hard mounts with AWS's recommended timeouts for EFS, a new source port
after a reconnect (noresvport: EFS recovers from a network blip only so)."""
JWT_KEY_FILE = "/etc/slurm/jwt_hs256.key"
AWS_VARS_FILE = "group_vars/all/aws.yml"
"""In an AWS cluster's inventory: what the stack outputs say of AWS (region, secret ARNs,
launch templates), for the rollout and for `slurmforge rotate`."""
"""The key slurmctld and slurmdbd sign and verify JSON Web Tokens with (AuthAltParameters),
on the controllers only, 0600 slurm:slurm: the rollout writes it from the secret store."""
SLURMRESTD_USER = "slurmrestd"
"""The REST API daemon's account: slurmrestd refuses to run as root or as SlurmUser."""
SLURMDBD_SECRET_CONF = "/etc/slurm/slurmdbd-storage.conf"
"""slurmdbd.conf's Include: the database password, never in the rendered file."""
ACCOUNTING_PROGRAM = "/usr/local/sbin/slurmforge-accounting"
ACCOUNTING_DESIRED = "/etc/slurm/slurmforge-accounting.json"
"""The rendered accounting.json the program makes slurmdbd equal to."""
SLURMDBD_UIDS_MARK = f"{ETC_DIR}/slurmdbd-uids.mark"
"""Touched when the rollout had slurmdbd look up the uids of users made after it started
(roles/slurmdbd/tasks/uids.yml)."""
LMOD_LIBEXEC = "/usr/share/lmod/lmod/libexec"
"""Debian's lmod tools (/usr/share/lmod/lmod links to the version: survives an upgrade)."""

PODMAN_API_DIR = "/run/podman"
"""The local target: the host's podman API socket directory, bind-mounted into the controller
(a directory, not the socket file: a restarted API service makes a new socket)."""
PODMAN_API_SOCKET = f"{PODMAN_API_DIR}/podman.sock"

PATHS: Mapping[str, str] = {
    "etc": ETC_DIR,
    "hold_file": HOLD_FILE,
    "service_venv": SERVICE_VENV,
    "service_state": SERVICE_STATE_DIR,
    "service_spool": SPOOL_DIR,
    "targets_dir": TARGETS_DIR,
    "targets_file": TARGETS_FILE,
    "alert_rules": ALERT_RULES_FILE,
    "nodes_ready_program": NODES_READY_PROGRAM,
    "ctld_in_control_program": CTLD_IN_CONTROL_PROGRAM,
    "control_program": CONTROL_PROGRAM,
    "ctld_standby_program": CTLD_STANDBY_PROGRAM,
    "join_program": JOIN_PROGRAM,
    "join_unit": JOIN_UNIT_FILE,
    "join_secrets": JOIN_SECRETS_DIR,
    "join_steps": JOIN_STEPS_FILE,
    "slurmdbd_secret_conf": SLURMDBD_SECRET_CONF,
    "accounting_program": ACCOUNTING_PROGRAM,
    "accounting_desired": ACCOUNTING_DESIRED,
    "slurmdbd_uids_mark": SLURMDBD_UIDS_MARK,
    "lmod_libexec": LMOD_LIBEXEC,
}
"""What the roles read as `slurmforge_paths.<key>`."""
PORTS: Mapping[str, int] = {
    "prometheus": PROMETHEUS_PORT,
    "alertmanager": ALERTMANAGER_PORT,
    "node_exporter": NODE_EXPORTER_PORT,
    "service": SERVICE_PORT,
}
"""What the roles read as `slurmforge_ports.<key>`."""

SERVICE_EXTRA = "service"
"""The optional dependencies (pyproject.toml) the service's venv holds beyond the run-time ones."""


@cache
def service_requirements() -> tuple[str, ...]:
    """What the service's venv installs (offline, from wheels the rollout machine downloads):
    the project's dependencies and its `service` extra, as the installed package's metadata
    has them (pyproject.toml's, as the build wrote them: sorted, in one spelling). pip
    resolves their whole closure when it downloads them."""
    from importlib.metadata import requires

    from slurmforge.package_data import PACKAGE

    base, extra = [], []
    for line in requires(PACKAGE) or []:
        requirement, _, marker = (part.strip() for part in line.partition(";"))
        if not marker:
            base.append(requirement)
        elif marker.replace('"', "'").replace(" ", "") == f"extra=='{SERVICE_EXTRA}'":
            extra.append(requirement)
    if not extra:
        raise ProvisionError(f"the installed {PACKAGE}'s metadata has no `{SERVICE_EXTRA}` extra: reinstall it")
    return (*base, *extra)


def node_vars() -> dict[str, Any]:
    """The inventory variables the roles take these values from (at image time too)."""
    return {
        "slurmforge_paths": dict(PATHS),
        "slurmforge_ports": dict(PORTS),
        "slurmforge_service_account": {"user": SERVICE_USER, "uid": SERVICE_UID, "gid": SERVICE_GID},
        "slurmforge_service_requirements": list(service_requirements()),
        "slurmforge_nfs_options": NFS_OPTIONS,
    }


# ------------------------------------------------------------------ provider settings


@dataclass(frozen=True)
class LocalProviderSettings:
    """The local target, written by `up` from its LocalProvider: what the service needs to
    make a pool node's container the way `up` makes every node's (slurmforge.local.container)
    - the node image, the podman network, every pool node's address (its MAC follows from
    it), and the host paths it bind-mounts: the NAS directories (mount point -> host
    directory), the rollout's public SSH key, the rendered join program and the cluster's
    munge key - then the host's podman API socket, and the pools told to fail their launches
    (the local stand-in for a region without capacity): a list, and a file of one pool a
    line, re-read on every launch ("" for no file)."""

    image: str
    network: str
    addresses: dict[str, str]
    """pool node -> its fixed address"""
    nas: dict[str, str]
    """mount point on the node -> the host directory"""
    ssh_key: str
    """the host's public key file, the nodes' root authorized_keys (read-only)"""
    join_program: str
    """the host's rendered join program (<inventory>/rendered/join.sh), at JOIN_PROGRAM (read-only)"""
    munge_key: str
    """the host's munge key file, at JOIN_SECRETS_DIR/munge.key (read-only)"""
    socket: str = PODMAN_API_SOCKET
    fail_pools: tuple[str, ...] = ()
    fail_pools_file: str = FAIL_POOLS_FILE
    interrupt_file: str = INTERRUPT_FILE
    """Spot notices to deliver ("" for none): a node name a line (PoolMachines.interruptions)."""


@dataclass(frozen=True)
class AwsProviderSettings:
    """The AWS target, from the stack's outputs (slurmforge.aws.inventory)."""

    region: str
    launch_templates: dict[str, str] = field(default_factory=dict)
    """pool -> its launch template id"""
    subnets: dict[str, str] = field(default_factory=dict)
    """zone -> the private subnet id there"""
    spot_queue_url: str | None = None
    """The SQS queue EventBridge puts spot interruption warnings on."""


ProviderSettings = LocalProviderSettings | AwsProviderSettings
SETTINGS_BY_TARGET: Mapping[str, type[ProviderSettings]] = {"local": LocalProviderSettings,
                                                            "aws": AwsProviderSettings}
Settings = TypeVar("Settings", LocalProviderSettings, AwsProviderSettings)


def settings_json(settings: ProviderSettings) -> dict[str, Any]:
    """The settings as the inventory holds them and provider.json has them."""
    return dict(json.loads(json.dumps(asdict(settings))))


def read_settings(kind: type[Settings], data: object) -> Settings:
    """`data` (provider.json) as `kind`; ProvisionError naming every key that is unknown,
    missing or of the wrong type."""
    what = f"provider settings ({kind.__name__})"
    if not isinstance(data, dict):
        raise ProvisionError(f"{what}: expected a JSON object, got {type(data).__name__}")
    known = {f.name: f for f in fields(kind)}
    problems = [f"unknown key {key!r}" for key in data if key not in known]
    problems += [f"missing key {name!r}" for name, f in known.items()
                 if name not in data and f.default is MISSING and f.default_factory is MISSING]
    values = {}
    for key, value in data.items():
        if key in known:
            ok, values[key] = _checked(value, str(known[key].type))
            if not ok:
                problems.append(f"{key!r} is not {known[key].type}: {value!r}")
    if problems:
        raise ProvisionError(f"{what}: {'; '.join(problems)} (keys: {', '.join(known)})")
    return kind(**values)


def _checked(value: Any, annotation: str) -> tuple[bool, Any]:
    """Is `value` what a field of that annotation holds, and the value as the field wants it."""
    if annotation == "str":
        return isinstance(value, str), value
    if annotation == "str | None":
        return value is None or isinstance(value, str), value
    if annotation == "tuple[str, ...]":
        ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        return ok, tuple(value) if ok else value
    if annotation == "dict[str, str]":
        ok = isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        return ok, dict(value) if ok else value
    raise TypeError(f"no check for {annotation}")


def cluster_cache_dir(root: str) -> str:
    """Where a cluster's spider cache lives: on the shared tree, next to `modulefiles`,
    so one refresh serves every node. roles/lmod points scDescriptT here
    (`lmod_cache_dir`); keep the two in step."""
    return f"{root}/.cache"
