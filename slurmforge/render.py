"""The one renderer: spec -> Slurm config text.

The CLI's `render`, the Ansible roles (which ship the text verbatim) and the scheduler
service all call `render_all`. Settings hold only what differs from Slurm's defaults,
checked against `man slurm.conf` of the release the node image carries (`slurm_release`:
Slurm 24.11 on Debian 13). Keys Slurm retired since 22.05 are gone: `PrivateData=cloud`
(23.02 shows cloud nodes by default), `SlurmctldParameters=cloud_reg_addrs` and
`CommunicationParameters=NoAddrCache` (23.11 made both the default and calls them defunct).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from slurmforge.billing import BillingWeights, billing_weights
from slurmforge.contract import (
    CTLD_IN_CONTROL_PROGRAM,
    CTLD_STANDBY_PROGRAM,
    HEALTH_PROGRAM,
    JOIN_PROGRAM,
    JWT_KEY_FILE,
    NODES_READY_PROGRAM,
    SERVICE_BIN,
    SLURMDBD_SECRET_CONF,
)
from slurmforge.distro import distro, release_tuple
from slurmforge.hosts import controller_name, controller_names
from slurmforge.spec.models import AwsTarget, Cluster, LocalTarget, Partition, StaticTarget
from slurmforge.spec.nodes import NodeHardware, node_sets, pool_hardware, pool_hostlist
from slurmforge.spec.routing import JOB_SUBMIT_SCRIPT, routing
from slurmforge.spec.slurmtime import parse_slurm_time
from slurmforge.templating import make_environment

if TYPE_CHECKING:
    import jinja2

CONFIG_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "slurmdbd.conf", "dma.conf", JOB_SUBMIT_SCRIPT)

# Where things live on every node: slurmforge.contract (the roles get the same values).
RESUME_PROGRAM = f"{SERVICE_BIN}/slurmforge-resume"
SUSPEND_PROGRAM = f"{SERVICE_BIN}/slurmforge-suspend"
RESUME_FAIL_PROGRAM = f"{SERVICE_BIN}/slurmforge-resume-fail"
LOCAL_SUSPEND_TIMEOUT = 20
# job mail: slurmctld runs bsd-mailx, which hands the message to dma (the controller's
# sendmail, configured by dma.conf; installed by the slurm_controller role)
MAIL_PROGRAM = "/usr/bin/mail"
SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"
"""SlurmctldLogFile; the rollout reads why slurmctld refused a config there."""

HEALTH_CHECK_INTERVAL = 30
"""slurm.conf's HealthCheckInterval: slurmd runs the node's health check (the program's
health mode) at start and every this many seconds. It costs ~0.15 s of one core and no
call to slurmctld on a healthy node; a broken node is drained within this."""


SLURMCTLD_TIMEOUT = 10
"""With a backup controller: seconds without an answer from the primary before the backup
takes control. The backup pings every SlurmctldTimeout/3 s and, since 23.02, also wants
the primary's heartbeat file (StateSaveLocation/heartbeat, rewritten every
SlurmctldTimeout/4 s) to have stopped changing, so a busy primary that still writes it
is never taken over: a short timeout costs no false takeovers. Takeover lands about
10 + 2 x 3.3 s after the primary dies (bench/failover_bench.py measures it); Slurm's
default of 120 s would leave a cluster without a controller for over two minutes."""


CRED_EXPIRE = 10
"""Seconds a job credential stays valid (AuthInfo=cred_expire; Slurm's default 120, its
minimum 5: src/interfaces/cred.c). slurmctld holds a requeued batch job for this + 1 s
before it may start again (batch_requeue_fini in job_mgr.c: the new launch's credential
must be newer than the revoked one), so the default makes every requeue - a spot notice,
a dead node, preemption, `scontrol requeue` - wait 121 s. A credential is checked by the
slurmd it is sent to within a second of being signed (slurmctld and srun send it directly:
TreeWidth is wide, the Prolog is the join program's hosts step); 10 s leaves room for
that and for clocks a few seconds apart (docs/service.md, "The requeue hold")."""


class Lines(tuple[str, ...]):
    """A slurm.conf key written once per value, on its own line (SlurmctldHost)."""


@cache
def environment() -> jinja2.Environment:
    env = make_environment(slurm_kv=slurm_kv, slurm_value=slurm_value, lua_string=lua_string)
    env.tests["lines"] = lambda value: isinstance(value, Lines)
    return env


def slurm_value(value: Any) -> str:
    if isinstance(value, bool):
        return "YES" if value else "NO"
    if isinstance(value, list | tuple):
        return ",".join(slurm_value(v) for v in value)
    return str(value)


def lua_string(value: str | None) -> str:
    """A Lua literal: nil, or a double-quoted string (names the spec allows need no escapes
    beyond these)."""
    if value is None:
        return "nil"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def slurm_kv(items: Mapping[str, Any], sep: str = " ") -> str:
    """Key=Value pairs: None and empty lists drop the key, lists join with commas,
    booleans become YES/NO."""
    return sep.join(
        f"{key}={slurm_value(value)}"
        for key, value in items.items()
        if value is not None and value != [] and value != ()
    )


# --------------------------------------------------------------------------- shared paths


JWT_AUTH = {"AuthAltTypes": "auth/jwt", "AuthAltParameters": f"jwt_key={JWT_KEY_FILE}"}
"""slurm.conf's and slurmdbd.conf's JSON Web Token keys: both daemons verify a REST API
request's token with the same key (only slurmctld and slurmdbd load AuthAltTypes)."""


def service_shared_dir(spec: Cluster) -> str:
    """The scheduler service's launch records and leader lock (service.leader): on the NAS,
    beside Slurm's state, where every controller finds them."""
    return f"{spec.storage.nas.mounts.slurm_state.rstrip('/')}/slurmforge-service"


def state_save_location(spec: Cluster) -> str:
    """slurmctld's StateSaveLocation: on the shared slurm_state mount (a backup controller
    and the upgrade check see the same state)."""
    return f"{spec.storage.nas.mounts.slurm_state.rstrip('/')}/slurmctld"


def is_cloud(spec: Cluster) -> bool:
    """Does any node start on demand (Slurm power saving)?"""
    if isinstance(spec.target, StaticTarget):
        return False
    return isinstance(spec.target, AwsTarget) or any(p.max_nodes > p.min_nodes for p in spec.pools)


# --------------------------------------------------------------------------- contexts


@dataclass(frozen=True)
class NodeLine:
    hostlist: str
    hardware: NodeHardware
    features: list[str]
    cloud: bool
    weight: int | None

    def fields(self) -> dict[str, Any]:
        hw = self.hardware
        layout = hw.uniform_layout
        return {
            "NodeName": self.hostlist,
            # a flexible pool of differently laid out types: CPUs only (any layout fits)
            "CPUs": None if layout else hw.cpus,
            "RealMemory": hw.memory_mb,
            "Sockets": hw.sockets if layout else None,
            "CoresPerSocket": hw.cores_per_socket if layout else None,
            "ThreadsPerCore": hw.threads_per_core if layout else None,
            "Feature": f'"{",".join(self.features)}"' if self.features else None,
            "Gres": f"{hw.gres_name}:{hw.gpus}" if hw.gpus else None,
            "Weight": self.weight,
            "State": "CLOUD" if self.cloud else None,
        }


def node_lines(spec: Cluster) -> list[NodeLine]:
    aws = isinstance(spec.target, AwsTarget)
    lines = []
    for pool in spec.pools:
        hw = pool_hardware(pool)
        if hw is None:  # the checks refuse such specs; render nothing for them
            continue
        features = ([hw.gpu_model] if hw.gpu_model and hw.gpus else []) + list(pool.features)
        for nodeset in node_sets(spec, pool):
            lines.append(NodeLine(nodeset.hostlist, hw, features, nodeset.dynamic or aws, pool.weight))
    return lines


def _partition_nodes(spec: Cluster, part: Partition) -> str:
    return ",".join(pool_hostlist(spec, spec.pool(name)) for name in part.pools)


def partition_fields(spec: Cluster, part: Partition,
                     weights: Mapping[str, BillingWeights] | None = None) -> dict[str, Any]:
    """One PartitionName line; `weights`: billing_weights(spec), when the caller has it."""
    pools = [spec.pool(name) for name in part.pools]
    billing = (billing_weights(spec) if weights is None else weights).get(part.name)
    cloud = is_cloud(spec) and any(p.max_nodes > p.min_nodes or isinstance(spec.target, AwsTarget)
                                   for p in pools)
    return {
        "PartitionName": part.name,
        "Nodes": _partition_nodes(spec, part),
        "Default": "YES" if part.default else None,
        "MaxTime": part.max_time,
        "DefaultTime": part.default_time,
        "State": part.state.value,
        "AllowGroups": part.allow_groups,
        "AllowAccounts": part.allow_accounts,
        "PriorityTier": part.priority_tier,
        "PreemptMode": part.preempt_mode,
        "OverSubscribe": part.oversubscribe,
        "QOS": part.qos,
        "MaxNodes": part.max_nodes,
        # the highest SuspendTime of a node's partitions wins (man slurm.conf)
        "SuspendTime": max(p.idle_seconds for p in pools) if cloud else None,
        # a job's billing TRES = its cost per hour (slurmforge/billing.py)
        "TRESBillingWeights": billing.text() if billing else None,
    }


def _gres_types(spec: Cluster) -> list[str]:
    names = {hw.gres_name for hw in (pool_hardware(p) for p in spec.pools) if hw and hw.gres_name}
    return sorted(names)


USAGE_RESET = {"day": "DAILY", "week": "WEEKLY", "month": "MONTHLY", "quarter": "QUARTERLY", "year": "YEARLY"}
"""accounting.budget_period -> PriorityUsageResetPeriod."""


def has_budgets(spec: Cluster) -> bool:
    return spec.accounting.enabled and any(a.budget is not None for a in spec.accounting.accounts)


def slurm_settings(spec: Cluster) -> dict[str, Any]:
    """Cluster-wide slurm.conf keys, in the order they are written."""
    sched, prio = spec.scheduling, spec.scheduling.priority
    state_dir = state_save_location(spec)
    cloud = is_cloud(spec)
    static_nodes = [s.hostlist for p in spec.pools for s in node_sets(spec, p) if not s.dynamic]
    backup = len(controller_names(spec)) > 1
    settings: dict[str, Any] = {
        "ClusterName": spec.name,
        "SlurmctldHost": Lines(controller_names(spec)),
        "SlurmctldTimeout": SLURMCTLD_TIMEOUT if backup else None,
        # A backup that held control is restarted once it stands by again: Slurm 24.11 reads
        # the cluster's ID at start only, and taking control (re-reading slurm.conf) zeroes
        # it; without it the next takeover waits for slurmdbd on the dead primary.
        # roles/slurm_controller/files/slurmforge-ctld-standby says how. With powered-down
        # nodes the program also tells the scheduler service that a slurmctld took control:
        # it never asks a powering-up node to register (service.handoff, CONTROL).
        "SlurmctldPrimaryOnProg": CTLD_IN_CONTROL_PROGRAM if backup or cloud else None,
        "SlurmctldPrimaryOffProg": CTLD_STANDBY_PROGRAM if backup else None,
        "SlurmUser": "slurm",
        "AuthType": "auth/munge",
        # the REST API's tokens (`scontrol token`; slurmrestd passes a request's token on):
        # slurmctld signs and verifies them with the cluster's JWT key
        **JWT_AUTH,
        # a requeued job may start again CRED_EXPIRE + 1 s later, not 121 s
        "AuthInfo": f"cred_expire={CRED_EXPIRE}",
        "StateSaveLocation": state_dir,
        "SlurmdSpoolDir": "/var/spool/slurmd",
        "SlurmctldLogFile": SLURMCTLD_LOG,
        "SlurmdLogFile": "/var/log/slurm/slurmd.log",
        "ReturnToService": 2,
        # scheduling
        "SchedulerType": f"sched/{sched.scheduler}",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": sched.select_parameters,
        "DefMemPerCPU": sched.default_mem_per_cpu_mb,
        "GresTypes": _gres_types(spec),
        "MaxJobCount": sched.max_job_count,
        # default pools: jobs that name no partition are routed by job_submit.lua
        "JobSubmitPlugins": "lua" if routing(spec).active else None,
        # a job no partition it names would ever run (a user outside AllowGroups, over
        # MaxTime) is refused at submission with Slurm's reason; Slurm's default (NO) queues
        # it for ever ("partition configuration not available"). ANY, not ALL: a routed job
        # names several partitions and needs to fit one of them.
        "EnforcePartLimits": "ANY",
        # resource limits through cgroups (cores, memory, devices: see cgroup.conf)
        "ProctrackType": "proctrack/cgroup",
        "TaskPlugin": ["task/cgroup", "task/affinity"],
        "JobAcctGatherType": "jobacct_gather/cgroup",
        "PrologFlags": "Contain",
        # the join program's hosts step (it sees SLURM_SCRIPT_CONTEXT=prolog_slurmd): every
        # node of a job adds its peers' names to /etc/hosts from the node kit's pool hosts as
        # the job is allocated - Contain implies Alloc, so on all its nodes, once all of them
        # registered (docs/node-lifecycle.md, "Names"); it never fails the job
        "Prolog": JOIN_PROGRAM,
        # the node's health check (the join program by another name): a node whose mounts,
        # munge, scratch or GPUs fail it is drained `health: ...` and replaced by the
        # scheduler service (docs/node-lifecycle.md, "Node health")
        "HealthCheckProgram": HEALTH_PROGRAM,
        "HealthCheckInterval": HEALTH_CHECK_INTERVAL,
        # priority and fair share
        "PriorityType": f"priority/{prio.type}",
    }
    if prio.type == "multifactor":
        settings |= {
            "PriorityWeightFairshare": prio.weight_fairshare,
            "PriorityWeightAge": prio.weight_age,
            "PriorityWeightJobSize": prio.weight_job_size or None,
            "PriorityWeightPartition": prio.weight_partition,
            "PriorityWeightQOS": prio.weight_qos,
            "PriorityWeightTRES": None,
            "PriorityDecayHalfLife": prio.decay_half_life,
            "PriorityCalcPeriod": prio.calc_period,
            "PriorityMaxAge": prio.max_age,
            # budgets (GrpTRESMins) count usage since the period began (checks: decay 0); and
            # without decay Slurm wants a reset period or refuses the config ("You have to
            # either have PriorityDecayHalfLife != 0 or PriorityUsageResetPeriod set"): every
            # budget_period then, budgets or not
            "PriorityUsageResetPeriod": USAGE_RESET[spec.accounting.budget_period]
            if has_budgets(spec) or parse_slurm_time(prio.decay_half_life) == 0 else None,
        }
    if billing_weights(spec):
        # billing = the largest weighted TRES, not their sum: a job pays for the share of
        # a node it takes (slurmforge/billing.py)
        settings["PriorityFlags"] = "MAX_TRES"
    if sched.preemption.type != "none":
        settings |= {
            "PreemptType": f"preempt/{sched.preemption.type}",
            "PreemptMode": sched.preemption.mode,
            "PreemptExemptTime": sched.preemption.exempt_time,
        }
    if spec.accounting.enabled:
        settings |= {
            "AccountingStorageType": "accounting_storage/slurmdbd",
            "AccountingStorageHost": controller_name(spec),
            "AccountingStorageEnforce": spec.accounting.enforce,
            "AccountingStorageTRES": ["gres/" + g for g in _gres_types(spec)],
            "JobAcctGatherFrequency": 30,
        }
    settings |= {"MailProg": MAIL_PROGRAM, "MailDomain": spec.mail.domain}
    # nodes join with only the munge key and the controller's address (configless)
    params = ["enable_configless"]
    if cloud:
        # the power-save thread resumes a job's nodes at once when node state changed since
        # its last scan - compared in whole seconds, so an allocation in the second of a scan
        # waits for the next periodic one: every 10 s by default (power_save.c); every 1 s here
        params += ["idle_on_node_suspend", "power_save_interval=1"]
        settings |= {
            "ResumeProgram": RESUME_PROGRAM,
            "SuspendProgram": SUSPEND_PROGRAM,
            "ResumeFailProgram": RESUME_FAIL_PROGRAM,
            # a job on powered-up nodes starts when its nodes register, not on slurmctld's
            # next 30 s periodic check (PERIODIC_TIMEOUT, hard-coded through 24.11: see
            # the program's header and NODES_READY_NEEDED_THROUGH)
            "PrologSlurmctld": NODES_READY_PROGRAM if needs_nodes_ready(spec) else None,
            "ResumeTimeout": sched.resume_timeout,
            # a node is resumable only SuspendTimeout after its power-down; a container
            # stops within seconds (the local provider kills it after 3 s), an EC2 instance
            # takes minutes
            "SuspendTimeout": LOCAL_SUSPEND_TIMEOUT if isinstance(spec.target, LocalTarget) else 120,
            "SuspendTime": min(p.idle_seconds for p in spec.pools),
            "ResumeRate": 0,
            "SuspendRate": 0,
            "SuspendExcNodes": static_nodes or None,
            # nodes come and go: no fan-out tree (a message relayed through a node that
            # just powered down is lost until it times out)
            "TreeWidth": 65533,
        }
    settings["SlurmctldParameters"] = params
    if isinstance(spec.target, LocalTarget):
        # containers see the host's CPUs and memory; trust the spec (man slurm.conf:
        # config_overrides) so every node registers with what the spec says
        settings["SlurmdParameters"] = "config_overrides"
    return settings


NODES_READY_NEEDED_THROUGH = "24.11"
"""The newest Slurm release checked to still start a job on resumed nodes only at its
30 s periodic check (src/slurmctld/controller.c: PERIODIC_TIMEOUT, not configurable;
SchedMD's pull request making it so is not merged). tests/slurm fails when the image's
Slurm is newer, so the workaround is re-checked rather than carried blindly."""


def slurm_release(spec: Cluster) -> str:
    """The Slurm release series the nodes run ("24.11"): what the configs are written for."""
    return distro(spec.images.base).slurm_release


def needs_nodes_ready(spec: Cluster) -> bool:
    return release_tuple(slurm_release(spec)) <= release_tuple(NODES_READY_NEEDED_THROUGH)


def slurm_conf_context(spec: Cluster, source: str) -> dict[str, Any]:
    weights = billing_weights(spec)
    return {
        "source": source,
        "release": slurm_release(spec),
        "settings": slurm_settings(spec),
        "nodes": [line.fields() for line in node_lines(spec)],
        "partitions": [partition_fields(spec, p, weights) for p in spec.partitions],
    }


def job_submit_context(spec: Cluster, source: str) -> dict[str, Any]:
    """job_submit.lua next to slurm.conf on the controller (see slurmforge/spec/routing.py)."""
    route = routing(spec)
    return {
        "source": source,
        "release": slurm_release(spec),
        "active": route.active,
        "gpu_partition": route.gpu_partition,
        "cpu_partition": route.cpu_partition,
        "gpu_pool": route.gpu_pool,
        "cpu_pool": route.cpu_pool,
        "gpu_gres": route.gpu_gres,
    }


def gres_context(spec: Cluster, source: str) -> dict[str, Any]:
    lines = []
    for line in node_lines(spec):
        hw = line.hardware
        if hw.gpus:
            lines.append({"NodeName": line.hostlist, "Name": hw.gres_name, "File": hw.device_glob})
    # Name the device files, no AutoDetect: Slurm 24.11 refuses it for CLOUD nodes (every
    # AWS node; slurmctld reads gres.conf for them at start: "Cannot use AutoDetect on
    # cloud/dynamic node"), and the local target's GPUs are files without a driver. The
    # files exist before slurmd starts: the gpu image variant makes /dev/nvidia<minor> of
    # each GPU (roles/gpu/files/slurmforge-nvidia-devices), the local target fakes them.
    return {"source": source, "settings": {"AutoDetect": "off"}, "lines": lines}


def cgroup_context(spec: Cluster, source: str) -> dict[str, Any]:
    return {
        "source": source,
        "settings": {
            # no CgroupPlugin: Slurm's autodetect picks cgroup/v2 where /sys/fs/cgroup is
            # the unified hierarchy (Debian 13 on AWS, most hosts of a local cluster) and
            # cgroup/v1 on a legacy or hybrid host (local nodes share the host's cgroups)
            "ConstrainCores": "yes",
            "ConstrainRAMSpace": "yes",
            "ConstrainSwapSpace": "yes",
            "ConstrainDevices": "yes",
        },
    }


def slurmdbd_context(spec: Cluster, source: str) -> dict[str, Any]:
    db = spec.accounting.database
    return {
        "source": source,
        "settings": {
            "AuthType": "auth/munge",
            **JWT_AUTH,
            "DbdHost": controller_name(spec),
            "SlurmUser": "slurm",
            "LogFile": "/var/log/slurm/slurmdbd.log",
            "PidFile": "/run/slurmdbd.pid",
            "StorageType": "accounting_storage/mysql",
            "StorageHost": db.host if db.kind == "external" else "localhost",
            "StoragePort": db.port if db.port != 3306 else None,
            "StorageLoc": db.name,
            "StorageUser": db.user,
        },
        # the password lives in a 0600 file the rollout writes from the secret store
        "secret_include": SLURMDBD_SECRET_CONF,
    }


def mail_context(spec: Cluster, source: str) -> dict[str, Any]:
    """/etc/dma/dma.conf on the controller: job mail goes through the spec's relay, or
    stays in /var/mail/<user> there (a recipient without a domain is local to dma)."""
    mail = spec.mail
    # dma delivers locally what is addressed to <user>@<MAILNAME>: that is the controller,
    # never the mail domain; senders are slurm@<domain> for the relay (MASQUERADE)
    settings: dict[str, Any] = {"MAILNAME": controller_name(spec), "MASQUERADE": mail.domain}
    if mail.relay is not None:
        settings |= {"SMARTHOST": mail.relay, "PORT": mail.port}
        if mail.tls is not None:
            settings["SECURETRANSFER"] = ""  # TLS; with STARTTLS, after it
        if mail.tls == "starttls":
            settings["STARTTLS"] = ""
    return {"source": source, "settings": settings}


CONTEXTS = {
    "slurm.conf": slurm_conf_context,
    "gres.conf": gres_context,
    "cgroup.conf": cgroup_context,
    "slurmdbd.conf": slurmdbd_context,
    "dma.conf": mail_context,
    JOB_SUBMIT_SCRIPT: job_submit_context,
}


def render(spec: Cluster, name: str, source: str = "cluster.yaml") -> str:
    if name not in CONTEXTS:
        raise KeyError(name)
    context = CONTEXTS[name](spec, source)
    return environment().get_template(f"{name}.j2").render(**context)


def render_all(spec: Cluster, source: str = "cluster.yaml") -> dict[str, str]:
    """Every config file, by file name (the Slurm ones and the controller's mailer's);
    what `render --out` writes and the roles install."""
    return {name: render(spec, name, source) for name in CONFIG_FILES}
