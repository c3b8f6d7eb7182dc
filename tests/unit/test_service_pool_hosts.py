"""The pool hosts the service publishes in the node kit (service.pool_hosts): what the
daemon's loop writes as machines are launched, listed and released (the fake Slurm and
cloud of test_service_daemon, real SQLite, real files), and how the file is written."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from test_service_daemon import OD1, S1, S2, FakeCloud, FakeSlurm, all_nodes, resume
from test_service_world import NOW, POWERED_DOWN, POWERING_UP, Clock, instance

from slurmforge.inventory import cluster_vars
from slurmforge.local.provider import LocalProvider
from slurmforge.node.kit import kit_dir, pool_hosts_file
from slurmforge.provider import Instance, InstanceState, LaunchRequest, LaunchResult
from slurmforge.service import actions as a
from slurmforge.service.applier import Applier
from slurmforge.service.daemon import Daemon, DaemonConfig
from slurmforge.service.main import parse_args
from slurmforge.service.pool_hosts import HEADER, PoolHosts, pool_hosts_text
from slurmforge.service.state import Binding, Store
from slurmforge.service.topology import topology
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit


class AddressedCloud(FakeCloud):
    """A cloud whose launch returns each machine's address (the local provider: the
    container's fixed address), or none until it is listed (`at_launch` False: EC2)."""

    def __init__(self, clock: Clock, at_launch: bool = True) -> None:
        super().__init__(clock)
        self.at_launch = at_launch
        self.listing_fails = False

    def start(self, request: LaunchRequest) -> LaunchResult:
        result = super().start(request)
        for node, inst in result.launched.items():
            self.instances[inst.id] = replace(inst, address=f"10.0.16.{node[-1]}")
        if self.at_launch:
            return LaunchResult({n: self.instances[i.id] for n, i in result.launched.items()}, result.failed)
        return result

    def list_instances(self) -> list[Instance]:
        if self.listing_fails:
            raise ConnectionError("DescribeInstances timed out")
        return super().list_instances()


def daemon(env: dict[str, Path], slurm: FakeSlurm, cloud: FakeCloud, clock: Clock) -> Daemon:
    config = DaemonConfig(spec_path=env["spec"], spool=env["spool"], heartbeat=env["beat"], interval=0.01,
                          pool_hosts_file=env["spool"].parent / "kit" / "pool" / "hosts")
    return Daemon(config, slurm, cloud, Store(env["db"]), load_spec, clock)


def published(d: Daemon) -> list[str]:
    assert d.config.pool_hosts_file is not None
    text = d.config.pool_hosts_file.read_text()
    assert text.startswith(HEADER)
    return text[len(HEADER):].splitlines()


def two_powering_up(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    resume(env, monkeypatch, "t-spot-[01-02]", '{"jobs":[{"job_id":7,"nodes":"t-spot-[01-02]"}]}')
    return FakeSlurm(all_nodes(t_spot_01=POWERING_UP, t_spot_02=POWERING_UP, t_od_01=("idle", "CLOUD")))


def test_a_launch_publishes_its_machines_addresses_and_a_release_removes_them(
        env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    slurm, cloud = two_powering_up(env, monkeypatch), AddressedCloud(clock)
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od", address="10.0.16.9")  # not the service's machine
    d = daemon(env, slurm, cloud, clock)
    d.loop_once()
    assert published(d) == [f"10.0.16.1 {S1}", f"10.0.16.2 {S2}"]
    # one node went back to power save: its machine is released
    slurm.state[S1] = replace(slurm.state[S1], state="idle", flags=frozenset(POWERED_DOWN[1:]))
    slurm.state[S2] = replace(slurm.state[S2], state="idle", flags=frozenset(("CLOUD",)))  # still in use
    clock.advance(10)
    d.loop_once()
    assert published(d) == [f"10.0.16.2 {S2}"]


def test_each_launch_publishes_at_once_not_at_the_end_of_the_loop(tmp_path: Path) -> None:
    """The applier writes the file as a launch completes: a later launch of the same loop
    (hundreds of machines on AWS) does not hold back the names of the first."""
    spec = load_spec(Path(__file__).parents[2] / "examples" / "local.yaml")
    clock = Clock()
    pool_hosts = PoolHosts(tmp_path / "pool" / "hosts")
    pool_hosts.learn([], listing=True)
    seen: list[str] = []

    class Watching(AddressedCloud):
        def start(self, request: LaunchRequest) -> LaunchResult:
            seen.append(pool_hosts.path.read_text() if pool_hosts.path.exists() else "")
            return super().start(request)

    cloud = Watching(clock)
    store = Store(tmp_path / "state.db")
    applier = Applier(FakeSlurm([]), cloud, store, clock, pool_hosts)
    launches = [a.Launch("cpu", "cpu", ("dev-cpu-03",), "tok-1"), a.Launch("cpu", "cpu", ("dev-cpu-04",), "tok-2")]
    applier.apply(launches, topology(spec))
    assert seen == ["", HEADER + "10.0.16.3 dev-cpu-03\n"]
    assert pool_hosts.path.read_text() == HEADER + "10.0.16.3 dev-cpu-03\n10.0.16.4 dev-cpu-04\n"


def test_a_machine_without_an_address_yet_is_published_once_it_is_listed_with_one(
        env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """EC2 did not know the fresh instances when the provider asked for their addresses
    right after the launch: the next loop's listing has them."""
    clock = Clock()
    slurm, cloud = two_powering_up(env, monkeypatch), AddressedCloud(clock, at_launch=False)
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    d = daemon(env, slurm, cloud, clock)
    d.loop_once()
    assert published(d) == []
    clock.advance(10)
    d.loop_once()
    assert published(d) == [f"10.0.16.1 {S1}", f"10.0.16.2 {S2}"]


def test_a_restarted_service_writes_nothing_until_it_has_listed_the_machines(
        env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Its bindings survive in the store, the addresses it learned do not: before a listing
    it would publish a file without the nodes whose launch it did not see."""
    clock = Clock()
    slurm, cloud = two_powering_up(env, monkeypatch), AddressedCloud(clock)
    cloud.instances["i-od"] = instance("i-od", OD1, pool="od")
    first = daemon(env, slurm, cloud, clock)
    first.loop_once()
    first.store.close()
    before = published(first)
    cloud.listing_fails = True
    clock.advance(10)
    second = daemon(env, slurm, cloud, clock)
    second.loop_once()
    assert published(second) == before == [f"10.0.16.1 {S1}", f"10.0.16.2 {S2}"]
    cloud.listing_fails = False
    clock.advance(10)
    second.loop_once()
    assert published(second) == before


def binding(node: str, iid: str) -> Binding:
    return Binding(node, iid, "cpu", NOW, "tok")


def test_the_file_is_replaced_whole_and_only_when_it_changes(tmp_path: Path) -> None:
    hosts = PoolHosts(tmp_path / "pool" / "hosts")
    hosts.learn([instance("i-1", "dev-cpu-03", address="10.89.7.13")], listing=True)
    bindings = {"dev-cpu-03": binding("dev-cpu-03", "i-1")}
    assert hosts.publish(bindings)
    before = os.stat(hosts.path)
    assert not hosts.publish(bindings)  # the same content: not written again
    assert os.stat(hosts.path).st_mtime_ns == before.st_mtime_ns
    hosts.learn([instance("i-2", "dev-cpu-04", address="10.89.7.14")])
    assert hosts.publish(bindings | {"dev-cpu-04": binding("dev-cpu-04", "i-2")})
    after = os.stat(hosts.path)
    assert after.st_ino != before.st_ino  # a new file renamed over the old one: readers see one or the other
    assert after.st_mode & 0o777 == 0o644 and sorted(p.name for p in hosts.path.parent.iterdir()) == ["hosts"]


def test_a_node_on_a_new_machine_never_gets_the_old_ones_address(tmp_path: Path) -> None:
    hosts = PoolHosts(tmp_path / "hosts")
    hosts.learn([instance("i-old", "t-spot-01", address="10.0.16.1")], listing=True)
    hosts.publish({"t-spot-01": binding("t-spot-01", "i-old")})
    hosts.learn([instance("i-old", "t-spot-01", InstanceState.TERMINATED, address="10.0.16.1"),
                 instance("i-new", "t-spot-01", InstanceState.PENDING, address=None)], listing=True)
    hosts.publish({"t-spot-01": binding("t-spot-01", "i-new")})
    assert hosts.path.read_text() == HEADER
    assert hosts.addresses == {}


def test_the_text_is_one_line_per_addressed_binding_by_name() -> None:
    bindings = {f"n-{i:02d}": binding(f"n-{i:02d}", f"i-{i}") for i in (2, 1, 0)}
    addresses = {"i-0": "10.0.0.0", "i-1": "10.0.0.1"}  # i-2: no address yet
    lines = pool_hosts_text(bindings, addresses).splitlines()
    assert lines == [HEADER.rstrip("\n"), "10.0.0.0 n-00", "10.0.0.1 n-01"]


def test_the_role_starts_the_service_with_the_kits_pool_hosts(tmp_path: Path) -> None:
    """The unit the role writes passes the file the inventory names (the join program reads
    the same) to an option the service has."""
    spec = load_spec(Path(__file__).parents[2] / "examples" / "local.yaml")
    hosts = LocalProvider(spec, "img", state_root=tmp_path).hosts()
    assert cluster_vars(spec, tmp_path, hosts)["slurmforge_pool_hosts_file"] == pool_hosts_file(spec)
    assert pool_hosts_file(spec) == f"{kit_dir(spec)}/pool/hosts"
    roles = Path(__file__).parents[2] / "roles" / "scheduler_service"
    values = {"scheduler_service_interval": "10"}  # every other variable a path
    unit = re.sub(r"{{ *(\w+)[^}]*}}", lambda m: values.get(m[1], f"/{m[1]}"),
                  (roles / "tasks" / "configure.yml").read_text())
    command = re.search(r"ExecStart=\S+ (.*?)\n\s*Restart=", unit, re.S)
    assert command is not None
    argv = command[1].replace("\\\n", " ").split()
    assert parse_args(argv).pool_hosts == Path("/scheduler_service_pool_hosts")
    defaults = (roles / "defaults" / "main.yml").read_text()
    assert 'scheduler_service_pool_hosts: "{{ slurmforge_pool_hosts_file }}"' in defaults
