"""Module definitions: every valid-*.yaml and the repo's modules/ load; every
invalid-*.yaml fails with the problems its `# expect:` lines name (each a substring
of one reported line). Files in modules_specs/ map module names to definitions."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from slurmforge.errors import SpecError
from slurmforge.lmod.catalog import Catalog, load_bundle, load_catalog, validate_catalog
from slurmforge.lmod.definition import (
    ModuleName,
    checksum,
    is_scheme_name,
    lib_package,
    parse_definition,
    python_suffix,
    software_version,
    verify_imports,
)
from slurmforge.lmod.plan import StepKind, plan_steps
from slurmforge.lmod.tree import Entry, Manifest, Tree

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).parent / "modules_specs"
VALID = sorted(SPECS.glob("valid-*.yaml"))
INVALID = sorted(SPECS.glob("invalid-*.yaml"))


def expectations(path: Path) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in path.read_text().splitlines() if line.startswith("# expect:")]


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_bundle_loads(path: Path) -> None:
    assert load_bundle(path).modules


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_bundle_reports_each_expected_problem(path: Path) -> None:
    expected = expectations(path)
    assert expected, f"{path.name} has no '# expect:' line"
    with pytest.raises(SpecError) as info:
        load_bundle(path)
    lines = [p.line() for p in info.value.problems]
    for want in expected:
        assert any(want in line for line in lines), f"{want!r} not in:\n" + "\n".join(lines)
    assert all("\n" not in line for line in lines)


def test_repo_modules_load_and_follow_the_scheme() -> None:
    catalog = load_catalog(ROOT / "modules")
    assert {"apps/python/3.13", "libs/python/six/1.16.0-python-3.13", "apps/ml-base/2024.06"} <= set(catalog.modules)
    assert {d.kind for d in catalog.modules.values()} >= {"python", "venv", "meta"}
    assert all(is_scheme_name(full) for full in catalog.modules)


def test_directory_loader_names_modules_by_path_and_reports_every_file(tmp_path: Path) -> None:
    (tmp_path / "apps/python").mkdir(parents=True)
    (tmp_path / "apps/python/3.13.yaml").write_text("kind: python\ninterpreter: /usr/bin/python3.13\n")
    (tmp_path / "apps/broken").mkdir()
    (tmp_path / "apps/broken/1.0.yaml").write_text("kind: meta\ndepends_on: [apps/python/3.13\n")
    (tmp_path / "apps/tool").mkdir()
    (tmp_path / "apps/tool/1.0.yaml").write_text("kind: meta\ndepends_on: [apps/python/3.12]\n")
    (tmp_path / "oops.yaml").write_text("kind: meta\ndepends_on: [apps/python/3.13]\n")
    with pytest.raises(SpecError) as info:
        load_catalog(tmp_path)
    lines = sorted(p.line() for p in info.value.problems)
    assert lines[0].startswith("apps/broken/1.0: YAML syntax error at line 3")
    assert lines[1] == "oops: the name breaks the naming scheme; fix: name it apps/<name>/<version> or " \
                       "libs/python/<package>/<version>-python-<X.Y>"
    assert len(lines) == 2  # the relational rules wait until every file parses


def test_directory_loader_runs_relational_rules_once_all_parse(tmp_path: Path) -> None:
    (tmp_path / "apps/tool").mkdir(parents=True)
    (tmp_path / "apps/tool/1.0.yaml").write_text("kind: meta\ndepends_on: [apps/python/3.12]\n")
    with pytest.raises(SpecError) as info:
        load_catalog(tmp_path)
    assert [p.line() for p in info.value.problems] == [
        "apps/tool/1.0:depends_on[0]: unknown module (got 'apps/python/3.12'); "
        "fix: add modules/apps/python/3.12.yaml or fix the name"]


def test_missing_directory_is_one_problem(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="problem"):
        load_catalog(tmp_path / "nope")


def test_names_split_like_lmod() -> None:
    mn = ModuleName.parse("libs/python/torch/1.13.1-cuda-11.7-python-3.10")
    assert (mn.name, mn.version) == ("libs/python/torch", "1.13.1-cuda-11.7-python-3.10")
    assert python_suffix(mn.full) == "3.10"
    assert lib_package(mn.full) == ("torch", "1.13.1")
    assert lib_package("libs/python/neptune-client/1.9.1-python-3.10") == ("neptune-client", "1.9.1")
    assert python_suffix("apps/python/3.10") is None
    with pytest.raises(ValueError):
        ModuleName.parse("python")


def test_checksum_covers_content_not_tree_state() -> None:
    base = {"kind": "python", "interpreter": "/usr/bin/python3.13", "help": "x"}
    plain = checksum("apps/python/3.13", parse_definition(base))
    assert plain.startswith("sha256:") and len(plain) == 7 + 64
    assert checksum("apps/python/3.13", parse_definition(dict(reversed(base.items())))) == plain
    assert checksum("apps/python/3.13", parse_definition({**base, "default": True, "deprecated": True})) == plain
    assert checksum("apps/python/3.13", parse_definition({**base, "help": "y"})) != plain
    assert checksum("apps/python/3.12", parse_definition(base)) != plain


def test_resolve_puts_dependencies_first() -> None:
    catalog = load_bundle(SPECS / "valid-seed-002.yaml")
    order = catalog.resolve(["apps/ml-base/2024.06"])
    assert order == ["apps/python/3.10", "apps/cuda/11.7", "libs/python/torch/1.13.1-cuda-11.7-python-3.10",
                     "apps/ml-base/2024.06"]
    [line] = [p.line() for p in catalog.unknown(["apps/python/3.1"])]
    assert line.startswith("apps/python/3.1: no such module definition; fix: did you mean apps/python/3.1")


def test_venv_checks_import_the_named_package_unless_told() -> None:
    venv = validate_catalog({
        "apps/python/3.13": {"kind": "python", "interpreter": "/usr/bin/python3.13"},
        "libs/python/typing-extensions/4.12.2-python-3.13": {
            "kind": "venv", "depends_on": ["apps/python/3.13"], "requirements": ["typing-extensions==4.12.2"]},
    }, "test")
    full = "libs/python/typing-extensions/4.12.2-python-3.13"
    d = venv.get(full)
    assert d.kind == "venv"
    assert verify_imports(full, d) == ["typing_extensions"]  # type: ignore[arg-type]


def test_an_empty_write_files_leaves_the_checksum_of_versions_published_before() -> None:
    """write_files came after versions were published: while empty it is not in the checksum."""
    d = parse_definition({"kind": "debian", "packages": ["openmpi-bin"]})
    assert checksum("apps/openmpi/5.0", d) == (
        "sha256:" + hashlib.sha256(
            b'{"definition":{"append_path":{},"category":"","depends_on":[],"files":[],"help":"","imports":[],'
            b'"kind":"debian","packages":["openmpi-bin"],"prepend_path":{},"setenv":{},"whatis":""},'
            b'"name":"apps/openmpi/5.0"}').hexdigest())
    shimmed = parse_definition({"kind": "debian", "packages": ["openmpi-bin"], "write_files": {"a.txt": "x"}})
    changed = parse_definition({"kind": "debian", "packages": ["openmpi-bin"], "write_files": {"a.txt": "y"}})
    assert len({checksum("apps/openmpi/5.0", x) for x in (d, shimmed, changed)}) == 3


def versions_lock() -> dict[str, str]:
    """modules/versions.lock: every version the repository has defined -> its checksum."""
    text = (ROOT / "modules" / "versions.lock").read_text()
    return dict(line.split() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def published(lock: dict[str, str]) -> Manifest:
    """A tree that holds every version of the lock, as `modules publish` recorded them."""
    entries = {}
    for full, sha in lock.items():
        mn = ModuleName.parse(full)
        entries[full] = Entry(name=mn.name, version=mn.version, kind="debian", checksum=sha, published_by="admin",
                              published_at="2026-01-01T00:00:00Z", definition={})
    return Manifest(modules=entries)


def test_a_cluster_that_published_every_version_takes_modules_as_they_are_now() -> None:
    """`modules publish --all` on a tree holding every version the repository ever defined:
    nothing refused (a changed definition under a published name is refused there, and a
    cluster would never get the change), nothing new that the lock does not name."""
    lock = versions_lock()
    catalog = load_catalog(ROOT / "modules")
    steps = plan_steps(catalog, catalog.names(), published(lock), set(), Tree("/opt/software/modules"))
    refused = [f"{s.module}: {s.detail}" for s in steps if s.action is StepKind.REFUSED]
    assert refused == [], "publish the change as a new version (a revision: -r<N>):\n" + "\n".join(refused)
    unlisted = [f"{full} {checksum(full, catalog.get(full))}" for full in catalog.names() if full not in lock]
    assert unlisted == [], "add to modules/versions.lock:\n" + "\n".join(unlisted)
    assert {s.action for s in steps} == {StepKind.UNCHANGED}


@pytest.mark.parametrize(("first", "now"), [
    ("libs/python/torch/2.6.0-python-3.13", "libs/python/torch/2.6.0-r3-python-3.13"),
    ("apps/openmpi/5.0", "apps/openmpi/5.0-r2"),
    ("libs/python/mpi4py/4.0.3-python-3.13", "libs/python/mpi4py/4.0.3-r2-python-3.13"),
])
def test_a_revision_under_its_first_versions_name_would_be_refused(first: str, now: str) -> None:
    """What the lock guards against: the revised definition published under the name clusters
    already hold would be refused there, so the revision carries a name of its own."""
    catalog = load_catalog(ROOT / "modules")
    renamed = Catalog({**catalog.modules, first: catalog.get(now)})
    [step] = [s for s in plan_steps(renamed, [first], published(versions_lock()), set(), Tree("/opt/software/modules"))
              if s.module == first]
    assert step.action is StepKind.REFUSED and "already published with different content" in step.detail
    assert software_version(first) == software_version(now)


def test_a_revision_names_the_same_software() -> None:
    """The build checks the first package's version against this: 5.0-r2 is Open MPI 5.0."""
    assert [software_version(full) for full in ("apps/openmpi/5.0-r2", "apps/openmpi/5.0", "apps/x/1.0-rc1",
                                                "libs/python/torch/2.6.0-r3-python-3.13")] == [
        "5.0", "5.0", "1.0-rc1", "2.6.0"]
