"""`slurmforge` starts fast because a command imports only what it uses: `--help` loads no
spec models, templates, YAML or rich; `validate` no Ansible, Pulumi, boto3, Jinja or rich.
Checked by what a real process imported (sys.modules at its end), not by timing: the
times are bench/startup_bench.py's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

CLOUD_AND_DEPLOY = {"boto3", "botocore", "pulumi", "pulumi_aws", "pulumi_random", "ansible", "ansible_runner",
                    "testinfra", "podman", "matplotlib", "moto"}
"""What no command below needs: the AWS SDK, Pulumi, Ansible, the plots."""
RENDERING = {"jinja2", "rich"}
SPEC = {"pydantic", "pydantic_core", "yaml", "slurmforge.spec"}

PROBE = """
import os, runpy, sys
sys.argv = ["slurmforge", *sys.argv[1:]]
try:
    runpy.run_module("slurmforge.cli", run_name="__main__")
except SystemExit as exc:
    status = exc.code or 0
with open(os.environ["MODULES_OUT"], "w") as out:
    out.write("\\n".join(sorted(sys.modules)))
sys.exit(status)
"""


def imported(tmp_path: Path, *argv: str) -> set[str]:
    """The modules `slurmforge ARGV` imported, as packages and slurmforge modules."""
    out = tmp_path / "modules.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MODULES_OUT": str(out)}
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    names = out.read_text().split()
    return {n.split(".")[0] for n in names} | {n for n in names if n.startswith("slurmforge.")}


@pytest.mark.parametrize("argv", [["--help"], ["modules", "--help"]])
def test_help_imports_nothing_heavy(tmp_path: Path, argv: list[str]) -> None:
    found = imported(tmp_path, *argv)
    heavy = CLOUD_AND_DEPLOY | RENDERING | (SPEC if argv == ["--help"] else SPEC - {"pydantic", "pydantic_core"})
    assert found & heavy == set()
    # the help is typer's own; no slurmforge module beyond the command line's
    assert {n for n in found if n.startswith("slurmforge.")} <= {
        "slurmforge.cli", "slurmforge.console", "slurmforge.contract", "slurmforge.errors", "slurmforge.lmod",
        "slurmforge.lmod.cli", "slurmforge.tables", "slurmforge.confirm", "slurmforge.target", "slurmforge.state_dirs"}


def test_validate_imports_the_spec_and_nothing_else_heavy(tmp_path: Path) -> None:
    found = imported(tmp_path, "validate", "examples/local.yaml")
    assert {"pydantic", "yaml", "slurmforge.spec.models"} <= found  # it does validate
    assert found & (CLOUD_AND_DEPLOY | RENDERING) == set()


def test_a_table_command_needs_no_rich(tmp_path: Path) -> None:
    sacct = tmp_path / "sacct.txt"
    sacct.write_text("JobID|User|Account|Partition|NodeList|AllocTRES|ElapsedRaw|Start|State\n")
    found = imported(tmp_path, "cost", "examples/local.yaml", "--sacct-file", str(sacct))
    assert found & (CLOUD_AND_DEPLOY | RENDERING) == set()
