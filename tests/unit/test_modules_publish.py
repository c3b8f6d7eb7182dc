"""Publishing for real into a temporary tree: LocalExecutor, pip, and Debian's Lmod.

One session tree holds two Python modules, one venv (six from PyPI), two tree
versions and a meta module; the tests then ask real Lmod what users would see.
Skipped when Lmod (apt-get install lmod) or python3.11 with venv is missing.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from slurmforge.errors import ModuleError
from slurmforge.modules import Action, Actor, Lmod, LocalExecutor, ModuleTree, Tree, load_catalog
from slurmforge.modules.catalog import Catalog
from slurmforge.modules.lmod import DEBIAN_LIBEXEC

log = logging.getLogger(__name__)

LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")
PYTHON = "/usr/bin/python3.11"
HAVE = LMOD_INIT.exists() and Path(PYTHON).exists() and subprocess.run(
    [PYTHON, "-c", "import ensurepip, venv"], capture_output=True, check=False).returncode == 0
pytestmark = [pytest.mark.unit,
              pytest.mark.skipif(not HAVE, reason="needs lmod and python3.11 with venv (apt-get install lmod "
                                                  "python3-venv)")]

SIX = "libs/python/six/1.16.0-python-3.11"
BAD = "libs/python/slurmforge-no-such-package/1.0-python-3.11"


@dataclass
class Published:
    root: Path
    modules: Path  # definitions directory
    cache: Path
    tree: ModuleTree
    seconds: dict[str, float]

    def catalog(self) -> Catalog:
        return load_catalog(self.modules)


def write_definitions(modules: Path, sources: Path) -> None:
    (sources / "hello-1.0/bin").mkdir(parents=True)
    script = sources / "hello-1.0/bin/hello"
    script.write_text("#!/bin/sh\necho hello 1.0\n")
    script.chmod(0o755)
    (sources / "hello-2.0/bin").mkdir(parents=True)
    (sources / "hello-2.0/bin/hello").write_text("#!/bin/sh\necho hello 2.0\n")
    (sources / "hello-2.0/bin/hello").chmod(0o755)
    tarball = sources / "hello-2.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(sources / "hello-2.0", arcname="hello-2.0")
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    definitions = {
        "apps/python/3.11": {"kind": "python", "interpreter": PYTHON, "default": True},
        "apps/python/3.11.2": {"kind": "python", "interpreter": PYTHON},
        SIX: {"kind": "venv", "depends_on": ["apps/python/3.11"], "requirements": ["six==1.16.0"]},
        BAD: {"kind": "venv", "depends_on": ["apps/python/3.11"],
              "requirements": ["slurmforge-no-such-package==1.0"], "imports": ["sys"]},
        "apps/hello/1.0": {"kind": "tree", "source": {"path": str(sources / "hello-1.0")},
                           "files": ["bin/hello"], "prepend_path": {"PATH": ["bin"]}},
        "apps/hello/2.0": {"kind": "tree", "source": {"tarball": str(tarball), "sha256": digest,
                                                      "strip_components": 1},
                           "files": ["bin/hello"], "prepend_path": {"PATH": ["bin"]},
                           "setenv": {"HELLO_HOME": "{prefix}"}},
        "apps/hello/3.0": {"kind": "tree", "source": {"path": str(sources / "hello-1.0")}},
        "apps/ml-base/1.0": {"kind": "meta", "depends_on": ["apps/python/3.11", SIX]},
    }
    for full, data in definitions.items():
        path = modules / f"{full}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data))


def open_tree(root: Path, cache: Path | None = None) -> ModuleTree:
    clock = iter(datetime(2024, 6, 1, 12, 0, s, tzinfo=UTC) for s in range(60))
    return ModuleTree(LocalExecutor(), Tree(str(root)), Actor("admin", lambda: next(clock, datetime.now(UTC))),
                      Lmod(DEBIAN_LIBEXEC, str(cache) if cache else None))


@pytest.fixture(scope="session")
def published(tmp_path_factory: pytest.TempPathFactory) -> Published:
    base = tmp_path_factory.mktemp("modtree")
    modules, root, cache = base / "modules", base / "tree", base / "lmod-cache"
    write_definitions(modules, base / "sources")
    tree = open_tree(root, cache)
    catalog = load_catalog(modules)
    seconds = {}
    for full in ("apps/python/3.11", "apps/python/3.11.2", SIX, "apps/hello/1.0", "apps/hello/2.0",
                 "apps/ml-base/1.0"):
        start = time.monotonic()
        tree.publish(catalog, [full])
        seconds[full] = time.monotonic() - start
    log.info("publish seconds: %s", seconds)
    return Published(root, modules, cache, tree, seconds)


def module(root: Path, script: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `script` in a clean bash where `module` is Lmod over the tree (stdout+stderr)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root.parent), "MODULEPATH": str(root / "modulefiles")}
    if cache is not None:
        rc = root.parent / "lmodrc.lua"
        rc.write_text(f'scDescriptT = {{ {{ ["dir"] = "{cache}", ["timestamp"] = "{cache}/timestamp" }} }}\n')
        env["LMOD_RC"] = str(rc)
    return subprocess.run(["bash", "--noprofile", "--norc", "-c", f"source {LMOD_INIT}\n{script}"],
                          capture_output=True, text=True, env=env, check=False, timeout=120)


def avail(root: Path) -> str:
    done = module(root, "module -t --ignore_cache avail 2>&1")
    return done.stdout


def snapshot(root: Path) -> dict[str, str]:
    """Every published path (not the staging area) and the manifest's bytes."""
    paths = sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".staging" not in p.parts)
    manifest = (root / ".slurmforge/manifest.json").read_text()
    return {"paths": "\n".join(paths), "manifest": manifest, "avail": avail(root)}


# --------------------------------------------------------------------------- tests


def test_lmod_lists_every_module_with_no_error(published: Published) -> None:
    done = module(published.root, "module --ignore_cache spider 2>&1; echo rc=$?")
    assert "rc=0" in done.stdout and "error" not in done.stdout.lower()
    for full in ("apps/python/3.11", SIX, "apps/hello/2.0", "apps/ml-base/1.0"):
        assert full in done.stdout
    check = subprocess.run([f"{DEBIAN_LIBEXEC}/check_module_tree_syntax", str(published.root / "modulefiles")],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_venv_module_imports_its_package(published: Published) -> None:
    done = module(published.root, f"module load {SIX} && python -c 'import six, sys; print(six.__version__, "
                                  "sys.prefix)'")
    assert done.returncode == 0, done.stderr
    version, prefix = done.stdout.split()
    assert version == "1.16.0"
    assert prefix == str(published.root / "install" / SIX)
    venv = published.root / "install" / SIX
    assert (venv / "bin/pip").read_text().startswith(f"#!{venv}/bin/python")  # relocated from staging
    assert ".staging" not in (venv / "pyvenv.cfg").read_text() + (venv / "bin/activate").read_text()
    assert (venv / "requirements.lock").read_text().splitlines().count("six==1.16.0") == 1


def test_meta_module_loads_the_bundle(published: Published) -> None:
    done = module(published.root, "module load apps/ml-base && python -c 'import six' && module -t list 2>&1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["apps/python/3.11", SIX, "apps/ml-base/1.0"]


def test_tree_modules_from_path_and_checked_tarball(published: Published) -> None:
    done = module(published.root, "module load apps/hello/1.0 && hello && module load apps/hello/2.0 && hello "
                                  "&& echo $HELLO_HOME")
    assert done.stdout.split("\n")[:3] == ["hello 1.0", "hello 2.0", str(published.root / "install/apps/hello/2.0")]


def test_manifest_records_who_when_and_checksum(published: Published) -> None:
    m = published.tree.manifest()
    entry = m.modules[SIX]
    assert (entry.name, entry.version, entry.kind, entry.published_by) == ("libs/python/six", "1.16.0-python-3.11",
                                                                           "venv", "admin")
    assert entry.checksum.startswith("sha256:") and entry.published_at.endswith("Z")
    assert m.modules["apps/python/3.11"].default and m.default_of("apps/python") == "3.11"
    assert [e.action for e in m.history][:2] == ["publish", "default"]


def test_publishing_again_is_a_no_op(published: Published) -> None:
    before = snapshot(published.root)
    steps = published.tree.publish(published.catalog(), [SIX, "apps/hello/2.0"])
    assert {s.action for s in steps} == {Action.UNCHANGED}
    assert snapshot(published.root) == before


def test_changed_definition_under_a_published_version_is_refused(published: Published) -> None:
    before = snapshot(published.root)
    path = published.modules / "apps/hello/2.0.yaml"
    original = path.read_text()
    path.write_text(original + "help: now with more hello\n")
    try:
        with pytest.raises(ModuleError, match=r"apps/hello/2.0: already published with different content .* "
                                              r"versions are immutable; fix: publish the change as a new version"):
            published.tree.publish(published.catalog(), ["apps/hello/2.0"])
    finally:
        path.write_text(original)
    assert snapshot(published.root) == before


def test_failed_build_leaves_tree_and_manifest_byte_identical(published: Published) -> None:
    before = snapshot(published.root)
    with pytest.raises(ModuleError, match=f"{BAD}: pip install failed on local: .*slurmforge-no-such-package"):
        published.tree.publish(published.catalog(), [BAD])
    assert snapshot(published.root) == before
    assert not any(p.is_file() for p in (published.root / ".staging").rglob("*"))
    assert not (published.root / ".slurmforge/lock").exists()


def test_default_and_rollback_change_what_load_picks(published: Published) -> None:
    def picked() -> str:
        return module(published.root, "module load apps/python && module -t list 2>&1").stdout.strip()

    assert picked() == "apps/python/3.11"  # Lmod alone would pick the highest, 3.11.2
    assert published.tree.set_default("apps/python/3.11.2").action is Action.DEFAULT
    assert picked() == "apps/python/3.11.2"
    assert published.tree.set_default("apps/python/3.11.2").action is Action.UNCHANGED
    step = published.tree.rollback("apps/python")
    assert (step.module, step.action) == ("apps/python/3.11", Action.DEFAULT)
    assert picked() == "apps/python/3.11"
    with pytest.raises(ModuleError, match="apps/python: no earlier default recorded"):
        published.tree.rollback("apps/python")
    assert [e.action for e in published.tree.manifest().history][-2:] == ["default", "rollback"]


def test_deprecated_version_is_hidden_but_loads_with_a_message(published: Published) -> None:
    assert "apps/hello/1.0" in avail(published.root)
    with pytest.raises(ModuleError, match="is the default of apps/python"):
        published.tree.deprecate("apps/python/3.11")
    assert published.tree.deprecate("apps/hello/1.0").action is Action.DEPRECATE
    shown = avail(published.root)
    assert "apps/hello/1.0" not in shown and "apps/hello/2.0" in shown
    done = module(published.root, "module load apps/hello/1.0 && hello")
    assert done.stdout.strip() == "hello 1.0"
    assert "apps/hello/1.0 is deprecated" in done.stderr
    assert published.tree.manifest().modules["apps/hello/1.0"].deprecated
    assert published.tree.deprecate("apps/hello/1.0").action is Action.UNCHANGED
    with pytest.raises(ModuleError, match="deprecated and cannot be the default"):
        published.tree.set_default("apps/hello/1.0")


def test_spider_cache_is_refreshed_after_changes(published: Published) -> None:
    def spider() -> str:
        return module(published.root, "module -t spider 2>&1", cache=published.cache).stdout

    assert SIX in spider() and "apps/ml-base/1.0" in spider()
    # Lmod really answers from that cache: a modulefile added behind its back stays unseen ...
    stray = published.root / "modulefiles/apps/stray/1.0.lua"
    stray.parent.mkdir()
    stray.write_text('whatis("Description: added by hand")\n')
    stray.parent.chmod(0o755)
    stray.chmod(0o644)  # Lmod skips what others cannot read
    try:
        assert "apps/stray/1.0" not in spider()
        # ... until a change through slurmforge refreshes it
        published.tree.set_default("apps/hello/2.0")
        assert "apps/stray/1.0" in spider()
    finally:
        shutil.rmtree(stray.parent)
        published.tree.lmod.refresh_cache(published.tree.ex, published.tree.tree.modulepath)  # type: ignore[union-attr]
    assert "apps/stray/1.0" not in spider()


def test_leftovers_of_an_interrupted_publish_are_refused(published: Published) -> None:
    stray = published.root / "install/apps/hello/3.0"
    stray.mkdir(parents=True)
    try:
        [step] = published.tree.plan(published.catalog(), ["apps/hello/3.0"])
        assert step.action is Action.REFUSED and str(stray) in step.detail
        with pytest.raises(ModuleError, match="interrupted publish"):
            published.tree.publish(published.catalog(), ["apps/hello/3.0"])
    finally:
        stray.rmdir()
    [step] = published.tree.plan(published.catalog(), ["apps/hello/3.0"])
    assert step.action is Action.BUILD


def test_a_held_lock_refuses_changes(published: Published) -> None:
    lock = published.root / ".slurmforge/lock"
    lock.mkdir()
    (lock / "owner").write_text("alice since 2024-06-01T12:00:00Z\n")
    try:
        with pytest.raises(ModuleError, match="locked by alice since 2024-06-01T12:00:00Z; fix: wait"):
            published.tree.set_default("apps/hello/2.0")
    finally:
        shutil.rmtree(lock)


def test_publish_timings_are_reasonable(published: Published) -> None:
    log.warning("publish seconds: %s", {k: round(v, 2) for k, v in published.seconds.items()})
    assert published.seconds["apps/python/3.11"] < 5
    assert published.seconds[SIX] < 120


@pytest.fixture
def fresh_root(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "tree"


def test_venv_build_needs_its_python_published_first(fresh_root: Path, published: Published) -> None:
    tree = open_tree(fresh_root)
    steps = tree.plan(published.catalog(), [SIX])
    assert [(s.module, s.action) for s in steps] == [("apps/python/3.11", Action.BUILD), (SIX, Action.BUILD)]
