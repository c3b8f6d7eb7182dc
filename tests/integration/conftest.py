"""The real local cluster, brought up once per test session by the same code path as
`slurmforge up --local` (the node image is cached between runs by content hash)."""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmforge.errors import ProvisionError, SlurmforgeError
from slurmforge.local.up import UpReport, up
from slurmforge.rollout import Progress
from slurmforge.spec import Cluster, load_spec
from tests.harness.live import LiveCluster, wait_until

ROOT = Path(__file__).resolve().parents[2]
# SLURMFORGE_TEST_SPEC: another local spec (its own name and subnet) so a second cluster can
# be tested on the same machine while the default one is in use
SPEC = Path(os.environ.get("SLURMFORGE_TEST_SPEC") or ROOT / "examples" / "local.yaml")


class QuietPhases:
    """The `up` phase sink, printing one line per phase (pytest -s shows them)."""

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        print(f"[up] {name}", flush=True)
        yield

    def event(self, progress: Progress) -> None:
        pass

    def note(self, text: str) -> None:
        print(text)


@dataclass
class Cluster_:
    spec: Cluster
    report: UpReport

    def run(self, node: str, command: str, user: str | None = None, timeout: int = 120,
            tty: bool = False) -> subprocess.CompletedProcess[str]:
        argv = ["podman", "exec", *(["-t"] if tty else []), *(["-u", user] if user else [])]
        if user:
            argv += ["-w", f"/home/{user}"]
        argv += [node, "timeout", str(timeout), "bash", "-lc", command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 20)

    def rolled_out_hosts(self) -> list[str]:
        """The hosts a rollout reaches: not the dynamic nodes, which join by themselves."""
        from slurmforge.bringup import fixed_hosts
        from slurmforge.inventory import read_inventory

        return [h.name for h in fixed_hosts(read_inventory(self.report.inventory)[1])]

    def image(self) -> str:
        """The node image this cluster runs (for throwaway containers in tests)."""
        return subprocess.run(["podman", "inspect", self.report.login, "--format", "{{.ImageName}}"],
                              capture_output=True, text=True, check=True).stdout.strip()

    def login(self, command: str, user: str = "alice", **kw: object) -> subprocess.CompletedProcess[str]:
        return self.run(self.report.login, command, user=user, **kw)  # type: ignore[arg-type]

    def live(self, user: str = "alice") -> LiveCluster:
        """The same cluster for the helpers the benches share (tests.harness.live)."""
        from slurmforge.inventory import read_inventory

        return LiveCluster.of(self.spec, read_inventory(self.report.inventory)[1], user=user)


BENCHES = Path(__file__).with_name("test_bench_quick.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The benches' quick modes run after the suite's own tests: they stop slurmctld, kill a
    node's machine and stop an OSD (each restored), and the other tests expect a cluster
    nobody has just faulted. The order of everything else is kept."""
    items.sort(key=lambda item: item.path == BENCHES)


def _usable() -> str | None:
    if os.geteuid() != 0:
        return "the local cluster needs root"
    if shutil.which("podman") is None:
        return "podman is not installed (make setup)"
    return None


@pytest.fixture(scope="session")
def cluster() -> Cluster_:
    reason = _usable()
    if reason:
        pytest.skip(reason)
    try:
        report = up(SPEC, QuietPhases(), run_sample_job=False)
    except SlurmforgeError as exc:
        # a cluster that does not come up fails every live test after waiting out its timeout:
        # stop the session now, with the reason (up's own: which daemon, which node)
        pytest.exit(f"the live cluster did not come up: {exc}", returncode=3)
    return Cluster_(load_spec(SPEC), report)


@pytest.fixture(scope="session")
def running_inventory(request: pytest.FixtureRequest) -> Path:
    """The running cluster's inventory, for tests that only read the cluster:
    SLURMFORGE_TEST_INVENTORY names one a checkout elsewhere brought up (its nodes are left
    as they are: `up` from this checkout would make them again for its own paths), else the
    `cluster` fixture's."""
    given = os.environ.get("SLURMFORGE_TEST_INVENTORY")
    if given:
        return Path(given)
    return Path(request.getfixturevalue("cluster").report.inventory)


def empty_queue(live: LiveCluster, after: str) -> None:
    """Cancel every job in the queue, with a warning naming them and `after` whom they were
    left; wait until they have left it."""
    listed = "squeue -h -o '%i %u %T %N' 2>/dev/null || true"
    try:
        left = [line.split() for line in live.root(listed).splitlines() if line.strip()]
        if not left:
            return
        live.root(f"scancel {' '.join(row[0] for row in left)} || true")
        warnings.warn(f"{after} left job(s) in the queue, cancelled: " + "; ".join(" ".join(row) for row in left),
                      stacklevel=1)
        wait_until(lambda: not live.root(listed).strip(), 60, "the cancelled jobs to leave the queue", every=1)
    except ProvisionError as exc:  # a controller a test left down: the next test says so itself
        warnings.warn(f"after {after}: could not empty the queue: {exc}", stacklevel=1)


@pytest.fixture(scope="session")
def queue_empty_at_start(cluster: Cluster_) -> None:
    """Jobs an earlier run left (a run killed half-way, a machine restored with jobs queued)
    cancelled once, before the first live test."""
    empty_queue(cluster.live(), "an earlier run")


@pytest.fixture(autouse=True)
def no_job_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every live test leaves the queue as it found it: empty. A test that failed half-way
    (or forgot a job) has its jobs cancelled here, with a warning naming them, so the next
    test does not wait behind them for a node (a 30-minute job held the static node every
    later test needs, and ten tests failed behind one)."""
    uses_cluster = "cluster" in request.fixturenames
    if uses_cluster:
        request.getfixturevalue("queue_empty_at_start")
    yield
    if uses_cluster:
        empty_queue(request.getfixturevalue("cluster").live(), request.node.nodeid)
