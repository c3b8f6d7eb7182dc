"""Publishing for real into a temporary tree, on the node image: a NodeExecutor on the
judge (tests/judge.py) runs python3.13, pip and Lmod there, as on a node.

One session tree holds two Python modules, one venv (six from PyPI, through podman's
network), two tree versions, a meta module and two debian modules (Debian 13 packages the
image lacks, one on top of the other); the tests then ask the node image's Lmod what users
would see. The tree lives under /tmp, the same path in the judge and here.
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
from lmod_node import PYTHON, check_syntax, in_judge, module, node_executor

from slurmforge.errors import ModuleError, RemoteError
from slurmforge.lmod.catalog import Catalog, load_catalog
from slurmforge.lmod.plan import StepKind
from slurmforge.lmod.publisher import Actor, ModuleTree
from slurmforge.lmod.tools import DEBIAN_LIBEXEC, Lmod
from slurmforge.lmod.tree import Tree
from tests.judge import Judge

log = logging.getLogger(__name__)

pytestmark = pytest.mark.unit

HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
SIX = "libs/python/six/1.16.0-python-3.13"
BAD = "libs/python/slurmforge-no-such-package/1.0-python-3.13"
SORTED = "libs/python/sortedcontainers/2.4.0-python-3.13"
HYPOTHESIS = "libs/python/hypothesis/6.130.5-python-3.13"
WRONG_DEB = "libs/python/sortedcontainers/9.9-python-3.13"


@dataclass
class Published:
    judge: Judge
    root: Path
    modules: Path  # definitions directory
    cache: Path
    tree: ModuleTree
    patch: str  # apps/python/3.13.N, N the image's patch level: the second Python module
    seconds: dict[str, float]

    def catalog(self) -> Catalog:
        return load_catalog(self.modules)

    def module(self, script: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
        return module(self.judge, self.root, script, cache)


def python_patch(judge: Judge) -> str:
    """apps/python/3.13.N for the image's python3.13 (a build checks the version it names)."""
    done = in_judge(judge, [PYTHON, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
    assert done.returncode == 0, done.stderr
    return f"apps/python/{done.stdout.strip()}"


def write_definitions(modules: Path, sources: Path, patch: str) -> None:
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
        "apps/python/3.13": {"kind": "python", "interpreter": PYTHON, "default": True},
        patch: {"kind": "python", "interpreter": PYTHON},
        SIX: {"kind": "venv", "depends_on": ["apps/python/3.13"], "requirements": ["six==1.16.0"]},
        BAD: {"kind": "venv", "depends_on": ["apps/python/3.13"],
              "requirements": ["slurmforge-no-such-package==1.0"], "imports": ["sys"]},
        "apps/hello/1.0": {"kind": "tree", "source": {"path": str(sources / "hello-1.0")},
                           "files": ["bin/hello"], "prepend_path": {"PATH": ["bin"]}},
        "apps/hello/2.0": {"kind": "tree", "source": {"tarball": str(tarball), "sha256": digest,
                                                      "strip_components": 1},
                           "files": ["bin/hello"], "prepend_path": {"PATH": ["bin"]},
                           "setenv": {"HELLO_HOME": "{prefix}"}},
        "apps/hello/3.0": {"kind": "tree", "source": {"path": str(sources / "hello-1.0")}},
        "apps/ml-base/1.0": {"kind": "meta", "depends_on": ["apps/python/3.13", SIX]},
        SORTED: {"kind": "debian", "depends_on": ["apps/python/3.13"], "packages": ["python3-sortedcontainers"],
                 "imports": ["sortedcontainers"]},
        HYPOTHESIS: {"kind": "debian", "depends_on": ["apps/python/3.13", SORTED], "packages": ["python3-hypothesis"],
                     "imports": ["hypothesis"]},
        WRONG_DEB: {"kind": "debian", "depends_on": ["apps/python/3.13"], "packages": ["python3-sortedcontainers"]},
    }
    for full, data in definitions.items():
        path = modules / f"{full}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data))


def open_tree(judge: Judge, root: Path, cache: Path | None = None) -> ModuleTree:
    clock = iter(datetime(2024, 6, 1, 12, 0, s, tzinfo=UTC) for s in range(60))
    return ModuleTree(node_executor(judge), Tree(str(root)),
                      Actor("admin", lambda: next(clock, datetime.now(UTC))),
                      Lmod(DEBIAN_LIBEXEC, str(cache) if cache else None), pip_env=pip_env(root.parent))


def pip_env(base: Path) -> dict[str, str]:
    """What this machine trusts, for pip in the judge (a TLS-intercepting proxy, if any):
    the CLI's --pip-cert, copied where the judge sees it."""
    if not HOST_CA.exists():
        return {}
    ca = base / "pip-ca.pem"
    shutil.copyfile(HOST_CA, ca)
    return {"PIP_CERT": str(ca)}


@pytest.fixture(scope="session")
def published(judge: Judge, tmp_path_factory: pytest.TempPathFactory) -> Published:
    base = tmp_path_factory.mktemp("modtree")
    modules, root, cache = base / "modules", base / "tree", base / "lmod-cache"
    patch = python_patch(judge)
    write_definitions(modules, base / "sources", patch)
    tree = open_tree(judge, root, cache)
    catalog = load_catalog(modules)
    seconds = {}
    for full in ("apps/python/3.13", patch, SIX, "apps/hello/1.0", "apps/hello/2.0", "apps/ml-base/1.0", SORTED,
                 HYPOTHESIS):
        start = time.monotonic()
        tree.publish(catalog, [full])
        seconds[full] = time.monotonic() - start
    log.info("publish seconds: %s", seconds)
    return Published(judge, root, modules, cache, tree, patch, seconds)


def avail(published: Published) -> str:
    return published.module("module -t --ignore_cache avail 2>&1").stdout


def snapshot(published: Published) -> dict[str, str]:
    """Every published path (not the staging area) and the manifest's bytes."""
    root = published.root
    paths = sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".staging" not in p.parts)
    manifest = (root / ".slurmforge/manifest.json").read_text()
    return {"paths": "\n".join(paths), "manifest": manifest, "avail": avail(published)}


# --------------------------------------------------------------------------- tests


def test_lmod_lists_every_module_with_no_error(published: Published) -> None:
    done = published.module("module --ignore_cache spider 2>&1; echo rc=$?")
    assert "rc=0" in done.stdout and "error" not in done.stdout.lower()
    for full in ("apps/python/3.13", SIX, "apps/hello/2.0", "apps/ml-base/1.0"):
        assert full in done.stdout
    check = check_syntax(published.judge, published.root / "modulefiles")
    assert check.returncode == 0, check.stdout + check.stderr


def test_venv_module_imports_its_package(published: Published) -> None:
    done = published.module(f"module load {SIX} && python -c 'import six, sys; print(six.__version__, "
                                  "sys.prefix)'")
    assert done.returncode == 0, done.stderr
    version, prefix = done.stdout.split()
    assert version == "1.16.0"
    assert prefix == str(published.root / "install" / SIX)
    venv = published.root / "install" / SIX
    # relocated from staging: pip's launcher names the published interpreter in its shebang,
    # or, a path past the kernel's 127-byte shebang limit, in the sh trampoline pip writes
    head = (venv / "bin/pip").read_text().splitlines()[:2]
    assert head[0] == f"#!{venv}/bin/python" or (
        head[0] == "#!/bin/sh" and head[1].startswith("'''exec' " + f"{venv}/bin/python ")), head
    assert ".staging" not in (venv / "pyvenv.cfg").read_text() + (venv / "bin/activate").read_text()
    assert (venv / "requirements.lock").read_text().splitlines().count("six==1.16.0") == 1


def test_meta_module_loads_the_bundle(published: Published) -> None:
    done = published.module("module load apps/ml-base && python -c 'import six' && module -t list 2>&1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["apps/python/3.13", SIX, "apps/ml-base/1.0"]


def test_debian_modules_unpack_what_the_image_lacks_and_what_a_dependency_carries_once(published: Published) -> None:
    locks = {full: (published.root / "install" / full / "packages.lock").read_text().split()
             for full in (SORTED, HYPOTHESIS)}
    assert [line.split("=")[0] for line in locks[SORTED]] == ["python3-sortedcontainers"]
    # hypothesis needs attr and sortedcontainers: attr comes along, sortedcontainers is its dependency's
    assert [line.split("=")[0] for line in locks[HYPOTHESIS]] == ["python3-attr", "python3-hypothesis"]
    done = published.module(f"module load {HYPOTHESIS} && python -c 'import hypothesis, sortedcontainers, attr; "
                            "print(hypothesis.__version__, sortedcontainers.__file__)'")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("6.130.5 ") and f"/install/{SORTED}/usr/lib/python3/" in done.stdout, done.stdout
    assert published.module("python3 -c 'import hypothesis'").returncode != 0  # nothing reached the image


def test_a_debian_module_named_after_another_version_is_refused(published: Published) -> None:
    before = snapshot(published)
    wrong = r"python3-sortedcontainers is 2\.4\.0-2, not 9\.9; fix: name the module after 2\.4\.0"
    with pytest.raises(ModuleError, match=wrong):
        published.tree.publish(published.catalog(), [WRONG_DEB])
    assert snapshot(published) == before


def test_tree_modules_from_path_and_checked_tarball(published: Published) -> None:
    done = published.module("module load apps/hello/1.0 && hello && module load apps/hello/2.0 && hello "
                                  "&& echo $HELLO_HOME")
    assert done.stdout.split("\n")[:3] == ["hello 1.0", "hello 2.0", str(published.root / "install/apps/hello/2.0")]


def test_manifest_records_who_when_and_checksum(published: Published) -> None:
    m = published.tree.manifest()
    entry = m.modules[SIX]
    assert (entry.name, entry.version, entry.kind, entry.published_by) == ("libs/python/six", "1.16.0-python-3.13",
                                                                           "venv", "admin")
    assert entry.checksum.startswith("sha256:") and entry.published_at.endswith("Z")
    assert m.modules["apps/python/3.13"].default and m.default_of("apps/python") == "3.13"
    assert [e.action for e in m.history][:2] == ["publish", "default"]


def test_publishing_again_is_a_no_op(published: Published) -> None:
    before = snapshot(published)
    steps = published.tree.publish(published.catalog(), [SIX, "apps/hello/2.0"])
    assert {s.action for s in steps} == {StepKind.UNCHANGED}
    assert snapshot(published) == before


def test_changed_definition_under_a_published_version_is_refused(published: Published) -> None:
    before = snapshot(published)
    path = published.modules / "apps/hello/2.0.yaml"
    original = path.read_text()
    path.write_text(original + "help: now with more hello\n")
    try:
        with pytest.raises(ModuleError, match=r"apps/hello/2.0: already published with different content .* "
                                              r"versions are immutable; fix: publish the change as a new version"):
            published.tree.publish(published.catalog(), ["apps/hello/2.0"])
    finally:
        path.write_text(original)
    assert snapshot(published) == before


def test_failed_build_leaves_tree_and_manifest_byte_identical(published: Published) -> None:
    before = snapshot(published)
    with pytest.raises(RemoteError, match=f"{BAD}: pip install failed on {published.judge.name}: "
                                          ".*slurmforge-no-such-package"):
        published.tree.publish(published.catalog(), [BAD])
    assert snapshot(published) == before
    assert not any(p.is_file() for p in (published.root / ".staging").rglob("*"))
    assert not (published.root / ".slurmforge/lock").exists()


def test_default_and_rollback_change_what_load_picks(published: Published) -> None:
    def picked() -> str:
        return published.module("module load apps/python && module -t list 2>&1").stdout.strip()

    assert picked() == "apps/python/3.13"  # Lmod alone would pick the highest, 3.13.N
    assert published.tree.set_default(published.patch).action is StepKind.DEFAULT
    assert picked() == published.patch
    assert published.tree.set_default(published.patch).action is StepKind.UNCHANGED
    step = published.tree.rollback("apps/python")
    assert (step.module, step.action) == ("apps/python/3.13", StepKind.DEFAULT)
    assert picked() == "apps/python/3.13"
    with pytest.raises(ModuleError, match="apps/python: no earlier default recorded"):
        published.tree.rollback("apps/python")
    assert [e.action for e in published.tree.manifest().history][-2:] == ["default", "rollback"]


def test_deprecated_version_is_hidden_but_loads_with_a_message(published: Published) -> None:
    assert "apps/hello/1.0" in avail(published)
    with pytest.raises(ModuleError, match="is the default of apps/python"):
        published.tree.deprecate("apps/python/3.13")
    assert published.tree.deprecate("apps/hello/1.0").action is StepKind.DEPRECATE
    shown = avail(published)
    assert "apps/hello/1.0" not in shown and "apps/hello/2.0" in shown
    done = published.module("module load apps/hello/1.0 && hello")
    assert done.stdout.strip() == "hello 1.0"
    assert "apps/hello/1.0 is deprecated" in done.stderr
    assert published.tree.manifest().modules["apps/hello/1.0"].deprecated
    assert published.tree.deprecate("apps/hello/1.0").action is StepKind.UNCHANGED
    with pytest.raises(ModuleError, match="deprecated and cannot be the default"):
        published.tree.set_default("apps/hello/1.0")


def test_spider_cache_is_refreshed_after_changes(published: Published) -> None:
    def spider() -> str:
        return published.module("module -t spider 2>&1", cache=published.cache).stdout

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
        assert step.action is StepKind.REFUSED and str(stray) in step.detail
        with pytest.raises(ModuleError, match="interrupted publish"):
            published.tree.publish(published.catalog(), ["apps/hello/3.0"])
    finally:
        stray.rmdir()
    [step] = published.tree.plan(published.catalog(), ["apps/hello/3.0"])
    assert step.action is StepKind.BUILD


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
    assert published.seconds["apps/python/3.13"] < 5
    assert published.seconds[SIX] < 120


@pytest.fixture
def fresh_root(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "tree"


def test_venv_build_needs_its_python_published_first(fresh_root: Path, published: Published) -> None:
    tree = open_tree(published.judge, fresh_root)
    steps = tree.plan(published.catalog(), [SIX])
    assert [(s.module, s.action) for s in steps] == [("apps/python/3.13", StepKind.BUILD), (SIX, StepKind.BUILD)]
