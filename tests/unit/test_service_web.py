"""The pool page, /metrics and the `slurmforge pools` table, from one snapshot."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from html.parser import HTMLParser

import jinja2
import pytest
from test_service_world import (
    ALLOCATED,
    DOWN_POWERED_DOWN,
    DRAINED,
    IDLE,
    NOW,
    POWERED_DOWN,
    POWERING_UP,
    node,
    topo,
)

from slurmforge.provider import Quota
from slurmforge.service.snapshot import ClusterSnapshot, build_snapshot, display_state
from slurmforge.service.spend import Spend
from slurmforge.service.state import Cooldown, Event
from slurmforge.service.web import environment, metrics_text, pools_table, render_page, serve
from slurmforge.slurm.client import Job
from slurmforge.tables import Format, render

pytestmark = pytest.mark.unit


def snapshot() -> ClusterSnapshot:
    nodes = [
        node("t-spot-01", ALLOCATED, gres="gpu:4", gres_used="gpu:4"),
        node("t-spot-02", ALLOCATED, gres="gpu:4", gres_used="gpu:1(IDX:0)"),
        node("t-spot-03", POWERING_UP, gres="gpu:4"),
        node("t-spot-04", POWERED_DOWN, gres="gpu:4"),
        node("t-od-01", IDLE, gres="gpu:4"),
        node("t-od-02", DRAINED, reason="health: xid 79", gres="gpu:4"),
        node("t-od-03", DOWN_POWERED_DOWN, gres="gpu:4"),
        node("t-od-04", POWERED_DOWN, gres="gpu:4"),
        node("t-cpu-01", IDLE), node("t-cpu-02", POWERED_DOWN), node("t-cpu-03", POWERED_DOWN),
    ]
    cooldowns = {"spot": Cooldown("spot", NOW + 90, 2, "InsufficientInstanceCapacity", NOW - 30),
                 "cpu": Cooldown("cpu", NOW - 1, 1, "expired", NOW - 61)}
    events = [Event(NOW - 30, "launch-failed", "spot", "spot", 3, "InsufficientInstanceCapacity"),
              Event(NOW - 29, "launch", "spot", "od", 3, "token sf-1"),
              Event(NOW - 28, "cooldown", "spot", "spot", 0, "until 1800000090 (InsufficientInstanceCapacity)"),
              Event(NOW - 20, "launch", "od", "od", 1, "t-od-02 for job 12"),
              Event(NOW - 7200, "launch", "spot", "spot", 50, "too old for the window"),
              Event(NOW - 5, "power-down", "cpu", "", 1, "<script>alert(1)</script>")]
    counters = [("slurmforge_launched_nodes_total", {"pool": "spot", "link": "od"}, 3.0)]
    jobs = [Job(11, "RUNNING", "t-spot-[01-02]", "alice", "gpu", "vision", "None", NOW - 4000,
                "cpu=8,mem=64G,node=2,billing=5,gres/gpu=5", started_at=NOW - 3900),
            Job(12, "PENDING", "", "bob", "gpu", "nlp", "Resources", NOW - 750, "cpu=4,node=1,gres/gpu=4"),
            Job(13, "PENDING", "", "carol", "gpu", "nlp", "AssocGrpBillingMinutes", NOW - 90,
                "cpu=1,node=1,gres/gpu=1"),
            Job(14, "PENDING", "", "dave", "cpu", "vision", "Priority", NOW - 30, "cpu=1,node=1")]
    spend = Spend(NOW - 14 * 86400 - 8 * 3600, NOW - 120, {"spot": 1234.5, "od": 0.0, "cpu": 3.25})  # 1 Jan
    return build_snapshot(topo(), nodes, cooldowns, events, NOW, loop_seconds=0.042, counters=counters, jobs=jobs,
                          spend=spend)


def test_snapshot_counts_by_pool() -> None:
    pools = {p.name: p for p in snapshot().pools}
    spot, od, cpu = pools["spot"], pools["od"], pools["cpu"]
    assert spot.nodes == {"allocated": 2, "powering_up": 1, "powered_down": 1}
    assert (spot.gpus_used, spot.gpus_free, spot.gpus_off) == (5, 3, 8)
    assert (spot.launches, spot.failures) == (3, 3)
    assert [c.link for c in spot.cooling] == ["spot"] and cpu.cooling == ()
    assert od.nodes == {"idle": 1, "drained": 1, "down": 1, "powered_down": 1} and od.gpus_free == 4
    assert cpu.total == 3 and cpu.gpus_used == 0
    # jobs: running where their nodes are, pending in every pool of their partition
    assert (spot.jobs_running, spot.jobs_pending, spot.gpus_wanted) == (1, 2, 5)
    assert (od.jobs_running, od.jobs_pending, od.gpus_wanted) == (0, 2, 5)
    assert (cpu.jobs_running, cpu.jobs_pending, cpu.gpus_wanted) == (0, 1, 0)
    assert spot.pending_reasons == (("AssocGrpBillingMinutes", 1), ("Resources", 1))
    assert [j.id for j in spot.jobs] == [12, 13, 11]  # longest waiting first, then running
    assert (spot.spend, cpu.spend) == (1234.5, 3.25)


def test_display_state_order() -> None:
    assert display_state(node("n", DOWN_POWERED_DOWN)) == "down"
    assert display_state(node("n", ("mixed", "CLOUD", "DRAIN"))) == "draining"
    assert display_state(node("n", ("future",))) == "other"


def test_json_round_trip() -> None:
    snap = snapshot()
    assert ClusterSnapshot.from_json(snap.to_json()) == snap


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{name}{{{re.escape(want)}}} (\S+)$" if labels else rf"^{name} (\S+)$"
    (value,) = re.findall(pattern, text, re.M)
    return float(value)


def test_metrics_text() -> None:
    text = metrics_text(snapshot())
    assert metric(text, "slurmforge_pool_nodes", pool="spot", state="allocated") == 2
    assert metric(text, "slurmforge_pool_nodes", pool="od", state="mixed") == 0
    assert metric(text, "slurmforge_pool_gpus", pool="spot", state="used") == 5
    assert metric(text, "slurmforge_pool_gpus", pool="spot", state="free") == 3
    assert metric(text, "slurmforge_pool_recent_launches", pool="spot") == 3
    assert metric(text, "slurmforge_pool_recent_launch_failures", pool="spot") == 3
    assert metric(text, "slurmforge_link_cooldown_seconds", link="spot") == 90
    assert metric(text, "slurmforge_links_cooling") == 1
    assert metric(text, "slurmforge_loop_duration_seconds") == 0.042
    assert metric(text, "slurmforge_launched_nodes_total", link="od", pool="spot") == 3
    assert metric(text, "slurmforge_pool_gpus_wanted", pool="od") == 5
    assert metric(text, "slurmforge_pool_spend_dollars", pool="spot") == 1234.5
    assert "# TYPE slurmforge_launch_failures_total counter" in text
    for line in text.splitlines():  # every sample line is name{labels} number
        assert line.startswith("#") or re.fullmatch(r"[a-z_]+(\{[^}]*\})? -?[0-9.e+-]+", line), line


class Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.pool: str | None = None
        self.attrs: dict[str, str] = {}
        self.found: dict[tuple[str, str], str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.pool = a.get("data-pool", self.pool)
        self.attrs = a

    def handle_data(self, data: str) -> None:
        if self.pool and "data-state" in self.attrs and data.strip():
            self.found[(self.pool, self.attrs["data-state"])] = data.strip()
            self.attrs = {}


def test_page_shows_every_pool_and_escapes() -> None:
    html = render_page(snapshot())
    cells = Cells()
    cells.feed(html)
    assert cells.found[("spot", "allocated")] == "2" and cells.found[("spot", "powering up")] == "1"
    assert cells.found[("od", "drained")] == "1" and cells.found[("cpu", "powered down")] == "2"
    assert 'data-gpus-used="5" data-gpus-wanted="5"' in html and 'data-gpus-free="3" data-gpus-off="8"' in html
    assert 'class="cooling" data-link="spot">link spot cooling down for 1 min 30 s, until 08:01:30 UTC' in html
    assert 'data-jobs-running="1" data-jobs-pending="2"' in html
    assert "waiting 12 min: Resources" in html and "running 1 h 05 min" in html
    assert 'data-spend="$1,234.50"' in html and "Spend since 1 Jan 2027" in html
    # what only the service reads, made readable: no launch tokens, no epoch seconds
    assert "token sf-1" not in html and "t-od-02 for job 12" in html and "1800000090" not in html
    assert "until 08:01:30 UTC (in 1 min 30 s) (InsufficientInstanceCapacity)" in html
    assert "falls back to od" in html
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html


def test_template_is_strict() -> None:
    with pytest.raises(jinja2.UndefinedError):
        environment().get_template("pools.html.j2").render(cluster="t")


def test_pools_table() -> None:
    text = render(pools_table(snapshot()), Format.TABLE, 200)
    row = next(line for line in text.splitlines() if line.startswith("spot "))
    assert row.split() == ["spot", "gpu", "spot", "4", "0", "2", "1", "1", "0", "1", "2", "5", "5", "3", "$1,234.50",
                           "3", "3", "spot", "(1", "min", "30", "s)"], row
    assert "spend since 1 Jan 2027 (read 2 min ago)" in text


def test_a_used_up_quota_is_named_on_the_page_metrics_table_and_json() -> None:
    quota = Quota("L-DB2E81BA", "Running On-Demand G and VT instances")
    cooldowns = {"od": Cooldown("od", NOW + 900, 1, "VcpuLimitExceeded", NOW, (quota,)),
                 "spot": Cooldown("spot", NOW + 60, 1, "InsufficientInstanceCapacity", NOW)}
    snap = build_snapshot(topo(), [node("t-spot-01", POWERED_DOWN)], cooldowns, [], NOW)
    assert ClusterSnapshot.from_json(snap.to_json()) == snap
    text = metrics_text(snap)
    assert metric(text, "slurmforge_link_quota_blocked", link="od", quota=quota.name, quota_code=quota.code) == 1
    assert "slurmforge_link_quota_blocked{link=\"spot\"" not in text  # no capacity is not a quota
    page = " ".join(re.sub(r"<[^>]+>", " ", render_page(snap)).split())  # the page's text
    assert ("EC2 quota reached: Running On-Demand G and VT instances (L-DB2E81BA) stops launches on link od "
            "(VcpuLimitExceeded). Ask AWS to raise it") in page
    assert "link spot cooling down for 1 min" in page
    assert "spot (1 min), od (15 min, quota L-DB2E81BA)" in render(pools_table(snap), Format.TABLE, 250)


def test_server_routes() -> None:
    snap: list[ClusterSnapshot | None] = [None]
    server = serve(lambda: snap[0], "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(urllib.error.HTTPError) as early:
            urllib.request.urlopen(f"{base}/metrics", timeout=5)
        assert early.value.code == 503
        snap[0] = snapshot()
        for path, kind, needle in (("/", "text/html", "Cluster t"),
                                   ("/metrics", "text/plain", "slurmforge_pool_nodes{"),
                                   ("/pools.json", "application/json", '"cluster": "t"'),
                                   ("/healthz", "text/plain", "ok")):
            with urllib.request.urlopen(base + path, timeout=5) as response:
                assert response.status == 200 and response.headers["Content-Type"].startswith(kind)
                assert needle in response.read().decode()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/nope", timeout=5)
        assert missing.value.code == 404
    finally:
        server.shutdown()
