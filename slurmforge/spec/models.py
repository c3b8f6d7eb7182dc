"""The cluster spec: the one user input. Shape and per-field rules live here;
rules that relate several fields live in `checks.py`.

Every model forbids unknown keys and is frozen: a spec is read once and then only
passed along.
"""

from __future__ import annotations

import ipaddress
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from slurmforge.spec.slurmtime import parse_slurm_time

API_VERSION = "slurmforge/v1"

# Slurm node/partition/group names: a letter first, then letters, digits, '-' or '_'.
NAME_RE = r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$"
SLURM_NAME_RE = r"^[A-Za-z][A-Za-z0-9_-]{0,62}$"
FEATURE_RE = r"^[A-Za-z0-9_.-]{1,64}$"
POSIX_NAME_RE = r"^[a-z_][a-z0-9_-]{0,31}$"

PoolName = Annotated[str, Field(pattern=NAME_RE)]
SlurmName = Annotated[str, Field(pattern=SLURM_NAME_RE)]
Feature = Annotated[str, Field(pattern=FEATURE_RE)]
PosixName = Annotated[str, Field(pattern=POSIX_NAME_RE)]
AbsPath = Annotated[str, Field(pattern=r"^/[^\s,:]*$")]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def _check_time(value: str | None) -> str | None:
    if value is not None:
        parse_slurm_time(value)
    return value


def _check_cidr(value: str) -> str:
    net = ipaddress.ip_network(value, strict=True)
    if net.version != 4:
        raise ValueError("only IPv4 CIDRs are supported")
    return value


# --------------------------------------------------------------------------- target


class AwsTarget(Model):
    kind: Literal["aws"]
    region: Annotated[str, Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-\d$")]
    key_name: str | None = None
    """EC2 key pair for the login node (optional: SSM Session Manager works without)."""
    tags: dict[str, str] = {}


class LocalTarget(Model):
    kind: Literal["local"]
    subnet: str = "10.89.0.0/24"
    """The podman network the node containers live on (must not collide with the host's)."""
    shared_dir: AbsPath | None = None
    """Host directory bind-mounted on every node as the NAS. Default:
    /var/lib/slurmforge/<cluster>/nas."""

    _v_subnet = field_validator("subnet")(_check_cidr)


class StaticHost(Model):
    name: SlurmName
    address: str


class StaticTarget(Model):
    kind: Literal["static"]
    controller: StaticHost
    login: list[StaticHost] = []
    nodes: dict[str, list[StaticHost]] = {}
    """Per pool, the machines that are its nodes (names as Slurm will call them)."""
    ssh_user: str = "root"


Target = Annotated[AwsTarget | LocalTarget | StaticTarget, Field(discriminator="kind")]

# --------------------------------------------------------------------------- pools


class PoolKind(StrEnum):
    CPU = "cpu"
    GPU = "gpu"


class Market(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"


class Gpus(Model):
    count: Annotated[int, Field(ge=1, le=64)]
    model: Feature
    kind: Literal["nvidia", "neuron"] = "nvidia"


class Hardware(Model):
    """Explicit hardware, for on-premise and local nodes (AWS pools use instance_types)."""

    sockets: Annotated[int, Field(ge=1, le=16)] = 1
    cores_per_socket: Annotated[int, Field(ge=1, le=512)]
    threads_per_core: Annotated[int, Field(ge=1, le=8)] = 1
    memory_mb: Annotated[int, Field(ge=64)]
    gpus: Gpus | None = None


class Pool(Model):
    name: PoolName
    kind: PoolKind
    instance_types: list[str] = []
    """AWS instance types, in order of preference (a flexible pool when several)."""
    hardware: Hardware | None = None
    gpus: Annotated[int | None, Field(ge=0)] = None
    """GPUs per node to give Slurm; default: all the instance type has."""
    memory_mb: Annotated[int | None, Field(ge=64)] = None
    """RealMemory override; default: 95% of the instance type's memory."""
    features: list[Feature] = []
    min_nodes: Annotated[int, Field(ge=0, le=100_000)] = 0
    max_nodes: Annotated[int, Field(ge=1, le=100_000)]
    market: Market = Market.ON_DEMAND
    fallback: list[PoolName] = []
    """Pools to try, in order, when this pool cannot get capacity."""
    zones: list[str] = []
    idle_seconds: Annotated[int, Field(ge=60, le=7 * 24 * 3600)] = 600
    """How long a dynamic node stays idle before it is powered down."""
    node_prefix: str | None = None
    """Node names are <node_prefix>-<index>; default <cluster>-<pool>."""
    index_width: Annotated[int | None, Field(ge=1, le=6)] = None
    placement_group: bool = False
    efa: bool = False
    weight: Annotated[int | None, Field(ge=0, le=65533)] = None
    """Slurm node Weight: lower is allocated first."""

    @field_validator("instance_types", mode="before")
    @classmethod
    def _one_type_is_a_list(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


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
    max_time: str | None = None
    default_time: str | None = None
    state: PartitionState = PartitionState.UP
    allow_groups: list[PosixName] = []
    allow_accounts: list[SlurmName] = []
    priority_tier: Annotated[int | None, Field(ge=0, le=65533)] = None
    preempt_mode: Literal["OFF", "CANCEL", "REQUEUE", "SUSPEND"] | None = None
    oversubscribe: Literal["NO", "YES", "FORCE", "EXCLUSIVE"] | None = None
    qos: SlurmName | None = None
    max_nodes: Annotated[int | None, Field(ge=1)] = None

    _v_times = field_validator("max_time", "default_time")(_check_time)


# --------------------------------------------------------------------------- scheduling


class Priority(Model):
    type: Literal["multifactor", "basic"] = "multifactor"
    weight_fairshare: Annotated[int, Field(ge=0)] = 10000
    weight_age: Annotated[int, Field(ge=0)] = 1000
    weight_job_size: Annotated[int, Field(ge=0)] = 0
    weight_partition: Annotated[int, Field(ge=0)] = 1000
    weight_qos: Annotated[int, Field(ge=0)] = 2000
    decay_half_life: str = "7-00:00:00"
    max_age: str = "7-00:00:00"

    _v_times = field_validator("decay_half_life", "max_age")(_check_time)


class Preemption(Model):
    type: Literal["none", "partition_prio", "qos"] = "none"
    mode: Literal["OFF", "CANCEL", "REQUEUE", "SUSPEND,GANG"] = "REQUEUE"
    exempt_time: str | None = None

    _v_times = field_validator("exempt_time")(_check_time)


class Qos(Model):
    name: SlurmName
    priority: Annotated[int, Field(ge=0)] = 0
    preempt: list[SlurmName] = []
    max_wall: str | None = None
    max_gpus_per_user: Annotated[int | None, Field(ge=0)] = None
    description: str = ""

    _v_times = field_validator("max_wall")(_check_time)


class Scheduling(Model):
    scheduler: Literal["backfill", "builtin"] = "backfill"
    select_parameters: Literal[
        "CR_CPU_Memory", "CR_Core_Memory", "CR_Socket_Memory", "CR_CPU", "CR_Core"
    ] = "CR_CPU_Memory"
    priority: Priority = Priority()
    preemption: Preemption = Preemption()
    qos: list[Qos] = []
    default_cpu_pool: PoolName | None = None
    default_gpu_pool: PoolName | None = None
    max_job_count: Annotated[int | None, Field(ge=1)] = None
    resume_timeout: Annotated[int, Field(ge=30, le=7200)] = 600
    """Seconds Slurm waits for a powered-up node to register (ResumeTimeout)."""


# --------------------------------------------------------------------------- storage


class NasMounts(Model):
    home: AbsPath = "/home"
    software: AbsPath = "/opt/software"
    slurm_state: AbsPath = "/var/spool/slurm-shared"


class Nas(Model):
    kind: Literal["efs", "nfs", "bind"]
    server: str | None = None
    """NFS server name or address (kind nfs)."""
    export: AbsPath | None = None
    """Exported path on the server (kind nfs)."""
    mounts: NasMounts = NasMounts()
    throughput_mode: Literal["bursting", "elastic", "provisioned"] = "elastic"


class Ceph(Model):
    hosts: Annotated[int, Field(ge=1, le=64)] = 3
    osds_per_host: Annotated[int, Field(ge=1, le=24)] = 1
    osd_size_gb: Annotated[int, Field(ge=4, le=16384)] = 100
    replication: Annotated[int, Field(ge=1, le=5)] = 3
    instance_type: str = "m6i.xlarge"
    mount: AbsPath = "/data"
    fs_name: SlurmName = "data"

    @property
    def osd_count(self) -> int:
        return self.hosts * self.osds_per_host


class Scratch(Model):
    path: AbsPath = "/scratch"
    size_gb: Annotated[int | None, Field(ge=1)] = None


class Storage(Model):
    nas: Nas
    ceph: Ceph | None = None
    scratch: Scratch | None = Scratch()


# --------------------------------------------------------------------------- accounting


class Database(Model):
    kind: Literal["local", "external"] = "local"
    host: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)] = 3306
    name: SlurmName = "slurm_acct_db"
    user: PosixName = "slurm"


class Account(Model):
    name: SlurmName
    description: str = ""
    organization: str = ""
    parent: SlurmName | None = None
    fairshare: Annotated[int, Field(ge=1)] = 1


class Accounting(Model):
    enabled: bool = True
    database: Database = Database()
    accounts: list[Account] = []
    enforce: list[Literal["associations", "limits", "qos", "safe"]] = ["associations", "limits", "qos"]


class Group(Model):
    name: PosixName
    gid: Annotated[int, Field(ge=1000, le=2**31 - 1)]


class User(Model):
    name: PosixName
    uid: Annotated[int, Field(ge=1000, le=2**31 - 1)]
    groups: list[PosixName] = []
    accounts: list[SlurmName] = []
    default_account: SlurmName | None = None
    ssh_keys: list[str] = []
    admin: bool = False


class Mail(Model):
    domain: str | None = None
    """Appended to user names for job mail (MailDomain)."""
    relay: str | None = None
    """SMTP relay the nodes send through."""


# --------------------------------------------------------------------------- network, images, head


class Subnet(Model):
    cidr: str
    zone: str

    _v_cidr = field_validator("cidr")(_check_cidr)


class Network(Model):
    vpc_cidr: str = "10.0.0.0/16"
    public_subnets: list[Subnet] = []
    private_subnets: list[Subnet] = []
    admin_cidrs: list[str] = []
    """Who may reach the login node over SSH."""
    allow_ssh_from_anywhere: bool = False
    """Must be set to accept 0.0.0.0/0 in admin_cidrs."""

    _v_cidr = field_validator("vpc_cidr")(_check_cidr)

    @field_validator("admin_cidrs")
    @classmethod
    def _admin_cidrs(cls, values: list[str]) -> list[str]:
        for v in values:
            _check_cidr(v)
        return values


class Images(Model):
    base: Literal["debian-12"] = "debian-12"
    ami: Annotated[str | None, Field(pattern=r"^ami-[0-9a-f]{8,17}$")] = None
    """Pin an already baked golden image instead of building one."""


class HeadNode(Model):
    instance_type: str = "m6i.xlarge"
    volume_gb: Annotated[int, Field(ge=20, le=16384)] = 100


class Head(Model):
    controller: HeadNode = HeadNode()
    login: HeadNode = HeadNode(instance_type="t3.large")
    login_count: Annotated[int, Field(ge=0, le=16)] = 1
    backup_controller: bool = False


class Modules(Model):
    root: AbsPath = "/opt/software/modules"


# --------------------------------------------------------------------------- the cluster


class Cluster(Model):
    api_version: Literal["slurmforge/v1"]
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9]{0,19}$")]
    """Cluster name (Slurm ClusterName, resource names, tags): lowercase, <= 20 chars."""
    target: Target
    network: Network = Network()
    images: Images = Images()
    head: Head = Head()
    pools: Annotated[list[Pool], Field(min_length=1)]
    partitions: Annotated[list[Partition], Field(min_length=1)]
    scheduling: Scheduling = Scheduling()
    storage: Storage
    accounting: Accounting = Accounting()
    groups: list[Group] = []
    users: list[User] = []
    mail: Mail = Mail()
    modules: Modules = Modules()

    def pool(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)

    def node_prefix(self, pool: Pool) -> str:
        return pool.node_prefix or f"{self.name}-{pool.name}"

