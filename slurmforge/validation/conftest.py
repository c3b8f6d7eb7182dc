"""The live-cluster validation suite: testinfra checks usable against any slurmforge
inventory (`slurmforge validate --inventory DIR`, which runs pytest on this directory with
--inventory DIR)."""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import testinfra  # type: ignore[import-untyped]
import testinfra.host  # type: ignore[import-untyped]
from testinfra.backend.base import BaseBackend, CommandResult  # type: ignore[import-untyped]

from slurmforge.connection import becomes_root, close_control, container, ssh_argv
from slurmforge.hosts import Host, HostRole, controller_name
from slurmforge.spec import Cluster

SSH_TIMEOUT = 600
"""One command's limit (the slowest check's command takes seconds)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--inventory", action="store", default=None, help="a slurmforge inventory directory")


class InventorySsh(BaseBackend):  # type: ignore[misc]
    """testinfra over ssh exactly as the inventory reaches the host (slurmforge.connection:
    user, port, key, common args such as AWS's ProxyJump through the login node, become),
    one shared connection per host for the whole run."""

    NAME = "ssh"

    def __init__(self, host: Host, control_dir: Path | None) -> None:
        super().__init__(host.name, sudo=becomes_root(host))
        self.argv = ssh_argv(host, control_dir)

    def get_sudo_command(self, command: str, sudo_user: str | None) -> str:
        return str(self.quote("sudo -n /bin/sh -c %s", command))  # never wait for a password

    def command(self, command: str, *args: str) -> list[str]:
        """The local argument list that runs `command` (testinfra's %s quoting) on the host."""
        return [*self.argv, "--", self.get_command(command, *args)]

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        argv = self.command(command, *args)
        proc = subprocess.run(argv, capture_output=True, timeout=SSH_TIMEOUT, check=False)
        if proc.returncode == 255:  # ssh's own failure, not the command's
            raise RuntimeError(f"cannot reach {self.hostname} over ssh: {proc.stderr.decode(errors='replace')[-300:]}")
        return self.result(proc.returncode, self.encode(argv[-1]), proc.stdout, proc.stderr)


def connect(host: Host, control_dir: Path | None = None) -> testinfra.host.Host:
    """podman exec for a local container (fastest), ssh as the inventory says otherwise."""
    local = container(host)
    if local:
        return testinfra.get_host(f"podman://{local}")
    backend = InventorySsh(host, control_dir)
    node = testinfra.host.Host(backend)
    backend.set_host(node)
    return node


@dataclass
class LiveCluster:
    spec: Cluster
    hosts: list[Host]
    control_dir: Path | None = None
    """Where the ssh connections shared by the run's commands live."""

    @property
    def up_hosts(self) -> list[Host]:
        """Slurm hosts that are running now (dynamic pool nodes rest powered down);
        Ceph hosts are not Slurm nodes (see ceph_hosts)."""
        return [h for h in self.hosts if not h.dynamic and h.role is not HostRole.CEPH]

    @property
    def ceph_hosts(self) -> list[Host]:
        return [h for h in self.hosts if h.role is HostRole.CEPH]

    def by_role(self, role: HostRole) -> list[Host]:
        return [h for h in self.up_hosts if h.role is role]

    def controller(self) -> testinfra.host.Host:
        return self.connect(next(h for h in self.hosts if h.name == controller_name(self.spec)))

    def connect(self, host: Host) -> testinfra.host.Host:
        return connect(host, self.control_dir)


@pytest.fixture(scope="session")
def live(request: pytest.FixtureRequest) -> Iterator[LiveCluster]:
    from slurmforge.inventory import read_inventory

    inventory = request.config.getoption("--inventory")
    if not inventory:
        pytest.skip("no --inventory given: the live-cluster suite needs a running cluster")
    spec, hosts = read_inventory(Path(inventory))
    with tempfile.TemporaryDirectory(prefix="sf-ssh-") as control:
        yield LiveCluster(spec, hosts, Path(control))
        for host in hosts:  # end the shared connections this run opened
            if not container(host):
                subprocess.run(close_control(ssh_argv(host, Path(control))), capture_output=True, check=False)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
