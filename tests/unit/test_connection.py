"""How a host is reached from its inventory vars (slurmforge.connection), and the validation
suite's testinfra backend built on it, run through a stand-in transport (`sh -c` for ssh's
remote shell)."""

from __future__ import annotations

from pathlib import Path

import pytest
import testinfra.host

from slurmforge.connection import becomes_root, close_control, ssh_argv
from slurmforge.hosts import Host, HostRole
from slurmforge.validation.conftest import InventorySsh, connect

pytestmark = pytest.mark.unit


def host(**conn: str) -> Host:
    return Host("c-ctl", "10.0.0.5", HostRole.CONTROLLER, connection=dict(conn))


@pytest.mark.parametrize(("conn", "sudo"), [
    ({}, False), ({"ansible_user": "root"}, False), ({"ansible_user": "admin"}, True),
    *(({"ansible_user": "root", "ansible_become": v}, True) for v in ("true", "True", "yes")),
    *(({"ansible_user": "root", "ansible_become": v}, False) for v in ("false", "False"))])
def test_sudo_when_the_inventory_says_become_or_the_user_is_not_root(conn: dict[str, str], sudo: bool) -> None:
    assert becomes_root(host(**conn)) is sudo


def test_every_connection_var_reaches_ssh_and_the_inventorys_options_come_first() -> None:
    h = host(ansible_user="admin", ansible_port="2222", ansible_host="203.0.113.7",
             ansible_ssh_private_key_file="/keys/id",
             ansible_ssh_common_args="-o ProxyJump=admin@198.51.100.9 -o ControlPersist=300s",
             ansible_ssh_extra_args="-o ServerAliveInterval=15")
    assert ssh_argv(h, Path("/run/c")) == [
        "ssh", "-o", "BatchMode=yes", "-o", "ProxyJump=admin@198.51.100.9", "-o", "ControlPersist=300s",
        "-o", "ServerAliveInterval=15", "-p", "2222", "-i", "/keys/id",
        "-o", "ControlMaster=auto", "-o", "ControlPersist=60s", "-o", "ControlPath=/run/c/%C", "admin@203.0.113.7"]
    assert ssh_argv(host()) == ["ssh", "-o", "BatchMode=yes", "root@10.0.0.5"]  # the cluster address
    assert close_control(ssh_argv(host())) == ["ssh", "-o", "BatchMode=yes", "-O", "exit", "root@10.0.0.5"]


def test_local_containers_stay_on_podman() -> None:
    node = connect(host(slurmforge_container="dev-controller", ansible_user="root"))
    assert node.backend.get_connection_type() == "podman"


def stand_in() -> testinfra.host.Host:
    """The backend of a host reached over ssh, its ssh replaced by `sh -c` (`sh -c --
    COMMAND`: a remote shell on this machine)."""
    node = connect(host(ansible_user="root"))
    assert isinstance(node.backend, InventorySsh)
    node.backend.argv = ["sh", "-c"]
    return node


def test_the_backend_runs_testinfras_commands_with_their_quoting_and_exit_codes(tmp_path: Path) -> None:
    node = stand_in()
    odd = tmp_path / "a b;$(echo x)"
    odd.write_text("shared\n")
    assert node.file(str(odd)).content_string == "shared\n"
    assert node.run("exit 3").rc == 3
    assert node.check_output("echo %s", "it's") == "it's"


def test_ssh_failing_is_an_error_naming_the_host() -> None:
    with pytest.raises(RuntimeError, match="cannot reach c-ctl over ssh: no route"):
        stand_in().run("echo no route >&2; exit 255")


def test_become_wraps_every_command_in_sudo_that_never_prompts() -> None:
    backend = connect(host(ansible_user="admin", ansible_become="true")).backend
    assert isinstance(backend, InventorySsh)
    assert backend.command("systemctl is-active %s", "munge")[-2:] == [
        "--", "sudo -n /bin/sh -c 'systemctl is-active munge'"]
