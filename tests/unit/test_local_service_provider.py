"""The local provider the scheduler service uses inside the controller: podman's REST API
over a unix socket (here a stub server on a real socket that records every call), fresh
containers made and removed like instances, the fail-pools switch, settings checks (the
venv's requirements: tests/unit/test_contract.py)."""

from __future__ import annotations

import json
import re
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from slurmforge.contract import JOIN_PROGRAM, JOIN_SECRETS_DIR, LocalProviderSettings, settings_json
from slurmforge.errors import ProvisionError
from slurmforge.hosts import TAG_LINK, TAG_TOKEN
from slurmforge.local.api import PodmanApi
from slurmforge.local.container import compute_container
from slurmforge.local.provider import STOP_GRACE, PoolMachines, service_provider
from slurmforge.provider import CapacityError, Instance, InstanceState, LaunchRequest, Provisioner, build_provider
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SPEC = load_spec(ROOT / "examples" / "local.yaml")


SETTINGS = LocalProviderSettings(
    image="localhost/slurmforge/node:t1", network="slurmforge-dev",
    addresses={"dev-cpu-01": "10.89.7.13", "dev-cpu-03": "10.89.7.15", "dev-cpu-04": "10.89.7.16"},
    nas={"/home": "/var/lib/slurmforge/dev/nas/home"}, ssh_key="/var/lib/slurmforge/dev/secrets/id_ed25519.pub",
    join_program="/repo/inventories/dev/rendered/join.sh", munge_key="/var/lib/slurmforge/dev/secrets/munge.key")


def container(name: str, running: bool, pool: str | None = None, ident: str = "") -> dict[str, Any]:
    labels = {"slurmforge.cluster": "dev", "slurmforge.address": "10.89.7.20"}
    if pool:
        labels |= {"slurmforge.pool": pool, "slurmforge.dynamic": "True"}
    return {"Id": ident or f"id-{name}", "Names": [name], "State": "running" if running else "exited",
            "Pid": 42 if running else 0, "Labels": labels, "Image": "img"}


class FakePodman:
    """The few libpod endpoints the provider calls, on containers by name or id; `calls`
    keeps (method, path, query), `bodies` what was created. `fail_start`: nodes whose start
    fails (HTTP 500)."""

    def __init__(self) -> None:
        self.containers = {c["Names"][0]: c for c in (
            container("dev-controller", True), container("dev-cpu-01", True, "cpu"),
            container("dev-cpu-03", False, "cpu"))}
        self.calls: list[tuple[str, str, dict[str, list[str]]]] = []
        self.bodies: list[dict[str, Any]] = []
        self.fail_start: set[str] = set()
        self.made = 0

    def find(self, ref: str) -> dict[str, Any] | None:
        return self.containers.get(ref) or next((c for c in self.containers.values() if c["Id"] == ref), None)

    def handle(self, method: str, url: str, body: bytes) -> tuple[int, Any]:
        parsed = urlparse(url)
        path, query = parsed.path.removeprefix("/v4.0.0/libpod"), parse_qs(parsed.query)
        self.calls.append((method, path, query))
        if path == "/containers/json":
            label = json.loads(query["filters"][0])["label"][0]
            key, _, value = label.partition("=")
            return 200, [c for c in self.containers.values() if c["Labels"].get(key) == value]
        if path == "/containers/create" and method == "POST":
            spec = json.loads(body)
            if spec["name"] in self.containers:
                return 500, {"message": f"the container name {spec['name']!r} is already in use"}
            self.bodies.append(spec)
            self.made += 1
            self.containers[spec["name"]] = {"Id": f"new-{self.made}", "Names": [spec["name"]], "State": "created",
                                             "Pid": 0, "Labels": spec["labels"], "Image": spec["image"]}
            return 201, {"Id": f"new-{self.made}", "Warnings": []}
        match = re.fullmatch(r"/containers/([^/]+)(/start|/stop)?", path)
        c = self.find(match[1]) if match else None
        if match is None:
            return 404, {"message": "not found"}
        if c is None:
            return 404, {"message": f"no container with name or ID {match[1]!r} found"}
        if method == "DELETE":
            del self.containers[c["Names"][0]]
            return 200, [{"Id": c["Id"]}]
        if match[2] == "/start" and c["Names"][0] in self.fail_start:
            return 500, {"message": "crun: cannot start"}
        running = match[2] == "/start"
        if (c["State"] == "running") == running:
            return 304, None
        c["State"], c["Pid"] = ("running", 42) if running else ("exited", 0)
        return 204, None


@pytest.fixture
def podman(tmp_path: Path) -> Iterator[tuple[FakePodman, str]]:
    fake = FakePodman()

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            sent = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, body = fake.handle(self.command, self.path, sent)
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _any

        def log_message(self, *args: Any) -> None:
            pass

    path = str(tmp_path / "podman.sock")
    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    # BaseHTTPRequestHandler wants a (host, port) client address
    server.get_request = lambda: (server.socket.accept()[0], ("local", 0))  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield fake, path
    server.shutdown()
    server.server_close()


def machines(path: str, fail_pools_file: Path | None = None) -> PoolMachines:
    return PoolMachines(SPEC, PodmanApi(path), SETTINGS, fail_pools_file)


def test_lists_only_pool_containers_by_container_id(podman: tuple[FakePodman, str]) -> None:
    fake, path = podman
    found = {i.node: i for i in machines(path).list_instances()}
    assert set(found) == {"dev-cpu-01", "dev-cpu-03"}
    assert found["dev-cpu-01"].state is InstanceState.RUNNING and found["dev-cpu-03"].state is InstanceState.STOPPED
    assert found["dev-cpu-01"].id == "id-dev-cpu-01"
    assert fake.calls[0][2]["all"] == ["true"]


def test_a_launch_makes_a_fresh_container_that_joins_at_boot(podman: tuple[FakePodman, str]) -> None:
    """What is left of the node's last machine (stopped) goes; the new one is the description
    `up` would make, with the join program and the munge key: it joins by itself."""
    fake, path = podman
    result = machines(path).start(LaunchRequest("cpu", ("dev-cpu-03", "dev-cpu-04"), "tok-1", link="cpu-fallback"))
    assert set(result.launched) == {"dev-cpu-03", "dev-cpu-04"} and not result.failed
    assert [b["name"] for b in fake.bodies] == ["dev-cpu-03", "dev-cpu-04"]
    described = compute_container(SPEC, SETTINGS, "dev-cpu-03").create_body()
    described["labels"] |= {TAG_TOKEN: "tok-1", TAG_LINK: "cpu-fallback"}  # which launch made it, on which link
    assert fake.bodies[0] == json.loads(json.dumps(described))
    mounts = {m["destination"]: m for m in fake.bodies[0]["mounts"]}
    assert mounts[JOIN_PROGRAM] == {"destination": JOIN_PROGRAM, "source": SETTINGS.join_program, "type": "bind",
                                    "options": ["rbind", "ro"]}
    assert mounts[f"{JOIN_SECRETS_DIR}/munge.key"]["source"] == SETTINGS.munge_key
    assert ("DELETE", "/containers/id-dev-cpu-03", {"force": ["true"]}) in fake.calls  # the old machine
    first = result.launched["dev-cpu-03"]
    assert first.id == "new-1" and first.address == "10.89.7.15" and first.tags[TAG_LINK] == "cpu-fallback"
    assert first.launched_at is not None
    assert fake.containers["dev-cpu-03"]["State"] == "running" and fake.containers["dev-cpu-03"]["Id"] == "new-1"


def test_a_retried_launch_makes_no_second_machine(podman: tuple[FakePodman, str]) -> None:
    fake, path = podman
    provider = machines(path)
    request = LaunchRequest("cpu", ("dev-cpu-04",), "tok-1")
    first = provider.start(request)
    again = provider.start(request)  # a retried token after a crash: the machine runs already
    assert first.launched["dev-cpu-04"].id == again.launched["dev-cpu-04"].id == "new-1"
    assert len(fake.bodies) == 1 and not again.failed


def test_a_running_machine_of_another_launch_is_replaced(podman: tuple[FakePodman, str]) -> None:
    """The service launches for a node whose machine it released as stale (started before the
    node's power-up or a takeover): what runs there is not this launch's and goes."""
    fake, path = podman
    provider = machines(path)
    provider.start(LaunchRequest("cpu", ("dev-cpu-04",), "tok-1"))
    again = provider.start(LaunchRequest("cpu", ("dev-cpu-04",), "tok-2"))
    assert again.launched["dev-cpu-04"].id == "new-2" and len(fake.bodies) == 2
    assert ("DELETE", "/containers/new-1", {"force": ["true"]}) in fake.calls


def test_a_machine_that_does_not_start_is_removed_and_the_launch_fails(podman: tuple[FakePodman, str]) -> None:
    fake, path = podman
    fake.fail_start.add("dev-cpu-04")
    result = machines(path).start(LaunchRequest("cpu", ("dev-cpu-04",), "t"))
    assert result.failed == {"dev-cpu-04": "NodeStartFailed"} and not result.launched
    assert "dev-cpu-04" not in fake.containers


def test_unknown_node_fails_without_a_call(podman: tuple[FakePodman, str]) -> None:
    fake, path = podman
    result = machines(path).start(LaunchRequest("cpu", ("dev-cpu-09",), "t"))
    assert result.failed == {"dev-cpu-09": "NoSuchNode"}
    assert not [c for c in fake.calls if c[0] != "GET"]


def test_failing_pool_refuses_launches_with_capacity_error(podman: tuple[FakePodman, str], tmp_path: Path) -> None:
    fake, path = podman
    fail_file = tmp_path / "fail-pools"
    provider = machines(path, fail_file)
    fail_file.write_text("cpu\n")
    refused = provider.start(LaunchRequest("cpu", ("dev-cpu-03", "dev-cpu-04"), "t1"))
    assert refused.failed == dict.fromkeys(("dev-cpu-03", "dev-cpu-04"), CapacityError.INSUFFICIENT_INSTANCE_CAPACITY)
    assert CapacityError.includes(refused.failed["dev-cpu-03"])
    assert not [c for c in fake.calls if c[0] != "GET"]
    # the fallback link is not told to fail: the same nodes start there
    moved = provider.start(LaunchRequest("cpu", ("dev-cpu-03",), "t2", link="cpu-fallback"))
    assert set(moved.launched) == {"dev-cpu-03"}
    fail_file.unlink()  # re-read on every launch
    assert set(provider.start(LaunchRequest("cpu", ("dev-cpu-04",), "t3")).launched) == {"dev-cpu-04"}


def test_notices_reach_machines_on_a_spot_link_only_and_leave_the_file_once_taken(
        podman: tuple[FakePodman, str], tmp_path: Path) -> None:
    """The interrupt file names nodes; a notice is given for a node whose machine runs on a
    spot link (cpu-spot), none for one launched on its on-demand fallback link or without a
    machine; the service's acknowledgement takes the names out of the file."""
    fake, path = podman
    notices = tmp_path / "interrupt"
    settings = replace(SETTINGS, addresses={**SETTINGS.addresses, "dev-cpu-spot-01": "10.89.7.30",
                                            "dev-cpu-spot-02": "10.89.7.31"})
    provider = PoolMachines(SPEC, PodmanApi(path), settings, None, notices)
    assert provider.interruptions() == []  # no file: no notice
    provider.start(LaunchRequest("cpu-spot", ("dev-cpu-spot-01",), "tok-1", link="cpu-spot"))
    provider.start(LaunchRequest("cpu-spot", ("dev-cpu-spot-02",), "tok-2", link="cpu-fallback"))
    notices.write_text("dev-cpu-spot-01\ndev-cpu-spot-02\ndev-cpu-03\n")
    given = provider.interruptions()
    assert [(n.instance, n.receipt) for n in given] == [(fake.containers["dev-cpu-spot-01"]["Id"], "dev-cpu-spot-01")]
    assert notices.read_text() == "dev-cpu-spot-01\n"  # the others dropped (no spot machine)
    provider.acknowledge(given)
    assert notices.read_text() == "" and provider.interruptions() == []


def test_terminate_stops_and_removes_and_never_reaches_the_replacement(podman: tuple[FakePodman, str]) -> None:
    """An instance is its container's id: terminating a node's old machine (a static node's,
    confirmed loops after its replacement started under the same name) removes nothing."""
    fake, path = podman
    provider = machines(path)
    old = Instance("id-dev-cpu-01", "dev-cpu-01", "cpu", InstanceState.RUNNING)
    provider.terminate([old, Instance("id-gone", "dev-cpu-09", "cpu", InstanceState.RUNNING)])
    assert "dev-cpu-01" not in fake.containers
    assert [c[:2] for c in fake.calls] == [("POST", "/containers/id-dev-cpu-01/stop"),
                                           ("DELETE", "/containers/id-dev-cpu-01"),
                                           ("POST", "/containers/id-gone/stop"), ("DELETE", "/containers/id-gone")]
    assert fake.calls[0][2]["timeout"] == [str(STOP_GRACE)]
    new = provider.start(LaunchRequest("cpu", ("dev-cpu-01",), "t")).launched["dev-cpu-01"]
    provider.terminate([old])
    assert fake.containers["dev-cpu-01"]["Id"] == new.id and fake.containers["dev-cpu-01"]["State"] == "running"


def test_a_terminated_machine_stays_listed_terminated_for_an_hour(podman: tuple[FakePodman, str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """As EC2 lists a terminated instance: the service knows at its next loop that the machine
    is gone (not after missing_grace), beside the node's new machine; an hour later it is gone."""
    import slurmforge.local.provider as local_provider

    _, path = podman
    provider = machines(path)
    old = provider.start(LaunchRequest("cpu", ("dev-cpu-01",), "t1")).launched["dev-cpu-01"]
    provider.terminate([old])

    def listed() -> set[tuple[str, InstanceState]]:
        return {(i.id, i.state) for i in provider.list_instances() if i.node == "dev-cpu-01"}

    assert listed() == {(old.id, InstanceState.TERMINATED)}
    new = provider.start(LaunchRequest("cpu", ("dev-cpu-01",), "t2")).launched["dev-cpu-01"]
    assert listed() == {(old.id, InstanceState.TERMINATED), (new.id, InstanceState.RUNNING)}
    clock = local_provider.time.time() + local_provider.TERMINATED_LISTED + 1
    monkeypatch.setattr(local_provider.time, "time", lambda: clock)
    assert listed() == {(new.id, InstanceState.RUNNING)}


def test_unreachable_socket_is_a_provision_error(tmp_path: Path) -> None:
    api = PodmanApi(str(tmp_path / "nothing.sock"), timeout=1)
    assert not api.ping()
    with pytest.raises(ProvisionError, match="podman API"):
        api.containers("slurmforge.cluster=dev")


def test_service_provider_from_settings(tmp_path: Path) -> None:
    written = settings_json(SETTINGS) | {"socket": str(tmp_path / "s.sock"), "fail_pools": ["cpu"],
                                         "fail_pools_file": ""}
    provider = build_provider(SPEC, written)
    assert isinstance(provider, PoolMachines) and provider.failing_pools() == {"cpu"}
    assert provider.settings == replace(SETTINGS, socket=str(tmp_path / "s.sock"), fail_pools=("cpu",),
                                        fail_pools_file="")
    with pytest.raises(ProvisionError, match="fail_pools"):
        service_provider(SPEC, settings_json(SETTINGS) | {"fail_pools": "cpu"})
    with pytest.raises(ProvisionError, match="unknown key 'fail_pool_file'"):  # a typo is no silent default
        service_provider(SPEC, settings_json(SETTINGS) | {"fail_pool_file": "/tmp/x"})
    with pytest.raises(ProvisionError, match="missing key 'image'"):  # what only `up` knows
        service_provider(SPEC, {})
    assert not isinstance(provider, Provisioner)  # the service never makes or removes the cluster's hosts



class BrokenService:
    """The host's podman API service as it was found after hours of runs: it answers pings,
    and every container start fails until a new service replaces it."""

    def __init__(self) -> None:
        self.running, self.broken, self.started = True, True, 0
        self.killed: list[list[str]] = []

    def request(self, method: str, path: str, query: dict[str, str] | None = None,
                body: dict[str, object] | None = None) -> tuple[int, bytes]:
        if path == "/_ping":
            return (200, b"OK") if self.running else (503, b"")
        if path.endswith("/start"):
            return (500, b'{"message": "write child: broken pipe"}') if self.broken else (204, b"")
        return (201, b'{"Id": "probe"}') if path == "/containers/create" else (204, b"")


def test_an_api_service_that_cannot_start_containers_is_replaced(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from slurmforge.local import api

    service = BrokenService()
    monkeypatch.setattr(api.PodmanApi, "request", lambda self, *a, **k: service.request(*a, **k))

    def pkill(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        service.killed.append(argv)
        service.running = False
        return subprocess.CompletedProcess(argv, 0, "", "")

    def popen(argv: list[str], **_: object) -> None:
        service.started += 1
        service.running, service.broken = True, False
        sock.touch()  # the new service's socket

    monkeypatch.setattr(api.subprocess, "run", pkill)
    monkeypatch.setattr(api.subprocess, "Popen", popen)
    monkeypatch.setattr(api.os, "chown", lambda *a: None)
    sock = tmp_path / "podman.sock"
    sock.touch()
    api.ensure_api_service(str(sock), probe_image="img")
    assert service.killed == [["pkill", "-f", f"podman system service .*unix://{sock}"]] and service.started == 1
    api.ensure_api_service(str(sock), probe_image="img")  # a working one is left alone
    assert service.started == 1 and len(service.killed) == 1
