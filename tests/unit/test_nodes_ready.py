"""The PrologSlurmctld that starts a job as soon as its powered-up nodes register
(roles/slurm_controller/files/slurmforge-nodes-ready), run by /bin/sh against a `sinfo`
that replays node states; the real thing is proven by tests/integration/test_elastic.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from test_contract import role_default

from slurmforge.contract import NODES_READY_PROGRAM

ROLE = Path(__file__).resolve().parents[2] / "roles" / "slurm_controller"
PROGRAM = ROLE / "files" / "slurmforge-nodes-ready"


def run(tmp_path: Path, replies: list[str], nodes: str = "dev-cpu-[03-04]",
        timeout: float = 10) -> tuple[int, float, list[str]]:
    """Run the prolog; `sinfo` answers the replies in turn (the last one forever)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for i, reply in enumerate(replies):
        (tmp_path / f"reply{i}").write_text(reply)
    (bin_dir / "sinfo").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path}/calls\n'
        f"n=$(wc -l < {tmp_path}/calls)\n"
        f"i=$((n - 1)); [ $i -lt {len(replies)} ] || i={len(replies) - 1}\n"
        f"cat {tmp_path}/reply$i\n")
    (bin_dir / "sinfo").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": nodes}
    started = time.monotonic()
    res = subprocess.run(["/bin/sh", str(PROGRAM)], env=env, timeout=timeout, capture_output=True)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return res.returncode, time.monotonic() - started, calls


def test_nodes_already_up_cost_one_call(tmp_path: Path) -> None:
    rc, seconds, calls = run(tmp_path, ["mixed\nidle\n"])
    assert rc == 0 and len(calls) == 1 and seconds < 1
    assert calls[0] == "-h -N -n dev-cpu-[03-04] -o %T"


def test_waits_while_a_node_powers_up_then_returns_at_once(tmp_path: Path) -> None:
    rc, seconds, calls = run(tmp_path, ["allocated~\nidle\n", "allocated#\nidle\n", "allocated#\nidle\n",
                                        "allocated\nidle\n"])
    assert rc == 0 and len(calls) == 4
    assert 0.6 < seconds < 2.5  # three 0.25 s polls


def test_a_node_given_up_on_ends_the_wait(tmp_path: Path) -> None:
    for i, replies in enumerate((["allocated#\n", "down~\n"], ["drained~\nallocated#\n"])):
        (tmp_path / str(i)).mkdir()
        rc, _, calls = run(tmp_path / str(i), replies)
        assert rc == 0 and len(calls) == len(replies), replies


def test_never_fails_the_job(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "sinfo").write_text("#!/bin/sh\necho 'slurm_load_node error' >&2\nexit 1\n")
    (tmp_path / "bin" / "sinfo").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "n1"}
    assert subprocess.run(["/bin/sh", str(PROGRAM)], env=env, timeout=10).returncode == 0
    env.pop("SLURM_JOB_NODELIST")
    assert subprocess.run(["/bin/sh", str(PROGRAM)], env=env, timeout=10).returncode == 0


def test_the_role_installs_it_where_slurm_conf_names_it() -> None:
    assert role_default("slurm_controller", "slurm_controller_nodes_ready_program") == NODES_READY_PROGRAM
    assert os.access(PROGRAM, os.X_OK)


def test_backs_off_while_a_boot_takes_long(tmp_path: Path) -> None:
    """0.25 s x4, 0.5 s x4, 1 s x4, then 2 s: a minute-long EC2 boot costs ~0.5 calls/s."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sleep").write_text(f'#!/bin/sh\necho "$1" >> {tmp_path}/pauses\n')  # records, returns at once
    (bin_dir / "sinfo").write_text(f"#!/bin/sh\n[ $(wc -l < {tmp_path}/pauses 2>/dev/null || echo 0) -ge 40 ] "
                                   "&& echo allocated || echo 'allocated#'\n")
    for tool in ("sleep", "sinfo"):
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "n1"}
    assert subprocess.run(["/bin/sh", str(PROGRAM)], env=env, timeout=10).returncode == 0
    pauses = (tmp_path / "pauses").read_text().split()
    assert pauses == ["0.25"] * 4 + ["0.5"] * 4 + ["1"] * 4 + ["2"] * 28
