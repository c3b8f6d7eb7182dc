"""The upgrade's plan: which hosts, in which order, what each step does to jobs (pure).

Slurm's order (upgrades.shtml): a backup of the accounting database, slurmdbd, then slurmctld
(the backup controller before the primary: the one in control restarts last), then the login
nodes' sackd, then slurmd - the static nodes in batches of at most the spec's
`maintenance.max_unavailable` of each pool, the dynamic ones as they power down.

slurmdbd runs on the primary controller on every target (slurm.conf's DbdHost): "if multiple
daemons are present on the same system, they may need to be upgraded at the same time ...
daemons should be started in the order listed above" (upgrades.shtml). So step 3 upgrades that
host's packages and restarts slurmdbd alone - slurmctld goes on with the binary it started
with - and step 5 restarts its slurmctld, once the backup controller runs the new release.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from slurmforge.drain import JobPolicy
from slurmforge.hostlists import compress
from slurmforge.hosts import Host, HostRole, controller_names
from slurmforge.slurm.client import NodeState
from slurmforge.spec import Cluster
from slurmforge.spec.nodes import node_sets
from slurmforge.tables import Column, Table
from slurmforge.upgrade.versions import CTLD, DBD, SACKD, SLURMD


class Kind(StrEnum):
    IMAGE = "image"
    BACKUPS = "backups"
    DBD = "slurmdbd"
    BACKUP = "backup controller"
    PRIMARY = "primary controller"
    LOGIN = "login"
    CEPH = "ceph host"
    STATIC = "static nodes"
    DYNAMIC = "dynamic nodes"


IN_PLACE = frozenset({Kind.DBD, Kind.BACKUP, Kind.PRIMARY, Kind.LOGIN, Kind.CEPH})
"""Head hosts are upgraded where they are (pets: their disks and addresses stay)."""


@dataclass(frozen=True)
class Step:
    kind: Kind
    hosts: tuple[str, ...] = ()
    does: str = ""
    jobs: str = ""
    """What it does to jobs, as the plan says it."""
    moves: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(daemon, hosts) this step moves to the new image's Slurm: what the version guard checks."""
    idle: tuple[str, ...] = ()
    """DYNAMIC: the powered-up nodes that run no job (POWER_DOWN now); the rest POWER_DOWN_ASAP."""

    @property
    def key(self) -> str:
        """Stable across runs: what upgrade.json records as done."""
        return f"{self.kind.value}:{compress(list(self.hosts))}" if self.hosts else self.kind.value

    def moved(self) -> dict[str, tuple[str, ...]]:
        return dict(self.moves)


@dataclass
class UpgradePlan:
    cluster: str
    image: str
    """The new image's short inputs digest."""
    slurm: str
    """The new image's Slurm version."""
    steps: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def unavailable_count(setting: int | str, static: int) -> int:
    """How many of a pool's `static` nodes may be out at once: a count, or a percentage of them
    (rounded down), never less than 1."""
    if isinstance(setting, str):
        share = int(setting.rstrip("%"))
        return max(1, math.floor(static * share / 100))
    return max(1, setting)


def batches(nodes: Sequence[str], size: int) -> list[tuple[str, ...]]:
    return [tuple(nodes[i:i + size]) for i in range(0, len(nodes), max(1, size))]


def make_plan(spec: Cluster, hosts: Sequence[Host], nodes: Sequence[NodeState], image: str, slurm: str,
              policy: JobPolicy, local: bool) -> UpgradePlan:
    """Every step of the upgrade to the image `image` (short digest) with Slurm `slurm`, for
    the cluster as `hosts` (its inventory) and `nodes` (scontrol's) say it is now."""
    plan = UpgradePlan(spec.name, image, slurm)
    controllers = controller_names(spec)
    primary, backups = controllers[0], controllers[1:]
    build = "build it from the current packages of the pinned release (the one image pipeline)" if local else \
        "the AMI `pulumi up` baked from the current packages (the inventory names it)"
    plan.steps.append(Step(Kind.IMAGE, (), build, "none"))
    plan.steps.append(Step(Kind.BACKUPS, (primary,), "Slurm's state directory and configuration (tar)"
                           + (", the accounting database (mysqldump --single-transaction)" if spec.accounting.enabled
                              else "") + ", kept 0600 under slurmforge's state directory", "none"))
    if spec.accounting.enabled:
        plan.steps.append(Step(Kind.DBD, (primary,), "upgrade the host in place (the image's steps, apt within the "
                               "release), restart slurmdbd; slurmctld there keeps its running binary until step 5",
                               "none: slurmctld keeps accounting messages while slurmdbd restarts",
                               ((DBD, (primary,)),)))
        plan.notes.append(f"slurmdbd runs on the primary controller {primary}: its packages are upgraded in the "
                          "slurmdbd step, its slurmctld restarted in the primary controller's step (upgrades.shtml: "
                          "daemons on one host are upgraded together, started in Slurm's order)")
    restart = "restart slurmctld: running jobs continue, submissions retried by the client"
    for backup in backups:
        plan.steps.append(Step(Kind.BACKUP, (backup,), "upgrade the host in place, restart the standby slurmctld",
                               "none: it is in standby", ((CTLD, (backup,)),)))
    plan.steps.append(Step(Kind.PRIMARY, (primary,), "upgrade the host in place, restart slurmctld (it saves its "
                           "state first), roll its configuration out again", restart, ((CTLD, (primary,)),)))
    for login in (h for h in hosts if h.role is HostRole.LOGIN):
        plan.steps.append(Step(Kind.LOGIN, (login.name,), "upgrade the host in place, restart sackd",
                               "none: jobs run on compute nodes; a shell there keeps its session",
                               ((SACKD, (login.name,)),)))
    for ceph in (h for h in hosts if h.role is HostRole.CEPH):
        # no Slurm daemon: Ceph's keep the binaries they started with (policy-rc.d), so CephFS
        # serves throughout; a Ceph point release takes effect when they restart (docs/upgrade.md)
        plan.steps.append(Step(Kind.CEPH, (ceph.name,), "upgrade the host in place; Ceph's daemons go on running",
                               "none: CephFS keeps serving"))
    plan.steps += static_steps(spec, hosts, policy)
    plan.steps += dynamic_steps(spec, hosts, nodes)
    return plan


def pool_nodes(spec: Cluster, hosts: Sequence[Host]) -> list[Host]:
    """Every pool node: as the inventory lists it, or - for a pool it lists none of (an AWS
    inventory: the scheduler service launches pool machines, the stack names none) - by the
    spec's node names (static: the first min_nodes), at no address."""
    listed = [h for h in hosts if h.role is HostRole.COMPUTE]
    out = []
    for pool in spec.pools:
        mine = [h for h in listed if h.pool == pool.name]
        out += mine or [Host(name, "", HostRole.COMPUTE, pool.name, dynamic=s.dynamic)
                        for s in node_sets(spec, pool) for name in s.names()]
    return out


def static_steps(spec: Cluster, hosts: Sequence[Host], policy: JobPolicy) -> list[Step]:
    out = []
    nodes = pool_nodes(spec, hosts)
    for pool in spec.pools:
        static = [h.name for h in nodes if h.pool == pool.name and not h.dynamic]
        size = unavailable_count(spec.maintenance.max_unavailable, len(static))
        for batch in batches(static, size):
            wait = "requeue them (--requeue)" if policy.requeue else "wait for their jobs (or requeue with --requeue)"
            out.append(Step(Kind.STATIC, batch, f"replace {len(batch)} node(s) of pool {pool.name} from the new image, "
                            "resume each once its new slurmd registers",
                            f"drain {len(batch)} node(s), {wait}", ((SLURMD, batch),)))
    return out


def dynamic_steps(spec: Cluster, hosts: Sequence[Host], nodes: Sequence[NodeState]) -> list[Step]:
    """Powered-up dynamic nodes: an idle one powered down now, a busy one when its jobs end
    (POWER_DOWN_ASAP); its next power-up boots the new image. Powered-down ones need nothing."""
    dynamic = {h.name for h in pool_nodes(spec, hosts) if h.dynamic}
    up = [n for n in nodes if n.name in dynamic and n.is_powered()]
    if not up:
        return []
    idle = tuple(sorted(n.name for n in up if not n.has_jobs()))
    busy = sorted(n.name for n in up if n.has_jobs())
    jobs = ", ".join(part for part in (
        f"power down {len(idle)} idle node(s)" if idle else "",
        f"drain {len(busy)} busy node(s) and power them down when their jobs end" if busy else "") if part)
    return [Step(Kind.DYNAMIC, tuple(sorted(n.name for n in up)), "their next power-up boots the new image", jobs,
                 (), idle)]


COLUMNS = (Column("step", "Step", numeric=True), Column("kind", "What"), Column("hosts", "Hosts"),
           Column("jobs", "Jobs", wrap=True), Column("does", "Does", wrap=True, drop=1))


def plan_table(plan: UpgradePlan, done: Sequence[str] = ()) -> Table:
    """`plan`'s table style: a row per step; a step its hosts already finished is marked."""
    table = Table(f"upgrade of cluster {plan.cluster} to image {plan.image} (Slurm {plan.slurm}): "
                  f"{len(plan.steps)} step(s)", COLUMNS,
                  meta={"cluster": plan.cluster, "image": plan.image, "slurm": plan.slurm})
    for number, step in enumerate(plan.steps, 1):
        kind = step.kind.value + (" (done)" if step.key in done else "")
        table.rows.append((number, kind, compress(list(step.hosts)) if step.hosts else None, step.jobs, step.does))
    table.notes += plan.notes
    return table
