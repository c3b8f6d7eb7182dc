"""Every table the CLI prints, readable at 80 columns and when piped: `status` and `pools`
from what the local cluster "dev" answered (tests/unit/dev_cluster: the scheduler
service's /pools.json, `sinfo -N -h -o '%N %T'` on its controller (with `%v`'s slurmd
version added); hosts from
examples/local.yaml as the local provider lays them out), `cost` through the real
command, in a pipe and in an 80-column terminal (a pty)."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from test_cost import HEADER, line
from test_service_web import snapshot as page_snapshot

from slurmforge.hosts import HostRole
from slurmforge.local.manage import node_table
from slurmforge.local.provider import LocalProvider
from slurmforge.service.snapshot import ClusterSnapshot
from slurmforge.service.web import pools_table
from slurmforge.spec import load_spec
from slurmforge.tables import Format, Table, count, render

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "examples/local.yaml"
DEV = Path(__file__).parent / "dev_cluster"


def fits(text: str, width: int = 80) -> list[str]:
    lines = text.splitlines()
    assert all(len(ln) <= width for ln in lines), "\n".join(ln for ln in lines if len(ln) > width)
    assert "…" not in text
    return lines


def words(lines: list[str]) -> str:
    """The lines as one line of text (notes wrap)."""
    return " ".join(" ".join(lines).split())


def plain_rows(text: str) -> tuple[list[str], list[list[str]]]:
    header, *rows = [ln.split() for ln in text.splitlines()]
    return header, rows


RECORD = json.dumps({"inputs": "0123456789abcdef", "slurm": "24.11.5-4+deb13u1"})


def sinfo_with_versions() -> str:
    """sinfo.txt as SINFO_NODES answers: `%v` N/A for a node whose slurmd never registered."""
    return "".join(f"{ln} {'N/A' if ln.endswith('~') else '24.11.5'}\n"
                   for ln in (DEV / "sinfo.txt").read_text().splitlines())


def status(tmp_path: Path) -> Table:
    spec = load_spec(LOCAL)
    hosts = LocalProvider(spec, "", state_root=tmp_path).hosts()
    running = {h.name: True for h in hosts if not h.dynamic}
    records: dict[str, str | None] = {h.name: RECORD for h in hosts if not h.dynamic}
    records["dev-cpu-02"] = None  # its read did not answer in time
    return node_table(spec.name, hosts, running, sinfo_with_versions(), records)


def test_status_at_80_columns_names_every_node_in_full(tmp_path: Path) -> None:
    table = status(tmp_path)
    names = [row[0] for row in table.rows]
    assert "dev-controller-backup" in names and "dev-cpu-fallback-01" in names
    lines = fits(render(table, Format.TABLE, 80))
    assert lines[0] == "cluster dev (local)" and lines[1].split() == ["Node", "Pool", "Address", "Container",
                                                                         "Slurm", "Image"]
    shown = {ln.split()[0]: ln.split() for ln in lines[2:-2]}  # the note that names what is left out is 2 lines
    assert set(shown) == set(names)
    fallback = shown["dev-cpu-fallback-01"]
    assert fallback[1:] == ["cpu-fallback", "10.89.7.20", "none", "idle~", "-"]  # powered down: no machine
    assert shown["dev-cpu-01"][-1] == "0123456789ab" and shown["dev-cpu-02"][-1] == "?"
    assert "not shown at 80 columns: Role, Version" in words(lines)
    # narrower still: columns give way, names never
    narrow = fits(render(table, Format.TABLE, 60), 60)
    assert {ln.split()[0] for ln in narrow[2:-2]} == set(names)
    assert "not shown at 60 columns: Role, Address, Image, Version" in words(narrow)


def test_status_piped_is_one_parseable_row_per_node(tmp_path: Path) -> None:
    table = status(tmp_path)
    header, rows = plain_rows(render(table, Format.PLAIN))
    keys = ["node", "role", "pool", "address", "container", "slurm", "image", "version", "slurmd"]
    assert header == keys
    assert all(len(r) == 9 for r in rows)
    by_name = {r[0]: r for r in rows}
    assert by_name["dev-cpu-fallback-01"] == ["dev-cpu-fallback-01", "compute", "cpu-fallback", "10.89.7.20", "none",
                                              "idle~", "-", "-", "-"]
    # the image's package version (Debian's revision shows a security fix); the registered slurmd's
    assert by_name["dev-cpu-01"][-3:] == ["0123456789ab", "24.11.5-4+deb13u1", "24.11.5"]
    assert by_name["dev-cpu-02"][-3:] == ["?", "24.11.5", "24.11.5"]  # unread: what its slurmd says
    assert by_name["dev-login"][-3:] == ["0123456789ab", "24.11.5-4+deb13u1", "-"]  # no slurmd there
    assert by_name["dev-controller-backup"][1:3] == ["controller", "-"]
    assert [r["node"] for r in csv.DictReader(io.StringIO(render(table, Format.CSV)))] == [r[0] for r in rows]
    shown = json.loads(render(table, Format.JSON))
    items = shown["rows"]
    assert shown["cluster"] == "dev" and list(items[0]) == keys
    assert next(i for i in items if i["node"] == "dev-login")["pool"] is None
    assert {i["role"] for i in items} == {r.value for r in HostRole}


def dev_pools() -> Table:
    return pools_table(ClusterSnapshot.from_json((DEV / "pools.json").read_text()))


def test_pools_of_the_dev_cluster_at_80_columns() -> None:
    lines = fits(render(dev_pools(), Format.TABLE, 80))
    assert lines[0] == "dev: pools"
    rows = {ln.split()[0]: ln.split() for ln in lines if ln.split() and ln.split()[0] in ("cpu", "gpu", "cpu-fallback")}
    assert set(rows) == {"cpu", "gpu", "cpu-fallback"}
    # what matters at a glance stays: nodes by state, jobs, GPUs, cooling links
    heads = " ".join(lines[1:3])
    for word in ("Idle", "Busy", "Starting", "Off", "drain", "run", "wait", "used", "free", "Cooling"):
        assert word in heads, heads
    assert rows["cpu"][1:5] == ["2", "0", "0", "2"] and rows["gpu"][-2] == "2"  # idle, busy, starting, off; GPUs free
    assert "not shown at 80 columns: Kind, Market, Nodes, GPUs wanted, Spend (USD), Launched, Failed" in words(lines)
    wide = fits(render(dev_pools(), Format.TABLE, 200), 200)
    assert wide[1].split()[:4] == ["Pool", "Kind", "Market", "Nodes"] and "$0.20" in wide[3]


def test_pools_piped_every_column_one_row_per_pool() -> None:
    header, rows = plain_rows(render(dev_pools(), Format.PLAIN))
    assert header == ["pool", "kind", "market", "nodes", "idle", "busy", "starting", "off", "down", "jobs_running",
                      "jobs_pending", "gpus_used", "gpus_wanted", "gpus_free", "spend_usd", "launched", "failed",
                      "cooling"]
    assert [r[0] for r in rows] == ["cpu", "gpu", "cpu-fallback"] and all(len(r) == len(header) for r in rows)
    gpu = dict(zip(header, rows[1], strict=True))
    assert gpu["gpus_free"] == "2" and float(gpu["spend_usd"]) == pytest.approx(0.1972) and gpu["cooling"] == "-"
    shown = json.loads(render(dev_pools(), Format.JSON))
    items = shown["rows"]
    assert shown["cluster"] == "dev" and [i["nodes"] for i in items] == [4, 1, 1]
    assert items[1]["spend_usd"] == pytest.approx(0.1972)


def test_pools_cooling_links_and_holds_wrap_not_cut() -> None:
    table = pools_table(page_snapshot())
    lines = fits(render(table, Format.TABLE, 80))
    at = lines[1].index("Cooling")
    spot = lines.index(next(ln for ln in lines if ln.startswith("spot ")))
    assert lines[spot + 1].startswith(" " * at)  # the link's text goes on below, in its column
    assert " ".join(ln[at:] for ln in lines[spot:spot + 2]) == "spot (1 min 30 s)"
    assert any(ln.startswith("HOLDING BACK") for ln in lines) or not page_snapshot().holds
    header, rows = plain_rows(render(table, Format.PLAIN))
    spot = next(r for r in rows if r[0] == "spot")
    assert " ".join(spot[len(header) - 1:]) == "spot (1 min 30 s)"  # free text only in the last column


def test_fractional_job_counts_cannot_be_read_as_thousands() -> None:
    assert [count(v) for v in (181.4, 0.5, 0.25, 2.0, 3, 1181.5, 12345)] == [
        "181.4", "0.5", "0.25", "2", "3", "1,181.5", "12,345"]


def in_terminal(argv: list[str], columns: int) -> str:
    """argv's output in a pseudo-terminal `columns` wide, as a person at one sees it."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"NO_COLOR": "1"}
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.fixture
def sacct(tmp_path: Path) -> Path:
    """Jobs of the local example's pools this past hour; job 3 runs on a node of `cpu` and
    one of `cpu-fallback`, so each counts half of it."""
    start = time.time() - 3600
    path = tmp_path / "sacct.txt"
    path.write_text("\n".join([
        HEADER,
        line(1, "alice-the-long-user-name", "research", "ml-cpu", "dev-cpu-01", "billing=960,cpu=2,mem=1G,node=1",
             1800, start),
        line(2, "bob", "research", "ml-gpu", "dev-gpu-01", "billing=20000,cpu=2,gres/gpu=2,mem=1G,node=1", 900, start),
        line(3, "eve", "vision", "ml-cpu", "dev-cpu-04,dev-cpu-fallback-01", "billing=1920,cpu=4,mem=2G,node=2",
             600, start)]) + "\n")
    return path


def test_cost_by_account_and_pool_in_a_terminal_and_piped(sacct: Path) -> None:
    argv = [sys.executable, "-m", "slurmforge.cli", "cost", str(LOCAL), "--sacct-file", str(sacct), "--by",
            "user,account,pool", "--since", "1d"]
    screen = fits(in_terminal(argv, 80))
    assert screen[0] == "Spend by user, account, pool"
    rows = {tuple(ln.split()[:3]): ln.split() for ln in screen[2:] if len(ln.split()) > 4}
    assert rows[("eve", "vision", "cpu")][3] == "0.5" and rows[("eve", "vision", "cpu-fallback")][3] == "0.5"
    assert rows[("alice-the-long-user-name", "research", "cpu")][3] == "1"
    assert "counts in each pool by its share of the nodes" in words(screen)
    piped = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=60, check=True,
                           env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    header, table = plain_rows(piped.stdout)
    assert header == ["user", "account", "pool", "jobs", "cpu_hours", "gpu_hours", "spend_usd", "unpriced_jobs"]
    by_key = {tuple(r[:3]): dict(zip(header, r, strict=True)) for r in table}
    assert by_key[("eve", "vision", "cpu-fallback")]["jobs"] == "0.5"
    assert float(by_key[("bob", "research", "gpu")]["spend_usd"]) == pytest.approx(0.5)
    assert len(table) == 4  # no total row, no notes: data only
    as_json = subprocess.run([*argv, "--format", "json"], capture_output=True, text=True, cwd=ROOT, timeout=60,
                             check=True)
    assert {(i["user"], i["pool"]): i["jobs"] for i in json.loads(as_json.stdout)["rows"]}[("eve", "cpu")] == 0.5
