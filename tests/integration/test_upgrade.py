"""Patch day on the live local cluster (long: `./dev.sh test-all`): a new node image - one with
a changed package input - rolled through the cluster under load by `slurmforge upgrade --local
--yes`, then counted in sacct: 0 jobs lost, 0 submissions refused, every host's RECORD on the
new image, Slurm's versions in order.

The changed input, without a test hook in slurmforge: the upgrade runs from a copy of this
source tree (PYTHONPATH) whose image playbook installs one more Debian package (`hello`).
package_data.root() is the copy's, so the image's inputs - and their digest - differ, and the
one pipeline builds that image as it would a real patch day's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurmforge.package_data import SHIPPED
from tests.integration.conftest import ROOT, Cluster_

pytestmark = [pytest.mark.integration, pytest.mark.long]

SUBMIT_EVERY = 3.0
EXTRA_TASK = """    - name: One more Debian package (the upgrade test's changed input)
      ansible.builtin.apt:
        name: hello
        state: present
"""


def changed_tree(tmp: Path) -> Path:
    tree = tmp / "tree"
    shutil.copytree(ROOT / "slurmforge", tree / "slurmforge", ignore=shutil.ignore_patterns("__pycache__"))
    for name in SHIPPED:  # what package_data.root() needs beside the package
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    image = tree / "playbooks" / "image.yml"
    text = image.read_text()
    image.write_text(text.replace("    - name: No daemon enabled in the image", EXTRA_TASK +
                                  "    - name: No daemon enabled in the image", 1))
    return tree


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
    tree = changed_tree(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    try:  # from the copy (python -m puts the working directory first on sys.path)
        done = subprocess.run([sys.executable, "-m", "slurmforge.cli", "upgrade", "--local", cluster.spec.name,
                               "--yes"], capture_output=True, text=True, env=env, cwd=tree, timeout=7200,
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
    digest = re.search(r"runs image (\w+)", done.stdout)
    assert digest is not None and digest[1] != before, done.stdout  # a new image, rolled
    assert "(done)" not in done.stdout, done.stdout  # every step ran
    for name in cluster.rolled_out_hosts():
        record = json.loads(cluster.run(name, "cat /usr/share/slurmforge/image.json").stdout)
        assert record["inputs"] == digest[1], name
    versions = cluster.run(f"{cluster.spec.name}-controller", "scontrol show nodes --json").stdout
    slurmd = {n["version"] for n in json.loads(versions)["nodes"] if n.get("version")}
    ctld = cluster.run(f"{cluster.spec.name}-controller", "slurmctld -V").stdout.split()[-1]
    assert all(tuple(map(int, v.split(".")[:3])) <= tuple(map(int, ctld.split(".")[:3])) for v in slurmd)
