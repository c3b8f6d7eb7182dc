"""slurmforge.fleet.on_each_machine: work on every running machine of a busy cluster, where
a dynamic node may be powered down (its machine released) while the work runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmforge import fleet
from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host, HostRole
from slurmforge.spec import Cluster, load_spec

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local.yaml"

STATIC = Host("dev-cpu-01", "10.0.0.1", HostRole.COMPUTE)
GOING = Host("dev-cpu-03", "10.0.0.3", HostRole.COMPUTE, dynamic=True)
STAYING = Host("dev-cpu-04", "10.0.0.4", HostRole.COMPUTE, dynamic=True)


@pytest.fixture
def spec() -> Cluster:
    return load_spec(EXAMPLE)


def run(monkeypatch: pytest.MonkeyPatch, spec: Cluster, listed: list[list[Host]], broken: set[str],
        nodes: list[Host]) -> tuple[list[Host], list[str]]:
    """on_each_machine over `nodes`; `broken` fail every time; the pool hosts list `listed`
    in turn (the last one stays)."""
    calls: list[str] = []
    monkeypatch.setattr(fleet, "dynamic_nodes", lambda *_: listed.pop(0) if len(listed) > 1 else listed[0])
    monkeypatch.setattr(fleet.time, "sleep", lambda _: None)

    def work(host: Host) -> None:
        calls.append(host.name)
        if host.name in broken:
            raise ProvisionError(f"{host.name}: can only create exec sessions on running containers")

    return fleet.on_each_machine(spec, [], nodes, work), calls


def test_a_dynamic_node_powered_down_meanwhile_is_dropped(monkeypatch: pytest.MonkeyPatch, spec: Cluster) -> None:
    left, calls = run(monkeypatch, spec, [[STAYING]], {GOING.name}, [STATIC, GOING, STAYING])
    assert [h.name for h in left] == [STATIC.name, STAYING.name]
    assert sorted(calls) == sorted([STATIC.name, GOING.name, STAYING.name])


def test_a_dynamic_node_still_listed_is_tried_again_until_it_leaves(monkeypatch: pytest.MonkeyPatch,
                                                                   spec: Cluster) -> None:
    left, calls = run(monkeypatch, spec, [[GOING, STAYING], [GOING, STAYING], [STAYING]], {GOING.name},
                      [GOING, STAYING])
    assert [h.name for h in left] == [STAYING.name]
    assert calls.count(GOING.name) == 3


def test_a_node_that_stays_and_keeps_failing_is_an_error(monkeypatch: pytest.MonkeyPatch, spec: Cluster) -> None:
    clock = iter(range(0, 1000, 20))
    monkeypatch.setattr(fleet.time, "monotonic", lambda: float(next(clock)))
    with pytest.raises(ProvisionError, match="dev-cpu-04"):
        run(monkeypatch, spec, [[GOING, STAYING]], {STAYING.name}, [GOING, STAYING])


def test_a_fixed_host_that_fails_is_an_error_at_once(monkeypatch: pytest.MonkeyPatch, spec: Cluster) -> None:
    with pytest.raises(ProvisionError, match="dev-cpu-01"):
        run(monkeypatch, spec, [[STAYING]], {STATIC.name}, [STATIC, STAYING])


def test_a_pool_machine_is_reached_through_the_jump_host_without_a_known_hosts_entry() -> None:
    """AWS: the pool machines are the scheduler service's, each with new host keys at an
    address an earlier machine may have had; the controller's way in (user, sudo, jump host)
    at the machine's address, no host key recorded or required (the rehearsal's rollout met
    "Host key verification failed" on a static node the service had just launched)."""
    from slurmforge.connection import ssh_argv

    head = Host("c-controller", "10.0.0.10", HostRole.CONTROLLER, connection={
        "ansible_user": "admin", "ansible_become": "true", "ansible_ssh_common_args": "-o ProxyJump=admin@203.0.113.7"})
    machine = Host("c-cpu-01", "10.0.1.7", HostRole.COMPUTE, connection=fleet.pool_connection(head, "10.0.1.7"))
    argv = ssh_argv(machine)
    assert argv[-1] == "admin@10.0.1.7" and "ProxyJump=admin@203.0.113.7" in argv
    assert "StrictHostKeyChecking=no" in argv and "UserKnownHostsFile=/dev/null" in argv
    assert "StrictHostKeyChecking=no" not in ssh_argv(head)
