"""A small client of podman's REST API over its unix socket (standard library only).

The scheduler service runs inside the controller container and makes and removes pool
node containers through the host's API socket, bind-mounted into the controller (`podman
system service`, started by `slurmforge up --local`). Plain http.client over AF_UNIX is
enough for the calls it makes (list, create, start, stop, remove), so the service's venv
needs no podman package.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from slurmforge.contract import PODMAN_API_SOCKET, SERVICE_GID
from slurmforge.errors import ProvisionError
from slurmforge.local.podman import ContainerInfo

log = logging.getLogger(__name__)

API = "/v4.0.0/libpod"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


class PodmanApi:
    def __init__(self, socket_path: str, timeout: float = 60) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def request(self, method: str, path: str, query: dict[str, str] | None = None,
                body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        url = API + path + (f"?{urlencode(query)}" if query else "")
        conn = _UnixConnection(self.socket_path, self.timeout)
        try:
            if body is None:
                conn.request(method, url)
            else:
                conn.request(method, url, json.dumps(body).encode(), {"Content-Type": "application/json"})
            res = conn.getresponse()
            return res.status, res.read()
        except OSError as exc:
            raise ProvisionError(f"podman API at {self.socket_path}: {exc}") from None
        finally:
            conn.close()

    def ping(self) -> bool:
        try:
            status, _ = self.request("GET", "/_ping")
        except ProvisionError:
            return False
        return status == 200

    def containers(self, label: str) -> list[ContainerInfo]:
        status, body = self.request("GET", "/containers/json",
                                    {"all": "true", "filters": json.dumps({"label": [label]})})
        if status != 200:
            raise ProvisionError(f"podman API: listing containers gave HTTP {status}: {_message(body)}")
        return [_info(row) for row in json.loads(body or b"[]")]

    def create(self, body: dict[str, Any]) -> str:
        """Create a container (libpod's SpecGenerator, `NodeContainer.create_body`); its id."""
        status, answer = self.request("POST", "/containers/create", body=body)
        if status != 201:
            raise ProvisionError(f"podman API: create {body.get('name', '?')} gave HTTP {status}: {_message(answer)}")
        return str(json.loads(answer)["Id"])

    def remove(self, name: str) -> None:
        """Remove a container whatever its state (force); one that is gone is fine (404)."""
        status, body = self.request("DELETE", f"/containers/{quote(name)}", {"force": "true"})
        if status not in (200, 204, 404):
            raise ProvisionError(f"podman API: remove {name} gave HTTP {status}: {_message(body)}")

    def start(self, name: str) -> None:
        """Start a stopped container; one that already runs is fine (304)."""
        status, body = self.request("POST", f"/containers/{quote(name)}/start")
        if status not in (204, 304):
            raise ProvisionError(f"podman API: start {name} gave HTTP {status}: {_message(body)}")

    def stop(self, name: str, timeout: int = 10) -> None:
        status, body = self.request("POST", f"/containers/{quote(name)}/stop", {"timeout": str(timeout)})
        if status not in (204, 304, 404):
            raise ProvisionError(f"podman API: stop {name} gave HTTP {status}: {_message(body)}")


def _info(row: dict[str, Any]) -> ContainerInfo:
    names = row.get("Names") or [""]
    return ContainerInfo(names[0], str(row.get("State", "")).lower(), int(row.get("Pid") or 0),
                         row.get("Labels") or {}, row.get("Image", ""), str(row.get("Id", "")),
                         float(row.get("StartedAt") or 0))


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message", ""))[:200]
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace")


def ensure_api_service(socket_path: str = PODMAN_API_SOCKET, gid: int = SERVICE_GID, binary: str = "podman",
                       timeout: float = 20, probe_image: str | None = None) -> None:
    """Start `podman system service` on the host unless it answers already (a killed
    session leaves a dead socket file behind: it is replaced). Idempotent.

    `probe_image`: also start a throwaway container from it through the API. A service can
    answer every ping and list containers while every start fails ("write child: broken
    pipe", HTTP 500: seen on this machine after hours of runs), which leaves no pool node
    able to power up; such a service is replaced."""
    api = PodmanApi(socket_path, timeout=30)
    if api.ping() and probe_image is not None and (broken := _start_fails(api, probe_image)):
        log.warning("podman's API service answers but cannot start a container (%s): starting it again", broken)
        subprocess.run(["pkill", "-f", f"{binary} system service .*unix://{socket_path}"], check=False)
        _wait_gone(api, timeout)
    if not api.ping():
        path = Path(socket_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        log.info("starting podman's API service on %s", socket_path)
        try:
            subprocess.Popen([binary, "system", "service", "--time=0", f"unix://{socket_path}"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        except FileNotFoundError:
            raise ProvisionError("podman is not installed (apt-get install podman)") from None
        deadline = time.monotonic() + timeout
        while not api.ping():
            if time.monotonic() > deadline:
                raise ProvisionError(f"podman's API service did not answer on {socket_path} within {timeout:.0f} s")
            time.sleep(0.2)
        if probe_image is not None and (broken := _start_fails(api, probe_image)):
            raise ProvisionError(f"podman's API service on {socket_path} cannot start a container: {broken}")
    os.chown(socket_path, 0, gid)
    os.chmod(socket_path, 0o660)


def _start_fails(api: PodmanApi, image: str) -> str:
    """Why a throwaway container from `image` could not be started through the API ("" when
    it started)."""
    name = f"slurmforge-api-probe-{os.getpid()}"
    try:
        api.remove(name)
        api.create({"name": name, "image": image, "command": ["true"], "netns": {"nsmode": "none"}})
        api.start(name)
    except ProvisionError as exc:
        return str(exc)
    finally:
        with contextlib.suppress(ProvisionError):
            api.remove(name)
    return ""


def _wait_gone(api: PodmanApi, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while api.ping() and time.monotonic() < deadline:
        time.sleep(0.2)
