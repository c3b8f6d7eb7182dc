"""`slurmforge report` against a Prometheus HTTP API served in-process from recorded
query_range answers (tests/unit/monitoring/query_range.json, taken from the local
cluster's real Prometheus): every plot is asked for once with the right window and step,
the PNGs and the page are written, and a missing or empty Prometheus is one line + exit code."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from slurmforge.cli import app
from slurmforge.inventory import write_inventory
from slurmforge.local.provider import LocalProvider
from slurmforge.report import PLOTS, Prometheus, ReportError, make_report, parse_duration, step_for
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

RECORDED = Path(__file__).parent / "monitoring" / "query_range.json"
NOW = 1_795_340_000.0


class FakePrometheus:
    """Answers /api/v1/query_range from a {query: result} map and records every call."""

    def __init__(self, answers: dict[str, Any], status: int = 200) -> None:
        self.answers, self.status, self.calls = answers, status, []  # type: ignore[var-annotated]
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                params = dict(urllib.parse.parse_qsl(url.query))
                fake.calls.append((url.path, params))
                if fake.status != 200:
                    body = {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}
                else:
                    body = {"status": "success", "data": {"resultType": "matrix",
                                                          "result": fake.answers.get(params.get("query"), [])}}
                data = json.dumps(body).encode()
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def recorded() -> Iterator[FakePrometheus]:
    fake = FakePrometheus(json.loads(RECORDED.read_text()))
    yield fake
    fake.server.shutdown()


def test_durations() -> None:
    assert parse_duration("24h") == 86400 and parse_duration("30m") == 1800 and parse_duration("7d") == 604800
    for bad in ("", "24", "h", "0h", "1y", "-3h"):
        with pytest.raises(ReportError):
            parse_duration(bad)
    assert step_for(3600) == 15 and step_for(86400) == 288


def test_report_from_recorded_data(recorded: FakePrometheus, tmp_path: Path) -> None:
    report = make_report(Prometheus(recorded.url), "mondev", 3600, tmp_path / "out", clock=lambda: NOW)
    assert [p for p, _ in recorded.calls] == ["/api/v1/query_range"] * len(PLOTS)
    assert [c["query"] for _, c in recorded.calls] == [p.query for p in PLOTS]
    assert all((c["start"], c["end"], c["step"]) == (f"{NOW - 3600:.3f}", f"{NOW:.3f}", "15")
               for _, c in recorded.calls)
    page = report.html_path.read_text()
    for plot in PLOTS:
        png = tmp_path / "out" / f"{plot.name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, plot.name
        assert f'src="{plot.name}.png"' in page
    assert "mondev: utilization" in page and "peak" in page


def test_unreachable_prometheus_is_one_line(tmp_path: Path) -> None:
    fake = FakePrometheus({})
    url = fake.url
    fake.server.shutdown()
    fake.server.server_close()
    with pytest.raises(ReportError, match=f"Prometheus at {url} is unreachable"):
        make_report(Prometheus(url, timeout=2), "c", 3600, tmp_path)


def test_no_data_is_an_error_not_an_empty_page(tmp_path: Path) -> None:
    fake = FakePrometheus({})
    with pytest.raises(ReportError, match="has no slurmforge data in the last 1h"):
        make_report(Prometheus(fake.url), "c", 3600, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    fake.server.shutdown()


def test_prometheus_error_is_reported(tmp_path: Path) -> None:
    fake = FakePrometheus({}, status=400)
    with pytest.raises(ReportError, match=r"refused .* parse error at char 3"):
        make_report(Prometheus(fake.url), "c", 3600, tmp_path)
    fake.server.shutdown()


def test_cli_report_errors_are_one_line(tmp_path: Path, recorded: FakePrometheus) -> None:
    spec_path = Path(__file__).resolve().parents[2] / "examples" / "local.yaml"
    spec = load_spec(spec_path)
    inventory = write_inventory(spec, spec_path, LocalProvider(spec, "img", state_root=tmp_path / "state").hosts(),
                                tmp_path / "inventory", tmp_path / "secrets")
    runner = CliRunner()
    res = runner.invoke(app, ["report", "--inventory", str(inventory), "--since", "soon", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "not a duration" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["report", "--inventory", str(tmp_path), "--out", str(tmp_path)])
    assert res.exit_code == 14 and "not a slurmforge inventory" in res.output
    res = runner.invoke(app, ["report", "--inventory", str(inventory), "--prometheus", "http://127.0.0.1:1",
                              "--out", str(tmp_path)])
    assert res.exit_code == 9 and "unreachable" in res.output and len(res.output.strip().splitlines()) == 1
    res = runner.invoke(app, ["report", "--inventory", str(inventory), "--prometheus", recorded.url,
                              "--since", "1h", "--out", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "report.html").exists()
    done = runner.invoke(app, ["report", "--inventory", str(inventory), "--prometheus", recorded.url,
                               "--since", "1h", "--out", str(tmp_path / "j"), "--format", "json"])
    assert done.exit_code == 0, done.output
    found = json.loads(done.stdout)
    assert {k: found[k] for k in ("cluster", "html", "plots", "prometheus")} == {
        "cluster": "dev", "html": str(tmp_path / "j" / "report.html"), "plots": len(PLOTS), "prometheus": recorded.url}
    assert set(found["period"]) == {"since", "until"}
    assert {r["plot"] for r in found["rows"]} <= {p.name for p in PLOTS} and found["rows"]
    queue = [r for r in found["rows"] if r["plot"] == "queue_wait"]
    assert all(r["unit"] == "minutes" and 0 <= r["mean"] <= r["peak"] and r["samples"] > 0 for r in queue)
    assert set(found["rows"][0]) == {"plot", "series", "unit", "mean", "peak", "samples"}
