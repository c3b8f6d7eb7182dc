"""`slurmforge down --inventory`: the service stopped first, every machine of the cluster
terminated, a wait bounded by a one-line error (the moto round trip is in
tests/pulumi/test_service_settings_round_trip.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from slurmforge.aws.teardown import release, summary
from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host, HostRole, controller_names
from slurmforge.inventory import write_inventory
from slurmforge.provider import Instance, InstanceState, LaunchRequest, LaunchResult, Machines
from slurmforge.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]


class Cloud(Machines):
    def __init__(self, instances: list[Instance], sticky: bool = False) -> None:
        self.instances = {i.id: i for i in instances}
        self.sticky = sticky
        self.terminated: list[list[str]] = []

    def list_instances(self) -> list[Instance]:
        return list(self.instances.values())

    def start(self, request: LaunchRequest) -> LaunchResult:
        raise AssertionError("down never launches")

    def terminate(self, instances: Sequence[Instance]) -> None:
        self.terminated.append([i.id for i in instances])
        if not self.sticky:
            for i in instances:
                self.instances[i.id] = Instance(i.id, i.node, i.pool, InstanceState.TERMINATED)


def inventory_of(example: str, tmp_path: Path) -> Path:
    """An inventory of examples/<example> (its Ceph left out: no Ceph hosts here)."""
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    (data.get("storage") or {}).pop("ceph", None)
    spec_path = tmp_path / example
    spec_path.write_text(yaml.safe_dump(data))
    spec = load_spec(spec_path)
    hosts = [Host(name, f"10.0.1.{10 + i}", HostRole.CONTROLLER) for i, name in enumerate(controller_names(spec))]
    hosts += [Host(f"{spec.name}-login", "10.0.1.20", HostRole.LOGIN)]
    return write_inventory(spec, spec_path, hosts, tmp_path / "inv", tmp_path / "secrets", provider_settings={})


def aws_inventory(tmp_path: Path) -> Path:
    return inventory_of("pools-aws.yaml", tmp_path)


def machines() -> list[Instance]:
    return [Instance("i-1", "n-01", "cpu", InstanceState.RUNNING),
            Instance("i-2", "n-02", "gpu", InstanceState.STOPPED),
            Instance("i-3", "n-03", "gpu", InstanceState.PENDING),
            Instance("i-4", None, "cpu", InstanceState.TERMINATED)]


def test_the_service_stops_before_anything_is_terminated(tmp_path: Path) -> None:
    order: list[str] = []
    cloud = Cloud(machines())
    terminate = cloud.terminate
    cloud.terminate = lambda instances: (order.append("terminate"), terminate(instances))[1]  # type: ignore[method-assign]
    released = release(aws_inventory(tmp_path), stop_service=lambda h: order.append(f"stop {h.name}") or None,
                       machines=cloud, sleep=lambda s: None)
    assert order == ["stop mlpools-controller", "terminate"]
    assert cloud.terminated == [["i-1", "i-2", "i-3"]]  # the terminated one is not asked again
    assert released.terminated == {"cpu": 1, "gpu": 2}
    assert "terminated 3 pool machine(s) (cpu: 1, gpu: 2)" in summary(released)


def test_an_unreachable_controller_terminates_nothing_unless_forced(tmp_path: Path) -> None:
    cloud = Cloud(machines())
    with pytest.raises(ProvisionError, match="could not stop the scheduler service on mlpools-controller: no route"):
        release(aws_inventory(tmp_path), stop_service=lambda h: "no route", machines=cloud)
    assert cloud.terminated == []
    released = release(aws_inventory(tmp_path), stop_service=lambda h: "no route", machines=cloud, force=True,
                       sleep=lambda s: None)
    assert released.stopped_on == () and sum(released.terminated.values()) == 3
    assert "no scheduler service reached (--force)" in summary(released)


def test_machines_that_will_not_go_end_in_one_line_after_the_timeout(tmp_path: Path) -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    cloud = Cloud(machines(), sticky=True)
    with pytest.raises(ProvisionError, match=r"3 machine\(s\) still alive after 60 s: i-1, i-2, i-3"):
        release(aws_inventory(tmp_path), stop_service=lambda h: None, machines=cloud, timeout=60,
                clock=lambda: now[0], sleep=sleep)
    assert len(cloud.terminated) > 2  # asked again while waiting


@pytest.mark.parametrize(("example", "says"), [("local.yaml", "down --local"), ("lab.yaml", "machines are yours")])
def test_targets_without_launched_machines_say_so(tmp_path: Path, example: str, says: str) -> None:
    with pytest.raises(ProvisionError, match=says):
        release(inventory_of(example, tmp_path), stop_service=lambda h: None, machines=Cloud([]))


@pytest.mark.parametrize(("argv", "says"), [
    (["down", "--inventory", "/nonexistent"], "/nonexistent is not a slurmforge inventory (no hosts.yml)"),
    (["down"], "down: no cluster named; fix: --local [NAME] (this machine's), --inventory DIR (any other)"),
])
def test_down_without_a_usable_target_says_so_in_one_line(argv: list[str], says: str) -> None:
    from typer.testing import CliRunner

    from slurmforge.cli import app

    res = CliRunner().invoke(app, argv, env={"SLURMFORGE_CONTEXT": "/nonexistent/current-cluster.json"})
    assert res.exit_code == 14 and says in " ".join(res.output.split()), res.output  # no such cluster
    assert "Traceback" not in res.output
