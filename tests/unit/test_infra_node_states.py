"""The live validation's verdict on node states (slurmforge/validation/node_states.py): every state a
busy, working cluster has passes; every fault is one line naming node, found and wanted."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_service_world import node

from slurmforge.spec.nodes import NodeHardware
from slurmforge.validation.node_states import hardware_problem, state_problem

pytestmark = pytest.mark.unit

FINE = {
    "idle": (("idle",), ""),
    "allocated": (("allocated",), ""),
    "mixed": (("mixed",), ""),
    "completing": (("allocated", "COMPLETING"), ""),
    "idle-completing": (("idle", "COMPLETING"), ""),
    "cloud-idle": (("idle", "CLOUD"), ""),
    "cloud-allocated": (("allocated", "CLOUD"), ""),
    "powering-up-for-a-job": (("allocated", "CLOUD", "NOT_RESPONDING", "POWERING_UP"), ""),
    "powering-down": (("idle", "CLOUD", "POWERING_DOWN"), ""),
    "power-down-queued": (("idle", "CLOUD", "POWER_DOWN"), ""),
    "admin-drained": (("idle", "DRAIN"), "kernel update"),
    "admin-draining-under-jobs": (("mixed", "DRAIN"), "kernel update"),
}


@pytest.mark.parametrize("name", list(FINE))
@pytest.mark.parametrize("dynamic", [True, False])
def test_a_busy_working_cluster_passes(name: str, dynamic: bool) -> None:
    state, reason = FINE[name]
    assert state_problem(node("n-01", state, reason=reason), dynamic) is None


def test_power_save_is_a_dynamic_nodes_rest_and_a_static_nodes_fault() -> None:
    powered_down = node("n-01", ("idle", "CLOUD", "POWERED_DOWN"))
    assert state_problem(powered_down, dynamic=True) is None
    assert state_problem(powered_down, dynamic=False) == (
        "n-01: Slurm state found IDLE+CLOUD+POWERED_DOWN, wanted in service (a static node is never powered down)")


WANTED = "wanted in service or in power save"
FAULTS = {
    "down": (("down", "NOT_RESPONDING"), "Not responding",
             f"n-01: Slurm state found DOWN+NOT_RESPONDING, reason 'Not responding', {WANTED}"),
    "resume-timeout": (("down", "CLOUD", "NOT_RESPONDING", "POWERED_DOWN"), "ResumeTimeout reached",
                       "n-01: Slurm state found DOWN+CLOUD+NOT_RESPONDING+POWERED_DOWN, reason 'ResumeTimeout "
                       f"reached', {WANTED}"),
    "not-responding": (("idle", "NOT_RESPONDING"), "",
                       f"n-01: Slurm state found IDLE+NOT_RESPONDING (its slurmd does not answer), {WANTED}"),
    "invalid-registration": (("idle", "INVALID_REG"), "",
                             "n-01: Slurm state found IDLE+INVALID_REG (Slurm refused: INVALID_REG), "
                             f"{WANTED}"),
    "drained-by-the-service": (("idle", "DRAIN"), "slurmforge: spot interruption notice",
                               "n-01: Slurm state found IDLE+DRAIN, reason 'slurmforge: spot interruption "
                               "notice', wanted in service (drained by the admin, if at all)"),
    "drained-by-the-health-check": (("idle", "DRAIN"), "health: /data not mounted",
                                    "n-01: Slurm state found IDLE+DRAIN, reason 'health: /data not mounted', "
                                    "wanted in service (drained by the admin, if at all)"),
    "unknown": (("unknown",), "", f"n-01: Slurm state found UNKNOWN, {WANTED}"),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_each_fault_is_one_line_with_node_found_and_wanted(name: str) -> None:
    state, reason, line = FAULTS[name]
    assert state_problem(node("n-01", state, reason=reason), dynamic=True) == line


def test_hardware_names_what_the_node_has_and_should_have() -> None:
    hw = NodeHardware(sockets=1, cores_per_socket=2, threads_per_core=1, memory_mb=2048, gpus=2)
    good = node("g-01", ("idle",), gres="gpu:2")
    good = replace(good, cpus=2, memory_mb=2048)
    assert hardware_problem(good, hw, "gpu") is None
    bad = replace(good, cpus=4, gres="")
    assert hardware_problem(bad, hw, "gpu") == \
        "g-01: hardware found 4 CPUs, 2048 MB, no gres, wanted 2 CPUs, 2048 MB, gpu:2"
