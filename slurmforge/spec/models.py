"""The cluster spec: the one user input. Shape and per-field rules live here;
rules that relate several fields live in `checks/`.

Every model forbids unknown keys and is frozen: a spec is read once and then only
passed along.
"""

# No `from __future__ import annotations` here: pydantic would then evaluate each of the
# ~180 field annotations from its string (compile and eval: a fifth of `slurmforge
# validate`'s start-up); written as objects, they cost nothing more. A method returning
# its own class names it in quotes (the class does not exist yet when the method is made).
import ipaddress
import math
import re
from dataclasses import replace
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from slurmforge.distro import DEFAULT_BASE, RETIRED, Distro, distro
from slurmforge.spec.slurmtime import SLURM_MAX_SECONDS, parse_slurm_time

API_VERSION = "slurmforge/v1"

# Slurm node/partition/group names: a letter first, then letters, digits, '-' or '_'.
NAME_RE = r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$"
SLURM_NAME_RE = r"^[A-Za-z][A-Za-z0-9_-]{0,62}$"
FEATURE_RE = r"^[A-Za-z0-9_.-]{1,64}$"
# useradd's rule (shadow: letters, digits, '_', '.', '-', not '-' first, at most 32),
# lowercase: names are also private group names, mail local parts and home directories.
POSIX_NAME_RE = r"^[a-z_][a-z0-9_.-]{0,31}$"
# Mount points and directories: the POSIX portable file name characters. fstab, systemd
# mount units, slurm.conf ('#' starts a comment) and shell lines take them as written.
ABS_PATH_RE = r"^/[A-Za-z0-9._/+@-]*$"
# One line of text Slurm keeps as written and prints back on one line: no C0 or C1 control
# characters (line feed, vertical tab, form feed, NEL, ...), no Unicode line or paragraph
# separators (what the rollout's line-by-line read of sacctmgr splits on), no quotes
# (sacctmgr turns them into backticks). tests/slurm/test_accounting_text.py runs sacctmgr.
TEXT_RE = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029\"']*$"
CLUSTER_NAME_RE = r"^[a-z][a-z0-9]{0,19}$"
REGION_RE = r"^[a-z]{2}(-gov)?-[a-z]+-\d$"
AMI_RE = r"^ami-[0-9a-f]{8,17}$"
# A database name RDS takes (its CreateDBInstance DBName rule for MariaDB: 1-64 letters,
# digits and '_', a letter first) and MariaDB takes unquoted (slurmdbd runs `create database
# <name>`); its reserved words are refused by a check (checks/people.py).
DB_NAME_RE = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"
# EC2 key pair names: up to 255 ASCII characters.
KEY_NAME_RE = r"^[ -~]{1,255}$"

PoolName = Annotated[str, Field(pattern=NAME_RE)]
SlurmName = Annotated[str, Field(pattern=SLURM_NAME_RE)]
Feature = Annotated[str, Field(pattern=FEATURE_RE)]
PosixName = Annotated[str, Field(pattern=POSIX_NAME_RE)]
Text = Annotated[str, Field(pattern=TEXT_RE, max_length=255)]

# Linux's PATH_MAX (with its terminating NUL) and NAME_MAX.
PATH_MAX = 4095
NAME_MAX = 255
# Slurm reads counts as unsigned 16- or 32-bit numbers and keeps the two largest for
# itself: NO_VAL (0xfffe / 0xfffffffe, "not set") and INFINITE (0xffff / 0xffffffff).
SLURM_U16_MAX = 0xFFFD
SLURM_U32_MAX = 0xFFFFFFFD
# sacctmgr's Fairshare=parent is stored as 0x7fffffff (SLURMDB_FS_USE_PARENT).
FAIRSHARE_MAX = 0x7FFFFFFE
# The dearest EC2 instance costs about $100/h; a tenfold margin for owned clusters' sums.
MAX_PRICE_PER_HOUR = 1000.0
# slurmctld allocates a hash table entry per MaxJobCount at start (8 bytes each, twice).
MAX_JOB_COUNT = 10_000_000
# Slurm's MAX_SLURM_NODES (slurm.h, "64K hosts"): the most hosts one hostlist range holds
# (hostlist.c's MAX_RANGE; slurmctld cannot read a NodeName range of more: "Too many hosts
# in range") and the size of slurmctld's node table (node_conf.c). A pool is one range.
MAX_SLURM_NODES = 65_536


def _node_count(value: int) -> int:
    if value > MAX_SLURM_NODES:
        raise field_error("slurm_node_count", f"more nodes than one Slurm hostlist range holds ({MAX_SLURM_NODES:,}: "
                          "slurmctld could not read the pool's NodeName line)",
                          f"use at most {MAX_SLURM_NODES:,}, in several pools if you need more (a cluster holds "
                          f"{MAX_SLURM_NODES:,} nodes in all)")
    return value


class Model(BaseModel):
    # defer_build: a model's validator is built when first used, not at import (building
    # the 35 models' validators was most of `slurmforge validate`'s start-up); a nested
    # model's default is a mapping its parent validates (nested_default), so that
    # validating a spec builds one validator, the Cluster's, with every model inline.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def new_list() -> list[Any]:
    """An empty list, a field's default. A literal [] would be deep-copied for every model
    (100,000 users: a third of a second); the builtin `list` as the factory would have
    pydantic read its signature from text (a tokenizer run per field, at start-up)."""
    return []


def new_dict() -> dict[Any, Any]:
    """An empty mapping, a field's default (see new_list)."""
    return {}


def nested_default(**values: object) -> Any:
    """A nested model's default: these values (else its own defaults), validated by the
    parent like any mapping. An instance as the default would build the nested model's own
    validator when this module is imported."""
    return Field(default_factory=lambda: dict(values), validate_default=True)


def field_error(kind: str, message: str, fix: str) -> PydanticCustomError:
    """A field-level error that carries its fix (the loader shows it after 'fix:')."""
    return PydanticCustomError(kind, message.replace("{", "(").replace("}", ")"), {"fix": fix})


REFRESH_RE = r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,63}$"
"""images.refresh: a label (a date, a ticket) that goes into the image's record and change key."""


def _refresh_label(value: object) -> object:
    """images.refresh as users write it: YAML reads an unquoted date as a date and 3 as an
    int; both are the label they look like. A boolean or a float (1.10 reads as 1.1) is not."""
    import datetime

    if isinstance(value, bool | float):
        raise field_error("refresh_label", f"a {'boolean' if isinstance(value, bool) else 'number'}, not a label",
                          'quote it, e.g. refresh: "2026-11-29"')
    if isinstance(value, datetime.date | int):
        return value.isoformat() if isinstance(value, datetime.date) else str(value)
    return value


def _not_a_boolean(value: object) -> object:
    """YAML reads true/yes/on as a boolean and pydantic would take it as 1."""
    if isinstance(value, bool):
        raise field_error("count_bool", "a boolean, not a number", "write a number (YAML reads unquoted "
                          "true, yes and on as booleans)")
    return value


Count = Annotated[int, BeforeValidator(_not_a_boolean)]
"""A whole number; a boolean is refused (pydantic's lax mode reads true as 1)."""
Dollars = Annotated[float, BeforeValidator(_not_a_boolean), Field(gt=0, le=MAX_PRICE_PER_HOUR, allow_inf_nan=False)]
"""US dollars per hour: above 0, finite, not a boolean."""


TIME_FORMS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"
_UNITS = {"h": "hours", "m": "minutes", "s": "seconds"}


def _check_time(value: object) -> object:
    """A Slurm time string. Runs before str validation: YAML reads an unquoted 1:30:00 as
    the base-60 number 5400, which Slurm would then take as 5400 minutes."""
    if isinstance(value, int) and not isinstance(value, bool):
        raise field_error("slurm_time_number", "a number, not a Slurm time string (YAML reads unquoted 1:30:00 "
                          "as 5400)", 'quote the time, e.g. "01:30:00", or "90" for 90 minutes')
    if isinstance(value, str):
        try:
            seconds = parse_slurm_time(value)
        except ValueError as exc:
            detail = re.search(r"(\w) field (\d+) is out of range", str(exc))
            why = f": {_UNITS[detail[1]]} {detail[2]} out of range" if detail else ""
            raise field_error("slurm_time", f"not a Slurm time{why}", f"use {TIME_FORMS}") from None
        if seconds != math.inf and seconds > SLURM_MAX_SECONDS:
            raise field_error("slurm_time_range", f"longer than Slurm can hold ({SLURM_MAX_SECONDS:,} seconds, "
                              "about 68 years)", "use a shorter time, or UNLIMITED")
    return value


def _check_job_time(value: str) -> str:
    if parse_slurm_time(value) == 0:
        raise field_error("slurm_time_zero", "0 minutes: no job could run", "use a time above 0, or UNLIMITED")
    return value


def _check_whole_minutes(value: str) -> str:
    """A period Slurm keeps in whole minutes, at least one (PriorityCalcPeriod:
    time_str2mins, and slurmctld refuses less than 1)."""
    seconds = parse_slurm_time(value)
    if seconds == math.inf or seconds < 60 or seconds % 60:
        raise field_error("whole_minutes", "not a whole number of minutes, at least 1",
                          'use minutes, e.g. "1" or "00:05:00"')
    return value


def _off(value: object) -> object:
    """OFF is a Slurm word, but YAML reads an unquoted OFF (or no) as false."""
    return "OFF" if value is False else value


def _yes_no(value: object) -> object:
    """YES and NO are Slurm words, but YAML reads them unquoted as booleans."""
    return ("YES" if value else "NO") if isinstance(value, bool) else value


_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4_CIDR = re.compile(rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}/(3[0-2]|[12]?[0-9])")


def _check_cidr(value: str) -> str:
    found = _IPV4_CIDR.fullmatch(value)
    if found:  # the usual case, without ipaddress's objects (microseconds each)
        number = sum(int(octet) << shift for octet, shift in zip(found.groups()[:4], (24, 16, 8, 0), strict=True))
        if number & ((1 << (32 - int(found[5]))) - 1) == 0:
            return value
    try:
        address = ipaddress.ip_interface(value)
    except ValueError:
        raise field_error("cidr", "not a CIDR range", "write address/prefix, e.g. 10.0.0.0/16") from None
    if address.version != 4:
        raise field_error("cidr", "IPv6 is not supported", "use an IPv4 range, e.g. 10.0.0.0/16")
    if "/" not in value:
        raise field_error("cidr", "no prefix length", f"write it as a range, e.g. {address.network}")
    if address.ip != address.network.network_address:
        raise field_error("cidr", "host bits are set", f"use the network address {address.network}")
    return value


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


def is_domain(value: str) -> bool:
    """A DNS domain such as example.org: host name labels, at least two, the last not all digits."""
    return bool(_HOSTNAME.match(value)) and "." in value and not value.rsplit(".", 1)[1].isdigit()


def _check_address(value: str) -> str:
    """An IP address, or a DNS name (dotted digits must be an IP address: 10.0.0.300 is not)."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if re.fullmatch(r"[\d.]+", value) or not _HOSTNAME.match(value):
        raise field_error("address", "not an IP address or host name", "use e.g. 192.168.1.10 or nas.example.org")
    return value


def _normal_path(value: str) -> str:
    """One spelling per directory: no '//', '/./' or trailing '/', so that paths compare
    equal when they are equal. '..' is refused rather than resolved (it reads as a
    different place than it is); so are paths Linux cannot hold."""
    parts = [part for part in value.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise field_error("path_dotdot", "'..' in a path", "write the directory it means, without '..'")
    if len(value) > PATH_MAX or any(len(part) > NAME_MAX for part in parts):
        raise field_error("path_long", f"longer than Linux allows ({PATH_MAX} characters, {NAME_MAX} per name)",
                          "use a shorter path")
    return "/" + "/".join(parts)


SlurmTime = Annotated[str, BeforeValidator(_check_time)]
"""A Slurm time string (MaxTime, DefaultTime, ...); see slurmtime.py."""
JobTime = Annotated[SlurmTime, AfterValidator(_check_job_time)]
"""A Slurm time a job runs for: not 0."""
Minutes = Annotated[SlurmTime, AfterValidator(_check_whole_minutes)]
"""A Slurm time of whole minutes, at least one."""
AbsPath = Annotated[str, Field(pattern=ABS_PATH_RE), AfterValidator(_normal_path)]
"""An absolute path, normalised: /home/, //home and /./home are all /home."""
Cidr = Annotated[str, AfterValidator(_check_cidr)]
"""An IPv4 network in CIDR notation, without host bits."""
Address = Annotated[str, AfterValidator(_check_address)]
"""An IP address or a DNS name."""


# --------------------------------------------------------------------------- target


class AwsTarget(Model):
    kind: Literal["aws"]
    region: Annotated[str, Field(pattern=REGION_RE)]
    key_name: Annotated[str, Field(pattern=KEY_NAME_RE)]
    """The EC2 key pair every head and Ceph host accepts for SSH: the rollout's way in
    (Ansible reaches the login node on its public address and every other host through it)."""
    tags: dict[str, str] = Field(default_factory=new_dict)


class LocalTarget(Model):
    kind: Literal["local"]
    subnet: Cidr = "10.89.0.0/24"
    """The podman network the node containers live on (must not collide with the host's)."""
    shared_dir: AbsPath | None = None
    """Host directory bind-mounted on every node as the NAS. Default:
    /var/lib/slurmforge/<cluster>/nas."""


class StaticHost(Model):
    name: SlurmName
    address: Address


class StaticTarget(Model):
    kind: Literal["static"]
    controller: StaticHost
    backup_controller: StaticHost | None = None
    """The second controller's machine (with head.backup_controller: true)."""
    login: list[StaticHost] = Field(default_factory=new_list)
    nodes: dict[str, list[StaticHost]] = Field(default_factory=new_dict)
    """Per pool, the machines that are its nodes (names as Slurm will call them)."""
    ssh_user: PosixName = "root"


Target = Annotated[AwsTarget | LocalTarget | StaticTarget, Field(discriminator="kind")]

# --------------------------------------------------------------------------- pools


class PoolKind(StrEnum):
    CPU = "cpu"
    GPU = "gpu"


class Market(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"


class Gpus(Model):
    count: Annotated[Count, Field(ge=1, le=64)]
    model: Feature
    kind: Literal["nvidia", "neuron"] = "nvidia"


class Hardware(Model):
    """Explicit hardware, for on-premise and local nodes (AWS pools use instance_types)."""

    sockets: Annotated[Count, Field(ge=1, le=16)] = 1
    cores_per_socket: Annotated[Count, Field(ge=1, le=512)]
    threads_per_core: Annotated[Count, Field(ge=1, le=8)] = 1
    memory_mb: Annotated[Count, Field(ge=64, le=SLURM_U32_MAX)]
    gpus: Gpus | None = None

    @model_validator(mode="after")
    def _cpus_fit_slurm(self) -> "Hardware":
        cpus = self.sockets * self.cores_per_socket * self.threads_per_core
        if cpus > SLURM_U16_MAX:
            raise field_error("cpus_range", f"{cpus:,} CPUs per node; Slurm counts a node's CPUs in 16 bits",
                              f"keep sockets x cores_per_socket x threads_per_core at {SLURM_U16_MAX:,} or fewer")
        return self


class Pool(Model):
    name: PoolName
    kind: PoolKind
    instance_types: list[str] = Field(default_factory=new_list)
    """AWS instance types, in order of preference (a flexible pool when several)."""
    hardware: Hardware | None = None
    gpus: Annotated[Count | None, Field(ge=0, le=64)] = None
    """GPUs per node to give Slurm; default: all the instance type has."""
    memory_mb: Annotated[Count | None, Field(ge=64, le=SLURM_U32_MAX)] = None
    """RealMemory override; default: 92.5% of the instance type's memory (slurmforge.spec.nodes)."""
    features: list[Feature] = Field(default_factory=new_list)
    min_nodes: Annotated[Count, Field(ge=0), AfterValidator(_node_count)] = 0
    max_nodes: Annotated[Count, Field(ge=1), AfterValidator(_node_count)]
    market: Market = Market.ON_DEMAND
    fallback: list[PoolName] = Field(default_factory=new_list)
    """Pools to try, in order, when this pool cannot get capacity."""
    zones: list[str] = Field(default_factory=new_list)
    idle_seconds: Annotated[Count, Field(ge=60, le=7 * 24 * 3600)] = 600
    """How long a dynamic node stays idle before it is powered down."""
    node_prefix: str | None = None
    """Node names are <node_prefix>-<index>; default <cluster>-<pool>."""
    index_width: Annotated[Count | None, Field(ge=1, le=6)] = None
    placement_group: bool = False
    efa: bool = False
    weight: Annotated[Count | None, Field(ge=0, le=65533)] = None
    """Slurm node Weight: lower is allocated first."""
    price_per_hour: Dollars | None = None
    """US dollars one node costs per hour: TRES billing weights and `slurmforge cost`.
    Default: the catalog's price of the pool's preferred type in its market
    (slurmforge/data/prices.yaml); pools with explicit hardware have none unless set."""

    @field_validator("instance_types", mode="before")
    @classmethod
    def _one_type_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @property
    def preferred_type(self) -> str | None:
        """The instance type the pool asks for first (the head of `instance_types`): its
        price, its launch template's type, the CPU layout and GPU model Slurm is told; None
        for a pool with explicit hardware."""
        return self.instance_types[0] if self.instance_types else None


# --------------------------------------------------------------------------- partitions


class PartitionState(StrEnum):
    UP = "UP"
    DOWN = "DOWN"
    DRAIN = "DRAIN"
    INACTIVE = "INACTIVE"


class Partition(Model):
    name: SlurmName
    pools: Annotated[list[PoolName], Field(min_length=1)]
    default: bool = False
    max_time: JobTime | None = None
    default_time: JobTime | None = None
    state: PartitionState = PartitionState.UP
    allow_groups: list[PosixName] = Field(default_factory=new_list)
    allow_accounts: list[SlurmName] = Field(default_factory=new_list)
    priority_tier: Annotated[Count | None, Field(ge=0, le=65533)] = None
    preempt_mode: Annotated[Literal["OFF", "CANCEL", "REQUEUE", "SUSPEND"] | None, BeforeValidator(_off)] = None
    oversubscribe: Annotated[Literal["NO", "YES", "FORCE", "EXCLUSIVE"] | None, BeforeValidator(_yes_no)] = None
    qos: SlurmName | None = None
    max_nodes: Annotated[Count | None, Field(ge=1, le=SLURM_U32_MAX)] = None


# --------------------------------------------------------------------------- scheduling


class Priority(Model):
    type: Literal["multifactor", "basic"] = "multifactor"
    weight_fairshare: Annotated[Count, Field(ge=0, le=SLURM_U32_MAX)] = 10000
    weight_age: Annotated[Count, Field(ge=0, le=SLURM_U32_MAX)] = 1000
    weight_job_size: Annotated[Count, Field(ge=0, le=SLURM_U32_MAX)] = 0
    weight_partition: Annotated[Count, Field(ge=0, le=SLURM_U32_MAX)] = 1000
    weight_qos: Annotated[Count, Field(ge=0, le=SLURM_U32_MAX)] = 2000
    decay_half_life: SlurmTime = "7-00:00:00"
    max_age: SlurmTime = "7-00:00:00"
    calc_period: Minutes | None = None
    """How often Slurm decays usage and recomputes fair share and job priorities
    (PriorityCalcPeriod); unset: Slurm's 5 minutes."""


class Preemption(Model):
    type: Literal["none", "partition_prio", "qos"] = "none"
    mode: Annotated[Literal["OFF", "CANCEL", "REQUEUE", "SUSPEND,GANG"], BeforeValidator(_off)] = "REQUEUE"
    exempt_time: SlurmTime | None = None


class Qos(Model):
    name: SlurmName
    priority: Annotated[Count, Field(ge=0, le=SLURM_U32_MAX)] = 0
    preempt: list[SlurmName] = Field(default_factory=new_list)
    max_wall: JobTime | None = None
    max_gpus_per_user: Annotated[Count | None, Field(ge=0, le=SLURM_U32_MAX)] = None
    description: Text = ""


class Scheduling(Model):
    scheduler: Literal["backfill", "builtin"] = "backfill"
    select_parameters: Literal[
        "CR_CPU_Memory", "CR_Core_Memory", "CR_Socket_Memory", "CR_CPU", "CR_Core"
    ] = "CR_CPU_Memory"
    priority: Priority = nested_default()
    preemption: Preemption = nested_default()
    qos: list[Qos] = Field(default_factory=new_list)
    default_cpu_pool: PoolName | None = None
    """Jobs that name no partition and ask for no GPUs go to this pool's partition."""
    default_gpu_pool: PoolName | None = None
    """Jobs that name no partition and ask for GPUs go to this pool's partition."""
    default_mem_per_cpu_mb: Annotated[Count | None, Field(ge=1, le=SLURM_U32_MAX)] = None
    """Memory a job gets per allocated CPU when it asks for none (DefMemPerCPU); unset:
    Slurm's default, the node's whole memory."""
    max_job_count: Annotated[Count | None, Field(ge=1, le=MAX_JOB_COUNT)] = None
    resume_timeout: Annotated[Count, Field(ge=30, le=7200)] = 600
    """Seconds Slurm waits for a powered-up node to register (ResumeTimeout)."""


# --------------------------------------------------------------------------- storage


class NasMounts(Model):
    home: AbsPath = "/home"
    software: AbsPath = "/opt/software"
    slurm_state: AbsPath = "/var/spool/slurm-shared"


class Nas(Model):
    kind: Literal["efs", "nfs", "bind"]
    server: Address | None = None
    """NFS server name or address (kind nfs)."""
    export: AbsPath | None = None
    """Exported path on the server (kind nfs)."""
    mounts: NasMounts = nested_default()
    throughput_mode: Literal["bursting", "elastic", "provisioned"] = "elastic"


class Ceph(Model):
    hosts: Annotated[Count, Field(ge=1, le=64)] = 3
    osds_per_host: Annotated[Count, Field(ge=1, le=24)] = 1
    osd_size_gb: Annotated[Count, Field(ge=4, le=16384)] = 100
    replication: Annotated[Count, Field(ge=1, le=5)] = 3
    instance_type: str = "m6i.xlarge"
    mount: AbsPath = "/data"
    fs_name: SlurmName = "data"

    @property
    def osd_count(self) -> int:
        return self.hosts * self.osds_per_host


class Scratch(Model):
    path: AbsPath = "/scratch"
    size_gb: Annotated[Count | None, Field(ge=1, le=65536)] = None


class Storage(Model):
    nas: Nas
    ceph: Ceph | None = None
    scratch: Scratch | None = nested_default()


# --------------------------------------------------------------------------- accounting


class Database(Model):
    kind: Literal["local", "external"] = "local"
    host: Address | None = None
    port: Annotated[Count, Field(ge=1, le=65535)] = 3306
    name: Annotated[str, Field(pattern=DB_NAME_RE)] = "slurm_acct_db"
    user: PosixName = "slurm"


# Budget hours become GrpTRESMins (minutes, 64 bits in Slurm): keep them far below that.
BUDGET_HOURS_MAX = 10**12
BudgetHours = Annotated[float, BeforeValidator(_not_a_boolean), Field(ge=0, le=BUDGET_HOURS_MAX, allow_inf_nan=False)]


class Budget(Model):
    """What an account (with the accounts below it) may use per accounting.budget_period:
    Slurm's GrpTRESMins on the account's association. Spent, its jobs pend with
    AssocGrpGRESMinutes / AssocGrpCPUMinutes / AssocGrpBillingMinutes."""

    gpu_hours: BudgetHours | None = None
    """GPU-hours (each accelerator kind the cluster has counts on its own)."""
    cpu_hours: BudgetHours | None = None
    """CPU-hours (allocated CPUs x hours)."""
    billing_hours: BudgetHours | None = None
    """Billing units x hours: a job's billing TRES (TRESBillingWeights of its partition) per hour."""

    @model_validator(mode="after")
    def _something(self) -> "Budget":
        if self.gpu_hours is None and self.cpu_hours is None and self.billing_hours is None:
            raise field_error("budget_empty", "a budget without a limit",
                              "set gpu_hours, cpu_hours or billing_hours (or remove budget)")
        return self


# Slurm's own top account: every account without a parent sits under it.
ROOT_ACCOUNT = "root"


def _root_is_no_parent(value: str | None) -> str | None:
    """`parent: root` (any case: Slurm keeps account names in lowercase) says what no parent
    says: the account sits under Slurm's root account."""
    return None if value is not None and value.lower() == ROOT_ACCOUNT else value


class Account(Model):
    name: SlurmName
    description: Text = ""
    organization: Text = ""
    parent: Annotated[SlurmName | None, AfterValidator(_root_is_no_parent)] = None
    """The parent account; none (or root, the same) puts the account under Slurm's root."""
    fairshare: Annotated[Count, Field(ge=1, le=FAIRSHARE_MAX)] = 1
    budget: Budget | None = None


class Accounting(Model):
    enabled: bool = True
    database: Database = nested_default()
    accounts: list[Account] = Field(default_factory=new_list)
    enforce: list[Literal["associations", "limits", "qos", "safe"]] = ["associations", "limits", "qos"]
    budget_period: Literal["day", "week", "month", "quarter", "year"] = "month"
    """When Slurm sets every association's usage back to 0 (PriorityUsageResetPeriod), so
    budgets start again: at 00:00 on the first day of the period, controller time."""


class Group(Model):
    name: PosixName
    gid: Annotated[Count, Field(ge=1000, le=2**31 - 1)]


class User(Model):
    name: PosixName
    uid: Annotated[Count, Field(ge=1000, le=2**31 - 1)]
    groups: list[PosixName] = Field(default_factory=new_list)
    accounts: list[SlurmName] = Field(default_factory=new_list)
    default_account: SlurmName | None = None
    ssh_keys: list[str] = Field(default_factory=new_list)
    admin: bool = False


class Mail(Model):
    """Job mail (`sbatch --mail-type=BEGIN,END,FAIL`): slurmctld hands it to the
    controller's mailer, which relays it, or keeps it in /var/mail/<user> without a relay."""

    domain: str | None = None
    """Appended to user names for job mail (MailDomain)."""
    relay: Address | None = None
    """SMTP relay the controller sends job mail through (it must accept mail from the cluster)."""
    port: Annotated[Count, Field(ge=1, le=65535)] = 25
    """The relay's port: 25 (plain SMTP), 587 (STARTTLS) or 465 (TLS)."""

    @property
    def tls(self) -> Literal["starttls", "implicit"] | None:
        """How the relay's port speaks TLS: STARTTLS on 587, from the first byte on 465."""
        return "starttls" if self.port == 587 else "implicit" if self.port == 465 else None


# --------------------------------------------------------------------------- network, images, head


class Subnet(Model):
    cidr: Cidr
    zone: str


class Network(Model):
    vpc_cidr: Cidr = "10.0.0.0/16"
    public_subnets: list[Subnet] = Field(default_factory=new_list)
    private_subnets: list[Subnet] = Field(default_factory=new_list)
    admin_cidrs: list[Cidr] = Field(default_factory=new_list)
    """Who may reach the login node over SSH."""
    allow_ssh_from_anywhere: bool = False
    """Must be set to accept 0.0.0.0/0 in admin_cidrs."""


class Images(Model):
    base: Literal["debian-13"] = "debian-13"
    """The distribution every node runs (one identical image): Debian 13, Slurm 24.11."""

    @field_validator("base", mode="before")
    @classmethod
    def _retired_base(cls, value: object) -> object:
        if isinstance(value, str) and value in RETIRED:
            raise field_error("retired_base", f"is no longer built ({RETIRED[value]})",
                              f"use base: {DEFAULT_BASE}; a cluster built on {value} is rebuilt, not upgraded "
                              "(docs/upgrade.md)")
        return value
    ami: Annotated[str | None, Field(pattern=AMI_RE)] = None
    """Pin an already baked golden image instead of building one."""
    refresh: Annotated[Annotated[str, Field(pattern=REFRESH_RE)] | None, BeforeValidator(_refresh_label)] = None
    """A label of the node image's build (patch day: a date): changing it builds the image
    again from the current packages of the release - the local image, the AMI - which
    `slurmforge upgrade` then rolls through the cluster (docs/upgrade.md)."""

    def distro(self) -> Distro:
        """The distribution the node image is built from, with this refresh label (part of
        the image's change key: slurmforge.image.image_key)."""
        return replace(distro(self.base), refresh=self.refresh or "")


class HeadNode(Model):
    instance_type: str = "m6i.xlarge"
    volume_gb: Annotated[Count, Field(ge=20, le=16384)] = 100


class Head(Model):
    controller: HeadNode = nested_default()
    login: HeadNode = nested_default(instance_type="t3.large")
    login_count: Annotated[Count, Field(ge=0, le=16)] = 1
    backup_controller: bool = False


def _max_unavailable(value: object) -> object:
    """A count (at least 1) or a percentage ("25%", 1-100) of a pool's static nodes."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit() and 1 <= int(value[:-1]) <= 100:
        return value
    raise field_error("max_unavailable", "not a node count or a percentage",
                      "a whole number of nodes, at least 1 (max_unavailable: 2), or a share of each pool's static "
                      "nodes from 1% to 100% (max_unavailable: 25%); it is never less than one node")


class Maintenance(Model):
    """How `slurmforge upgrade` rolls a new node image through the cluster (docs/upgrade.md)."""

    max_unavailable: Annotated[int | str, BeforeValidator(_max_unavailable)] = 1
    """Static nodes of a pool replaced at once: a count, or a percentage of the pool's static
    nodes (rounded down, at least one)."""


class RestApi(Model):
    """Slurm's REST API (slurmrestd, JWT authentication) on the login node(s)."""

    port: Annotated[Count, Field(ge=1024, le=65535)] = 6820
    """Where slurmrestd listens (every address of the login node; on AWS, open to the VPC)."""


class Modules(Model):
    root: AbsPath = "/opt/software/modules"


# --------------------------------------------------------------------------- monitoring

PROM_DURATION_RE = r"^[0-9]+[smhd]$"
PromDuration = Annotated[str, Field(pattern=PROM_DURATION_RE)]
EMAIL_RE = r"^[^@\s,]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$"
HTTP_URL_RE = r"^https?://[^\s/]+(/\S*)?$"


class Alerts(Model):
    """Thresholds of the alert rules Prometheus evaluates on the controller."""

    node_down_for: PromDuration = "5m"
    node_drained_for: PromDuration = "10m"
    target_down_for: PromDuration = "5m"
    pending_minutes: Annotated[Count, Field(ge=1, le=7 * 24 * 60)] = 30
    """A job waiting this long on a pool already at max_nodes."""
    links_cooling_for: PromDuration = "2m"
    storage_full_percent: Annotated[Count, Field(ge=50, le=99)] = 90
    storage_full_for: PromDuration = "5m"
    email: list[Annotated[str, Field(pattern=EMAIL_RE)]] = Field(default_factory=new_list)
    """Who Alertmanager mails firing and resolved alerts to (through mail.relay)."""
    webhook: Annotated[str, Field(pattern=HTTP_URL_RE)] | None = None
    """Where Alertmanager POSTs alert groups as JSON (its webhook format): a chat bridge, an
    on-call service, a dead man's switch."""
    repeat_interval: PromDuration = "4h"
    """A still-firing alert is sent again after this long."""


class Monitoring(Model):
    retention_days: Annotated[Count, Field(ge=1, le=3650)] = 15
    retention_gb: Annotated[Count, Field(ge=1, le=10_000)] = 4
    """Prometheus deletes the oldest blocks beyond this size (a small controller's disk)."""
    scrape_interval: PromDuration = "15s"
    alerts: Alerts = nested_default()


# --------------------------------------------------------------------------- the cluster


class Cluster(Model):
    api_version: Literal["slurmforge/v1"]
    name: Annotated[str, Field(pattern=CLUSTER_NAME_RE)]
    """Cluster name (Slurm ClusterName, resource names, tags): lowercase, <= 20 chars."""
    target: Target
    network: Network = nested_default()
    images: Images = nested_default()
    head: Head = nested_default()
    pools: Annotated[list[Pool], Field(min_length=1)]
    partitions: Annotated[list[Partition], Field(min_length=1)]
    scheduling: Scheduling = nested_default()
    storage: Storage
    accounting: Accounting = nested_default()
    groups: list[Group] = Field(default_factory=new_list)
    users: list[User] = Field(default_factory=new_list)
    mail: Mail = nested_default()
    modules: Modules = nested_default()
    monitoring: Monitoring = nested_default()
    rest_api: RestApi = nested_default()
    maintenance: Maintenance = nested_default()

    def pool(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)

    def node_prefix(self, pool: Pool) -> str:
        return pool.node_prefix or f"{self.name}-{pool.name}"

