"""The command line as an operator meets it (issue 37), driven through `python -m
slurmforge.cli` as a user would: a terminal through a pty where the answer depends on it,
a pipe elsewhere, a user who is not root, a machine with no cluster."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import slow_parts
import yaml
from typer.testing import CliRunner

from slurmforge import target as t
from slurmforge.cli import app
from slurmforge.confirm import confirm
from slurmforge.errors import EXIT_CODES, NotConfirmed
from slurmforge.package_data import playbooks
from slurmforge.rollout import CLUSTER_PLAYBOOK, count_plays

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT), "PATH": os.environ["PATH"], "HOME": str(tmp_path),
            "SLURMFORGE_CONTEXT": str(tmp_path / "current.json"), **extra}


def cli(tmp_path: Path, *argv: str, not_root: bool = False) -> subprocess.CompletedProcess[str]:
    """argv as a user would run it; not_root: as someone else than root (a user namespace
    of its own, as tests/package does)."""
    return subprocess.run([*(["unshare", "--user"] if not_root else []), sys.executable, "-m", "slurmforge.cli",
                           *argv], capture_output=True, text=True, cwd=tmp_path, env=env(tmp_path), timeout=60,
                          check=False, stdin=subprocess.DEVNULL)


def lab_inventory(tmp_path: Path) -> Path:
    """An inventory of the lab example (machines you own) whose controller does not answer."""
    inventory = tmp_path / "inv"
    inventory.mkdir()
    (inventory / "cluster.yaml").write_text((ROOT / "examples" / "lab.yaml").read_text())
    unreachable = {"slurmforge_address": "127.0.0.1", "ansible_host": "127.0.0.1", "ansible_port": 1,
                   "ansible_user": "root", "ansible_ssh_common_args": "-o ConnectTimeout=3 -o BatchMode=yes"}
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"slurm_cluster": {"children": {
        "slurm_controller": {"hosts": {"lab-ctl": unreachable}}, "slurm_login": {}, "slurm_compute": {}}}}}}))
    return inventory


def with_fakes(*install: str) -> list[str]:
    """`slurmforge` with slow_parts' stand-ins installed (their names) in its process."""
    calls = "; ".join(f"slow_parts.{name}()" for name in install)
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"import slow_parts; {calls}; from slurmforge.cli import main; main()"]


def on_a_terminal(tmp_path: Path, argv: list[str], answer: str = "", program: list[str] | None = None,
                  when: tuple[bytes, Callable[[], object]] | None = None, columns: int = 200) -> tuple[int, str]:
    """argv run on a pty (stdin, stdout and stderr a terminal `columns` wide), `answer` typed at
    its question; `when`: (what it says, what to do then, once)."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen([*(program or [sys.executable, "-m", "slurmforge.cli"]), *argv], stdin=child,
                            stdout=child, stderr=child, cwd=tmp_path, env=env(tmp_path, FAKE_DIR=str(tmp_path)),
                            close_fds=True)
    os.close(child)
    seen, answered, deadline = b"", False, time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(main, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        if not answered and b"Type yes to" in seen:
            os.write(main, answer.encode() + b"\n")
            answered = True
        if when is not None and when[0] in seen:
            when[1]()
            when = None
        if proc.poll() is not None and not ready:
            break
    os.close(main)
    return proc.wait(timeout=10), seen.decode(errors="replace")


def test_a_rotation_asks_on_a_terminal_and_a_no_changes_nothing(tmp_path: Path) -> None:
    inventory = lab_inventory(tmp_path)
    code, seen = on_a_terminal(tmp_path, ["rotate", "munge-key", "--inventory", str(inventory)], "no")
    assert "rotate munge-key: a new munge key on every running node" in seen and "cluster lab" in seen
    assert code == NotConfirmed.exit_code and "not confirmed (answered 'no', not 'yes'); nothing was changed" in seen


def test_without_a_terminal_it_refuses_in_one_line(tmp_path: Path) -> None:
    inventory = lab_inventory(tmp_path)
    for argv in (["rotate", "db-password", "--inventory", str(inventory)], ["down", "--inventory", str(inventory)]):
        done = cli(tmp_path, *argv)
        refusal = [ln for ln in done.stderr.splitlines() if ln.startswith("error")]
        assert done.returncode == 13 and len(refusal) == 1, done.stderr
        assert "no terminal to ask on, so pass --yes" in refusal[0] and "nothing was changed" in refusal[0]


def test_yes_answers_for_the_operator_and_the_plan_is_still_shown() -> None:
    shown = io.StringIO()
    confirm("remove it", ["down: remove the 9 nodes"], yes=True, stdin=io.StringIO(""), stderr=shown)
    assert shown.getvalue() == "down: remove the 9 nodes\n"
    with pytest.raises(NotConfirmed, match="pass --yes"):
        confirm("remove it", ["down: remove the 9 nodes"], yes=False, stdin=io.StringIO("yes\n"), stderr=shown)


def test_yes_and_auto_approve_are_one_option() -> None:
    for flag in ("--yes", "--auto-approve", "-y"):
        res = CliRunner().invoke(app, ["down", flag, "--inventory", "/nonexistent"])
        assert res.exit_code == 14 and "No such option" not in res.output


def test_no_cluster_anywhere_is_one_line_that_never_advises_creating_one(tmp_path: Path) -> None:
    for argv in (["status"], ["pools"], ["report"], ["cost"], ["modules", "list"], ["rotate", "jwt-key"],
                 ["plan", str(ROOT / "examples" / "local.yaml")], ["validate", "--local", "--inventory", "x"]):
        done = CliRunner().invoke(app, argv)
        code = 2 if "validate" in argv else 14
        assert done.exit_code == code, (argv, done.output)
        assert done.output.count("\n") == 1 and "--local [NAME]" in done.output, done.output
        assert "pulumi" not in done.output and "up --local" not in done.output
    once = cli(tmp_path, "status")  # the same through the installed entry point
    assert (once.returncode, once.stderr.count("\n")) == (14, 1) and "no cluster named" in once.stderr


def test_a_remembered_cluster_is_used_and_named(tmp_path: Path) -> None:
    inventory = lab_inventory(tmp_path)
    done = cli(tmp_path, "use", "--inventory", str(inventory))
    assert done.returncode == 0 and json.loads((tmp_path / "current.json").read_text()) == {
        "inventory": str(inventory.resolve())}
    assert cli(tmp_path, "use").stdout.strip() == f"the cluster of inventory {inventory.resolve()}"
    status = cli(tmp_path, "status")  # its controller does not answer: one line, exit 11
    assert status.stderr.splitlines()[0] == (f"status: the cluster of inventory {inventory.resolve()} (remembered by "
                                             "`slurmforge use`; --local or --inventory for another)")
    assert status.returncode == 11 and status.stderr.count("\n") == 2, status.stderr
    assert "cannot reach lab-ctl over ssh" in status.stderr and "fix:" in status.stderr
    assert cli(tmp_path, "use", "--clear").returncode == 0 and not (tmp_path / "current.json").exists()


def test_local_name_is_an_optional_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(t, "inventories_root", lambda: tmp_path)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "cluster.yaml").write_text("target:\n  kind: local\n")
    assert t.split_local(["status", "--local", "dev"]) == ["status", "--local", "--cluster", "dev"]
    assert t.split_local(["status", "--local=lab"]) == ["status", "--local", "--cluster", "lab"]
    assert t.split_local(["status", "--local", "--format", "json"]) == ["status", "--local", "--format", "json"]
    # after a command with a positional argument, only a cluster of this machine is a name
    assert t.split_local(["ssh", "--local", "login"]) == ["ssh", "--local", "login"]
    assert t.split_local(["ssh", "--local", "dev", "login"]) == ["ssh", "--local", "--cluster", "dev", "login"]
    assert t.split_local(["up", "--local", "examples/local.yaml"]) == ["up", "--local", "examples/local.yaml"]


def test_the_positional_commands_are_the_ones_click_knows() -> None:
    import typer.main

    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    with_positional = {name for name, command in group.commands.items()
                       if any(p.param_type_name == "argument" for p in command.params)
                       or hasattr(command, "commands")}
    assert with_positional - {"rotate"} == set(t.POSITIONAL_COMMANDS)


def test_a_user_on_a_local_inventory_is_told_sudo_in_one_line(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = tmp_path / "inv"
    inventory.mkdir()
    (inventory / "cluster.yaml").write_text((ROOT / "examples" / "local.yaml").read_text())
    (inventory / "hosts.yml").write_text("all: {}\n")
    line = "error the local cluster runs in root's podman: run the command with sudo\n"
    done = cli(tmp_path, "status", "--inventory", str(inventory), not_root=os.geteuid() == 0)
    assert (done.returncode, done.stderr) == (7, line)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    for argv in (["pools"], ["cost"], ["modules", "list"], ["rollout"], ["report"], ["plan", str(ROOT / "examples" /
                 "local.yaml")], ["validate"], ["down"], ["rotate", "munge-key"]):
        res = CliRunner().invoke(app, [*argv, "--inventory", str(inventory)])
        assert (res.exit_code, res.output) == (7, line), argv
    for argv in (["status", "--local"], ["down", "--local"], ["ssh", "--local"]):
        res = CliRunner().invoke(app, argv)
        assert (res.exit_code, res.output) == (7, line), argv


def test_help_version_completion(tmp_path: Path) -> None:
    short = cli(tmp_path, "-h")
    assert short.returncode == 0 and "Exit codes:" in short.stdout and max(map(len, short.stdout.splitlines())) <= 80
    for code in EXIT_CODES:
        assert f"{code.code:>4}  {code.cause}" in short.stdout
    assert "..." not in short.stdout.split("Commands:")[1].split("The cluster:")[0]  # no summary cut
    assert cli(tmp_path, "--version").stdout.startswith("slurmforge ")
    for command in (["validate"], ["render"], ["up"], ["status"], ["pools"], ["ssh"], ["inventory"], ["rollout"],
                    ["down"], ["plan"], ["report"], ["cost"], ["use"], ["completion"], ["rotate", "munge-key"],
                    ["rotate", "jwt-key"], ["rotate", "db-password"], ["modules", "list"], ["modules", "plan"],
                    ["modules", "publish"], ["modules", "default"], ["modules", "rollback"], ["modules", "deprecate"]):
        assert "Examples:\n  " in CliRunner().invoke(app, [*command, "-h"]).output, command
    for shell, marker in (("bash", "complete -o default -F"), ("zsh", "compdef"), ("fish", "complete --command")):
        script = cli(tmp_path, "completion", shell)
        assert script.returncode == 0 and marker in script.stdout and "_SLURMFORGE_COMPLETE" in script.stdout
    asked = subprocess.run([sys.executable, "-m", "slurmforge.cli"], capture_output=True, text=True, timeout=60,
                           env={**env(tmp_path), "_SLURMFORGE_COMPLETE": "complete_bash",
                                "COMP_WORDS": "slurmforge rot", "COMP_CWORD": "1"})
    assert asked.stdout.split() == ["rotate"], asked.stderr


def test_up_shows_its_progress_on_a_terminal_and_only_results_in_a_pipe(tmp_path: Path) -> None:
    """The node image build's steps, whose build a second `up` waits for, the rollout's play
    (of how many), task and host, each with the time so far, on a terminal; in a pipe a line
    per phase done and the result, nothing redrawn."""
    lock = (tmp_path / "image.lock").open("a+")
    lock.write("slurmforge pid 999, since 12:00:00, for localhost/slurmforge-node:abc\n")
    lock.flush()
    fcntl.flock(lock, fcntl.LOCK_EX)  # another `up` builds the image
    code, seen = on_a_terminal(tmp_path, ["up", "--local", "--yes", "--no-job"], program=with_fakes("install"),
                               when=(b"waiting for", lambda: fcntl.flock(lock, fcntl.LOCK_UN)))
    assert code == 0, seen
    image, rollout = "node image (built once, cached by content hash)", "roll out (Ansible)"
    image_line, rollout_line = "\rnode image: ", "\rroll out: "
    assert seen.count("waiting for the node image build of slurmforge pid 999, since 12:00:00, for "
                      "localhost/slurmforge-node:abc on this machine (lock " + str(tmp_path / "image.lock")) == 1
    assert f"{image_line}waiting for slurmforge pid 999's build to end (lock {tmp_path / 'image.lock'}) (" in seen
    assert f"{image_line}play 1/1 Install every package a slurmforge node may need › task 2: slurm_common : Slurm " \
           "packages (" in seen
    plays = count_plays(playbooks() / CLUSTER_PLAYBOOK)
    assert f"{rollout_line}play 2/{plays} Controller - slurmctld › task 2: slurmctld running · dev-controller (" in seen
    assert f"{rollout_line}play 1/{plays} Head nodes - the join program › task 1: Munge key · dev-login, 2 " \
           "done (" in seen
    done = "\x1b[32m✓\x1b[0m "  # green on a terminal
    assert f"{done}{image}" in seen and f"{done}{rollout}" in seen and "is up - rollout changed 2 thing(s)" in seen


def spec_with_a_user(tmp_path: Path) -> Path:
    """The example local cluster and a user more: its plan against slow_parts.RECORDED adds her."""
    data = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    data["users"].append({"name": "dana", "uid": 3010, "groups": ["ml-users"], "accounts": ["research"],
                          "default_account": "research"})
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def plan_rows_then(out: str) -> list[str]:
    """The lines after the plan's table (its header, then one row a line, dana's two last),
    each time said as (T s)."""
    said = re.sub(r"\(\d+\.\d s\)$", "(T s)", out, flags=re.M).splitlines()
    assert said[0].split() == ["kind", "name", "change", "cause", "jobs", "detail"], out
    assert said[1].split()[:3] == ["accounting", "user_dana", "add"] and said[2].split()[:3] == ["user", "dana", "add"]
    return said[3:]


def test_up_in_a_pipe_prints_its_plan_phases_notes_and_summary_on_stdout_and_no_progress(tmp_path: Path) -> None:
    """Results on stdout, progress on stderr: piped, `up` prints on stdout - as it always did,
    what tests/integration/test_apply_live.py and test_day_two_live.py read there - the plan
    before anything changes, the notes of each phase as they come (the image lock's holder,
    the users pushed), each phase done with its time, the drain's line and the summary;
    stderr holds only the plan's title, as `plan` prints it piped; no progress line at all."""
    spec = spec_with_a_user(tmp_path)
    lock = (tmp_path / "image.lock").open("a+")
    lock.write("slurmforge pid 999, since 12:00:00, for localhost/slurmforge-node:abc\n")
    lock.flush()
    fcntl.flock(lock, fcntl.LOCK_EX)  # another `up` builds the image
    proc = subprocess.Popen([*with_fakes("install"), "up", "--local", str(spec), "--yes", "--no-job"], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=tmp_path,
                            env=env(tmp_path, FAKE_DIR=str(tmp_path)))
    assert proc.stdout is not None
    lines = []
    unlock = threading.Timer(30, fcntl.flock, (lock, fcntl.LOCK_UN))  # a note not on stdout fails, not hangs
    unlock.start()
    while line := proc.stdout.readline():  # each note is on stdout as it happens
        lines.append(line)
        if line.startswith("waiting for the node image build"):
            fcntl.flock(lock, fcntl.LOCK_UN)
            break
    out, err = proc.communicate(timeout=60)
    unlock.cancel()
    out = "".join(lines) + out
    assert proc.returncode == 0, out + err
    assert "\r" not in out + err and "\x1b" not in out + err
    assert err == "plan for cluster dev: 2 change(s)\ndeployed state read from dev-controller\n"
    assert plan_rows_then(out) == [
        f"waiting for the node image build of slurmforge pid 999, since 12:00:00, for localhost/slurmforge-node:abc "
        f"on this machine (lock {tmp_path / 'image.lock'}); this one then uses it",
        "✓ node image (built once, cached by content hash) (T s)",
        f"users and groups changed on the running dynamic node(s) {slow_parts.SPOT_NODE}",
        "✓ roll out (Ansible) (T s)",
        f"drained nodes emptied in 3 s; requeued job(s) {slow_parts.REQUEUED}",
        "",
        f"cluster dev is up - rollout changed 2 thing(s); inventory {tmp_path}; log {tmp_path / 'up.log'}",
        "get in:  slurmforge ssh --local login --user <name>   (or podman exec -it dev-login bash)"]


def test_rollout_in_a_pipe_prints_its_plan_phases_notes_and_summary_on_stdout_and_no_progress(
        tmp_path: Path) -> None:
    """`rollout` as `up`: the plan, the notes, each phase done and the summary on stdout (what
    test_never_down.py and test_day_two_live.py read), only the plan's title on stderr."""
    spec_with_a_user(tmp_path)
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    done = subprocess.run([*with_fakes("install_rollout"), "rollout", "--inventory", str(tmp_path), "--yes"],
                          capture_output=True, text=True, cwd=tmp_path, env=env(tmp_path, FAKE_DIR=str(tmp_path)),
                          timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\r" not in done.stdout + done.stderr and "\x1b" not in done.stdout + done.stderr
    assert done.stderr == "plan for cluster dev: 2 change(s)\ndeployed state read from dev-controller\n"
    *said, summary = plan_rows_then(done.stdout)
    assert said == [f"users and groups changed on the running dynamic node(s) {slow_parts.SPOT_NODE}",
                    "✓ roll out (Ansible) (T s)", "✓ the cluster answers (Ceph, every static node in service) (T s)"]
    assert re.fullmatch(r"rollout changed 2 thing\(s\) in \d+ s; log /\S+/inv-rollout\.log", summary.replace(
        tmp_path.name, "inv")), summary


def test_validate_shows_the_check_and_the_hosts_it_waits_for_on_a_terminal(tmp_path: Path) -> None:
    inventory = lab_inventory(tmp_path)
    code, seen = on_a_terminal(tmp_path, ["validate", "--inventory", str(inventory)],
                               program=with_fakes("install_suite"))
    assert code == 5, seen
    assert "\rvalidate inv: 1/3: test_reads_the_hosts · reading the hosts: 1/3 answered, waiting for lab-login, " \
           "lab-cpu-01 (" in seen
    assert "\rvalidate inv: 1/3: test_reads_the_hosts · reading the hosts: 3/3 answered (" in seen
    assert "\rvalidate inv: 3/3: test_fine (" in seen
    assert "live-cluster validation failed: 1 failed, 2 passed" in seen and "lab-cpu-01: munged found" in seen


def test_validate_inventory_in_json_says_every_check_and_nothing_else(tmp_path: Path) -> None:
    inventory = lab_inventory(tmp_path)
    done = subprocess.run([*with_fakes("install_suite"), "validate", "--inventory", str(inventory), "--format",
                           "json"], capture_output=True, text=True, cwd=tmp_path,
                          env=env(tmp_path, FAKE_DIR=str(tmp_path)), timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 5 and "\r" not in done.stderr and "reading the hosts" not in done.stderr
    found = json.loads(done.stdout)
    assert {k: found[k] for k in ("cluster", "inventory", "passed", "checks", "failed")} == {
        "cluster": "lab", "inventory": str(inventory), "passed": False, "checks": 3, "failed": 1}
    assert found["problems"] == ["lab-cpu-01: munged found not running, wanted running"]
    assert [(r["check"], r["result"]) for r in found["rows"]] == [
        ("test_reads_the_hosts", "passed"), ("test_munge_runs", "failed"), ("test_fine", "passed")]
    assert all(isinstance(r["seconds"], float) for r in found["rows"])
    assert done.stderr.startswith("error live-cluster validation failed: 1 failed, 2 passed")


def test_validate_a_spec_in_json(tmp_path: Path) -> None:
    good = CliRunner().invoke(app, ["validate", str(ROOT / "examples" / "local.yaml"), "--format", "json"])
    found = json.loads(good.stdout)
    assert good.exit_code == 0 and found["rows"] == [] and found["valid"] is True
    assert {k: found[k] for k in ("cluster", "target", "problems")} == {"cluster": "dev", "target": "local",
                                                                        "problems": 0}
    assert found["nodes_max"] > 0 and found["partitions"] > 0
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "examples" / "local.yaml").read_text().replace("name: dev", "name: Dev Cluster", 1))
    done = CliRunner().invoke(app, ["validate", str(bad), "--format", "json"])
    found = json.loads(done.stdout)
    assert done.exit_code == 2 and found["valid"] is False and found["cluster"] is None
    assert found["problems"] == len(found["rows"]) >= 1
    assert found["rows"][0]["field"] == "name" and found["rows"][0]["value"] == "'Dev Cluster'"
    assert set(found["rows"][0]) == {"field", "value", "problem", "fix"}
