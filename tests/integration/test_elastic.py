"""Issue 5's proof on the real local cluster: the scheduler service in the controller
makes a fresh node container through the host's podman API when Slurm resumes a
powered-down node (it joins with the join program at boot; the service reports the join
share), falls back to the next link when the first has no capacity, survives a SIGKILL
mid-launch, removes the containers of idle nodes Slurm powers down, and serves a pool page
a real browser renders.

Node plan (examples/local.yaml): dev-cpu-03 resumes and later suspends, dev-cpu-04
starts on the fallback link, dev-cpu-fallback-01 is launched across a service crash.
The tests run in file order; the last one waits for dev-cpu-03's idle time to pass.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import tempfile
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from slurmforge.contract import FAIL_POOLS_FILE, SERVICE_BIN, SPOOL_DIR
from slurmforge.hosts import HostRole, controller_name
from slurmforge.inventory import read_inventory
from slurmforge.render import service_shared_dir
from slurmforge.service.main import DEFAULT_PORT
from tests.harness.live import node_state_command, wait_until
from tests.integration.conftest import Cluster_

pytestmark = pytest.mark.integration

SPOOL, FAIL_POOLS = SPOOL_DIR, FAIL_POOLS_FILE
LOOP_SECONDS = 10
COLD_START_BOUND = 15
RESUMED, FALLBACK, CRASHED = "dev-cpu-03", "dev-cpu-04", "dev-cpu-fallback-01"
_done: dict[str, float] = {}


def root(cluster: Cluster_, command: str, timeout: int = 60) -> str:
    res = cluster.run(controller_name(cluster.spec), command, timeout=timeout)
    assert res.returncode == 0, f"{command}: {res.stderr or res.stdout}"
    return res.stdout


def slurm_state(cluster: Cluster_, node: str) -> str:
    return root(cluster, node_state_command(node)).strip()


def job_state(cluster: Cluster_, job: str) -> str:
    state = root(cluster, f"squeue -h -j {job} -o %T 2>/dev/null || true").strip()
    return state or root(cluster, f"sacct -n -X -P -j {job} -o State").strip()


def container_running(node: str) -> bool:
    res = subprocess.run(["podman", "inspect", "-f", "{{.State.Running}}", node], capture_output=True, text=True)
    return res.stdout.strip() == "true"


def container_exists(node: str) -> bool:
    return subprocess.run(["podman", "container", "exists", node], capture_output=True).returncode == 0


def joined(cluster: Cluster_, node: str, since: float) -> str:
    """The service's `joined` event for `node`'s machine launched after `since`; "" when none."""
    return next((e["detail"] for e in events(cluster)
                 if e["kind"] == "joined" and e["at"] >= since and e["detail"].startswith(f"{node} ")), "")


def submit(cluster: Cluster_, node: str, seconds: int = 2) -> str:
    res = cluster.login(f"sbatch --parsable -w {node} -o el-%j.out --wrap 'hostname; sleep {seconds}'")
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0]


def wait_running(cluster: Cluster_, job: str, timeout: float = 45) -> float:
    """Seconds until the job left PENDING/CONFIGURING."""
    started = time.monotonic()
    wait_until(lambda: job_state(cluster, job) in ("RUNNING", "COMPLETING", "COMPLETED"), timeout,
               f"job {job} to run", every=0.2)
    return time.monotonic() - started


def controller_url(cluster: Cluster_, path: str = "/") -> str:
    _, hosts = read_inventory(cluster.report.inventory)
    address = next(h.address for h in hosts if h.role is HostRole.CONTROLLER)
    return f"http://{address}:{DEFAULT_PORT}{path}"


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as res:
        return str(res.read().decode())


def events(cluster: Cluster_) -> list[dict[str, Any]]:
    return list(json.loads(fetch(controller_url(cluster, "/pools.json")))["events"])


@pytest.fixture(scope="module", autouse=True)
def service(cluster: Cluster_) -> None:
    """The service answers; no pool is told to fail."""
    root(cluster, f"rm -f {FAIL_POOLS}")
    wait_until(lambda: root(cluster, "systemctl is-active slurmforge-service || true").strip() == "active", 30,
               "slurmforge-service")
    wait_until(lambda: _answers(controller_url(cluster, "/pools.json")), 30, "the pool page")


def _answers(url: str) -> bool:
    try:
        fetch(url)
    except OSError:
        return False
    return True


def test_job_starts_a_powered_down_node(cluster: Cluster_) -> None:
    wait_until(lambda: slurm_state(cluster, RESUMED).endswith("~") and not container_exists(RESUMED), 60,
               f"{RESUMED} powered down, without a container")
    since = time.time()
    job = submit(cluster, RESUMED)
    seconds = wait_running(cluster, job)
    print(f"\n{RESUMED}: powered down -> job {job} running in {seconds:.1f} s")
    assert container_running(RESUMED)
    # a fresh machine that joined by itself (the join program at boot), and how long that took
    share = wait_until(lambda: joined(cluster, RESUMED, since), 2 * LOOP_SECONDS + 5, f"{RESUMED}'s joined event",
                       every=1)
    print(share)
    assert "machine started -> slurmd started" in share
    wait_until(lambda: job_state(cluster, job) == "COMPLETED", 30, f"job {job} to complete")
    assert cluster.login(f"cat el-{job}.out").stdout.strip() == RESUMED
    # born from the image with what a rollout would have written: its daemons come back by
    # themselves (the restart drop-ins are in the image, no Ansible reached this machine)
    restart = subprocess.run(["podman", "exec", RESUMED, "systemctl", "show", "-p", "Restart", "--value",
                              "slurmd", "munge"], capture_output=True, text=True, check=True).stdout.split()
    assert restart == ["on-failure", "on-failure"], restart
    # the node registers ~2-4 s after Slurm allocates it; the PrologSlurmctld
    # (slurmforge-nodes-ready) then completes the job's configuration at once instead of
    # Slurm 22.05's next 30 s periodic check
    assert seconds <= COLD_START_BOUND, f"cold start took {seconds:.1f} s"
    _done[RESUMED] = time.monotonic()


def test_no_capacity_on_the_first_link_falls_back(cluster: Cluster_) -> None:
    root(cluster, f"echo cpu > {FAIL_POOLS}")
    try:
        since = time.time()
        job = submit(cluster, FALLBACK)
        wait_running(cluster, job)
    finally:
        root(cluster, f"rm -f {FAIL_POOLS}")
    assert container_running(FALLBACK)
    recent = [e for e in events(cluster) if e["at"] >= since - 1]
    failed = [e for e in recent if e["kind"] == "launch-failed" and e["link"] == "cpu"]
    launched = [e for e in recent if e["kind"] == "launch" and e["link"] == "cpu-fallback"]
    assert failed and failed[0]["detail"] == "InsufficientInstanceCapacity", recent
    assert launched and launched[0]["pool"] == "cpu", recent
    assert launched[0]["at"] - failed[0]["at"] <= LOOP_SECONDS, recent
    pools = {p["name"]: p for p in json.loads(fetch(controller_url(cluster, "/pools.json")))["pools"]}
    assert any(c["link"] == "cpu" for c in pools["cpu"]["cooling"]), pools["cpu"]


def test_service_killed_mid_launch_leaves_no_orphan_and_no_duplicate(cluster: Cluster_) -> None:
    wait_until(lambda: slurm_state(cluster, CRASHED).endswith("~"), 60, f"{CRASHED} powered down")
    # the service is down when Slurm hands the resume off; it starts, takes the hand-off
    # (the spool empties) and launches right after: SIGKILL at that moment
    root(cluster, "systemctl stop slurmforge-service")
    job = submit(cluster, CRASHED, seconds=5)
    root(cluster, f"timeout 20 sh -c 'until ls {SPOOL} | grep -q .; do sleep 0.05; done'")
    root(cluster, "systemctl start --no-block slurmforge-service && "
                  f"timeout 20 sh -c 'while ls {SPOOL} | grep -q .; do sleep 0.01; done' && "
                  "systemctl kill -s KILL slurmforge-service")
    root(cluster, "systemctl restart slurmforge-service")
    wait_running(cluster, job, timeout=60)
    assert container_running(CRASHED)
    time.sleep(2 * LOOP_SECONDS)  # an orphan may live at most two loops
    ours = subprocess.run(["podman", "ps", "--filter", f"label=slurmforge.cluster={cluster.spec.name}",
                           "--filter", "label=slurmforge.dynamic=True", "--format", "{{.Names}}"],
                          capture_output=True, text=True).stdout.split()
    states = {n: slurm_state(cluster, n) for n in ours}
    orphans = [n for n, s in states.items() if s.endswith("~")]
    assert not orphans, states
    assert ours.count(CRASHED) == 1
    db = f"{service_shared_dir(cluster.spec)}/state.db"
    pending = root(cluster, f"{SERVICE_BIN}/python -c \"import sqlite3; print(sqlite3.connect("
                            f"'{db}').execute(\\\"select count(*) from launches where status='pending'\\\")"
                            ".fetchone()[0])\"")
    assert pending.strip() == "0"
    wait_until(lambda: job_state(cluster, job) == "COMPLETED", 30, f"job {job} to complete")


def test_pool_page_renders_in_headless_chromium(cluster: Cluster_, tmp_path: Path) -> None:
    browser = shutil.which("chromium")
    if browser is None:
        pytest.fail("chromium is not installed (apt-get install chromium)")
    url = controller_url(cluster)
    png = tmp_path / "pools.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}",
                        f"--screenshot={png}", "--window-size=1280,900", url],
                       capture_output=True, timeout=90, check=False)
    assert png.exists() and png.stat().st_size > 20_000, "no screenshot"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png.read_bytes()[16:24]) == (1280, 900)
    shutil.copy(png, Path(tempfile.gettempdir()) / "slurmforge-pools.png")
    # the page lists every pool with the counts the service reports (one loop may pass
    # between the two fetches: retry until they agree)
    def agree() -> bool:
        page, snap = page_counts(fetch(url)), json.loads(fetch(controller_url(cluster, "/pools.json")))
        want = {p["name"]: {k.replace("_", " "): v for k, v in p["nodes"].items() if v} for p in snap["pools"]}
        return bool(want) and page == want
    wait_until(agree, 3 * LOOP_SECONDS, "the page and /pools.json to agree", every=1)
    print(f"\nscreenshot: {Path(tempfile.gettempdir()) / 'slurmforge-pools.png'}")


class _PoolCounts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.pools: dict[str, dict[str, int]] = {}
        self._pool = ""
        self._state = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("data-pool"):
            self._pool = a["data-pool"] or ""
            self.pools[self._pool] = {}
        elif tag == "td" and a.get("data-state") and self._pool:
            self._state = a["data-state"] or ""

    def handle_data(self, data: str) -> None:
        if self._state and data.strip():
            self.pools[self._pool][self._state] = int(data.strip())
            self._state = ""


def page_counts(html: str) -> dict[str, dict[str, int]]:
    parser = _PoolCounts()
    parser.feed(html)
    return parser.pools


def test_idle_node_powers_down_again(cluster: Cluster_) -> None:
    assert RESUMED in _done, "the resume test did not finish"
    idle = next(p.idle_seconds for p in cluster.spec.pools if p.name == "cpu")
    # SuspendTime after the job, a loop for the service, then the container is removed
    wait_until(lambda: not container_exists(RESUMED), idle + 60, f"{RESUMED} container to be removed", every=1)
    wait_until(lambda: slurm_state(cluster, RESUMED).endswith(("~", "%")), 30, f"{RESUMED} powering down")
    # slurmctld marks the node powering down and forks SuspendProgram at about the same
    # moment; the service may stop the machine from the Slurm state a loop before it
    # takes the hand-off file, so the event can show up one loop after the stop
    wait_until(lambda: "suspend" in {e["kind"] for e in events(cluster)}, 2 * LOOP_SECONDS + 5,
               "the suspend hand-off on the pool page", every=1)
