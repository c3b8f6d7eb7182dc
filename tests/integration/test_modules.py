"""Issue 6's proof on the real local cluster: `slurmforge modules ... --inventory`
publishes into the shared software tree through the login node, and every node's Lmod
sees the change at once, through the spider cache the lmod role configures.

The tree on the cluster's NAS outlives test sessions: the fixture empties it first
(this cluster is the test cluster; nothing else publishes into it).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from slurmforge.contract import LMOD_LIBEXEC
from slurmforge.hosts import HostRole
from slurmforge.inventory import read_inventory
from slurmforge.lmod.node import open_inventory
from slurmforge.remote.node import NodeExecutor
from tests.harness.live import pip_cert_args
from tests.integration.conftest import ROOT, Cluster_

pytestmark = pytest.mark.integration

PYTHON = "apps/python/3.13"
SIX = "libs/python/six/1.16.0-python-3.13"
BROKEN = "libs/python/slurmforge-no-such-package/0.0.1-python-3.13"
DEFINITIONS: dict[str, dict[str, object]] = {
    PYTHON: yaml.safe_load((ROOT / "modules" / f"{PYTHON}.yaml").read_text()),
    SIX: yaml.safe_load((ROOT / "modules" / f"{SIX}.yaml").read_text()),
    "apps/ml-base/2024.06": {"kind": "meta", "depends_on": [PYTHON], "default": True},
    "apps/ml-base/2024.09": {"kind": "meta", "depends_on": [PYTHON, SIX]},
}


@dataclass
class Published:
    cluster: Cluster_
    inventory: Path
    modules: Path
    root: str
    node: NodeExecutor
    nodes: list[str]
    seconds: float

    def sf(self, *args: str, modules: Path | None = None) -> subprocess.CompletedProcess[str]:
        """`slurmforge modules ARGS --inventory ...`, as an admin runs it."""
        argv = [sys.executable, "-m", "slurmforge.cli", "modules", *args, "--inventory", str(self.inventory)]
        if args[0] in ("plan", "publish"):
            argv += ["--modules", str(modules or self.modules)]
        if args[0] == "publish":
            argv += pip_cert_args()
        return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=600)

    def everywhere(self, command: str) -> dict[str, str]:
        """stdout+stderr of a login shell command as alice, on every node."""
        procs = {n: subprocess.Popen(["podman", "exec", "-u", "alice", "-w", "/home/alice", n, "timeout", "60",
                                      "bash", "-lc", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True) for n in self.nodes}
        return {n: p.communicate(timeout=90)[0] for n, p in procs.items()}

    def avail(self) -> str:
        """`module -t avail` (from the spider cache), identical on every node."""
        seen = self.everywhere("module -t avail 2>&1")
        assert len(set(seen.values())) == 1, f"module avail differs between nodes: {seen}"
        return next(iter(seen.values()))

    def manifest(self) -> str | None:
        return self.node.read_file(f"{self.root}/.slurmforge/manifest.json")


def write_definitions(where: Path, definitions: dict[str, dict[str, object]]) -> Path:
    for full, data in definitions.items():
        path = where / f"{full}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data))
    return where


def one_error(res: subprocess.CompletedProcess[str]) -> str:
    """The single `error ...` line of a refused command; no traceback."""
    assert res.returncode != 0, res.stdout
    assert "Traceback" not in res.stderr, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error")]
    assert len(errors) == 1, res.stderr
    return errors[0]


@pytest.fixture(scope="module")
def published(cluster: Cluster_, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    inventory = cluster.report.inventory
    spec, node = open_inventory(inventory)
    root = spec.modules.root
    nodes = [h.name for h in read_inventory(inventory)[1] if not h.dynamic and h.role is not HostRole.CEPH]
    # start from an empty tree: keep the role's directories, drop what earlier sessions published
    wipe = node.run(["sh", "-c", 'cd "$1" && rm -rf install .slurmforge .staging modulefiles/* .cache/*',
                     "sh", root])
    assert wipe.ok, wipe.stderr
    p = Published(cluster, inventory, write_definitions(tmp_path_factory.mktemp("modules"), DEFINITIONS),
                  root, node, nodes, 0.0)
    start = time.monotonic()
    res = p.sf("publish", SIX)
    p.seconds = time.monotonic() - start
    print(f"[modules] publish {PYTHON} + {SIX} on {node.name}: {p.seconds:.1f} s", flush=True)
    assert res.returncode == 0, res.stdout + res.stderr
    yield p


JOB = """#!/bin/bash
module load libs/python/six/1.16.0-python-3.13
hostname
python -c 'import six, sys; print(six.__version__, six.__file__, sys.prefix)'
"""


def test_alice_loads_the_venv_module_in_a_batch_job_on_a_compute_node(published: Published) -> None:
    res = published.cluster.login(f"sbatch --wait --parsable -o mod-%j.out <<'EOF'\n{JOB}EOF")
    assert res.returncode == 0, res.stdout + res.stderr
    out = published.cluster.login(f"cat mod-{res.stdout.strip().split(';')[0]}.out").stdout
    lines = out.splitlines()
    assert len(lines) == 2, out
    assert lines[0] != published.cluster.report.login, "the job ran on the login node"
    version, path, prefix = lines[1].split()
    assert version == "1.16.0", out
    assert path.startswith(f"{published.root}/install/{SIX}/"), out
    assert prefix == f"{published.root}/install/{SIX}", out  # relocated from staging


def test_the_same_tree_on_every_node_from_the_refreshed_cache(published: Published) -> None:
    avail = published.avail().split()
    assert f"{PYTHON}" in avail and SIX in avail, avail
    uncached = published.everywhere("module -t --ignore_cache avail 2>&1")
    assert set(uncached.values()) == {"\n".join(avail) + "\n"}, "the spider cache is stale"


def test_publishing_again_is_a_no_op(published: Published) -> None:
    before = published.manifest()
    res = published.sf("publish", SIX)
    assert res.returncode == 0, res.stderr
    assert "0 published, 2 unchanged" in res.stdout, res.stdout
    assert published.manifest() == before


def test_lmod_checks_every_modulefile_without_error(published: Published) -> None:
    spider = published.everywhere("module --ignore_cache spider 2>&1; echo rc=$?")
    for node, out in spider.items():
        assert "rc=0" in out and "rror" not in out, f"{node}: {out}"
        assert "libs/python/six: libs/python/six/1.16.0-python-3.13" in out, f"{node}: {out}"
    syntax = published.node.run([f"{LMOD_LIBEXEC}/check_module_tree_syntax",
                                 f"{published.root}/modulefiles"])
    assert syntax.ok, syntax.stdout + syntax.stderr


def test_default_and_rollback_take_effect_on_every_node_at_once(published: Published) -> None:
    def loaded() -> set[str]:
        return {out.strip() for out in
                published.everywhere("module load apps/ml-base && module -t list 2>&1 | grep ml-base").values()}

    assert published.sf("publish", "apps/ml-base/2024.06", "apps/ml-base/2024.09").returncode == 0
    assert loaded() == {"apps/ml-base/2024.06"}
    changed = published.sf("default", "apps/ml-base/2024.09")
    assert changed.returncode == 0, changed.stderr
    assert loaded() == {"apps/ml-base/2024.09"}
    back = published.sf("rollback", "apps/ml-base")
    assert back.returncode == 0, back.stderr
    assert loaded() == {"apps/ml-base/2024.06"}
    assert published.sf("deprecate", "apps/ml-base/2024.09").returncode == 0
    assert "apps/ml-base/2024.09" not in published.avail().split()
    still = published.everywhere("module load apps/ml-base/2024.09 2>&1; module -t list 2>&1")
    assert all("deprecated" in out and "apps/ml-base/2024.09" in out for out in still.values()), still


def test_a_failed_publish_leaves_the_tree_and_manifest_as_they_were(published: Published,
                                                                    tmp_path: Path) -> None:
    modules = write_definitions(tmp_path, {**DEFINITIONS, BROKEN: {
        "kind": "venv", "depends_on": [PYTHON], "requirements": ["slurmforge-no-such-package==0.0.1"]}})
    before = (published.avail(), published.manifest())
    res = published.sf("publish", BROKEN, modules=modules)
    assert "pip install failed on" in one_error(res)
    assert (published.avail(), published.manifest()) == before
    leftovers = published.node.run(["find", f"{published.root}/.staging", "-not", "-type", "d"])
    assert leftovers.stdout == "", leftovers.stdout


BAD_INPUT = {
    "unknown-dependency": ({"apps/tool/1.0": {"kind": "meta", "depends_on": ["apps/nope/1.0"]}},
                           "apps/tool/1.0", "apps/nope/1.0"),
    "cycle": ({"apps/a/1.0": {"kind": "meta", "depends_on": ["apps/b/1.0"]},
               "apps/b/1.0": {"kind": "meta", "depends_on": ["apps/a/1.0"]}}, "apps/a/1.0", "cycle"),
    "bad-name": ({"libs/python/six/1.16.0": {"kind": "venv", "depends_on": [PYTHON],
                                             "requirements": ["six==1.16.0"]}}, "libs/python/six/1.16.0",
                 "python-"),
    "changed-version": ({SIX: {**DEFINITIONS[SIX], "requirements": ["six==1.16.0", "idna"]}}, SIX,
                        "immutable"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_and_publishes_nothing(published: Published, tmp_path: Path, case: str) -> None:
    extra, target, message = BAD_INPUT[case]
    modules = write_definitions(tmp_path, {**DEFINITIONS, **extra})
    before = (published.node.run(["find", f"{published.root}/modulefiles", f"{published.root}/install",
                                  "-maxdepth", "4"]).stdout, published.manifest())
    line = one_error(published.sf("publish", target, modules=modules))
    assert message in line, line
    after = (published.node.run(["find", f"{published.root}/modulefiles", f"{published.root}/install",
                                 "-maxdepth", "4"]).stdout, published.manifest())
    assert after == before


@pytest.mark.long
def test_a_change_that_missed_its_cache_refresh_is_healed_by_the_next_rollout(published: Published) -> None:
    """A modulefile copied in by hand (or a `modules` run killed between its write and its
    cache refresh) leaves every node answering from a stale cache; the next `up` rebuilds
    it (roles/lmod) when it runs Ansible: `up --full-rollout`, the way to repair drift (a
    plain `up` skips nodes that already have this rollout). The copy is removed afterwards
    and the cache refreshed again."""
    from slurmforge.lmod.tools import DEBIAN_LIBEXEC
    from slurmforge.local.up import up
    from tests.integration.conftest import SPEC, QuietPhases

    tree = f"{published.root}/modulefiles"
    stray = f"{tree}/{PYTHON.rsplit('/', 1)[0]}/3.99.lua"
    refresh = [f"{DEBIAN_LIBEXEC}/update_lmod_system_cache_files", "-d", f"{published.root}/.cache",
               "-t", f"{published.root}/.cache/timestamp", tree]
    copied = published.node.run(["cp", f"{tree}/{PYTHON}.lua", stray])
    assert copied.ok, copied.stderr
    try:
        assert "apps/python/3.99" not in published.avail(), "the copy should not be in the cache yet"
        report = up(SPEC, QuietPhases(), run_sample_job=False, full_rollout=True)
        assert report.rollout is not None and report.rollout.ok
        assert "apps/python/3.99" in published.avail().split(), "the rollout left the spider cache stale"
    finally:
        published.node.run(["rm", "-f", stray])
        assert published.node.run(refresh).ok
    assert "apps/python/3.99" not in published.avail()
