"""Assessing a node: what state it is in. `Context.assess` sorts every managed node into one
`NodeStatus` from Slurm's view of it, its machine's state and the service's marks and bindings,
and decides nothing yet (service.respond maps each status to its actions). The rules, static
nodes' included, are service.classify's docstring's; `stale_machine` is the guard's too."""

from __future__ import annotations

import functools
from enum import Enum

from slurmforge.hostlists import expand
from slurmforge.provider import Instance
from slurmforge.service.handoff import HandoffKind
from slurmforge.service.slurmd_failures import SlurmdFailure
from slurmforge.service.state import Request, ServiceState
from slurmforge.service.topology import NodeInfo
from slurmforge.service.world import GONE, LIVE, MISSING, UNRESPONSIVE, Lookups, World
from slurmforge.slurm.client import NodeState
from slurmforge.slurm.reasons import (
    HEALTH_REASON,
    REBUILD,
    health_problems,
    held_by_admin,
    held_by_service,
    is_recoverable,
    lost_mounts,
    own_reason,
    replacement_stopped,
    sick_under_jobs,
)


class NodeStatus(Enum):
    OFF = "off"
    RELEASE = "release"
    RESET = "reset"
    START_STATIC = "start-static"
    NEEDS_LAUNCH = "needs-launch"
    LAUNCHING = "launching"
    NEEDS_ADDRESS = "needs-address"
    BOOT_FAILED = "boot-failed"
    STALE_MACHINE = "stale-machine"
    """Powering up on a machine that started before the power-up was requested, or before
    the slurmctld in control took control."""
    DIED_BOOTING = "died-booting"
    COMPLETING_ON_NOTHING = "completing-on-nothing"
    """Slurm waits for a job to finish on a node whose machine is gone (a requeue or a
    POWER_DOWN_FORCE that reached the node as its machine went): no slurmd will ever answer,
    and the power-save thread powers down no node with a completing job, so the job would
    wait for SlurmdTimeout (300 s) and the node with it. POWER_DOWN_FORCE again ends it:
    slurmctld takes the node out of each completing job (kill_running_job_by_node_name,
    job_mgr.c) and the requeued job may start elsewhere at once."""
    INSTANCE_LOST = "instance-lost"
    MISSING = "missing"
    NOT_RESPONDING = "not-responding"
    UNRESPONSIVE = "unresponsive"
    REPLACE = "replace"
    EVACUATE = "evacuate"
    """Drained by its health check with jobs still on it: signal them, then requeue them."""
    LEFT_ALONE = "left-alone"
    STORAGE_OUTAGE = "storage-outage"
    """Drained by its health check for a shared mount other nodes lost too: not replaced,
    its jobs not moved; its health check resumes it once the mount answers again."""
    INTERRUPTED = "interrupted"
    HEALTHY = "healthy"
    # static nodes kept alive in place (service.classify's docstring)
    MACHINE_STOPPING = "machine-stopping"
    """The machine is on its way down: not gone yet."""
    REPLACEMENT_DUE = "replacement-due"
    """DOWN by the service and the machine gone: requeue what is left, launch a new one."""
    REPLACEMENT_BOOTING = "replacement-booting"
    """The new machine is up or on its way; its slurmd has not registered yet."""
    REPLACEMENT_JOINED = "replacement-joined"
    """The new machine's slurmd registered, the service's DOWN or DRAIN is still on."""
    SLURMD_FAILED = "slurmd-failed"
    """The new machine's slurmd stopped on an error (its line recorded in the node kit): the
    machine is replaced now, not at ResumeTimeout."""
    REPLACEMENT_STOPPED = "replacement-stopped"
    """Two new machines of a static node failed the same way: no third one until an admin
    resumes the node."""


STORAGE_OUTAGE_NODES = 2
"""Nodes whose health checks lost the same shared mount at once: the file system's outage,
not their machines' fault (a Ceph or NAS restart, a whole cluster started again before its
storage answered). Replacing them would fix nothing and throw their jobs away."""
MOUNT_GRACE = 60.0
"""Seconds a node drained only for lost mounts waits before it is replaced on its own: two
of the health check's intervals (slurmforge.render.HEALTH_CHECK_INTERVAL, 30 s), so every
other node's check has run meanwhile - the first node to see a storage outage is not
replaced before the others report it - and a mount back by then lifts the drain itself."""
CLOCK_SLACK = 2.0
"""Seconds of doubt when a machine's start is compared with a request: Slurm counts boot
times in whole seconds, EC2's LaunchTime too, and two hosts' clocks differ a little."""


def started_at(state: ServiceState, node: str, inst: Instance) -> float | None:
    """When a node's machine started: the service's own launch of it (its clock, the one the
    hand-offs carry), else what the cloud says; None when nobody knows."""
    binding = state.bindings.get(node)
    if binding is not None and binding.instance == inst.id:
        return binding.launched_at
    return inst.launched_at


def boot_needed_after(state: ServiceState, node: str) -> tuple[float, str] | None:
    """The moment a powering-up node's machine must have started after for Slurm to take its
    slurmd, and what happened then: the newest open resume request that names the node
    (written as slurmctld set the node's boot request time), or the newest takeover by a
    slurmctld, whichever is later."""
    requested, took = _request_times(state.requests)
    moments = ([(requested[node], "its power-up was requested")] if node in requested else []) + (
        [(took, "slurmctld took control")] if took is not None else [])
    return max(moments, default=None)


@functools.lru_cache(maxsize=4)
def _request_times(requests: tuple[Request, ...]) -> tuple[dict[str, float], float | None]:
    """node -> its newest open resume request, and the newest takeover: once per loop's
    requests (the classifier and the guard ask per node; hostlists are expanded once)."""
    requested: dict[str, float] = {}
    for r in requests:
        if r.kind is HandoffKind.RESUME:
            for name in expand(r.nodes):
                requested[name] = max(requested.get(name, r.at), r.at)
    took = max((r.at for r in requests if r.kind is HandoffKind.CONTROL), default=None)
    return requested, took


def stale_machine(state: ServiceState, node: str, inst: Instance) -> bool:
    """A live machine of a powering-up node that started before `boot_needed_after`: Slurm
    will not take its slurmd (or, after a takeover, may start its job a second time)."""
    needed, started = boot_needed_after(state, node), started_at(state, node, inst)
    return needed is not None and started is not None and started < needed[0] - CLOCK_SLACK


class Context(Lookups):
    """The lookups over one World, and the rules that sort each node into a NodeStatus."""

    def __init__(self, world: World) -> None:
        super().__init__(world)
        lost: dict[str, int] = {}
        for slurm_node in world.nodes:
            for path in lost_mounts(health_problems(slurm_node)):
                lost[path] = lost.get(path, 0) + 1
        self.storage_out = frozenset(p for p, n in lost.items() if n >= STORAGE_OUTAGE_NODES)

    def assess(self, node: NodeState, info: NodeInfo) -> NodeStatus:
        inst = self.instance(node.name)
        live = inst is not None and inst.state in LIVE
        if not node.is_powered():
            return self._assess_off(node, info, live)
        if node.name in self.interrupted:
            return NodeStatus.INTERRUPTED
        if node.is_powering_up():
            return self._assess_booting(node, inst)
        if info.static:
            return self._assess_static(node, self.machine(node.name))
        return self._assess_up(node, self.machine(node.name))

    def unresponsive(self, node: NodeState) -> NodeStatus:
        """A node Slurm says is not responding: UNRESPONSIVE once the grace has passed."""
        late = self.past_grace(node.name, UNRESPONSIVE, self.tun.unresponsive_grace)
        return NodeStatus.UNRESPONSIVE if late else NodeStatus.NOT_RESPONDING

    def waits_for_storage(self, node: NodeState) -> bool:
        """Drained by its health check only for shared mounts that other nodes lost too, or
        for MOUNT_GRACE s whatever the others say."""
        problems = health_problems(node)
        lost = lost_mounts(problems)
        if not problems or len(lost) != len(problems):
            return False
        return lost <= self.storage_out or self.now - node.reason_changed_at < MOUNT_GRACE

    def stale_health_verdict(self, node: NodeState, inst: Instance) -> NodeStatus | None:
        """A health drain older than the node's machine judged an earlier machine (one `up`
        or a restart made again): the new one gets its own check. Resumed once its slurmd
        registered (its health check drains it again if it is sick too); replaced when it
        has not registered by ResumeTimeout."""
        if not (node.reason.startswith(HEALTH_REASON) and (node.is_drain() or node.is_down())
                and node.reason_changed_at > 0):
            return None
        binding = self.state.bindings.get(node.name)
        launched = binding.launched_at if binding is not None and binding.instance == inst.id else 0.0
        started = max(inst.launched_at or 0.0, launched)
        if started <= node.reason_changed_at + CLOCK_SLACK:
            return None
        if node.slurmd_started_at >= started - CLOCK_SLACK:
            return NodeStatus.REPLACEMENT_JOINED
        if self.now - started > self.topology.resume_timeout:
            return None
        return NodeStatus.REPLACEMENT_BOOTING

    def _assess_off(self, node: NodeState, info: NodeInfo, live: bool) -> NodeStatus:
        if live:
            return NodeStatus.RELEASE
        if node.is_powering_down():
            if "COMPLETING" in node.flags and "POWERING_DOWN" not in node.flags:
                return NodeStatus.COMPLETING_ON_NOTHING
            return NodeStatus.OFF
        if (node.is_down() or node.is_drain()) and is_recoverable(node.reason):
            return NodeStatus.RESET
        if info.static and not (node.is_down() or node.is_drain()) and self.available_link(info.pool):
            return NodeStatus.START_STATIC
        return NodeStatus.OFF

    def _assess_booting(self, node: NodeState, inst: Instance | None) -> NodeStatus:
        if inst is None:
            if node.name in self.retrying_nodes or self.recently_launched(node.name):
                return NodeStatus.LAUNCHING
            return NodeStatus.NEEDS_LAUNCH
        if inst.state not in LIVE:
            return NodeStatus.DIED_BOOTING
        if stale_machine(self.state, node.name, inst):
            return NodeStatus.STALE_MACHINE
        binding = self.state.bindings.get(node.name)
        started = inst.launched_at or (binding.launched_at if binding else None)
        if started is not None and self.slurmd_failure(node.name, started) is not None:
            return NodeStatus.SLURMD_FAILED
        if started is not None and self.now - started > self.topology.resume_timeout:
            return NodeStatus.BOOT_FAILED
        if inst.address and inst.address != node.address:
            return NodeStatus.NEEDS_ADDRESS
        return NodeStatus.LAUNCHING

    def _assess_up(self, node: NodeState, inst: Instance | None) -> NodeStatus:
        if inst is None:
            if self.recently_launched(node.name):
                return NodeStatus.HEALTHY
            lost = self.past_grace(node.name, MISSING, self.tun.missing_grace)
            return NodeStatus.INSTANCE_LOST if lost else NodeStatus.MISSING
        if inst.state not in LIVE:
            return NodeStatus.INSTANCE_LOST
        if self.waits_for_storage(node):
            return NodeStatus.STORAGE_OUTAGE
        if sick_under_jobs(node):
            return NodeStatus.EVACUATE
        if node.is_down() or (node.is_drain() and not node.has_jobs()):
            return NodeStatus.REPLACE if is_recoverable(node.reason) else NodeStatus.LEFT_ALONE
        if node.is_not_responding():
            return self.unresponsive(node)
        return NodeStatus.HEALTHY

    def _assess_static(self, node: NodeState, inst: Instance | None) -> NodeStatus:
        """A static node that is up (in_place): service.classify's docstring's rules, in order."""
        if held_by_admin(node):
            return NodeStatus.LEFT_ALONE
        if replacement_stopped(node):
            return NodeStatus.REPLACEMENT_STOPPED
        binding = self.state.bindings.get(node.name)
        unlisted = binding is not None and binding.instance not in self.by_id and self.recently_launched(node.name)
        if node.name in self.retrying_nodes or unlisted:  # a launch under way: the old machine is not the node's
            return NodeStatus.REPLACEMENT_BOOTING if held_by_service(node) else NodeStatus.HEALTHY
        if inst is None:
            lost = self.past_grace(node.name, MISSING, self.tun.missing_grace)
            return self._machine_gone(node, inst) if lost else NodeStatus.MISSING
        if inst.state in GONE:
            return self._machine_gone(node, inst)
        if inst.state not in LIVE:
            return NodeStatus.MACHINE_STOPPING
        if held_by_service(node):
            if self.rebuild_due(node, inst):
                return NodeStatus.REPLACE
            started = self.machine_started(node, inst)
            if node.slurmd_started_at >= started > 0:
                return NodeStatus.REPLACEMENT_JOINED
            if self.slurmd_failure(node.name, started) is not None:
                return NodeStatus.SLURMD_FAILED
            if self.now - started > self.topology.resume_timeout:
                return NodeStatus.BOOT_FAILED
            if node.is_cloud() and inst.address and inst.address != node.address:
                return NodeStatus.NEEDS_ADDRESS  # a node without CLOUD keeps the address the rollout gave it
            return NodeStatus.REPLACEMENT_BOOTING
        stale = self.stale_health_verdict(node, inst)
        if stale is not None:
            return stale
        if node.is_not_responding():
            return self.unresponsive(node)
        if self.waits_for_storage(node):
            return NodeStatus.STORAGE_OUTAGE
        if sick_under_jobs(node):
            return NodeStatus.EVACUATE
        if node.is_down() or node.is_drained():
            return NodeStatus.REPLACE  # failed by Slurm or the health check (not the admin's)
        return NodeStatus.HEALTHY

    def _machine_gone(self, node: NodeState, inst: Instance | None) -> NodeStatus:
        """Gone before the node is DOWN by the service: set it DOWN. After: replace it,
        unless it was the replacement itself (launched since), which died booting."""
        if not (held_by_service(node) and node.is_down()):
            return NodeStatus.INSTANCE_LOST
        binding = self.state.bindings.get(node.name)
        if binding is not None and binding.launched_at >= node.reason_changed_at and (
                inst is None or binding.instance == inst.id):
            return NodeStatus.DIED_BOOTING
        return NodeStatus.REPLACEMENT_DUE

    def slurmd_failure(self, name: str, started: float) -> SlurmdFailure | None:
        """The node's recorded slurmd failure, when its current machine (started at `started`)
        wrote it."""
        failure = self.world.slurmd_failures.get(name)
        return failure if failure is not None and failure.at >= started - CLOCK_SLACK else None

    def rebuild_due(self, node: NodeState, inst: Instance) -> bool:
        """A rollout (or `slurmforge upgrade`) set the node DOWN for a machine made again from the
        current image (REBUILD, slurmforge.drain.replace), and this machine is older than that
        request: it is the old one, terminated so that a new one is launched - not waited for
        as if it were a replacement booting, which it never becomes (until ResumeTimeout)."""
        if not node.reason.startswith(own_reason(REBUILD)) or node.reason_changed_at <= 0:
            return False
        binding = self.state.bindings.get(node.name)
        launched = [inst.launched_at or 0.0]
        if binding is not None and binding.instance == inst.id:
            launched.append(binding.launched_at)
        return max(launched) + CLOCK_SLACK < node.reason_changed_at

    def machine_started(self, node: NodeState, inst: Instance) -> float:
        """When the node's live machine started, as far as anyone knows: the service's
        launch of it, the cloud's launch time, or else when the service set the node
        DOWN (a machine that came back later started after that)."""
        binding = self.state.bindings.get(node.name)
        known = [inst.launched_at or 0.0, node.reason_changed_at]
        if binding is not None and binding.instance == inst.id:
            known.append(binding.launched_at)
        return max(known)
