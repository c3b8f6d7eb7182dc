"""The faults of bench/never_down_bench.py and tests/integration/test_never_down.py against a
scripted cluster: what they count, and that they restore what they changed even when they
fail half-way (slurmctld started, jobs cancelled, the killed container started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host, HostRole
from slurmforge.spec import load_spec
from tests.harness import faults, live
from tests.harness.faults import FAULT_JOB, JobNodes, controller_outage, dead_node
from tests.harness.live import LiveCluster

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
WHERE = JobNodes("ml-cpu", "dev-cpu-[01-02]", victim="dev-cpu-02")
CLEARED = [f"scancel -n {FAULT_JOB} 2>/dev/null || true", f"squeue -h -n {FAULT_JOB} -o %i 2>/dev/null || true"]
LOG = """Jan 01 00:00:05 dev-controller slurmforge-service[9]: holding back 3 action(s) since 00:00:05: slurm-view: ...
Jan 01 00:00:15 dev-controller slurmforge-service[9]: holding back 2 action(s) since 00:00:05: release-rate: \
1 released machine(s) wait: at most 5 terminated a loop
Jan 01 00:00:25 dev-controller slurmforge-service[9]: terminate i-1 (dev-cpu-03): orphan
"""


class FakePodman:
    def __init__(self, fail_kill: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail_kill = fail_kill

    def run(self, args: list[str], check: bool = True, **_: Any) -> str:
        self.calls.append(args)
        if self.fail_kill and args[0] == "kill":
            raise ProvisionError("podman kill failed")
        return ""


class ScriptedCluster(LiveCluster):
    """Answers from a script; records every root command and submission."""

    def __init__(self, containers: list[set[str]], sacct: dict[str, str], squeue: dict[str, list[str]],
                 fail_kill: bool = False, backups: tuple[str, ...] = ()) -> None:
        podman: Any = FakePodman(fail_kill)
        super().__init__("dev", "dev-controller", "dev-login", "alice", "10.89.7.2", podman, backups)
        self.containers, self.sacct, self.squeue = containers, sacct, squeue
        self.commands: list[str] = []
        self.elsewhere: list[tuple[str, str]] = []
        """(node, command) of every command on a node other than the primary, in order with
        the primary's (which are also in `commands`)."""
        self.submitted: list[str] = []

    def on(self, node: str, command: str, timeout: float = 60) -> str:
        self.elsewhere.append((node, command))
        return self.root(command) if node == self.controller else ""

    def root(self, command: str, timeout: float = 60) -> str:
        self.commands.append(command)
        if command.startswith("date"):
            return "2025-01-01 00:00:00\n"
        if command.startswith("journalctl"):
            return LOG
        return ""

    def submit(self, args: str) -> str:
        self.submitted.append(args)
        return str(100 + len(self.submitted))

    def squeue_answer(self, job: str) -> str | None:
        states = self.squeue[job]
        return states.pop(0) if len(states) > 1 else states[0]

    def sacct_states(self, *jobs: str) -> dict[str, str]:
        return {job: self.sacct[job] for job in jobs}

    def slurm_state(self, node: str) -> str:
        return "idle"

    def nodes_in_transition(self) -> list[str]:
        return []

    def controller_up(self) -> bool:
        return "systemctl start slurmctld" in self.commands

    def running_containers(self) -> set[str]:
        return self.containers.pop(0) if len(self.containers) > 1 else self.containers[0]

    def is_holding(self, reason: str = "slurm-view") -> bool:
        return True


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(live.time, "sleep", lambda _: None)


def test_an_outage_counts_stopped_machines_termination_lines_and_jobs() -> None:
    cluster = ScriptedCluster([{"dev-controller", "dev-cpu-01", "dev-cpu-03"}, {"dev-controller", "dev-cpu-01"}],
                              {"101": "COMPLETED", "102": "COMPLETED"}, {"101": ["RUNNING"], "102": ["PENDING"]})
    outage = controller_outage(cluster, 0.05, WHERE)
    assert outage.stopped == ("dev-cpu-03",)
    # the executor's line counts; a hold's "at most 5 terminated a loop" does not
    assert outage.terminations == ("Jan 01 00:00:25 dev-controller slurmforge-service[9]: terminate i-1 "
                                   "(dev-cpu-03): orphan",)
    assert outage.machines_terminated == 1 and outage.holding and outage.jobs_completed == 2
    running, pending = cluster.submitted
    assert running == "-J slurmforge-fault -N 2 -p ml-cpu -w dev-cpu-[01-02] -o nd-%j.out --wrap 'sleep 20'"
    assert "--begin=now+1 " in pending and "-p ml-cpu" in pending
    stop = cluster.commands.index("systemctl stop slurmctld")
    start = cluster.commands.index("systemctl start slurmctld")
    assert stop < start
    assert any(c.startswith("journalctl -u slurmforge-service") and "--since '2025-01-01 00:00:00'" in c
               for c in cluster.commands[stop:start])
    assert cluster.commands[-1] == "scancel 101 102 2>/dev/null || true"


def test_an_outage_that_fails_half_way_starts_slurmctld_and_cancels_the_jobs() -> None:
    cluster = ScriptedCluster([], {}, {"101": ["RUNNING"], "102": ["PENDING"]})

    def fail_after_first() -> set[str]:
        """The list before the outage, then podman fails."""
        if "systemctl stop slurmctld" in cluster.commands:
            raise ProvisionError("podman ps failed")
        return {"dev-cpu-01"}

    cluster.running_containers = fail_after_first  # type: ignore[method-assign]
    with pytest.raises(ProvisionError, match="podman ps failed"):
        controller_outage(cluster, 0.05, WHERE)
    assert cluster.commands[-2:] == ["systemctl start slurmctld", "scancel 101 102 2>/dev/null || true"]


def test_an_outage_with_a_backup_controller_stops_both_slurmctlds() -> None:
    """Stopping the primary alone would be a failover: the backup is stopped first (so it
    never takes over) and started last."""
    cluster = ScriptedCluster([{"dev-controller"}], {"101": "COMPLETED", "102": "COMPLETED"},
                              {"101": ["RUNNING"], "102": ["PENDING"]}, backups=("dev-controller-backup",))
    controller_outage(cluster, 0.05, WHERE)
    slurmctld = [(node, cmd) for node, cmd in cluster.elsewhere if cmd.endswith(" slurmctld")]
    assert slurmctld == [("dev-controller-backup", "systemctl stop slurmctld"),
                         ("dev-controller", "systemctl stop slurmctld"),
                         ("dev-controller", "systemctl start slurmctld"),
                         ("dev-controller-backup", "systemctl start slurmctld")]


def test_a_pending_job_that_already_runs_is_refused() -> None:
    cluster = ScriptedCluster([set()], {}, {"101": ["RUNNING"], "102": ["RUNNING"]})
    with pytest.raises(ProvisionError, match="should wait for its begin time, but is RUNNING"):
        controller_outage(cluster, 0.05, WHERE)
    assert "systemctl stop slurmctld" not in cluster.commands
    assert cluster.commands[-1] == "scancel 101 102 2>/dev/null || true"


def test_a_dead_node_is_timed_and_the_service_brings_it_back() -> None:
    # the victim's container: running, killed (gone), started by the service (back)
    cluster = ScriptedCluster([{"dev-cpu-02"}, set(), {"dev-cpu-02"}], {},
                              {"101": ["RUNNING", "RUNNING", "RUNNING", "PENDING"]})
    dead = dead_node(cluster, WHERE)
    assert dead.job == "101" and dead.seconds is not None and dead.after == "PENDING"
    assert dead.back is not None and dead.requeued
    assert cluster.submitted == [f"-J {FAULT_JOB} -N 2 -p ml-cpu -w dev-cpu-[01-02] -o nd-%j.out --requeue "
                                 "--wrap 'sleep 600'"]
    assert cluster.podman.calls == [["kill", "dev-cpu-02"]]  # type: ignore[attr-defined]  # nobody else starts it
    assert cluster.commands == [*CLEARED, "scancel 101 2>/dev/null || true"]
    assert dead.completed is None  # not asked


def test_a_dead_nodes_requeued_job_is_awaited_completed_when_asked() -> None:
    """finish: a short job, awaited COMPLETED in sacct after it ran again on the replacement."""
    cluster = ScriptedCluster([{"dev-cpu-02"}, set(), {"dev-cpu-02"}], {"101": "COMPLETED"},
                              {"101": ["RUNNING", "RUNNING", "RUNNING", "PENDING"]})
    dead = dead_node(cluster, WHERE, finish=True)
    assert dead.back is not None and dead.requeued and dead.completed is not None
    assert dead.completed >= dead.back
    assert cluster.submitted[0].endswith(f"--requeue --wrap 'sleep {faults.FINISH_JOB_SECONDS}'")


def test_every_fault_cancels_the_jobs_a_killed_run_left_before_it_submits() -> None:
    """A run killed half-way leaves its jobs in Slurm (kept across restarts and `up`); they
    would hold the nodes the next run needs."""
    outage = ScriptedCluster([set(), set()], {"101": "COMPLETED", "102": "COMPLETED"},
                             {"101": ["RUNNING"], "102": ["PENDING"]})
    controller_outage(outage, 0.05, WHERE)
    dead = ScriptedCluster([{"dev-cpu-02"}, set(), {"dev-cpu-02"}], {}, {"101": ["RUNNING", "PENDING"]})
    dead_node(dead, WHERE)
    for cluster in (outage, dead):
        assert cluster.commands[:2] == CLEARED and all(a.startswith(f"-J {FAULT_JOB} ") for a in cluster.submitted)


def test_a_dead_node_the_service_does_not_bring_back_is_started_by_the_fault() -> None:
    cluster = ScriptedCluster([set()], {}, {"101": ["RUNNING", "PENDING"]})
    dead = dead_node(cluster, WHERE, back_limit=0)
    assert dead.back is None
    assert cluster.podman.calls == [["kill", "dev-cpu-02"], ["start", "dev-cpu-02"]]  # type: ignore[attr-defined]


def test_a_dead_node_whose_job_stays_running_is_no_measurement() -> None:
    cluster = ScriptedCluster([{"dev-cpu-02"}], {}, {"101": ["RUNNING"]})
    dead = dead_node(cluster, WHERE, limit=0)
    assert dead.seconds is None and dead.after == "RUNNING"


def test_a_failed_kill_still_starts_the_node_and_cancels_the_job() -> None:
    cluster = ScriptedCluster([set()], {}, {"101": ["RUNNING"]}, fail_kill=True)
    with pytest.raises(ProvisionError, match="podman kill failed"):
        dead_node(cluster, WHERE)
    assert cluster.podman.calls[-1] == ["start", "dev-cpu-02"]  # type: ignore[attr-defined]
    assert cluster.commands == [*CLEARED, "scancel 101 2>/dev/null || true"]


def hosts() -> list[Host]:
    def compute(name: str, pool: str, dynamic: bool = False) -> Host:
        return Host(name, "10.89.7.9", HostRole.COMPUTE, pool, dynamic)

    return [Host("dev-controller", "10.89.7.2", HostRole.CONTROLLER), Host("dev-login", "10.89.7.3", HostRole.LOGIN),
            compute("dev-gpu-01", "gpu"), compute("dev-cpu-02", "cpu"), compute("dev-cpu-01", "cpu"),
            compute("dev-cpu-03", "cpu", dynamic=True)]


def test_the_jobs_run_on_two_static_nodes_of_the_default_partition() -> None:
    spec = load_spec(ROOT / "examples" / "local.yaml")
    assert JobNodes.of(spec, hosts()) == WHERE
    with pytest.raises(ProvisionError, match="partition ml-gpu has 1 static node"):
        JobNodes.of(spec, hosts(), "ml-gpu")
    with pytest.raises(ProvisionError, match="no partition nope in dev"):
        JobNodes.of(spec, hosts(), "nope")
