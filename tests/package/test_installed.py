"""slurmforge as a user installs it: the wheel and the sdist built from this tree (hatchling's
own hooks, offline), the wheel installed into a fresh venv with its dependencies from the
package index, and the installed `slurmforge` run from a directory outside the clone, as
someone else than root (so its state goes to that user's own state directory), with
nothing of the clone on its path.

The venv is kept between runs under the cache, named after the wheel's digest: an unchanged
tree installs nothing again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmforge import package_data, wheel

pytestmark = pytest.mark.package

ROOT = Path(__file__).resolve().parents[2]
BUILD = ("import sys; from hatchling.build import build_sdist, build_wheel; "
         "print(build_wheel(sys.argv[1])); print(build_sdist(sys.argv[1]))")
INFO = "slurmforge-0.1.0.dist-info/"


@dataclass
class Dists:
    wheel: Path
    sdist: Path


def build(source: Path, out: Path) -> Dists:
    """The wheel and the sdist of `source`, as `python -m build` would make them (same hooks)."""
    res = subprocess.run([sys.executable, "-c", BUILD, str(out)], cwd=source, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    wheel_name, sdist_name = res.stdout.split()
    return Dists(out / wheel_name, out / sdist_name)


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    return build(ROOT, tmp_path_factory.mktemp("dist"))


def names(archive: Path) -> set[str]:
    with zipfile.ZipFile(archive) as z:
        return set(z.namelist())


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "slurmforge" / "test-installed"


@pytest.fixture(scope="module")
def venv(dists: Dists) -> Path:
    """A fresh venv with the wheel installed as a user would (`pip install slurmforge-*.whl`:
    the dependencies from the index), kept while the wheel's bytes do not change."""
    key = hashlib.sha256(dists.wheel.read_bytes()).hexdigest()[:16]
    root = cache_dir()
    target = root / key
    if not (target / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)  # only the current wheel's venv is kept
        subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, timeout=120)
        res = subprocess.run([str(target / "bin" / "pip"), "install", "--quiet", str(dists.wheel)],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout[-1000:] + res.stderr[-2000:]
        (target / ".complete").touch()
    return target


@dataclass
class Outside:
    """A directory outside the clone, a home of its own, and how to run the installed tool there."""

    cwd: Path
    home: Path
    venv: Path

    def run(self, *args: str, tool: str = "slurmforge") -> subprocess.CompletedProcess[str]:
        env = {"PATH": f"{self.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(self.home),
               "LANG": "C.UTF-8", "COLUMNS": "200"}
        not_root = ["unshare", "--user"] if os.geteuid() == 0 else []  # a user's state dir, not /var/lib
        return subprocess.run([*not_root, str(self.venv / "bin" / tool), *args], cwd=self.cwd, env=env,
                              capture_output=True, text=True, timeout=120)

    def python(self, code: str) -> str:
        res = self.run("-c", code, tool="python")
        assert res.returncode == 0, res.stderr
        return res.stdout.strip()


@pytest.fixture()
def outside(venv: Path, tmp_path: Path) -> Iterator[Outside]:
    cwd, home = tmp_path / "work", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    assert not cwd.is_relative_to(ROOT)
    yield Outside(cwd, home, venv)


def site_files(venv: Path) -> set[Path]:
    """The installed package's files (what pip put there, and the bytecode Python writes)."""
    (package,) = venv.glob("lib/python*/site-packages/slurmforge")
    return {p for p in package.rglob("*") if "__pycache__" not in p.parts}


# ------------------------------------------------------------------ what the wheel holds


def test_the_wheel_holds_everything_the_product_runs(dists: Dists) -> None:
    """Every file of playbooks/, roles/, templates/, stacks/ and examples/ inside the package,
    every module of slurmforge/ (its sub-packages too), the live-cluster validation suite and
    the data files; no tests, benches or docs."""
    held = names(dists.wheel)
    for shipped in package_data.SHIPPED:
        tree = {f"slurmforge/{shipped}/{p.relative_to(ROOT / shipped).as_posix()}"
                for p in (ROOT / shipped).rglob("*") if p.is_file() and "__pycache__" not in p.parts}
        assert tree and tree <= held, f"{shipped}: missing from the wheel: {sorted(tree - held)[:5]}"
    assert {"slurmforge/validation/conftest.py", "slurmforge/validation/test_cluster.py",
            "slurmforge/validation/test_ceph.py", "slurmforge/data/prices.yaml",
            "slurmforge/playbooks/ansible.cfg", "slurmforge/stacks/program.py"} <= held
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "slurmforge").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert "slurmforge/slurm/client.py" in modules and modules <= held, sorted(modules - held)[:5]
    assert not [n for n in held if n.startswith(("tests/", "bench/", "docs/", "slurmforge/tests/"))]
    assert {n.split("/")[0] for n in held} == {"slurmforge", INFO.rstrip("/")}


def test_the_sdist_builds_the_same_wheel(dists: Dists, tmp_path: Path) -> None:
    """`pip install` of the sdist builds its wheel from what the sdist holds: the same files."""
    with tarfile.open(dists.sdist) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    (source,) = (tmp_path / "src").iterdir()
    again = build(source, tmp_path / "dist")
    assert names(again.wheel) == names(dists.wheel)


def test_the_service_wheel_the_rollout_makes_holds_the_same_files(dists: Dists, tmp_path: Path) -> None:
    """slurmforge.wheel (what the controller's service venv installs) packs the running
    package - here the clone - into the wheel the build makes, file for file."""
    made = wheel.build(tmp_path)
    assert made.name == dists.wheel.name
    with zipfile.ZipFile(made) as ours, zipfile.ZipFile(dists.wheel) as built:
        ours_files = {n: ours.read(n) for n in ours.namelist() if not n.startswith(INFO)}
        built_files = {n: built.read(n) for n in built.namelist() if not n.startswith(INFO)}
    assert ours_files == built_files


# ------------------------------------------------------------------ the installed tool


def test_the_installed_package_finds_its_files_inside_itself(outside: Outside) -> None:
    found = json.loads(outside.python(
        "import json, slurmforge.package_data as p; "
        "print(json.dumps([str(p.package_dir()), str(p.root()), str(p.playbooks()), str(p.validation_suite())]))"))
    package, root, playbooks, suite = map(Path, found)
    assert package == root and package.parent.name == "site-packages" and package.is_relative_to(outside.venv)
    assert (playbooks / "site.yml").is_file() and (suite / "conftest.py").is_file()
    assert outside.python("import importlib.util as u; print(u.find_spec('slurmforge.stacks.program').origin)") \
        == str(root / "stacks" / "program.py")


def test_the_installed_tool_works_outside_the_clone(outside: Outside) -> None:
    """--help, validate, render, and an AWS stack's inventory from its saved outputs: from a
    directory with nothing of the clone; the inventory goes to the user's state directory,
    nothing into the current directory or the installed package."""
    from tests.harness.rehearsal.stack import stack_output_json
    from tests.pulumi.conftest import POOLS_AWS, run_stack

    before = site_files(outside.venv)
    shutil.copy(ROOT / "examples" / "local.yaml", outside.cwd / "cluster.yaml")
    shutil.copy(POOLS_AWS, outside.cwd / "pools-aws.yaml")
    outputs = {**stack_output_json(run_stack(POOLS_AWS)), "spec": "pools-aws.yaml"}  # as `pulumi up` names it
    (outside.cwd / "outputs.json").write_text(json.dumps(outputs))
    mine = {"cluster.yaml", "pools-aws.yaml", "outputs.json"}

    res = outside.run("--help")
    assert res.returncode == 0 and "validate" in res.stdout and "rollout" in res.stdout, res.stderr
    res = outside.run("validate")
    assert res.returncode == 0 and "dev" in res.stdout, res.stdout + res.stderr
    res = outside.run("render", "--out", "rendered")
    assert res.returncode == 0, res.stderr
    assert "ClusterName=dev" in (outside.cwd / "rendered" / "slurm.conf").read_text()
    mine.add("rendered")

    res = outside.run("inventory", "--from-stack-outputs", "outputs.json", "--no-fetch-secrets")
    assert res.returncode == 0, res.stdout + res.stderr
    inventory = outside.home / ".local" / "state" / "slurmforge" / "inventories" / "mlpools"
    assert f"wrote inventory {inventory}" in res.stdout
    assert (inventory / "hosts.yml").is_file() and (inventory / "rendered" / "join.sh").is_file()
    assert {p.name for p in outside.cwd.iterdir()} == mine
    assert site_files(outside.venv) == before

    # what needs an extra says which, in one line (the wheel alone has no Ansible or testinfra)
    for args in (["rollout", "--inventory", str(inventory)], ["validate", "--inventory", str(inventory)]):
        res = outside.run(*args)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert "pipx install 'slurmforge[deploy]'" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_the_installed_service_programs_start(outside: Outside) -> None:
    """The entry points the controller's venv runs come with the wheel."""
    for tool in ("slurmforge-service", "slurmforge-resume"):
        assert (outside.venv / "bin" / tool).exists()
    res = outside.run("--help", tool="slurmforge-service")
    assert res.returncode == 0, res.stderr


PROGRAM = """
import asyncio, json, sys
import pulumi
import slurmforge.stacks.program as program  # what the user's __main__.py of docs/aws.md imports
from tests.pulumi.conftest import RecordingMocks

assert program.__file__.startswith(sys.argv[1]), program.__file__
pulumi.runtime.set_mocks(RecordingMocks(), project="slurmforge", stack="mine", preview=False)
pulumi.runtime.set_all_config({"slurmforge:spec": "pools-aws.yaml", "aws:region": "us-east-1"})
exported = {}
pulumi.export = lambda key, value: exported.__setitem__(key, value)
outputs = {}

async def resolve():
    for key, value in exported.items():
        outputs[key] = await pulumi.Output.from_input(value).future()

@pulumi.runtime.test
def up():
    program.main()
    return asyncio.ensure_future(resolve())

up()
print(json.dumps({"cluster": outputs["cluster"], "spec": outputs["spec"]}))
"""


def test_the_installed_pulumi_program_runs_from_a_project_of_the_users(outside: Outside) -> None:
    """docs/aws.md's Pulumi project for an installed slurmforge: its __main__.py imports
    slurmforge.stacks.program, which reads the spec relative to the project (under the
    mocks: the current directory) and builds the cluster. Pulumi and pulumi-aws (the `aws`
    extra) come from this test's venv; every slurmforge module from the installed one."""
    from tests.pulumi.conftest import POOLS_AWS

    shutil.copy(POOLS_AWS, outside.cwd / "pools-aws.yaml")
    (site,) = outside.venv.glob("lib/python*/site-packages")
    env = {**os.environ, "PYTHONPATH": f"{site}:{ROOT}", "PYTHONDONTWRITEBYTECODE": "1"}
    res = subprocess.run([sys.executable, "-c", PROGRAM, str(site)], cwd=outside.cwd, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == {"cluster": "mlpools", "spec": "pools-aws.yaml"}
