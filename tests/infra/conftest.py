"""The live-cluster validation suite: testinfra checks usable against any slurmforge
inventory (`slurmforge validate --inventory DIR`, or pytest tests/infra --inventory DIR)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra

from slurmforge.hosts import Host, HostRole
from slurmforge.render import controller_name
from slurmforge.spec import Cluster


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--inventory", action="store", default=None, help="a slurmforge inventory directory")


def backend_url(host: Host) -> str:
    """podman exec for local containers (fastest), ssh for everything else."""
    if "slurmforge_container" in host.connection:
        return f"podman://{host.connection['slurmforge_container']}"
    user = host.connection.get("ansible_user", "root")
    return f"ssh://{user}@{host.address}"


@dataclass
class LiveCluster:
    spec: Cluster
    hosts: list[Host]

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
        return testinfra.get_host(backend_url(host))


@pytest.fixture(scope="session")
def live(request: pytest.FixtureRequest) -> LiveCluster:
    from slurmforge.inventory import read_inventory

    inventory = request.config.getoption("--inventory")
    if not inventory:
        pytest.skip("no --inventory given: the live-cluster suite needs a running cluster")
    spec, hosts = read_inventory(Path(inventory))
    return LiveCluster(spec, hosts)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
