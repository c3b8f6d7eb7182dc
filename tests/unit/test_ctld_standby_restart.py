"""The backup controller's standby restart (roles/slurm_controller/files): the programs run
as shipped, with slurmctld's runtime directory, `scontrol` and `systemctl` replaced by a
scratch directory and recording stand-ins. The live proof is the second failover cycle of
tests/integration/test_controller_failover.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "slurm_controller"
RUNTIME = "/run/slurmctld"
CONTROL_PLACEHOLDER = "@control_program@"
"""Where tasks/configure.yml writes in the scheduler service's hand-off."""


def program(name: str, run_dir: Path, out: Path, control: Path | None = None) -> Path:
    """The shipped program with slurmctld's RuntimeDirectory moved to `run_dir` and the
    service's hand-off the role writes in at `control` (default: none installed)."""
    text = (ROLE / "files" / name).read_text()
    assert RUNTIME in text, name
    path = out / name
    path.write_text(text.replace(RUNTIME, str(run_dir)).replace(CONTROL_PLACEHOLDER,
                                                                str(control or out / "no-service")))
    path.chmod(0o755)
    return path


def run(path: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run([str(path)], capture_output=True, text=True, env=env, timeout=60, check=True)


def stand_ins(bin_dir: Path, calls: Path) -> None:
    bin_dir.mkdir()
    for name, out in (("scontrol", "Slurmctld(primary) at p is UP\\nSlurmctld(backup) at b is UP"),
                      ("systemctl", "")):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nprintf "{out}\\n"\n')
        tool.chmod(0o755)


def test_a_backup_restarts_only_after_holding_control(tmp_path: Path) -> None:
    run_dir, calls, bins = tmp_path / "run", tmp_path / "calls", tmp_path / "bin"
    run_dir.mkdir()
    stand_ins(bins, calls)
    on = program("slurmforge-ctld-in-control", run_dir, tmp_path)
    off = program("slurmforge-ctld-standby", run_dir, tmp_path)
    restart = program("slurmforge-ctld-restart", run_dir, tmp_path)
    flag = run_dir / "slurmforge-restart"

    run(off, bins)  # a fresh start enters standby: nothing to do
    assert not flag.exists()
    run(restart, bins)
    assert not calls.exists()

    run(on, bins)   # took control ...
    run(off, bins)  # ... and handed it back
    assert flag.exists() and not (run_dir / "slurmforge-held-control").exists()
    run(restart, bins)  # what the path unit starts
    assert not flag.exists()
    assert calls.read_text().splitlines() == ["scontrol ping", "systemctl restart slurmctld"]

    run(off, bins)  # standby again without holding control since: no second restart
    assert not flag.exists()


def test_the_path_unit_watches_the_flag_the_standby_program_writes() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    standby = (ROLE / "files" / "slurmforge-ctld-standby").read_text()
    assert f'mv "$mark" {defaults["slurm_controller_restart_flag"]}' in standby
    assert f"flag={defaults['slurm_controller_restart_flag']}" in (
        ROLE / "files" / "slurmforge-ctld-restart").read_text()
    tasks = (ROLE / "tasks" / "configure.yml").read_text()
    assert "PathExists={{ slurm_controller_restart_flag }}" in tasks


def test_taking_control_tells_the_scheduler_service_where_it_is_installed(tmp_path: Path) -> None:
    """The in-control program runs the service's hand-off (slurmforge-control) when the
    service is installed, and only marks the process without it; the role writes the path."""
    run_dir, calls, bins = tmp_path / "run", tmp_path / "calls", tmp_path / "bin"
    run_dir.mkdir()
    stand_ins(bins, calls)
    control = tmp_path / "slurmforge-control"
    on = program("slurmforge-ctld-in-control", run_dir, tmp_path, control)
    run(on, bins)  # no service on this controller
    assert (run_dir / "slurmforge-held-control").exists() and not calls.exists()
    control.write_text(f'#!/bin/sh\necho "control $*" >> {calls}\n')
    control.chmod(0o755)
    run(on, bins)
    assert calls.read_text() == "control \n"
    configure = (ROLE / "tasks" / "configure.yml").read_text()
    assert f"replace('{CONTROL_PLACEHOLDER}', slurm_controller_control_program)" in configure
