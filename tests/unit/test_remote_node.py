"""The cluster executor: which node builds, how podman exec / ssh command lines are
made from inventory vars, and the file operations run for real through a stand-in
transport (`env` for podman exec, `sh -c` for ssh's remote shell)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slurmforge.errors import ModuleError, NeedsRoot, NoCluster, NodeUnreachable, RemoteError
from slurmforge.hosts import Host, HostRole
from slurmforge.lmod.cli import modules_app
from slurmforge.lmod.node import build_host
from slurmforge.remote.node import NodeExecutor, executor_for

pytestmark = pytest.mark.unit

SSH_VARS = {"ansible_user": "admin", "ansible_port": "2222", "ansible_host": "203.0.113.7",
            "ansible_ssh_private_key_file": "/keys/id", "ansible_ssh_common_args": "-o StrictHostKeyChecking=no"}


def host(name: str, role: HostRole, dynamic: bool = False, **conn: str) -> Host:
    return Host(name, "10.0.0.1", role, "cpu" if role is HostRole.COMPUTE else None, dynamic, dict(conn))


HOSTS = [host("c-ctl", HostRole.CONTROLLER), host("c-cpu-01", HostRole.COMPUTE, dynamic=True),
         host("c-cpu-02", HostRole.COMPUTE), host("c-login", HostRole.LOGIN)]


def test_the_login_node_builds_else_a_static_compute_node() -> None:
    assert build_host(HOSTS).name == "c-login"
    assert build_host(HOSTS[:3]).name == "c-cpu-02"
    assert build_host(HOSTS, "c-cpu-01").name == "c-cpu-01"
    with pytest.raises(ModuleError, match="no Slurm node 'nope'"):
        build_host(HOSTS, "nope")
    with pytest.raises(ModuleError, match="no Slurm node 'c-ceph-01'"):  # no module tree on storage hosts
        build_host([*HOSTS, host("c-ceph-01", HostRole.CEPH)], "c-ceph-01")
    with pytest.raises(ModuleError, match="no login node and no static compute node"):
        build_host(HOSTS[:2])


def test_local_nodes_go_through_podman_exec_as_root_in_a_timeout() -> None:
    ex = executor_for(host("dev-login", HostRole.LOGIN, slurmforge_container="dev-login"))
    argv = ex.command(["pip", "install", "a b"], {"PIP_NO_CACHE_DIR": "1"}, 60)
    assert argv == ["podman", "exec", "-i", "dev-login", "timeout", "60", "env", "PIP_NO_CACHE_DIR=1",
                    "sh", "-c", 'umask 022; exec "$@"', "sh", "pip", "install", "a b"]


def test_other_nodes_go_through_ssh_with_the_inventory_vars_and_quoted_arguments() -> None:
    ex = executor_for(host("aws-login", HostRole.LOGIN, **SSH_VARS))
    argv = ex.command(["touch", "/tmp/a b; rm -rf /"], None, 60)
    assert argv[:-1] == ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-p", "2222",
                         "-i", "/keys/id", "admin@203.0.113.7", "--"]
    assert argv[-1] == ("timeout 60 sudo -n env sh -c 'umask 022; exec \"$@\"' sh touch '/tmp/a b; rm -rf /'")


def test_a_cluster_user_is_podman_execs_user_or_runuser_after_sudo_over_ssh() -> None:
    local = executor_for(host("dev-login", HostRole.LOGIN, slurmforge_container="dev-login"), "alice")
    assert local.command(["sbatch", "job.sh"], None, 180) == [
        "podman", "exec", "-i", "-u", "alice", "dev-login", "timeout", "180", "env",
        "sh", "-c", 'umask 022; exec "$@"', "sh", "sbatch", "job.sh"]
    remote = executor_for(host("aws-login", HostRole.LOGIN, **SSH_VARS), "alice")
    assert remote.command(["sbatch", "job.sh"], None, 180)[-1] == (
        "timeout 180 sudo -n runuser -u alice -- env sh -c 'umask 022; exec \"$@\"' sh sbatch job.sh")
    as_root = executor_for(host("lab-login", HostRole.LOGIN, ansible_user="root"), "alice")
    assert as_root.command(["id"], None, 60)[-1] == (
        "timeout 60 runuser -u alice -- env sh -c 'umask 022; exec \"$@\"' sh id")


@pytest.mark.parametrize("ex", [NodeExecutor("fake-podman", ("env",)),
                                NodeExecutor("fake-ssh", ("sh", "-c"), remote_shell=True)],
                         ids=["podman-like", "ssh-like"])
def test_files_and_commands_through_the_transport(ex: NodeExecutor, tmp_path: Path) -> None:
    odd = str(tmp_path / "a b;$(echo x)")
    assert ex.read_file(odd) is None
    ex.write_file(odd, "hello\n'quoted' $HOME\n")
    assert ex.read_file(odd) == "hello\n'quoted' $HOME\n"
    assert stat.S_IMODE(os.stat(odd).st_mode) == 0o644
    made = ex.run(["mkdir", f"{tmp_path}/d"])
    assert made.ok and stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o755  # umask 022 on the node
    env = ex.run(["sh", "-c", 'echo "$GREETING"'], env={"GREETING": "hi there"})
    assert env.stdout == "hi there\n"
    failed = ex.run(["ls", f"{tmp_path}/missing"])
    assert failed.rc != 0 and "missing" in failed.reason()
    assert ex.run(["sleep", "5"], timeout=1).rc == 124


def test_unreachable_ssh_node_is_one_error() -> None:
    ex = NodeExecutor("gone", ("sh", "-c", "echo 'ssh: connect to host gone: No route' >&2; exit 255"),
                      remote_shell=True)
    with pytest.raises(RemoteError, match="cannot reach gone over ssh: ssh: connect to host gone"):
        ex.run(["true"])


def test_cli_inventory_errors_are_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(modules_app, ["list", "--inventory", str(tmp_path)])
    assert missing.exit_code == NoCluster.exit_code
    assert missing.output.count("\n") == 1 and "not a slurmforge inventory (no hosts.yml)" in missing.output
    both = runner.invoke(modules_app, ["list", "--inventory", str(tmp_path), "--tree", str(tmp_path)])
    assert both.exit_code == ModuleError.exit_code and "not both" in both.output
    bad = runner.invoke(modules_app, ["default", "apps", "--tree", str(tmp_path)])
    assert bad.exit_code == ModuleError.exit_code and bad.output.count("\n") == 1


def test_a_missing_container_is_one_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "podman"
    fake.write_text("#!/bin/sh\necho 'Error: no container with name or ID \"gone\" found: no such container' >&2\n"
                    "exit 125\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    ex = executor_for(host("gone", HostRole.LOGIN, slurmforge_container="gone"))
    monkeypatch.setattr("slurmforge.state_dirs.log_dir", lambda: tmp_path / "log")
    with pytest.raises(NodeUnreachable) as failed:
        ex.read_file("/etc/hostname")
    line = str(failed.value)
    assert line.startswith("cannot reach gone through podman: its container is not running; fix: ") and "\n" not in line
    assert "no such container" not in line and failed.value.exit_code == 11  # podman's own words go to the log
    log = tmp_path / "log" / "reach.log"
    assert str(log) in line and "no such container" in log.read_text()


def test_podman_as_a_user_is_told_to_use_sudo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's podman has none of root's containers: one line, sudo, exit 7 - whichever
    command reached for the node."""
    fake = tmp_path / "podman"
    fake.write_text("#!/bin/sh\necho 'Error: no container with name or ID \"gone\" found' >&2\nexit 125\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr("slurmforge.remote.node.os.geteuid", lambda: 1000)
    with pytest.raises(NeedsRoot) as failed:
        executor_for(host("gone", HostRole.LOGIN, slurmforge_container="gone")).run(["true"])
    assert failed.value.exit_code == 7 and "sudo" in str(failed.value)


def test_the_lmod_role_and_the_cli_name_the_same_cache_and_libexec() -> None:
    """The rollout (roles/lmod) and `slurmforge modules` refresh the same spider cache with
    the same tool: a drift would leave one of them refreshing a cache nobody reads."""
    from test_contract import role_default

    from slurmforge.contract import cluster_cache_dir
    from slurmforge.lmod.tools import DEBIAN_LIBEXEC

    assert role_default("lmod", "lmod_libexec") == DEBIAN_LIBEXEC
    from slurmforge.node.program import lmod_paths
    from slurmforge.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "local.yaml")
    paths = lmod_paths(spec)  # the inventory's slurmforge_lmod, which the join program uses too
    assert paths["cache_dir"] == cluster_cache_dir(spec.modules.root)
    assert role_default("lmod", "lmod_cache_dir", {"slurmforge_lmod": paths}) == paths["cache_dir"]
    assert role_default("lmod", "lmod_modulepath", {"slurmforge_lmod": paths}) == paths["modulepath"]
