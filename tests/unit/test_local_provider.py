"""The local provider's containers: what a recreated controller keeps, which hosts `up` makes."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slurmforge.bringup import fixed_hosts
from slurmforge.contract import JOIN_PROGRAM, JOIN_SECRETS_DIR
from slurmforge.errors import ProvisionError
from slurmforge.hosts import HostRole
from slurmforge.local.container import compute_container
from slurmforge.local.podman import ContainerInfo, runs_in
from slurmforge.local.provider import MARIADB_DATADIR, LocalProvider
from slurmforge.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "examples" / "local.yaml"


class Recorder:
    """The podman calls _ensure_container makes, nothing run."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.revivable = True
        self.records: dict[str, str] = {}
        """RECORD's text in each container (an in-place upgrade's) and in the image ("img")."""

    def remove_container(self, name: str) -> None:
        self.calls.append(["rm", name])

    def revive(self, info: ContainerInfo) -> ContainerInfo | None:
        return replace(info, state="exited", pid=0) if self.revivable else None

    def run(self, args: list[str], check: bool = True) -> str:
        self.calls.append(args)
        return self.records.get("img", "") if args[:2] == ["run", "--rm"] else ""

    def read_file(self, name: str, path: str) -> str | None:
        return self.records.get(name)


def _recorded(tmp_path: Path) -> tuple[Recorder, LocalProvider, list[Any], Any, Any]:
    """The example cluster's provider on a Recorder; its hosts, its controller, a static node."""
    recorder = Recorder()
    provider = LocalProvider(load_spec(LOCAL), "img", podman=recorder, state_root=tmp_path,  # type: ignore[arg-type]
                             join_program=tmp_path / "join.sh")
    hosts = provider.hosts()
    head = next(h for h in hosts if h.role is HostRole.CONTROLLER)
    static = next(h for h in hosts if h.role is HostRole.COMPUTE and not h.dynamic)
    return recorder, provider, hosts, head, static


def test_a_head_host_upgraded_in_place_to_the_image_is_kept(tmp_path: Path) -> None:
    """`slurmforge upgrade` brought the controller to the current image in place: its container
    still names the old podman image, but its RECORD says the image's inputs digest, so `up`
    keeps it (and its disk); a static node on the old image is made again whatever it says."""
    recorder, provider, hosts, head, static = _recorded(tmp_path)
    recorder.records = {"img": '{"inputs": "new"}', head.name: '{"inputs": "new", "in_place": "x"}',
                        static.name: '{"inputs": "new"}'}
    for host, kept in ((head, True), (static, False)):
        wanted = provider.container(host, hosts)
        info = ContainerInfo(host.name, "running", os.getpid(), wanted.all_labels(), "old-tag")
        assert provider._stale(info, wanted) is not kept, host.name
    recorder.records[head.name] = '{"inputs": "older"}'
    wanted = provider.container(head, hosts)
    assert provider._stale(ContainerInfo(head.name, "running", os.getpid(), wanted.all_labels(), "old-tag"), wanted)


def test_a_head_host_upgraded_in_place_to_another_image_is_made_again(tmp_path: Path) -> None:
    """The controller's container was made from the cluster's image, then `slurmforge upgrade`
    of a spec with an images.refresh brought it to another image in place; `up` of a spec
    without that refresh makes it again - its RECORD, read from its file system (also when its
    processes died with the host), is not the image's. A record-less or matching one is kept,
    and a compute node is judged by its container's image alone."""
    recorder, provider, hosts, head, static = _recorded(tmp_path)
    recorder.records = {"img": '{"inputs": "current"}', head.name: '{"inputs": "refreshed", "in_place": "x"}',
                        static.name: '{"inputs": "refreshed"}'}

    def stale(host: Any, pid: int = os.getpid()) -> bool:
        wanted = provider.container(host, hosts)
        return provider._stale(ContainerInfo(host.name, "running", pid, wanted.all_labels(), "img"), wanted)

    assert stale(head) and stale(head, pid=0) and not stale(static)
    recorder.records[head.name] = '{"inputs": "current"}'
    assert not stale(head)
    del recorder.records[head.name]
    assert not stale(head)


def _controller(provider: LocalProvider) -> tuple[Any, list[Any]]:
    hosts = provider.hosts()
    return next(h for h in hosts if h.role is HostRole.CONTROLLER), hosts


def test_the_controller_keeps_its_database_on_the_host(tmp_path: Path) -> None:
    spec = load_spec(LOCAL)
    provider = LocalProvider(spec, "img", state_root=tmp_path)
    controller, hosts = _controller(provider)
    args = provider.container(controller, hosts).run_args()
    assert f"{tmp_path / spec.name / 'mariadb'}:{MARIADB_DATADIR}" in args
    login = next(h for h in hosts if h.role is HostRole.LOGIN)
    assert not any(a.endswith(f":{MARIADB_DATADIR}") for a in provider.container(login, hosts).run_args())


def test_a_container_that_differs_from_its_description_in_anything_is_made_again(tmp_path: Path) -> None:
    """The description's digest decides, not a list of fields: a controller made before its
    database volume, a static node made without the join program, a login node with podman's
    /etc/hosts are each made again; one that matches is only started."""
    spec = load_spec(LOCAL)
    recorder = Recorder()
    provider = LocalProvider(spec, "img", podman=recorder, state_root=tmp_path,  # type: ignore[arg-type]
                             join_program=tmp_path / "join.sh")
    hosts = provider.hosts()
    static = next(h for h in hosts if h.role is HostRole.COMPUTE and not h.dynamic)
    for host in [*(next(h for h in hosts if h.role is role) for role in (HostRole.CONTROLLER, HostRole.LOGIN)), static]:
        wanted = provider.container(host, hosts)
        for older in (replace(wanted, mounts=wanted.mounts[:-1]), replace(wanted, extra_hosts=())):
            recorder.calls.clear()
            provider._ensure_container(host, hosts, ContainerInfo(host.name, "exited", 0, older.all_labels(), "img"))
            assert recorder.calls[0] == ["rm", host.name] and recorder.calls[1][0] == "run", older
        recorder.calls.clear()
        provider._ensure_container(host, hosts, ContainerInfo(host.name, "exited", 0, wanted.all_labels(), "img"))
        assert recorder.calls == [["start", host.name]]  # current: started, not recreated
        recorder.calls.clear()
        provider._ensure_container(host, hosts, ContainerInfo(host.name, "exited", 0, wanted.all_labels(), "old"))
        assert recorder.calls[0] == ["rm", host.name]  # another image
        recorder.calls.clear()  # a stop still under way (its processes alive): podman cannot start it yet
        provider._ensure_container(host, hosts, ContainerInfo(host.name, "stopping", os.getpid(),
                                                              wanted.all_labels(), "img"))
        assert recorder.calls == [["stop", "-t", "10", host.name], ["start", host.name]]
        # its processes gone, their pid another's now (a host restart): started again with its disk,
        # or made again when podman cannot be brought to start it
        dead = ContainerInfo(host.name, "stopping", os.getpid(), wanted.all_labels(), "img", id="ab" * 32)
        recorder.calls.clear()
        assert provider._ensure_container(host, hosts, dead) is True
        assert recorder.calls == [["start", host.name]]
        recorder.calls.clear()
        recorder.revivable = False
        assert provider._ensure_container(host, hosts, dead) is False
        assert recorder.calls[0] == ["rm", host.name] and recorder.calls[1][0] == "run"
        recorder.revivable = True
        recorder.calls.clear()  # dead and of another image: made again, never revived
        provider._ensure_container(host, hosts, replace(dead, image="old"))
        assert recorder.calls[0] == ["rm", host.name] and recorder.calls[1][0] == "run"


def test_a_pid_is_the_containers_only_in_its_cgroup(tmp_path: Path) -> None:
    """podman lists a dead container's pid, which the kernel gives to the next process."""
    cid = "be75cab8848e" + "0" * 52
    (tmp_path / "3347").mkdir()
    (tmp_path / "3347" / "cgroup").write_text(f"0::/libpod_parent/libpod-{cid}/init.scope\n")
    (tmp_path / "4061").mkdir()
    (tmp_path / "4061" / "cgroup").write_text("0::/libpod_parent/libpod-" + "f" * 64 + "\n")  # a Ceph daemon now
    assert runs_in(cid, 3347, tmp_path) and not runs_in(cid, 4061, tmp_path)
    assert not runs_in(cid, 5000, tmp_path) and not runs_in(cid, 0, tmp_path)


def test_static_nodes_are_made_as_the_service_makes_pool_nodes(tmp_path: Path) -> None:
    """One description for every compute node: a static node `up` makes mounts the join
    program and the munge key and joins at boot, as the service's machines do."""
    spec = load_spec(LOCAL)
    provider = LocalProvider(spec, "img", state_root=tmp_path, join_program=tmp_path / "join.sh")
    hosts = provider.hosts()
    static = next(h for h in hosts if h.role is HostRole.COMPUTE and not h.dynamic)
    made = provider.container(static, hosts)
    assert made == compute_container(spec, provider.service_settings(), static.name)
    assert {m.target for m in made.mounts} >= {JOIN_PROGRAM, f"{JOIN_SECRETS_DIR}/munge.key"}
    assert all(m.read_only for m in made.mounts if m.target == JOIN_PROGRAM)


def test_slurm_hosts_keep_their_own_hosts_file_and_ceph_hosts_get_podmans(tmp_path: Path) -> None:
    """The rollout writes /etc/hosts on Slurm hosts (a host added later reaches every node)."""
    spec = load_spec(LOCAL)
    provider = LocalProvider(spec, "img", state_root=tmp_path)
    hosts = provider.hosts()
    login = next(h for h in hosts if h.role is HostRole.LOGIN)
    ceph = next(h for h in hosts if h.role is HostRole.CEPH)
    login_args, ceph_args = provider.container(login, hosts).run_args(), provider.container(ceph, hosts).run_args()
    assert "--no-hosts" in login_args and "--add-host" not in login_args
    assert "--no-hosts" not in ceph_args and "--add-host" in ceph_args


class Host_:
    """podman as `provision` sees it: the containers listed, what it runs, starts and removes."""

    def __init__(self, subnet: str, containers: list[ContainerInfo]) -> None:
        self.subnet, self.listed = subnet, {c.name: c for c in containers}
        self.calls: list[list[str]] = []

    def containers(self, label: str) -> list[ContainerInfo]:
        return list(self.listed.values())

    def container(self, name: str) -> ContainerInfo | None:
        return self.listed.get(name)

    def container_exists(self, name: str) -> bool:
        return name in self.listed

    def network_exists(self, name: str) -> bool:
        return True

    def json(self, args: list[str]) -> list[dict[str, Any]]:
        return [{"subnets": [{"subnet": self.subnet}]}]

    def read_file(self, name: str, path: str) -> str | None:
        return None  # a container made from the image (no in-place upgrade): its image decides

    def remove_container(self, name: str) -> None:
        self.calls.append(["rm", name])
        del self.listed[name]

    def run(self, args: list[str], check: bool = True) -> str:
        self.calls.append(args)
        name = args[args.index("--name") + 1] if args[0] == "run" else args[1]
        self.listed[name] = ContainerInfo(name, "running", 42, {}, "img")
        return ""

    def exec(self, name: str, argv: list[str], **kwargs: Any) -> Any:
        return subprocess.CompletedProcess(argv, 0, "running\n", "")


def test_up_makes_the_fixed_hosts_and_leaves_dynamic_nodes_to_the_service(tmp_path: Path) -> None:
    """A dynamic node has a container only while Slurm has it powered up: `up` makes none,
    removes a stopped one (the kept containers of older releases) and leaves a running one
    alone (it may run jobs), and a created one too (the service, which runs throughout `up`,
    is launching it); the rollout reaches the fixed hosts only."""
    spec = load_spec(LOCAL)
    stopped = ContainerInfo("dev-cpu-03", "exited", 0, {"slurmforge.pool": "cpu"}, "old-img")
    running = ContainerInfo("dev-cpu-04", "running", os.getpid(), {"slurmforge.pool": "cpu"}, "old-img")
    launching = ContainerInfo("dev-cpu-fallback-01", "created", 0, {"slurmforge.pool": "cpu-fallback"}, "img")
    podman = Host_(spec.target.subnet, [stopped, running, launching])  # type: ignore[union-attr]
    provider = LocalProvider(spec, "img", podman=podman, state_root=tmp_path,  # type: ignore[arg-type]
                             join_program=tmp_path / "join.sh")
    hosts = provider.provision()
    assert hosts == provider.hosts()
    made = [c[c.index("--name") + 1] for c in podman.calls if c[0] == "run"]
    assert made == [h.name for h in fixed_hosts(hosts)]
    assert {h.name for h in hosts} - set(made) == {"dev-cpu-03", "dev-cpu-04", "dev-cpu-fallback-01",
                                                   "dev-cpu-spot-01", "dev-cpu-spot-02"}
    assert ["rm", "dev-cpu-03"] in podman.calls and ["rm", "dev-cpu-04"] not in podman.calls
    assert ["rm", "dev-cpu-fallback-01"] not in podman.calls
    assert set(podman.listed) == {*made, "dev-cpu-04", "dev-cpu-fallback-01"}


class Networks(Host_):
    """podman's networks as `provision` finds them: `inspect` answers `network`."""

    def __init__(self, subnet: str, containers: list[ContainerInfo], network: dict[str, Any] | None) -> None:
        super().__init__(subnet, containers)
        self.network = network

    def network_exists(self, name: str) -> bool:
        return self.network is not None

    def json(self, args: list[str]) -> list[dict[str, Any]]:
        return [self.network] if self.network is not None else []


@pytest.mark.parametrize(("network", "made_again"), [
    (None, True),
    ({"subnets": [{"subnet": "10.89.7.0/24"}], "dns_enabled": True}, True),  # podman's default
    ({"subnets": [{"subnet": "10.89.7.0/24"}], "dns_enabled": False}, False),
])
def test_the_network_has_no_dns_of_podmans(tmp_path: Path, network: dict[str, Any] | None, made_again: bool) -> None:
    """Container names must not resolve on the local target when they resolve nowhere else:
    a node finds another by name through /etc/hosts, as on AWS. A network that has podman's
    DNS is made again (its containers with it)."""
    spec = load_spec(LOCAL)
    running = ContainerInfo("dev-login", "running", os.getpid(), {}, "img")
    podman = Networks(spec.target.subnet, [running], network)  # type: ignore[union-attr]
    provider = LocalProvider(spec, "img", podman=podman, state_root=tmp_path)  # type: ignore[arg-type]
    provider._ensure_network()
    create = ["network", "create", "--disable-dns", "--subnet", "10.89.7.0/24", "slurmforge-dev"]
    assert (create in podman.calls) is made_again
    assert (["rm", "dev-login"] in podman.calls) is (made_again and network is not None)
    assert all("create" not in c or "--disable-dns" in c for c in podman.calls)


class Booting:
    """podman exec as wait_booted sees it: systemd's state and its job list, in turns."""

    def __init__(self, turns: list[tuple[str, str]]) -> None:
        self.turns, self.asked = turns, 0

    def exec(self, name: str, argv: list[str], **kwargs: Any) -> Any:
        state, jobs = self.turns[min(self.asked // 2, len(self.turns) - 1)]
        self.asked += 1
        return subprocess.CompletedProcess(argv, 0, state + "\n" if "is-system-running" in argv else jobs, "")


@pytest.mark.parametrize(("jobs", "booted"), [
    ("41 slurmd.service start running\n2 multi-user.target start waiting\n", True),
    ("41 slurmd.service start running\n7 ssh.service start running\n", False),
    ("40 slurmforge-join.service start running\n41 slurmd.service start waiting\n", True),  # no node kit yet
    ("", False),
])
def test_a_node_whose_slurmd_waits_for_its_controller_counts_as_booted(tmp_path: Path, jobs: str,
                                                                       booted: bool) -> None:
    """A compute node born with its controllers joins at boot; its slurmd is ready only once
    the rollout that follows configured a controller (and its join succeeds only once that
    rollout published the node kit), so `up` must not wait for it."""
    provider = LocalProvider(load_spec(LOCAL), "img", podman=Booting([("starting", jobs)]),  # type: ignore[arg-type]
                             state_root=tmp_path)
    if booted:
        provider.wait_booted(["dev-cpu-01"], timeout=5)
    else:
        with pytest.raises(ProvisionError, match="did not boot within 0 s"):
            provider.wait_booted(["dev-cpu-01"], timeout=0.2)
    provider = LocalProvider(load_spec(LOCAL), "img", podman=Booting([("starting", jobs), ("running", "")]),  # type: ignore[arg-type]
                             state_root=tmp_path)
    provider.wait_booted(["dev-cpu-01"], timeout=5)  # finished booting: whatever it waited for


def test_the_static_nodes_up_would_make_again_are_drained_first(tmp_path: Path) -> None:
    """`stale_nodes`: the running static nodes whose container `provision` replaces (another
    description - the pool's new hardware - or another image); `up` adds those the plan did
    not name to what it drains (local.up.with_stale)."""
    from slurmforge.drain import REBUILD, Drain
    from slurmforge.local.up import with_stale

    spec = load_spec(LOCAL)
    provider = LocalProvider(spec, "img", state_root=tmp_path, join_program=tmp_path / "join.sh")
    hosts = provider.hosts()
    by_name = {h.name: h for h in hosts}
    current = {n: provider.container(by_name[n], hosts).all_labels()
               for n in ("dev-cpu-01", "dev-cpu-02", "dev-gpu-01")}
    data = spec.model_dump(mode="json")
    data["pools"][1]["hardware"]["memory_mb"] = 512  # the gpu pool as it was
    older = compute_container(spec.model_validate(data), provider.service_settings(), "dev-gpu-01").all_labels()
    listed = [ContainerInfo("dev-cpu-01", "running", os.getpid(), current["dev-cpu-01"], "img"),
              ContainerInfo("dev-cpu-02", "running", os.getpid(), current["dev-cpu-02"], "old-img"),
              ContainerInfo("dev-gpu-01", "running", os.getpid(), older, "img")]
    provider.podman = Host_(spec.target.subnet, listed)  # type: ignore[assignment,union-attr]
    assert provider.stale_nodes() == ["dev-cpu-02", "dev-gpu-01"]
    # a cold start: podman still lists them running, their processes are gone - nothing to drain
    # (the controller that would is as dead), provision makes them again
    dead = [replace(c, pid=2 ** 22 + 1, id="0" * 64) for c in listed]
    provider.podman = Host_(spec.target.subnet, dead)  # type: ignore[assignment,union-attr]
    assert all(c.is_dead for c in dead) and provider.stale_nodes() == []
    provider.podman = Host_(spec.target.subnet, listed)  # type: ignore[assignment,union-attr]
    planned = [Drain(("dev-gpu-01",), "rebuilt (RealMemory 512 -> 1024)", REBUILD)]
    assert with_stale(planned, provider.stale_nodes()) == [
        *planned, Drain(("dev-cpu-02",), "made again (a new node image or container description)", REBUILD)]


class Restarted(Host_):
    """podman after a host restart: every container listed running, its processes gone; `revive`
    makes one startable, `start` runs it, and the services answer once started."""

    def __init__(self, subnet: str, containers: list[ContainerInfo]) -> None:
        super().__init__(subnet, containers)
        self.started: set[str] = set()

    def revive(self, info: ContainerInfo) -> ContainerInfo | None:
        self.calls.append(["revive", info.name])
        return replace(info, state="exited", pid=0)

    def run(self, args: list[str], check: bool = True, timeout: float | None = None) -> str:
        self.calls.append(args)
        if args[0] == "start":
            self.started.update(args[1:])
            for name in args[1:]:
                self.listed[name] = replace(self.listed[name], state="running", pid=os.getpid(), id="")
            return ""
        if args[0] == "exec":  # what a started Ceph host and controller answer
            return {"ceph": "data:1 {0=dev-ceph-01=up:active}\n",
                    "scontrol": "Slurmctld(primary) at dev-controller is UP\n"}.get(args[4], "")
        return super().run(args, check)


def test_a_host_restart_brings_the_machines_back_with_their_disks_storage_and_controllers_first(
        tmp_path: Path) -> None:
    """A cold start (podman lists the fixed hosts running, their processes are gone): each is
    started again, not made again - its disk, with everything the rollout put there, is kept, so
    the rollout after has nothing to do - the Ceph hosts first, until their file system has an
    active MDS, then the controllers, until slurmctld answers, then the others, which find /data
    and a slurmctld to fetch their configs from at their first try."""
    spec = load_spec(LOCAL)
    provider = LocalProvider(spec, "img", state_root=tmp_path, join_program=tmp_path / "join.sh")
    hosts = fixed_hosts(provider.hosts())
    dead = [ContainerInfo(h.name, "running", 2 ** 22 + 1, provider.container(h, provider.hosts()).all_labels(),
                          "img", id="0" * 64) for h in hosts]
    podman = Restarted(spec.target.subnet, dead)  # type: ignore[union-attr]
    provider.podman = podman  # type: ignore[assignment]
    provider.wait_booted = lambda names, timeout=120: None  # type: ignore[method-assign]
    provider.provision()
    assert not [c for c in podman.calls if c[0] in ("run", "rm")], podman.calls  # nothing made again
    steps = [c[0] if c[0] != "exec" else c[4] for c in podman.calls]
    starts = [c[1] for c in podman.calls if c[0] == "start"]
    assert set(starts) == {h.name for h in hosts}
    roles = {h.name: h.role for h in hosts}
    ceph_at, controllers_at = steps.index("ceph"), steps.index("scontrol")
    before = starts[:sum(1 for s in steps[:ceph_at] if s == "start")]
    between = starts[len(before):sum(1 for s in steps[:controllers_at] if s == "start")]
    assert {roles[n] for n in before} == {HostRole.CEPH}, steps
    assert {roles[n] for n in between} == {HostRole.CONTROLLER}, steps
    assert {roles[n] for n in starts[len(before) + len(between):]} == {HostRole.LOGIN, HostRole.COMPUTE}


def test_a_container_whose_processes_died_starts_again_with_its_disk() -> None:
    """podman itself: a container whose processes and conmon were killed (what a host restart
    or a machine restore leaves) lists as running and runs nothing, `start` or not; `revive` makes podman
    record it exited, and it starts with the file written before."""
    from slurmforge.local.podman import Podman
    from tests.harness.faults import kill_machines
    from tests.judge import node_image

    podman = Podman()
    name = f"slurmforge-revive-{os.getpid()}"
    subprocess.run(["podman", "run", "-d", "--name", name, node_image(), "sleep", "infinity"], check=True,
                   capture_output=True, timeout=120)
    try:
        subprocess.run(["podman", "exec", name, "sh", "-c", "echo kept > /root/disk"], check=True, timeout=60)
        kill_machines(podman, [name])
        info = podman.container(name)
        assert info is not None and info.is_dead
        subprocess.run(["podman", "start", name], capture_output=True, timeout=60)  # "running": nothing to do
        assert subprocess.run(["podman", "exec", name, "true"], capture_output=True, timeout=60).returncode != 0
        revived = podman.revive(info)
        assert revived is not None and revived.state in ("exited", "stopped")
        podman.run(["start", name])
        assert podman.run(["exec", name, "cat", "/root/disk"]).strip() == "kept"
    finally:
        podman.remove_container(name)
