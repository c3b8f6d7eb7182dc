"""`slurmforge validate --inventory` on an inventory shaped like an AWS stack's: the running
local cluster's hosts reached over ssh instead of podman, the login node directly and every
other host through it (ProxyJump), as root with become (sudo), each host's connection vars
made by the AWS inventory's own code (`aws_inventory.ssh_connection`). What only the local
cluster needs is added the way an admin's machine would have it: the cluster's key for the
last hop, and an ssh config (`-F`, which ssh hands to the jump connection) with the key and
host-key settings for the jump host.

Read-only on the cluster: one probe per host, then the validation suite (whose one write is
its own probe file on the shared mounts, removed again)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from slurmforge.aws.inventory import ssh_connection
from slurmforge.connection import close_control
from slurmforge.hosts import Host, HostRole
from slurmforge.inventory import HOSTS_FILE, SPEC_COPY, hosts_document, read_inventory
from slurmforge.validation.conftest import InventorySsh, connect

pytestmark = pytest.mark.integration

LOCAL_ONLY = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"


@pytest.fixture(scope="module")
def jump_inventory(running_inventory: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec, hosts = read_inventory(running_inventory)
    login = next(h for h in hosts if h.role is HostRole.LOGIN)
    key = login.connection["ansible_ssh_private_key_file"]
    out = tmp_path_factory.mktemp("jump-inventory")
    config = out / "ssh_config"
    config.write_text(f"Host {login.address}\n  IdentityFile {key}\n  StrictHostKeyChecking no\n"
                      "  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    reached = []
    for host in hosts:
        conn = ssh_connection("root", f"root@{login.address}", login.address if host is login else None)
        common = f"-F {config} {LOCAL_ONLY} {conn.get('ansible_ssh_common_args', '')}".strip()
        reached.append(replace(host, connection={**conn, "ansible_ssh_common_args": common,
                                                 "ansible_ssh_private_key_file": key}))
    (out / HOSTS_FILE).write_text(yaml.safe_dump(hosts_document(spec, reached), sort_keys=False))
    shutil.copy(running_inventory / SPEC_COPY, out / SPEC_COPY)
    return out


def reached_hosts(inventory: Path) -> tuple[Host, list[Host]]:
    """The login node, and every host that has a machine now (dynamic nodes rest)."""
    _, hosts = read_inventory(inventory)
    assert not any("slurmforge_container" in h.connection for h in hosts)
    return next(h for h in hosts if h.role is HostRole.LOGIN), [h for h in hosts if not h.dynamic]


def test_every_host_is_reached_through_the_login_node_and_works_through_sudo(jump_inventory: Path) -> None:
    """The checks' own backend: sshd on each private host sees the login node as its
    client, and the command runs as root through sudo."""
    login, hosts = reached_hosts(jump_inventory)
    with tempfile.TemporaryDirectory(prefix="sf-ssh-") as control:
        backends = []
        try:
            for host in hosts:
                node = connect(host, Path(control))
                backend = node.backend
                assert isinstance(backend, InventorySsh)
                backends.append(backend)
                peer = subprocess.run([*backend.argv, "--", 'echo "${SSH_CONNECTION%% *}"'], capture_output=True,
                                      text=True, timeout=60)
                assert peer.returncode == 0, f"{host.name}: {peer.stderr}"
                if host is login:
                    assert peer.stdout.strip() != login.address
                else:
                    assert peer.stdout.strip() == login.address, f"{host.name} was not reached through the login node"
                assert node.check_output("echo $SUDO_USER:$(id -u)") == "root:0", host.name
        finally:
            for backend in backends:
                subprocess.run(close_control(backend.argv), capture_output=True, timeout=30, check=False)


def test_validate_passes_through_the_jump_host(jump_inventory: Path) -> None:
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "slurmforge.cli", "validate", "--inventory", str(jump_inventory)],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "passed every check" in res.stdout
    print(f"validate through the jump host: {time.monotonic() - started:.0f} s")
