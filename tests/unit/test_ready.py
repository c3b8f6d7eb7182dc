"""A bring-up returns 0 only when the cluster runs jobs: Ceph serves, every static compute node
is in service (slurmforge.bringup.await_ready). What the last CI run met: a monitor that did
not start, every static node drained `health: /data not answering`, and `up` said done."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from slurmforge import bringup
from slurmforge.bringup import await_ready, ceph_problem, node_problems
from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host, HostRole
from slurmforge.remote.executor import Completed
from slurmforge.slurm.client import NodeState, parse_nodes

pytestmark = pytest.mark.unit

STATIC = ["dev-cpu-01", "dev-cpu-02", "dev-gpu-01"]


def answer(*nodes: str) -> str:
    """`scontrol show nodes --json` (24.11's shape) for nodes written `name|STATE+FLAG|reason`."""
    items = []
    for line in nodes:
        name, states, reason = line.split("|")
        items.append({"name": name, "state": states.split("+"), "reason": reason})
    return json.dumps({"nodes": items, "errors": [], "warnings": []})


def said(*nodes: str) -> list[NodeState]:
    return parse_nodes(answer(*nodes))


def test_nodes_in_service_are_ready_whatever_their_jobs() -> None:
    nodes = said("dev-cpu-01|IDLE|", "dev-cpu-02|MIXED+COMPLETING|", "dev-gpu-01|ALLOCATED+RESERVED|",
                 "dev-cpu-03|IDLE+CLOUD+POWERED_DOWN|")
    assert node_problems(nodes, STATIC) == ([], [])


@pytest.mark.parametrize(("node", "told"), [
    ("dev-cpu-02|IDLE+DRAIN|health: /data not answering", "dev-cpu-02: drained (health: /data not answering)"),
    ("dev-cpu-02|MIXED+DRAIN|health: munge: no credential from munged", "dev-cpu-02: draining (health: munge"),
    ("dev-cpu-02|IDLE+NOT_RESPONDING|", "dev-cpu-02: idle, not responding"),  # registered once, silent now
    ("dev-cpu-02|DOWN+NOT_RESPONDING|Not responding", "dev-cpu-02: down, not responding (Not responding)"),
    ("dev-cpu-02|IDLE+DRAIN+NOT_RESPONDING|maintenance", "dev-cpu-02: drained, not responding (maintenance)"),
    ("dev-cpu-02|FUTURE|", "dev-cpu-02: future"),
    ("dev-cpu-02|IDLE+POWERED_DOWN|", "dev-cpu-02: idle, powered down"),
    ("dev-cpu-02|DOWN|disk", "dev-cpu-02: down (disk)"),
])
def test_a_node_that_cannot_take_jobs_is_a_problem(node: str, told: str) -> None:
    problems, notes = node_problems(said("dev-cpu-01|IDLE|", node, "dev-gpu-01|IDLE|"), STATIC)
    assert len(problems) == 1 and problems[0].startswith(told) and notes == []


def test_an_admins_drain_is_left_as_it_is_and_said() -> None:
    problems, notes = node_problems(said("dev-cpu-01|IDLE|", "dev-cpu-02|IDLE+DRAIN|kernel update",
                                         "dev-gpu-01|IDLE|"), STATIC)
    assert problems == [] and notes == ["dev-cpu-02: drained (kernel update): taken out by an admin, left as it is"]


def test_a_static_node_slurm_does_not_list_is_a_problem() -> None:
    problems, _ = node_problems(said("dev-cpu-01|IDLE|"), STATIC)
    assert problems == ["dev-cpu-02: not in Slurm's node list", "dev-gpu-01: not in Slurm's node list"]


def done(rc: int, out: str = "") -> Completed:
    return Completed(["x"], rc, out, "")


@pytest.mark.parametrize(("health", "failed", "said"), [
    (done(0, "HEALTH_OK\n"), "", None),
    (done(0, "HEALTH_WARN 1 pool(s) have no replicas configured\n"), "", None),
    (done(0, "HEALTH_ERR 1 filesystem is offline\n"), "", "Ceph: HEALTH_ERR 1 filesystem is offline"),
    (done(124), "ceph-mon@dev-ceph-01.service loaded failed failed Ceph cluster monitor daemon\n",
     "Ceph: no answer from its monitors (failed: ceph-mon@dev-ceph-01.service; `journalctl -u`"),
    (done(1), "", "Ceph: no answer from its monitors"),
    (None, "", "Ceph: no answer from its monitors"),
])
def test_ceph_serves_unless_its_health_is_an_error_or_nothing_answers(
        health: Completed | None, failed: str, said: str | None) -> None:
    found = ceph_problem(health, failed)
    assert found == said if said is None else (found or "").startswith(said)


class Node:
    """An executor scripted by argv[0..2]: the answers in order, the last kept."""

    def __init__(self, name: str, answers: dict[str, list[Completed]]) -> None:
        self.name, self.answers, self.calls = name, answers, 0

    def run(self, argv: Sequence[str], env: object = None, timeout: float = 0) -> Completed:
        self.calls += 1
        queue = self.answers[" ".join(argv[:3])]
        return queue.pop(0) if len(queue) > 1 else queue[0]


class Notes:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


HOSTS = [Host("dev-controller", "10.0.0.2", HostRole.CONTROLLER), Host("dev-ceph-01", "10.0.0.3", HostRole.CEPH),
         Host("dev-cpu-01", "10.0.0.4", HostRole.COMPUTE), Host("dev-cpu-02", "10.0.0.5", HostRole.COMPUTE),
         Host("dev-gpu-01", "10.0.0.6", HostRole.COMPUTE)]


def fake_cluster(monkeypatch: pytest.MonkeyPatch, ceph: list[Completed], slurm: list[Completed]) -> dict[str, Node]:
    """`slurm`: the controller's answers to `scontrol show nodes --json`, in order."""
    machines = {"dev-ceph-01": Node("dev-ceph-01", {"timeout 20 ceph": ceph,
                                                    "systemctl list-units --failed": [done(0)]}),
                "dev-controller": Node("dev-controller", {"scontrol show nodes": slurm})}
    monkeypatch.setattr(bringup, "executor_for", lambda host, user=None: machines[host.name])
    monkeypatch.setattr("slurmforge.bringup.time.sleep", lambda _: None)
    return machines


def test_await_ready_waits_out_a_drain_the_health_check_lifts(monkeypatch: pytest.MonkeyPatch) -> None:
    drained = answer("dev-cpu-01|IDLE+DRAIN|health: /data not answering", "dev-cpu-02|IDLE|", "dev-gpu-01|IDLE|")
    ready = answer("dev-cpu-01|IDLE|", "dev-cpu-02|IDLE|", "dev-gpu-01|IDLE|")
    nodes = fake_cluster(monkeypatch, [done(124), done(0, "HEALTH_OK")], [done(0, drained), done(0, drained),
                                                                           done(0, ready)])
    await_ready(HOSTS, HOSTS[0], Notes(), timeout=60)  # type: ignore[arg-type]
    assert nodes["dev-controller"].calls == 3


def test_await_ready_names_every_problem_when_the_cluster_never_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    drained = answer(*(f"{n}|IDLE+DRAIN|health: /data not answering" for n in STATIC))
    fake_cluster(monkeypatch, [done(124)], [done(0, drained)])
    with pytest.raises(ProvisionError) as err:
        await_ready(HOSTS, HOSTS[0], Notes(), timeout=0)  # type: ignore[arg-type]
    message = str(err.value)
    assert message.startswith("the cluster is not ready after 0 s: Ceph: no answer from its monitors; ")
    assert all(f"{n}: drained (health: /data not answering)" in message for n in STATIC)
    assert "\n" not in message


def test_a_cluster_without_static_nodes_or_ceph_asks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = fake_cluster(monkeypatch, [done(124)], [done(1)])
    await_ready([HOSTS[0]], HOSTS[0], Notes(), timeout=0)  # type: ignore[arg-type]
    assert nodes["dev-controller"].calls == 0 and nodes["dev-ceph-01"].calls == 0


def test_an_answer_slurm_did_not_finish_is_a_problem_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cluster(monkeypatch, [done(0, "HEALTH_OK")], [done(0, '{"nodes": [{"name": "dev-cpu-0')])
    with pytest.raises(ProvisionError, match=r"not ready after 0 s: slurmctld: .*not JSON"):
        await_ready(HOSTS, HOSTS[0], Notes(), timeout=0)  # type: ignore[arg-type]
