"""Patch day on the live local cluster (long: `./dev.sh test-all`), the user's way: the
cluster's spec with a new `images.refresh` (so the node image is built again from the
release's current packages), rolled through the cluster under load by `slurmforge upgrade
SPEC --local --yes`, then counted in sacct: 0 jobs lost, 0 submissions refused, every host's
RECORD on the new image, Slurm's versions in order."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from slurmforge.inventory import SPEC_COPY
from tests.integration.conftest import ROOT, Cluster_

pytestmark = [pytest.mark.integration, pytest.mark.long]

SUBMIT_EVERY = 3.0


def refreshed_spec(cluster: Cluster_, tmp: Path) -> Path:
    data = yaml.safe_load((cluster.report.inventory / SPEC_COPY).read_text())
    data["images"] = {**(data.get("images") or {}), "refresh": f"test-{time.strftime('%Y%m%dT%H%M%S')}"}
    path = tmp / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Load:
    """A submission every few seconds from the login node; every refusal kept."""

    def __init__(self, cluster: Cluster_) -> None:
        self.cluster, self.stop = cluster, threading.Event()
        self.ids: list[int] = []
        self.refused: list[str] = []
        self.waits: list[float] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            began = time.monotonic()
            done = self.cluster.login("sbatch --parsable -A research -t 5 --wrap 'sleep 5'", timeout=300)
            self.waits.append(time.monotonic() - began)
            if done.returncode == 0 and done.stdout.strip().split(";")[0].isdigit():
                self.ids.append(int(done.stdout.strip().split(";")[0]))
            else:
                self.refused.append((done.stderr or done.stdout).strip())
            self.stop.wait(SUBMIT_EVERY)


def test_a_new_image_rolls_through_a_busy_cluster_and_nothing_is_lost(cluster: Cluster_, tmp_path: Path) -> None:
    long_job = cluster.login("sbatch --parsable -A research -N 2 -t 20 --wrap 'srun sleep 420'")
    assert long_job.returncode == 0, long_job.stderr
    spanning = int(long_job.stdout.strip().split(";")[0])
    load = Load(cluster)
    load.thread.start()
    controller = f"{cluster.spec.name}-controller"
    before = json.loads(cluster.run(controller, "cat /usr/share/slurmforge/image.json").stdout)["inputs"]
    spec = refreshed_spec(cluster, tmp_path)
    try:
        done = subprocess.run([sys.executable, "-m", "slurmforge.cli", "upgrade", str(spec), "--local",
                               cluster.spec.name, "--yes"], capture_output=True, text=True, cwd=ROOT, timeout=7200,
                              check=False)
    finally:
        load.stop.set()
        load.thread.join(timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert load.refused == [], load.refused
    ids = ",".join(map(str, [spanning, *load.ids]))
    sacct = cluster.run(f"{cluster.spec.name}-controller", f"sacct -X -n -P -j {ids} --format=JobID,State")
    states = dict(line.split("|", 1) for line in sacct.stdout.split() if "|" in line)
    lost = {j: s for j, s in states.items() if s not in ("COMPLETED", "RUNNING", "PENDING", "REQUEUED")}
    assert lost == {} and len(states) == len(load.ids) + 1, sacct.stdout
    backups = re.search(r"backups in (\S+)$", done.stdout, re.M)  # Slurm's guide's minimum, 0600 each
    assert backups is not None, done.stdout
    kept = {path.name: path for path in Path(backups[1]).iterdir()}
    assert set(kept) == {"slurm-state.tar.gz", "accounting.sql.gz"} and all(
        path.stat().st_mode & 0o777 == 0o600 for path in kept.values())
    with tarfile.open(kept["slurm-state.tar.gz"]) as archive:
        names = archive.getnames()
    assert any(n.endswith("/job_state") for n in names) and "etc/slurm/slurm.conf" in names, names[:20]
    digest = re.search(r"runs image (\w+)", done.stdout)
    assert digest is not None and digest[1] != before, done.stdout  # a new image, rolled
    skipped = [line for line in done.stdout.splitlines()  # every host's step ran (the image is made before the plan)
               if "_(done)" in line and line.split()[0].isdigit() and not line.split()[1].startswith("image")]
    assert skipped == [], done.stdout
    for name in cluster.rolled_out_hosts():
        record = json.loads(cluster.run(name, "cat /usr/share/slurmforge/image.json").stdout)
        assert record["inputs"] == digest[1], name
    versions = cluster.run(f"{cluster.spec.name}-controller", "scontrol show nodes --json").stdout
    slurmd = {n["version"] for n in json.loads(versions)["nodes"] if n.get("version")}
    ctld = cluster.run(f"{cluster.spec.name}-controller", "slurmctld -V").stdout.split()[-1]
    assert all(tuple(map(int, v.split(".")[:3])) <= tuple(map(int, ctld.split(".")[:3])) for v in slurmd)
