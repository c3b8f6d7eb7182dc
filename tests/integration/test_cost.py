"""Issue 14, item 6 on the real local cluster: a GPU job's billing is its share of the
pool's price, `slurmforge cost --inventory` finds it in sacct, and the pool page says
what the month cost. Short: one 5-second job."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import urllib.request

import pytest

from slurmforge.billing import billing_weights
from slurmforge.contract import SERVICE_PORT
from slurmforge.inventory import read_inventory
from slurmforge.monitoring import controller_address
from tests.integration.conftest import Cluster_

pytestmark = pytest.mark.integration


def test_a_gpu_jobs_billing_and_spend(cluster: Cluster_) -> None:
    weights = billing_weights(cluster.spec)["ml-gpu"]
    shown = cluster.run(cluster.report.login, "scontrol show partition ml-gpu -o").stdout
    assert f"TRESBillingWeights={weights.text()}" in shown, shown
    res = cluster.login("sbatch --wait --parsable -p ml-gpu -A research --gres=gpu:1 -c 1 --mem=256M "
                        "-o /dev/null --wrap 'sleep 5'", timeout=300)
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    row = cluster.login(f"sacct -n -X -P -j {job} -o AllocTRES,ElapsedRaw,State").stdout.strip()
    tres, elapsed, state = row.split("|")
    # one GPU of the node's two, with 1 CPU of 2 and a quarter of its memory: half of $2/h
    assert "billing=10000" in tres.split(",") and state == "COMPLETED", row
    out = subprocess.run([sys.executable, "-m", "slurmforge.cli", "cost", "--inventory", str(cluster.report.inventory),
                          "--by", "user,pool", "--since", "30m", "--format", "csv"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {(r["user"], r["pool"]): r for r in csv.DictReader(io.StringIO(out.stdout))}
    assert float(rows[("alice", "gpu")]["spend_usd"]) >= 10_000 * int(elapsed) / 36_000_000 > 0
    # the pool page's figures come from the same sacct (refreshed every 5 minutes): priced
    address = controller_address(read_inventory(cluster.report.inventory)[1])
    with urllib.request.urlopen(f"http://{address}:{SERVICE_PORT}/pools.json", timeout=10) as answer:
        snap = json.loads(answer.read())
    assert snap["spend"] is not None and snap["spend"]["error"] == "", snap["spend"]
    assert {p["name"]: p["spend"] is not None for p in snap["pools"]} == {"cpu": True, "gpu": True,
                                                                            "cpu-fallback": True, "cpu-spot": True}
