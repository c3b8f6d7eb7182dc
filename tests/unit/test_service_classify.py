"""The classifier, table-driven with a fake clock: every node state x cloud state the
anchors handle, then launches and fallback, orphans, crashed launches, spot notices."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from test_service_world import (
    ALLOCATED,
    DOWN,
    DOWN_POWERED_DOWN,
    DRAINED,
    DRAINED_POWERED_DOWN,
    DRAINING,
    IDLE,
    NOT_RESPONDING,
    NOW,
    POWERED_DOWN,
    POWERING_DOWN,
    POWERING_UP,
    STATIC_NONCLOUD,
    WorldBuilder,
    instance,
    node,
)

from slurmforge.hosts import TAG_TOKEN
from slurmforge.provider import InstanceState
from slurmforge.service import when
from slurmforge.service.actions import (
    AbandonLaunch,
    Action,
    AdvanceInterruption,
    ClearMark,
    CloseRequests,
    Drain,
    ForgetSignalled,
    Joined,
    KeepAway,
    Launch,
    LetBack,
    MarkCooldown,
    MarkDown,
    PowerDown,
    PowerUp,
    Release,
    Replaced,
    Requeue,
    Resume,
    SetAddress,
    SetMark,
    Signal,
    Terminate,
    Unbind,
)
from slurmforge.service.assess import NodeStatus
from slurmforge.service.classify import classify
from slurmforge.service.handoff import HandoffKind
from slurmforge.service.respond import STALE_RPC_WINDOW
from slurmforge.service.slurmd_failures import SlurmdFailure, parse_failure, read_failures
from slurmforge.service.state import (
    KEEP_ADDED,
    Binding,
    Cooldown,
    InterruptionRecord,
    KeptAway,
    LaunchRecord,
    Request,
    ServiceState,
    SignalledJob,
)
from slurmforge.service.sweeps import launch_token
from slurmforge.slurm.client import Job

pytestmark = pytest.mark.unit

S1, S2, OD1, OD2 = "t-spot-01", "t-spot-02", "t-od-01", "t-od-02"
RUNNING, PENDING, TERMINATED, STOPPED = (InstanceState.RUNNING, InstanceState.PENDING, InstanceState.TERMINATED,
                                        InstanceState.STOPPED)


def resume_at(nodes: str, at: float) -> Request:
    return Request(f"resume-{at}", HandoffKind.RESUME, nodes, at)


def control_at(at: float, n: int = 1) -> Request:
    return Request(f"control-{n}", HandoffKind.CONTROL, "", at)


def bound(node_name: str, iid: str, at: float = NOW - 300, link: str = "spot") -> dict[str, Binding]:
    return {node_name: Binding(node_name, iid, link, at, "sf-old")}


def cooling(*links: str, failures: int = 1) -> dict[str, Cooldown]:
    return {link: Cooldown(link, NOW + 60, failures, "InsufficientInstanceCapacity", NOW) for link in links}


def state(**kw: object) -> ServiceState:
    return ServiceState(**kw)  # type: ignore[arg-type]


Case = Callable[[], tuple[WorldBuilder, list[Action]]]

FATAL = "fatal: can't stat gres.conf file /dev/nvidia0"
STOP_REASON = f"slurmforge: replacement stopped: slurmd failed the same way on 2 new machines (i-2, i-3): {FATAL}"

CASES: dict[str, tuple[WorldBuilder, list[Action]]] = {
    # ----- powered down / powering down
    "off-no-instance": (WorldBuilder([node(S1, POWERED_DOWN)]), []),
    "off-with-running-instance": (
        WorldBuilder([node(S1, POWERED_DOWN)], [instance("i-1", S1)], state(bindings=bound(S1, "i-1"))),
        [Terminate("i-1", S1, f"node {S1} is powered down"), Unbind(S1)]),
    "off-instance-terminated-binding-dropped": (
        WorldBuilder([node(S1, POWERED_DOWN)], [instance("i-1", S1, TERMINATED)], state(bindings=bound(S1, "i-1"))),
        [Unbind(S1)]),
    "powering-down-with-instance": (
        WorldBuilder([node(S1, POWERING_DOWN)], [instance("i-1", S1)]),
        [Terminate("i-1", S1, f"node {S1} is powered down")]),
    "powering-down-nothing-left": (WorldBuilder([node(S1, POWERING_DOWN)]), []),
    # a job requeued off a node whose machine went (a spot interruption: the AWS rehearsal
    # found it waiting SlurmdTimeout): POWER_DOWN_FORCE again takes the node out of the job
    "power-down-queued-a-job-completing-no-machine-forces-it-again": (
        WorldBuilder([node(S1, ("idle", "CLOUD", "DRAIN", "COMPLETING", "POWER_DOWN"),
                           reason="slurmforge: spot instance interrupted")], [instance("i-1", S1, TERMINATED)]),
        [PowerDown((S1,), "slurmforge: spot instance interrupted")]),
    "power-down-queued-a-job-completing-on-a-live-machine-releases-it-first": (
        WorldBuilder([node(S1, ("idle", "CLOUD", "COMPLETING", "POWER_DOWN"))], [instance("i-1", S1)]),
        [Terminate("i-1", S1, f"node {S1} is powered down")]),
    "resume-timeout-down-is-reset-not-left-down": (
        WorldBuilder([node(S1, DOWN_POWERED_DOWN, reason="ResumeTimeout reached")]),
        [PowerDown((S1,), "slurmforge: reset after 'ResumeTimeout reached'")]),
    "reset-requested-waits-for-the-power-save-thread": (
        WorldBuilder([node(S1, ("down", "CLOUD", "NOT_RESPONDING", "POWER_DOWN"),
                           reason="slurmforge: reset after 'ResumeTimeout reached'")]), []),
    "admin-down-powered-down-left-alone": (
        WorldBuilder([node(S1, DOWN_POWERED_DOWN, reason="rack 4 maintenance")]), []),
    "own-drain-powered-down-is-reset": (
        WorldBuilder([node(S1, DRAINED_POWERED_DOWN, reason="slurmforge: spot interruption notice")]),
        [PowerDown((S1,), "slurmforge: reset after 'slurmforge: spot interruption notice'")]),
    # ----- powering up (resume)
    "powering-up-no-instance-launches": (
        WorldBuilder([node(S1, POWERING_UP)], state=state(node_jobs={S1: 42})),
        [Launch("spot", "spot", (S1,), launch_token("spot", [S1], NOW), (42,))]),
    "powering-up-launched-not-listed-yet-waits": (
        WorldBuilder([node(S1, POWERING_UP)], state=state(bindings=bound(S1, "i-1", at=NOW - 20))), []),
    "powering-up-missing-private-ip-waits": (
        WorldBuilder([node(S1, POWERING_UP)], [instance("i-1", S1, PENDING, address=None, launched=NOW - 30)],
                     state(bindings=bound(S1, "i-1", at=NOW - 30))), []),
    "powering-up-address-known-sets-nodeaddr": (
        WorldBuilder([node(S1, POWERING_UP)], [instance("i-1", S1, address="10.0.16.9", launched=NOW - 60)]),
        [SetAddress(S1, "10.0.16.9")]),
    "powering-up-address-already-set": (
        WorldBuilder([node(S1, POWERING_UP, address="10.0.16.9")],
                     [instance("i-1", S1, address="10.0.16.9", launched=NOW - 60)]), []),
    "bootstrap-failure-after-resume-timeout": (
        WorldBuilder([node(S1, POWERING_UP, address="10.0.16.5")], [instance("i-1", S1, launched=NOW - 601)]),
        [PowerDown((S1,), "slurmforge: bootstrap failure: t-spot-01 not registered by resume timeout on i-1"),
         Terminate("i-1", S1, "bootstrap failure: t-spot-01 not registered by resume timeout on i-1")]),
    "instance-died-while-booting-cools-link": (
        WorldBuilder([node(S1, POWERING_UP)], [instance("i-1", S1, TERMINATED, launched=NOW - 40)],
                     state(bindings=bound(S1, "i-1", at=NOW - 40))),
        [Unbind(S1), MarkCooldown("spot", NOW + 60, 1, "instance i-1 terminated while booting")]),
    "powering-up-first-link-cooling-uses-fallback": (
        WorldBuilder([node(S1, POWERING_UP)], state=state(cooldowns=cooling("spot"))),
        [Launch("spot", "od", (S1,), launch_token("od", [S1], NOW))]),
    "powering-up-all-links-cooling-powers-down-and-requeues": (
        WorldBuilder([node(S1, POWERING_UP), node(S2, POWERING_UP)],
                     state=state(cooldowns=cooling("spot", "od"), node_jobs={S1: 7, S2: 7})),
        [PowerDown((S1, S2), "slurmforge: no capacity on spot, od"), Requeue((7,), "no capacity on spot, od")]),
    # ----- up
    "up-healthy": (WorldBuilder([node(S1, IDLE)], [instance("i-1", S1)], state(bindings=bound(S1, "i-1"))), []),
    "up-missing-private-ip-is-not-replaced": (
        WorldBuilder([node(S1, ALLOCATED)], [instance("i-1", S1, address=None)], state(bindings=bound(S1, "i-1"))),
        []),
    "up-instance-terminated-powers-down": (
        WorldBuilder([node(S1, IDLE)], [instance("i-1", S1, TERMINATED)], state(bindings=bound(S1, "i-1"))),
        [PowerDown((S1,), "slurmforge: instance i-1 of t-spot-01 is terminated")]),
    "up-instance-terminated-under-jobs-marks-down": (
        WorldBuilder([node(S1, ALLOCATED)], [instance("i-1", S1, TERMINATED)], state(bindings=bound(S1, "i-1"))),
        [MarkDown((S1,), "slurmforge: instance i-1 of t-spot-01 is terminated")]),
    "down-after-mark-down-powers-down": (
        WorldBuilder([node(S1, DOWN, reason="slurmforge: instance i-1 of t-spot-01 is terminated")],
                     [instance("i-1", S1, TERMINATED)], state(bindings=bound(S1, "i-1"))),
        [PowerDown((S1,), "slurmforge: instance i-1 of t-spot-01 is terminated")]),
    "up-instance-stopped-powers-down": (
        WorldBuilder([node(S1, IDLE)], [instance("i-1", S1, STOPPED)]),
        [PowerDown((S1,), "slurmforge: instance i-1 of t-spot-01 is stopped")]),
    "up-instance-not-listed-marks-first": (
        WorldBuilder([node(S1, IDLE)]), [SetMark(S1, "missing", NOW)]),
    "up-instance-not-listed-recently-launched-waits": (
        WorldBuilder([node(S1, IDLE)], state=state(bindings=bound(S1, "i-1", at=NOW - 30))), []),
    "up-instance-not-listed-past-grace-powers-down": (
        WorldBuilder([node(S1, IDLE)], state=state(marks={S1: {"missing": NOW - 61}})),
        [PowerDown((S1,), "slurmforge: no machine of t-spot-01 is listed")]),
    "slurmd-not-responding-marks-first": (
        WorldBuilder([node(S1, NOT_RESPONDING)], [instance("i-1", S1)]), [SetMark(S1, "unresponsive", NOW)]),
    "slurmd-not-responding-within-grace-waits": (
        WorldBuilder([node(S1, NOT_RESPONDING)], [instance("i-1", S1)],
                     state(marks={S1: {"unresponsive": NOW - 100}})), []),
    "slurmd-not-responding-past-grace-replaced": (
        WorldBuilder([node(S1, NOT_RESPONDING)], [instance("i-1", S1)],
                     state(marks={S1: {"unresponsive": NOW - 181}})),
        [PowerDown((S1,), "slurmforge: slurmd on t-spot-01 not responding"),
         Terminate("i-1", S1, "slurmd on t-spot-01 not responding")]),
    "powered-down-node-forgets-its-marks": (
        WorldBuilder([node(S1, POWERING_DOWN)], state=state(marks={S1: {"unresponsive": NOW - 181}})),
        [ClearMark(S1, "unresponsive")]),
    "responding-again-clears-mark": (
        WorldBuilder([node(S1, IDLE)], [instance("i-1", S1)], state(marks={S1: {"unresponsive": NOW - 100}})),
        [ClearMark(S1, "unresponsive")]),
    "down-by-slurm-replaced": (
        WorldBuilder([node(S1, DOWN, reason="Not responding")], [instance("i-1", S1)]),
        [PowerDown((S1,), "slurmforge: replacing t-spot-01 (Not responding)"),
         Terminate("i-1", S1, "replacing t-spot-01 (Not responding)")]),
    "down-by-admin-left-alone": (
        WorldBuilder([node(S1, DOWN, reason="bad dimm, ticket 42")], [instance("i-1", S1)]), []),
    "gpu-health-drained-replaced": (
        WorldBuilder([node(S1, DRAINED, reason="health: gpu 2 xid 79")], [instance("i-1", S1)]),
        [PowerDown((S1,), "slurmforge: replacing t-spot-01 (health: gpu 2 xid 79)"),
         Terminate("i-1", S1, "replacing t-spot-01 (health: gpu 2 xid 79)")]),
    "gpu-health-draining-signals-its-jobs": (
        WorldBuilder([node(S1, DRAINING, reason="health: gpu 2 xid 79")], [instance("i-1", S1)], jobs={S1: (11,)}),
        [SetMark(S1, "evacuating", NOW), Signal((11,), "USR1", "t-spot-01 failed its health check")]),
    "gpu-health-draining-gives-its-jobs-time-to-checkpoint": (
        WorldBuilder([node(S1, DRAINING, reason="health: gpu 2 xid 79")], [instance("i-1", S1)],
                     state(marks={S1: {"evacuating": NOW - 29}}), jobs={S1: (11,)}), []),
    "gpu-health-draining-requeues-its-jobs-after-the-grace": (
        WorldBuilder([node(S1, DRAINING, reason="health: gpu 2 xid 79")], [instance("i-1", S1)],
                     state(marks={S1: {"evacuating": NOW - 30}}), jobs={S1: (11,)}),
        [Requeue((11,), "t-spot-01 failed its health check")]),
    "gpu-health-drained-empty-forgets-the-evacuation": (
        WorldBuilder([node(S1, DRAINED, reason="health: gpu 2 xid 79")], [instance("i-1", S1)],
                     state(marks={S1: {"evacuating": NOW - 40}})),
        [ClearMark(S1, "evacuating"), PowerDown((S1,), "slurmforge: replacing t-spot-01 (health: gpu 2 xid 79)"),
         Terminate("i-1", S1, "replacing t-spot-01 (health: gpu 2 xid 79)")]),
    "admin-draining-jobs-run-on": (
        WorldBuilder([node(S1, DRAINING, reason="kernel update")], [instance("i-1", S1)], jobs={S1: (11,)}), []),
    "admin-drain-left-alone": (
        WorldBuilder([node(S1, DRAINED, reason="kernel update")], [instance("i-1", S1)]), []),
    "interrupted-node-left-to-the-notice-handling": (
        WorldBuilder([node(S1, DRAINING, reason="slurmforge: spot interruption notice")],
                     [instance("i-1", S1)],
                     state(bindings=bound(S1, "i-1"),
                           interruptions=(InterruptionRecord("i-1", S1, "spot", NOW - 10, "signalled"),))),
        []),
    # ----- static nodes kept at count
    "static-node-off-is-powered-up": (WorldBuilder([node(OD1, POWERED_DOWN)]), [PowerUp((OD1,))]),
    "static-node-off-all-links-cooling-waits": (
        WorldBuilder([node(OD1, POWERED_DOWN)], state=state(cooldowns=cooling("od"))), []),
    "static-node-admin-drained-stays-off": (
        WorldBuilder([node(OD1, DRAINED_POWERED_DOWN, reason="kept off")]), []),
    "dynamic-node-off-stays-off": (WorldBuilder([node(OD2, POWERED_DOWN)]), []),
    "non-cloud-node-ignored": (WorldBuilder([node(S1, STATIC_NONCLOUD)]), []),
    "non-cloud-node-machine-stopped-under-jobs-marks-down": (
        WorldBuilder([node(S1, ("allocated",))], [instance("i-1", S1, STOPPED)]),
        [MarkDown((S1,), "slurmforge: instance i-1 of t-spot-01 is stopped")]),
    "non-cloud-node-machine-stopped-without-jobs-ignored": (
        WorldBuilder([node(S1, STATIC_NONCLOUD)], [instance("i-1", S1, STOPPED)]), []),
    "non-cloud-node-running-machine-under-jobs-ignored": (
        WorldBuilder([node(S1, ("mixed",))], [instance("i-1", S1, RUNNING)]), []),
    "non-cloud-node-already-down-ignored": (
        WorldBuilder([node(S1, ("down",), reason="slurmforge: x")], [instance("i-1", S1, STOPPED)]), []),
    "unknown-node-ignored": (WorldBuilder([node("elsewhere-01", POWERING_UP)]), []),
    # ----- static nodes kept alive in place: the machine first, then the node, then the new machine
    "static-machine-terminated-under-jobs-marks-down": (
        WorldBuilder([node(OD1, ALLOCATED)], [instance("i-1", OD1, TERMINATED, pool="od")], jobs={OD1: (5,)}),
        [SetMark(OD1, "replacing", NOW),
         MarkDown((OD1,), "slurmforge: instance i-1 of t-od-01 is terminated", keep_away=(5,),
                  keep_for=STALE_RPC_WINDOW)]),
    "static-noncloud-machine-stopped-marks-down": (
        WorldBuilder([node(OD1, ("idle",))], [instance("i-1", OD1, STOPPED, pool="od")]),
        [SetMark(OD1, "replacing", NOW),
         MarkDown((OD1,), "slurmforge: instance i-1 of t-od-01 is stopped", keep_for=STALE_RPC_WINDOW)]),
    "static-slurm-down-machine-gone-marks-down-with-own-reason": (
        WorldBuilder([node(OD1, DOWN, reason="Not responding")], [instance("i-1", OD1, TERMINATED, pool="od")],
                     state(marks={OD1: {"unresponsive": NOW - 100}})),
        [ClearMark(OD1, "unresponsive"), SetMark(OD1, "replacing", NOW - 100),
         MarkDown((OD1,), "slurmforge: instance i-1 of t-od-01 is terminated", keep_for=STALE_RPC_WINDOW)]),
    "static-machine-not-listed-marks-first": (
        WorldBuilder([node(OD1, IDLE)]), [SetMark(OD1, "missing", NOW)]),
    "static-machine-not-listed-past-grace-marks-down": (
        WorldBuilder([node(OD1, IDLE)], state=state(marks={OD1: {"missing": NOW - 61}})),
        [SetMark(OD1, "replacing", NOW - 61),
         MarkDown((OD1,), "slurmforge: no machine of t-od-01 is listed", keep_for=STALE_RPC_WINDOW)]),
    "static-down-by-service-machine-gone-requeues-and-launches": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: instance i-1 of t-od-01 is terminated")],
                     [instance("i-1", OD1, TERMINATED, pool="od")], state(marks={OD1: {"replacing": NOW - 30}}),
                     jobs={OD1: (5,)}),
        [Requeue((5,), "replacing t-od-01"), Launch("od", "od", (OD1,), launch_token("od", [OD1], NOW))]),
    "static-down-by-service-machine-stopped-is-terminated-and-replaced": (
        WorldBuilder([node(OD1, ("down",), reason="slurmforge: instance i-1 of t-od-01 is stopped")],
                     [instance("i-1", OD1, STOPPED, pool="od")]),
        [Terminate("i-1", OD1, "replaced: instance i-1 of t-od-01 is stopped"),
         Launch("od", "od", (OD1,), launch_token("od", [OD1], NOW))]),
    "static-down-by-service-not-listed-keeps-its-mark-and-launches": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: no machine of t-od-01 is listed")],
                     state=state(marks={OD1: {"missing": NOW - 80, "replacing": NOW - 80}})),
        [Launch("od", "od", (OD1,), launch_token("od", [OD1], NOW))]),
    "static-replacement-waits-while-every-link-cools": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: instance i-1 of t-od-01 is terminated")],
                     [instance("i-1", OD1, TERMINATED, pool="od")], state(cooldowns=cooling("od"))), []),
    "static-running-not-responding-marks-first": (
        WorldBuilder([node(OD1, NOT_RESPONDING)], [instance("i-1", OD1, pool="od")]),
        [SetMark(OD1, "unresponsive", NOW)]),
    "static-running-not-responding-past-grace-terminated-first": (
        WorldBuilder([node(OD1, NOT_RESPONDING)], [instance("i-1", OD1, pool="od")],
                     state(marks={OD1: {"unresponsive": NOW - 181}}), jobs={OD1: (5,)}),
        [SetMark(OD1, "replacing", NOW - 181), Terminate("i-1", OD1, "slurmd on t-od-01 not responding")]),
    "static-machine-stopping-is-not-gone-yet": (
        WorldBuilder([node(OD1, NOT_RESPONDING)], [instance("i-1", OD1, InstanceState.STOPPING, pool="od")],
                     state(marks={OD1: {"unresponsive": NOW - 200, "replacing": NOW - 200}}), jobs={OD1: (5,)}),
        [ClearMark(OD1, "unresponsive")]),
    "static-health-drained-machine-terminated-first": (
        WorldBuilder([node(OD1, DRAINED, reason="health: gpu 2 xid 79")], [instance("i-1", OD1, pool="od")]),
        [SetMark(OD1, "replacing", NOW), Terminate("i-1", OD1, "replacing t-od-01 (health: gpu 2 xid 79)")]),
    "static-health-draining-signals-its-jobs": (
        WorldBuilder([node(OD1, DRAINING, reason="health: /data not mounted")], [instance("i-1", OD1, pool="od")],
                     jobs={OD1: (7, 8)}),
        [SetMark(OD1, "evacuating", NOW), Signal((7, 8), "USR1", "t-od-01 failed its health check")]),
    "static-health-draining-requeues-its-jobs-after-the-grace": (
        WorldBuilder([node(OD1, DRAINING, reason="health: /data not mounted")], [instance("i-1", OD1, pool="od")],
                     state(marks={OD1: {"evacuating": NOW - 31}}), jobs={OD1: (7, 8)}),
        [Requeue((7, 8), "t-od-01 failed its health check")]),
    # a shared file system lost on more than one node at once is the storage's outage (a Ceph
    # restart; a whole cluster started again before Ceph answered): nothing replaced, no job
    # moved; the health checks lift their drains when the mount answers (join.sh.j2)
    "storage-outage-on-two-nodes-replaces-neither": (
        WorldBuilder([node(OD1, DRAINED, reason="health: /data unreadable"),
                      node(S1, DRAINING, reason="health: /data unreadable")],
                     [instance("i-1", OD1, pool="od"), instance("i-2", S1)], jobs={S1: (7,)}), []),
    "storage-outage-automount-found-nothing-on-two-nodes": (
        WorldBuilder([node(OD1, DRAINED, reason="health: /data not mounted (its automount found nothing)"),
                      node(S1, DRAINED, reason="health: /home not answering; /data not mounted")],
                     [instance("i-1", OD1, pool="od"), instance("i-2", S1)]),
        [PowerDown((S1,), "slurmforge: replacing t-spot-01 (health: /home not answering; /data not mounted)"),
         Terminate("i-2", S1, "replacing t-spot-01 (health: /home not answering; /data not mounted)")]),
    "storage-outage-does-not-cover-another-problem": (
        WorldBuilder([node(OD1, DRAINED, reason="health: /data unreadable"),
                      node(S1, DRAINED, reason="health: /data unreadable; munge: no credential from munged")],
                     [instance("i-1", OD1, pool="od"), instance("i-2", S1)]),
        [PowerDown((S1,), "slurmforge: replacing t-spot-01 (health: /data unreadable; munge: no credential from "
                          "munged)"),
         Terminate("i-2", S1, "replacing t-spot-01 (health: /data unreadable; munge: no credential from munged)")]),
    # the first node to see an outage is not replaced before the others' checks report it
    "one-node-lost-a-mount-waits-two-check-intervals": (
        WorldBuilder([node(OD1, DRAINED, reason="health: /data unreadable", reason_changed_at=NOW - 59)],
                     [instance("i-1", OD1, pool="od")]), []),
    "static-one-node-lost-a-mount-is-replaced": (
        WorldBuilder([node(OD1, DRAINED, reason="health: /data unreadable")], [instance("i-1", OD1, pool="od")]),
        [SetMark(OD1, "replacing", NOW), Terminate("i-1", OD1, "replacing t-od-01 (health: /data unreadable)")]),
    # a health drain older than the machine judged an earlier machine (`up` or a restart made
    # it again): the new machine's own check decides; it is resumed once its slurmd registered
    "static-health-drain-older-than-its-machine-waits-for-the-new-slurmd": (
        WorldBuilder([node(OD1, DRAINED, reason="health: /data unreadable", reason_changed_at=NOW - 200)],
                     [instance("i-2", OD1, launched=NOW - 100, pool="od")]), []),
    "static-health-drain-older-than-its-machine-resumed-once-registered": (
        WorldBuilder([node(OD1, DRAINED, reason="health: /data unreadable", reason_changed_at=NOW - 200,
                           slurmd_started_at=NOW - 90)],
                     [instance("i-2", OD1, launched=NOW - 100, pool="od")]), [Resume((OD1,))]),
    "static-health-drain-of-this-machine-replaces-it": (
        WorldBuilder([node(OD1, DRAINED, reason="health: /data unreadable", reason_changed_at=NOW - 70,
                           slurmd_started_at=NOW - 90)],
                     [instance("i-2", OD1, launched=NOW - 100, pool="od")]),
        [SetMark(OD1, "replacing", NOW), Terminate("i-2", OD1, "replacing t-od-01 (health: /data unreadable)")]),
    "static-replacement-booting-waits": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: x", address="10.0.16.7", reason_changed_at=NOW - 40)],
                     [instance("i-2", OD1, address="10.0.16.7", launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-2", at=NOW - 30, link="od"))), []),
    "static-replacement-booting-gets-its-address": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: x", address="10.0.16.5", reason_changed_at=NOW - 40)],
                     [instance("i-2", OD1, address="10.0.16.7", launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-2", at=NOW - 30, link="od"))),
        [SetAddress(OD1, "10.0.16.7")]),
    "static-noncloud-replacement-keeps-the-rollouts-address": (
        WorldBuilder([node(OD1, ("down",), reason="slurmforge: x", reason_changed_at=NOW - 40)],
                     [instance("i-2", OD1, address="10.0.16.7", launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-2", at=NOW - 30, link="od"))), []),
    "static-launch-not-listed-yet-waits": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: x", reason_changed_at=NOW - 40)],
                     [instance("i-1", OD1, TERMINATED, pool="od")],
                     state(bindings=bound(OD1, "i-9", at=NOW - 20, link="od"))), []),
    "static-crashed-replacement-launch-retried-not-doubled": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: x", reason_changed_at=NOW - 40)],
                     [instance("i-1", OD1, TERMINATED, pool="od")],
                     state(pending_launches=(LaunchRecord("sf-r", "od", "od", (OD1,), (), NOW - 20),))),
        [Launch("od", "od", (OD1,), "sf-r", (), retry=True)]),
    "static-replacement-not-registered-by-resume-timeout-terminated": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: x", address="10.0.16.7", reason_changed_at=NOW - 700)],
                     [instance("i-2", OD1, address="10.0.16.7", launched=NOW - 601, pool="od")],
                     state(bindings=bound(OD1, "i-2", at=NOW - 601, link="od"), marks={OD1: {"replacing": NOW - 720}})),
        [Terminate("i-2", OD1, "bootstrap failure: t-od-01 not registered by resume timeout on i-2")]),
    # the new machine's slurmd stopped on an error (its line in the node kit): replaced at once,
    # not at ResumeTimeout, the line on the node; a failure older than the machine is not its own
    "static-replacement-slurmd-failed-replaced-at-once": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: x", address="10.0.16.7", reason_changed_at=NOW - 60)],
                     [instance("i-2", OD1, address="10.0.16.7", launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-2", at=NOW - 30, link="od"), marks={OD1: {"replacing": NOW - 90}}),
                     failures={OD1: SlurmdFailure(NOW - 10, FATAL)}),
        [MarkDown((OD1,), f"slurmforge: slurmd failed on i-2: {FATAL}"),
         Terminate("i-2", OD1, f"slurmd failed on i-2: {FATAL}")]),
    "static-replacement-an-earlier-machines-slurmd-failure-is-not-its-own": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: x", address="10.0.16.7", reason_changed_at=NOW - 60)],
                     [instance("i-2", OD1, address="10.0.16.7", launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-2", at=NOW - 30, link="od"), marks={OD1: {"replacing": NOW - 90}}),
                     failures={OD1: SlurmdFailure(NOW - 100, FATAL)}), []),
    # a second new machine failing the same way: no third one, the node says why in one line
    "static-second-replacement-failing-the-same-way-stops-the-replacements": (
        WorldBuilder([node(OD1, DOWN, reason=f"slurmforge: slurmd failed on i-2: {FATAL}", address="10.0.16.7",
                           reason_changed_at=NOW - 50)],
                     [instance("i-3", OD1, address="10.0.16.7", launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-3", at=NOW - 30, link="od"), marks={OD1: {"replacing": NOW - 200}}),
                     failures={OD1: SlurmdFailure(NOW - 5, FATAL)}),
        [MarkDown((OD1,), STOP_REASON), Terminate("i-3", OD1, STOP_REASON)]),
    "static-second-replacement-failing-another-way-is-replaced-again": (
        WorldBuilder([node(OD1, DOWN, reason=f"slurmforge: slurmd failed on i-2: {FATAL}", address="10.0.16.7",
                           reason_changed_at=NOW - 50)],
                     [instance("i-3", OD1, address="10.0.16.7", launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-3", at=NOW - 30, link="od"), marks={OD1: {"replacing": NOW - 200}}),
                     failures={OD1: SlurmdFailure(NOW - 5, "fatal: Unable to determine this slurmd's NodeName")}),
        [MarkDown((OD1,), "slurmforge: slurmd failed on i-3: fatal: Unable to determine this slurmd's NodeName"),
         Terminate("i-3", OD1, "slurmd failed on i-3: fatal: Unable to determine this slurmd's NodeName")]),
    "static-replacement-stopped-is-left-down": (
        WorldBuilder([node(OD1, DOWN, reason=STOP_REASON, reason_changed_at=NOW - 500)],
                     [instance("i-3", OD1, TERMINATED, launched=NOW - 530, pool="od")],
                     state(bindings=bound(OD1, "i-3", at=NOW - 530, link="od"), marks={OD1: {"replacing": NOW - 900}}),
                     failures={OD1: SlurmdFailure(NOW - 505, FATAL)}), []),
    # a powering-up pool node: the same, instead of waiting for ResumeTimeout
    "powering-up-slurmd-failed-replaced-at-once": (
        WorldBuilder([node(S1, POWERING_UP)],
                     [instance("i-5", S1, launched=NOW - 40, pool="spot")],
                     state(bindings=bound(S1, "i-5", at=NOW - 40, link="spot")),
                     failures={S1: SlurmdFailure(NOW - 3, FATAL)}),
        [PowerDown((S1,), f"slurmforge: slurmd failed on i-5: {FATAL}"),
         Terminate("i-5", S1, f"slurmd failed on i-5: {FATAL}")]),
    "static-replacement-died-booting-cools-its-link": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: x", reason_changed_at=NOW - 60)],
                     [instance("i-2", OD1, TERMINATED, launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-2", at=NOW - 30, link="od"))),
        [Unbind(OD1), MarkCooldown("od", NOW + 60, 1, "instance i-2 terminated while booting")]),
    "static-replacement-registered-drain-lifted": (
        WorldBuilder([node(OD1, ("idle", "CLOUD", "DRAIN"), reason="slurmforge: x", address="10.0.16.7",
                           reason_changed_at=NOW - 65, slurmd_started_at=NOW - 5)],
                     [instance("i-2", OD1, address="10.0.16.7", launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-2", at=NOW - 30, link="od"))),
        [Resume((OD1,))]),
    # the jobs that ran on the dead machine are kept off the node (STALE_RPC_WINDOW), not the
    # node held: resumed as soon as its new slurmd registered
    "static-replacement-registered-resumed-at-once": (
        WorldBuilder([node(OD1, ("idle", "CLOUD", "DRAIN"), reason="slurmforge: x", address="10.0.16.7",
                           reason_changed_at=NOW - 20, slurmd_started_at=NOW - 5)],
                     [instance("i-2", OD1, address="10.0.16.7", launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-2", at=NOW - 30, link="od"))), [Resume((OD1,))]),
    "static-down-by-service-jobs-left-requeued-and-kept-away": (
        WorldBuilder([node(OD1, DOWN, reason="slurmforge: instance i-1 of t-od-01 is terminated",
                           reason_changed_at=NOW - 10)],
                     [instance("i-1", OD1, TERMINATED, pool="od")], state(marks={OD1: {"replacing": NOW - 30}}),
                     jobs={OD1: (5,)}),
        [Requeue((5,), "replacing t-od-01"), KeepAway(OD1, (5,), NOW - 10 + STALE_RPC_WINDOW),
         Launch("od", "od", (OD1,), launch_token("od", [OD1], NOW))]),
    "kept-away-not-excluded-yet-is-excluded": (
        WorldBuilder([], state=state(kept_away=(KeptAway(5, OD1, NOW + 30), KeptAway(6, OD1, NOW + 30, KEEP_ADDED)))),
        [KeepAway(OD1, (5,), NOW + 30)]),
    "kept-away-window-over-is-let-back": (
        WorldBuilder([], state=state(kept_away=(KeptAway(5, OD1, NOW, KEEP_ADDED), KeptAway(6, OD1, NOW - 1),
                                                KeptAway(7, OD2, NOW + 1, KEEP_ADDED)))),
        [LetBack(OD1, (5, 6))]),
    "static-back-in-service-on-the-new-machine": (
        WorldBuilder([node(OD1, IDLE, address="10.0.16.7", slurmd_started_at=NOW - 5)],
                     [instance("i-2", OD1, address="10.0.16.7", launched=NOW - 30, pool="od")],
                     state(bindings=bound(OD1, "i-2", at=NOW - 30, link="od"), marks={OD1: {"replacing": NOW - 70}})),
        [ClearMark(OD1, "replacing"), Replaced(OD1, "od", "i-2", NOW - 70, NOW - 30, NOW - 5)]),
    "static-old-machine-came-back-no-replacement-counted": (
        WorldBuilder([node(OD1, IDLE)], [instance("i-1", OD1, pool="od")],
                     state(bindings=bound(OD1, "i-1", at=NOW - 1000, link="od"), marks={OD1: {"replacing": NOW - 70}})),
        [ClearMark(OD1, "replacing")]),
    "static-admin-drained-machine-gone-left-alone": (
        WorldBuilder([node(OD1, DRAINED, reason="kernel update")], [instance("i-1", OD1, STOPPED, pool="od")]), []),
    "static-admin-down-machine-gone-left-alone": (
        WorldBuilder([node(OD1, ("down", "CLOUD"), reason="rack 4 maintenance")],
                     [instance("i-1", OD1, TERMINATED, pool="od")]), []),
    "static-admin-down-machine-not-responding-left-alone": (
        WorldBuilder([node(OD1, DOWN, reason="rack 4 maintenance")], [instance("i-1", OD1, pool="od")],
                     state(marks={OD1: {"unresponsive": NOW - 500, "replacing": NOW - 500}})),
        [ClearMark(OD1, "unresponsive"), ClearMark(OD1, "replacing")]),
    # ----- the join share of a machine the service launched (the "joining" mark, dated by the launch)
    "joined-slurmd-started-after-the-launch": (
        WorldBuilder([node(S1, IDLE, address="10.0.16.5", slurmd_started_at=NOW - 27)], [instance("i-1", S1)],
                     state(bindings=bound(S1, "i-1", at=NOW - 30.4), marks={S1: {"joining": NOW - 30.4}})),
        [Joined(S1, "spot", NOW - 30.4, NOW - 27), ClearMark(S1, "joining")]),
    "joined-slurmd-started-in-the-launchs-second": (  # Slurm's start time has whole seconds
        WorldBuilder([node(S1, IDLE, address="10.0.16.5", slurmd_started_at=NOW - 31)], [instance("i-1", S1)],
                     state(bindings=bound(S1, "i-1", at=NOW - 30.4), marks={S1: {"joining": NOW - 30.4}})),
        [Joined(S1, "spot", NOW - 30.4, NOW - 31), ClearMark(S1, "joining")]),
    "joining-waits-while-only-the-last-machines-slurmd-is-known": (
        WorldBuilder([node(S1, POWERING_UP, address="10.0.16.5", slurmd_started_at=NOW - 900)],
                     [instance("i-1", S1, launched=NOW - 5)],
                     state(bindings=bound(S1, "i-1", at=NOW - 5), marks={S1: {"joining": NOW - 5}})),
        []),
    "joining-ends-without-an-event-when-the-node-is-powered-down": (
        WorldBuilder([node(S1, POWERED_DOWN)], [], state(marks={S1: {"joining": NOW - 100}})),
        [ClearMark(S1, "joining")]),
    "powered-down-after-a-duplicate-launch-is-reset": (  # slurmctld's reason: a job it lost runs there
        WorldBuilder([node(S1, DRAINED_POWERED_DOWN, reason="Duplicate jobid")]),
        [PowerDown((S1,), "slurmforge: reset after 'Duplicate jobid'")]),
    # ----- a machine from before the power-up; a slurmctld that took control
    "powering-up-on-a-machine-from-before-the-power-up-releases-it": (  # the service was stopped
        WorldBuilder([node(S1, POWERING_UP, address="10.0.16.5")], [instance("i-1", S1, launched=NOW - 300)],
                     state(bindings=bound(S1, "i-1", at=NOW - 300), requests=(resume_at(S1, NOW - 10),))),
        [Terminate("i-1", S1, "stale: i-1 of t-spot-01 started before its power-up was requested "
                   f"({when.clock(NOW - 10)}); Slurm waits for a new boot"), Unbind(S1),
         Launch("spot", "spot", (S1,), launch_token("spot", [S1], NOW))]),
    "powering-up-unbound-machine-from-before-the-power-up-releases-it": (  # the cloud's launch time
        WorldBuilder([node(S1, POWERING_UP, address="10.0.16.5")], [instance("i-1", S1, launched=NOW - 300)],
                     state(requests=(resume_at(S1, NOW - 10),))),
        [Terminate("i-1", S1, "stale: i-1 of t-spot-01 started before its power-up was requested "
                   f"({when.clock(NOW - 10)}); Slurm waits for a new boot"),
         Launch("spot", "spot", (S1,), launch_token("spot", [S1], NOW))]),
    "powering-up-on-the-machine-launched-for-it-waits": (
        WorldBuilder([node(S1, POWERING_UP, address="10.0.16.5")], [instance("i-1", S1, launched=NOW - 9)],
                     state(bindings=bound(S1, "i-1", at=NOW - 9.5), requests=(resume_at(S1, NOW - 10),))), []),
    "powering-up-launch-time-in-whole-seconds-is-not-stale": (  # EC2's LaunchTime, another clock
        WorldBuilder([node(S1, POWERING_UP, address="10.0.16.5")], [instance("i-1", S1, launched=NOW - 11)],
                     state(requests=(resume_at(S1, NOW - 10),))), []),
    "took-control-while-a-machine-booted-replaces-it": (  # its registration went to the slurmctld before
        WorldBuilder([node(S1, POWERING_UP, address="10.0.16.5"), node(S2, POWERING_UP, address="10.0.16.6")],
                     [instance("i-1", S1, launched=NOW - 40), instance("i-2", S2, address="10.0.16.6",
                                                                     launched=NOW - 3)],
                     state(bindings=bound(S1, "i-1", at=NOW - 40) | bound(S2, "i-2", at=NOW - 3),
                           requests=(resume_at(S1, NOW - 41), resume_at(S2, NOW - 4), control_at(NOW - 8)))),
        [Terminate("i-1", S1, "stale: i-1 of t-spot-01 started before slurmctld took control "
                   f"({when.clock(NOW - 8)}); Slurm waits for a new boot"), Unbind(S1),
         Launch("spot", "spot", (S1,), launch_token("spot", [S1], NOW))]),
    "took-control-is-remembered-while-slurm-may-wait": (
        WorldBuilder([node(S1, POWERING_UP, address="10.0.16.5")], [instance("i-1", S1, launched=NOW - 3)],
                     state(bindings=bound(S1, "i-1", at=NOW - 3), requests=(resume_at(S1, NOW - 4),
                                                                            control_at(NOW - 8)))), []),
    "took-control-longer-ago-than-resume-timeout-is-closed": (
        WorldBuilder([node(S1, POWERING_UP, address="10.0.16.5")], [instance("i-1", S1, launched=NOW - 650)],
                     state(requests=(control_at(NOW - 700),))),
        [PowerDown((S1,), "slurmforge: bootstrap failure: t-spot-01 not registered by resume timeout on i-1"),
         Terminate("i-1", S1, "bootstrap failure: t-spot-01 not registered by resume timeout on i-1"),
         CloseRequests(("control-1",))]),
    "static-admin-draining-machine-gone-under-jobs-marked-down-keeping-the-reason": (
        WorldBuilder([node(OD1, DRAINING, reason="kernel update")], [instance("i-1", OD1, STOPPED, pool="od")]),
        [MarkDown((OD1,), "kernel update; slurmforge: instance i-1 of t-od-01 is stopped")]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_node_state_x_cloud_state(name: str) -> None:
    builder, expected = CASES[name]
    assert classify(builder.build()) == expected


def test_every_status_is_covered_by_the_table() -> None:
    from slurmforge.service.assess import Context

    seen = set()
    for builder, _ in CASES.values():
        world = builder.build()
        ctx = Context(world)
        for n in world.nodes:
            info = world.topology.nodes.get(n.name)
            if info is not None and (n.is_cloud() or info.static):
                seen.add(ctx.assess(n, info))
    assert seen == set(NodeStatus)


# --------------------------------------------------------------------------- launches


def test_launch_groups_by_pool_and_orders_nodes_by_job() -> None:
    nodes = [node(n, POWERING_UP) for n in ("t-spot-03", S1, S2, "t-cpu-01", "t-cpu-02")]
    world = WorldBuilder(nodes, state=state(node_jobs={"t-spot-03": 5, S1: 9, S2: 5, "t-cpu-02": 3})).build()
    assert classify(world) == [
        Launch("cpu", "cpu", ("t-cpu-01", "t-cpu-02"), launch_token("cpu", ["t-cpu-01", "t-cpu-02"], NOW), (3,)),
        Launch("spot", "spot", (S2, "t-spot-03", S1), launch_token("spot", [S2, "t-spot-03", S1], NOW), (5, 9)),
    ]


def test_launch_token_is_deterministic_and_fits_ec2() -> None:
    token = launch_token("spot", [S1, S2], NOW)
    assert token == launch_token("spot", [S1, S2], NOW)
    assert token != launch_token("od", [S1, S2], NOW)
    assert token != launch_token("spot", [S1, S2], NOW + 10)
    assert len(token) <= 64 and token.isascii()


def test_crashed_launch_is_retried_with_its_token_and_not_doubled() -> None:
    record = LaunchRecord("sf-crashed", "spot", "spot", (S1, S2), (4,), NOW - 30)
    untagged = instance("i-9", None, PENDING, address=None, launched=NOW - 25, tags={TAG_TOKEN: "sf-crashed"})
    world = WorldBuilder([node(S1, POWERING_UP), node(S2, POWERING_UP)], [untagged],
                         state(pending_launches=(record,))).build()
    assert classify(world) == [Launch("spot", "spot", (S1, S2), "sf-crashed", (4,), retry=True)]


def test_crashed_launch_past_its_window_is_abandoned_and_relaunched() -> None:
    record = LaunchRecord("sf-ancient", "spot", "spot", (S1,), (), NOW - 901)
    world = WorldBuilder([node(S1, POWERING_UP)], state=state(pending_launches=(record,))).build()
    assert classify(world) == [AbandonLaunch("sf-ancient", "retry window passed"),
                               Launch("spot", "spot", (S1,), launch_token("spot", [S1], NOW))]


# --------------------------------------------------------------------------- orphans


def test_orphans_and_duplicates_are_terminated_foreign_machines_are_not() -> None:
    world = WorldBuilder(
        [node(S1, IDLE), node(S2, IDLE)],
        [instance("i-1", S1), instance("i-2", S1, launched=NOW - 100),  # i-2: a second machine for S1
         instance("i-3", None),  # pool tag, no node, no launch in flight
         instance("i-4", "t-gone-07", launched=NOW - 901),  # a node the spec no longer has
         instance("i-8", "t-new-01", launched=NOW - 899),  # a newer spec's, made ahead of its rollout
         instance("i-5", None, pool=None, tags={}),  # the controller: not ours
         instance("i-6", S2, TERMINATED), instance("i-7", S2)],
        state(bindings=bound(S1, "i-1") | bound(S2, "i-7")),
    ).build()
    assert classify(world) == [
        Terminate("i-2", S1, "duplicate: node t-spot-01 already has i-1"),
        Terminate("i-3", None, "orphan: instance i-3 belongs to no node"),
        Terminate("i-4", "t-gone-07", "orphan: node t-gone-07 is not in the cluster"),
    ]


def test_instance_found_by_binding_when_node_tag_missing() -> None:
    world = WorldBuilder([node(S1, IDLE)], [instance("i-1", None)], state(bindings=bound(S1, "i-1"))).build()
    assert classify(world) == []


# --------------------------------------------------------------------------- spot interruption


def notice(stage: str, at: float = NOW) -> ServiceState:
    return state(interruptions=(InterruptionRecord("i-1", None, None, at, stage),), bindings=bound(S1, "i-1"))


def test_spot_notice_drains_signals_and_cools_the_spot_link() -> None:
    """The link stays cool past the requeue (the checkpoint grace, 90 s) by five minutes: the
    requeued job lands on the next link, not on new spot capacity EC2 is taking back (the
    60 s of a capacity failure were over before the requeue: the AWS rehearsal)."""
    world = WorldBuilder([node(S1, ALLOCATED)], [instance("i-1", S1)], notice("new"), jobs={S1: (11, 12)}).build()
    assert classify(world) == [
        Drain((S1,), "slurmforge: spot interruption notice"),
        Signal((11, 12), "USR1", "spot interruption notice for t-spot-01"),
        MarkCooldown("spot", NOW + 90 + 300, 1, "spot interruption"), AdvanceInterruption("i-1", "signalled")]


def test_spot_notice_waits_for_the_checkpoint_grace() -> None:
    world = WorldBuilder([node(S1, DRAINING, reason="slurmforge: spot interruption notice")], [instance("i-1", S1)],
                         notice("signalled", at=NOW - 60), jobs={S1: (11,)}).build()
    assert classify(world) == []


def test_spot_notice_requeues_after_grace() -> None:
    world = WorldBuilder([node(S1, DRAINING, reason="slurmforge: spot interruption notice")], [instance("i-1", S1)],
                         notice("signalled", at=NOW - 91), jobs={S1: (11,)}).build()
    assert classify(world) == [
        Requeue((11,), "spot interruption"), PowerDown((S1,), "slurmforge: spot instance interrupted"),
        Terminate("i-1", S1, "spot instance interrupted"), AdvanceInterruption("i-1", "done")]


def test_spot_node_whose_jobs_left_is_released_before_the_grace() -> None:
    """The job checkpointed on the signal and requeued itself: the machine goes now, not at
    the grace, so that the node is free for the job again (on its next link)."""
    world = WorldBuilder([node(S1, DRAINED, reason="slurmforge: spot interruption notice")], [instance("i-1", S1)],
                         notice("signalled", at=NOW - 12)).build()
    assert classify(world) == [PowerDown((S1,), "slurmforge: spot instance interrupted"),
                               Terminate("i-1", S1, "spot instance interrupted"), AdvanceInterruption("i-1", "done")]


def test_spot_instance_gone_early_requeues_at_once() -> None:
    world = WorldBuilder([node(S1, DRAINING, reason="slurmforge: spot interruption notice")],
                         [instance("i-1", S1, TERMINATED)], notice("signalled", at=NOW - 10), jobs={S1: (11,)}).build()
    assert classify(world) == [Requeue((11,), "spot interruption"),
                               PowerDown((S1,), "slurmforge: spot instance interrupted"),
                               AdvanceInterruption("i-1", "done")]


def test_notice_for_unknown_instance_is_closed() -> None:
    world = WorldBuilder([node(S1, IDLE)], [instance("i-1", S1)],
                         state(interruptions=(InterruptionRecord("i-404", None, None, NOW, "new"),))).build()
    assert classify(world) == [AdvanceInterruption("i-404", "done")]


# --------------------------------------------------------------------------- requests


def test_requests_close_when_their_nodes_are_up() -> None:
    requests = (Request("r-old", HandoffKind.RESUME, "t-spot-[01-02]", NOW - 200),
                Request("r-new", HandoffKind.RESUME, "t-spot-[01-02]", NOW - 5),
                Request("r-wait", HandoffKind.RESUME, "t-spot-03", NOW - 200),
                Request("s-1", HandoffKind.SUSPEND, "t-spot-04", NOW - 1))
    world = WorldBuilder([node(S1, IDLE), node(S2, IDLE), node("t-spot-03", POWERING_UP)],
                         [instance("i-1", S1), instance("i-2", S2), instance("i-3", "t-spot-03", launched=NOW - 50)],
                         state(requests=requests)).build()
    assert classify(world)[-1] == CloseRequests(("r-old", "s-1"))


def test_jobs_held_after_a_duplicate_launch_are_released_while_the_node_is_reset() -> None:
    """A slurmctld killed -9 had started job 40 on t-spot-01 and lost that; the next one
    started it again, slurmd refused the duplicate, slurmctld drained the node and held the
    job. The node is reset (its machine and the copy go) and the job released."""
    from dataclasses import replace

    world = replace(WorldBuilder([node(S1, DRAINED_POWERED_DOWN, reason="Duplicate jobid")]).build(), held=(40,))
    assert classify(world) == [PowerDown((S1,), "slurmforge: reset after 'Duplicate jobid'"),
                               Release((40,), "its launch found a copy a killed slurmctld had started")]
    # held for another reason (no duplicate anywhere): the admin's to look at
    assert classify(replace(WorldBuilder([node(S1, POWERED_DOWN)]).build(), held=(40,))) == []


# --------------------------------------------------------------------------- jobs the service signalled


def signalled(*jobs: int) -> ServiceState:
    return state(signalled={j: SignalledJob(j, "USR1", NOW - 20, "spot interruption notice for t-spot-01")
                            for j in jobs})


def slurm_job(job_id: int, job_state: str, exit_signal: str = "") -> Job:
    return Job(job_id, job_state, S1 if job_state != "PENDING" else "", exit_signal=exit_signal)


def test_a_job_the_services_signal_ended_is_requeued_and_the_record_settled() -> None:
    """A batch script that neither traps USR1 nor passes it on ends on it (bash's default):
    Slurm would have requeued it when the spot machine went, so the service does."""
    world = replace(WorldBuilder([node(S1, DRAINING)], [instance("i-1", S1)], signalled(11, 12)).build(),
                    signalled={11: slurm_job(11, "FAILED", "USR1"), 12: slurm_job(12, "RUNNING")})
    assert classify(world) == [
        Requeue((11,), "its batch script ended on the service's USR1 (spot interruption notice for t-spot-01)"),
        ForgetSignalled((11,))]


@pytest.mark.parametrize("seen", [
    slurm_job(11, "COMPLETED"),  # checkpointed and exited on its own: its choice
    slurm_job(11, "FAILED", "KILL"),  # ended by another signal (the machine, a user's scancel)
    slurm_job(11, "CANCELLED", "TERM"),
    None,  # slurmctld no longer holds it (MinJobAge)
], ids=["completed", "another-signal", "cancelled", "forgotten"])
def test_a_signalled_job_that_ended_otherwise_is_only_forgotten(seen: Job | None) -> None:
    world = replace(WorldBuilder([node(S1, DRAINING)], [instance("i-1", S1)], signalled(11)).build(),
                    signalled={} if seen is None else {11: seen})
    assert classify(world) == [ForgetSignalled((11,))]


@pytest.mark.parametrize("job_state", ["RUNNING", "PENDING", "CONFIGURING", "SUSPENDED"])
def test_a_signalled_job_still_alive_or_requeued_by_itself_is_left(job_state: str) -> None:
    world = replace(WorldBuilder([node(S1, DRAINING)], [instance("i-1", S1)], signalled(11)).build(),
                    signalled={11: slurm_job(11, job_state)})
    assert classify(world) == []


def test_signalled_jobs_not_read_is_no_decision() -> None:
    world = replace(WorldBuilder([node(S1, DRAINING)], [instance("i-1", S1)], signalled(11)).build(), signalled=None)
    assert classify(world) == []


def test_a_lost_mount_waits_for_every_other_nodes_check() -> None:
    from slurmforge.render import HEALTH_CHECK_INTERVAL
    from slurmforge.service.assess import MOUNT_GRACE

    assert MOUNT_GRACE >= 2 * HEALTH_CHECK_INTERVAL


def test_the_nodes_slurmd_failures_are_read_from_the_kit(tmp_path: Path) -> None:
    """One `<epoch> <line>` file per node (the join program's ExecStopPost); a file being
    written (a dot name) or not in that form is not a failure; no directory is none."""
    (tmp_path / "t-od-01").write_text(f"1700000000 {FATAL}\n")
    (tmp_path / ".t-od-02.Xy12").write_text("1700000001 fatal: half")
    (tmp_path / "t-od-02").write_text("garbage\n")
    assert read_failures(tmp_path) == {"t-od-01": SlurmdFailure(1700000000.0, FATAL)}
    assert read_failures(tmp_path / "none") == {} and read_failures(None) == {}
    assert parse_failure("1700000000 ") is None
