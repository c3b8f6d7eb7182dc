"""The local provider the scheduler service uses inside the controller: podman's REST API
over a unix socket (here a stub server on a real socket that records every call), the
fail-pools switch, settings checks (the venv's requirements: tests/unit/test_contract.py)."""

from __future__ import annotations

import json
import re
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from slurmforge.errors import ProvisionError
from slurmforge.hosts import TAG_LINK
from slurmforge.local.api import PodmanApi
from slurmforge.providers.base import CapacityError, Instance, InstanceState, LaunchRequest, Provisioner
from slurmforge.providers.local import PoolMachines, service_provider
from slurmforge.service.main import build_provider
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SPEC = load_spec(ROOT / "examples" / "local.yaml")


def container(name: str, running: bool, pool: str | None = None) -> dict[str, Any]:
    labels = {"slurmforge.cluster": "dev", "slurmforge.address": "10.89.7.20"}
    if pool:
        labels |= {"slurmforge.pool": pool, "slurmforge.dynamic": "True"}
    return {"Names": [name], "State": "running" if running else "exited", "Pid": 42 if running else 0,
            "Labels": labels, "Image": "img"}


class FakePodman:
    """The few libpod endpoints the provider calls; `calls` keeps (method, path, query)."""

    def __init__(self) -> None:
        self.containers = {c["Names"][0]: c for c in (
            container("dev-controller", True), container("dev-cpu-01", True, "cpu"),
            container("dev-cpu-03", False, "cpu"), container("dev-cpu-04", False, "cpu"))}
        self.calls: list[tuple[str, str, dict[str, list[str]]]] = []

    def handle(self, method: str, url: str) -> tuple[int, Any]:
        parsed = urlparse(url)
        path, query = parsed.path.removeprefix("/v4.0.0/libpod"), parse_qs(parsed.query)
        self.calls.append((method, path, query))
        if path == "/containers/json":
            label = json.loads(query["filters"][0])["label"][0]
            key, _, value = label.partition("=")
            return 200, [c for c in self.containers.values() if c["Labels"].get(key) == value]
        match = re.fullmatch(r"/containers/([^/]+)/(start|stop)", path)
        if match and method == "POST":
            c = self.containers.get(match[1])
            if c is None:
                return 404, {"message": f"no container with name or ID {match[1]!r} found"}
            running = match[2] == "start"
            if (c["State"] == "running") == running:
                return 304, None
            c["State"], c["Pid"] = ("running", 42) if running else ("exited", 0)
            return 204, None
        return 404, {"message": "not found"}


@pytest.fixture
def podman(tmp_path: Path) -> Iterator[tuple[FakePodman, str]]:
    fake = FakePodman()

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            status, body = fake.handle(self.command, self.path)
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _any

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


def test_lists_only_pool_containers(podman: tuple[FakePodman, str]) -> None:
    fake, path = podman
    found = {i.node: i for i in PoolMachines(SPEC, PodmanApi(path)).list_instances()}
    assert set(found) == {"dev-cpu-01", "dev-cpu-03", "dev-cpu-04"}
    assert found["dev-cpu-01"].state is InstanceState.RUNNING and found["dev-cpu-03"].state is InstanceState.STOPPED
    assert fake.calls[0][2]["all"] == ["true"]


def test_start_is_idempotent_and_names_the_link(podman: tuple[FakePodman, str]) -> None:
    fake, path = podman
    provider = PoolMachines(SPEC, PodmanApi(path))
    request = LaunchRequest("cpu", ("dev-cpu-03",), "tok-1", link="cpu-fallback")
    first = provider.start(request)
    again = provider.start(request)  # a retried token after a crash: no second machine, no error
    assert set(first.launched) == set(again.launched) == {"dev-cpu-03"} and not first.failed
    assert first.launched["dev-cpu-03"].tags[TAG_LINK] == "cpu-fallback"
    starts = [c for c in fake.calls if c[:2] == ("POST", "/containers/dev-cpu-03/start")]
    assert len(starts) == 2 and fake.containers["dev-cpu-03"]["State"] == "running"


def test_unknown_node_fails_without_a_call(podman: tuple[FakePodman, str]) -> None:
    fake, path = podman
    result = PoolMachines(SPEC, PodmanApi(path)).start(LaunchRequest("cpu", ("dev-cpu-09",), "t"))
    assert result.failed == {"dev-cpu-09": "NoSuchNode"}
    assert not [c for c in fake.calls if c[0] == "POST"]


def test_failing_pool_refuses_launches_with_capacity_error(podman: tuple[FakePodman, str], tmp_path: Path) -> None:
    fake, path = podman
    fail_file = tmp_path / "fail-pools"
    provider = PoolMachines(SPEC, PodmanApi(path), fail_pools_file=fail_file)
    fail_file.write_text("cpu\n")
    refused = provider.start(LaunchRequest("cpu", ("dev-cpu-03", "dev-cpu-04"), "t1"))
    assert refused.failed == dict.fromkeys(("dev-cpu-03", "dev-cpu-04"), CapacityError.INSUFFICIENT_INSTANCE_CAPACITY)
    assert CapacityError.is_capacity(refused.failed["dev-cpu-03"])
    assert not [c for c in fake.calls if c[0] == "POST"]
    # the fallback link is not told to fail: the same nodes start there
    moved = provider.start(LaunchRequest("cpu", ("dev-cpu-03",), "t2", link="cpu-fallback"))
    assert set(moved.launched) == {"dev-cpu-03"}
    fail_file.unlink()  # re-read on every launch
    assert set(provider.start(LaunchRequest("cpu", ("dev-cpu-04",), "t3")).launched) == {"dev-cpu-04"}


def test_terminate_stops_containers_and_tolerates_a_stopped_or_missing_one(podman: tuple[FakePodman, str]) -> None:
    fake, path = podman
    doomed = [Instance(n, n, "cpu", InstanceState.RUNNING) for n in ("dev-cpu-01", "dev-cpu-04", "dev-cpu-09")]
    PoolMachines(SPEC, PodmanApi(path)).terminate([*doomed, Instance("orphan", None, None, InstanceState.RUNNING)])
    assert fake.containers["dev-cpu-01"]["State"] == "exited"
    assert [c[1] for c in fake.calls] == ["/containers/dev-cpu-01/stop", "/containers/dev-cpu-04/stop",
                                          "/containers/dev-cpu-09/stop"]
    assert fake.calls[0][2]["timeout"] == ["10"]


def test_unreachable_socket_is_a_provision_error(tmp_path: Path) -> None:
    api = PodmanApi(str(tmp_path / "nothing.sock"), timeout=1)
    assert not api.ping()
    with pytest.raises(ProvisionError, match="podman API"):
        api.containers("slurmforge.cluster=dev")


def test_service_provider_from_settings(tmp_path: Path) -> None:
    provider = build_provider(SPEC, {"socket": str(tmp_path / "s.sock"), "fail_pools": ["cpu"],
                                     "fail_pools_file": ""})
    assert isinstance(provider, PoolMachines) and provider.failing_pools() == {"cpu"}
    with pytest.raises(ProvisionError, match="fail_pools"):
        service_provider(SPEC, {"fail_pools": "cpu"})
    with pytest.raises(ProvisionError, match="unknown key 'fail_pool_file'"):  # a typo is no silent default
        service_provider(SPEC, {"fail_pool_file": "/tmp/x"})
    assert not isinstance(provider, Provisioner)  # the service never makes or removes the cluster's hosts

