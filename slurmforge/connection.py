"""How slurmforge reaches a host: the way the inventory tells Ansible to, so every program
that runs something on a host (the rollout marks, `modules`, `cost`, `down --inventory`,
the validation suite) goes exactly where the rollout goes.

A local node (the inventory sets `slurmforge_container`) is reached through `podman exec`.
Any other host through ssh with its connection vars: ansible_host (else the host's
address), ansible_user, ansible_port, ansible_ssh_private_key_file, ansible_ssh_common_args
and ansible_ssh_extra_args - on AWS `-o ProxyJump=admin@<login>` for every private host.
Work needs root (the checks read root-only state, the builds install): `sudo -n` when the
inventory says become or the ssh user is not root. ssh never prompts (BatchMode): a host
that wants a password or an unknown jump host key is a failure with ssh's own line.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from slurmforge.hosts import Host

CONTAINER = "slurmforge_container"
CONTROL_PERSIST = "60s"


def container(host: Host) -> str | None:
    """The local node's container, None for a host reached over ssh."""
    return host.connection.get(CONTAINER) or None


def ssh_user(host: Host) -> str:
    return host.connection.get("ansible_user", "root")


def becomes_root(host: Host) -> bool:
    """Commands go through `sudo -n`: Ansible's `ansible_become` (any of its spellings of
    true), or an ssh user that is not root."""
    become = str(host.connection.get("ansible_become", "")).strip().lower() in ("true", "yes", "on", "1", "y", "t")
    return become or ssh_user(host) != "root"


def ssh_argv(host: Host, control_dir: Path | None = None) -> list[str]:
    """`ssh [options] user@address`: append `--` and the remote command. `control_dir`: keep
    one connection per host open there (ControlMaster) for the commands that follow, so a
    host behind a jump host costs two handshakes once, not per command. The inventory's own
    options come first: ssh takes the first value of an option."""
    conn = host.connection
    argv = ["ssh", "-o", "BatchMode=yes", *shlex.split(conn.get("ansible_ssh_common_args", "")),
            *shlex.split(conn.get("ansible_ssh_extra_args", ""))]
    if "ansible_port" in conn:
        argv += ["-p", conn["ansible_port"]]
    if "ansible_ssh_private_key_file" in conn:
        argv += ["-i", conn["ansible_ssh_private_key_file"]]
    if control_dir is not None:
        argv += ["-o", "ControlMaster=auto", "-o", f"ControlPersist={CONTROL_PERSIST}",
                 "-o", f"ControlPath={control_dir}/%C"]
    return [*argv, f"{ssh_user(host)}@{conn.get('ansible_host', host.address)}"]


def close_control(argv: list[str]) -> list[str]:
    """The command that ends the shared connection `ssh_argv(host, control_dir)` opened."""
    return [*argv[:-1], "-O", "exit", argv[-1]]
