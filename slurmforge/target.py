"""Which cluster a command acts on, chosen one way for every command (as kubectl's context
or terraform's workspace): `--local [NAME]` (this machine's podman cluster; NAME when there
are several), `--inventory DIR` (any cluster: AWS, machines you own, or a local one), or the
default remembered by `slurmforge use`, which every command that falls back on it names on
stderr. No target and nothing remembered is an error that says how to name one; it never
advises creating infrastructure.

Standard library only (every command imports it at start: tests/unit/test_startup.py).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from slurmforge.errors import NeedsRoot, NoCluster, UsageError
from slurmforge.state_dirs import inventories_root, state_root

CURRENT_FILE = "current-cluster.json"
"""Under the state root: the remembered default (`slurmforge use`)."""
NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")
"""A token that can be a cluster's name (the spec's `name` rule); a path or a spec file cannot."""
POSITIONAL_COMMANDS = frozenset({"up", "plan", "validate", "render", "cost", "ssh", "inventory", "modules",
                                 "completion", "preflight", "upgrade"})
"""Commands with a positional argument: there `--local X` takes X as the cluster's name only
when X is a local cluster on this machine (tests/unit/test_cli_target.py keeps this true)."""


def is_local_inventory(inventory: Path) -> bool:
    """An inventory the local provider wrote (its nodes are root's podman containers)."""
    try:
        return "kind: local" in (inventory / "cluster.yaml").read_text()
    except OSError:
        return False


def local_inventories() -> dict[str, Path]:
    """This machine's local clusters by name (their inventories under the state root)."""
    return {p.parent.name: p.parent for p in sorted(inventories_root().glob("*/cluster.yaml"))
            if is_local_inventory(p.parent)}


@dataclass(frozen=True)
class Target:
    """A cluster named on the command line or remembered: local by name (None: the only one
    on this machine) or by inventory."""

    local: bool
    name: str | None = None
    inventory: Path | None = None
    remembered: bool = False

    def describe(self) -> str:
        if self.inventory is not None:
            return f"the cluster of inventory {self.inventory}"
        return f"local cluster {self.name}" if self.name else "the local cluster"

    def inventory_dir(self) -> Path:
        """The cluster's inventory: the one named, or the local cluster's own."""
        if self.inventory is not None:
            return self.inventory
        found = local_inventories()
        if self.name is None:
            if len(found) != 1:
                raise NoCluster(f"{len(found)} local clusters ({', '.join(found)}): name one with --local NAME"
                                if found else "no local cluster on this machine: `sudo slurmforge up --local` "
                                "makes one, or name another with --inventory DIR")
            return next(iter(found.values()))
        if self.name not in found:
            raise NoCluster(f"no local cluster '{self.name}' on this machine (local clusters: "
                            f"{', '.join(found) or 'none'})")
        return found[self.name]

    def require_access(self) -> None:
        """A local cluster (named, or an inventory of one) is root's: say sudo, before podman
        says something else."""
        if os.geteuid() != 0 and (self.local or (self.inventory is not None and is_local_inventory(self.inventory))):
            raise NeedsRoot()


def _current_file() -> Path:
    """$SLURMFORGE_CONTEXT (as KUBECONFIG: another file for another set of habits), else
    current-cluster.json in the state directory."""
    return Path(os.environ.get("SLURMFORGE_CONTEXT") or state_root() / CURRENT_FILE)


def remembered() -> Target | None:
    try:
        data = json.loads(_current_file().read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and isinstance(data.get("inventory"), str):
        return Target(False, None, Path(data["inventory"]), remembered=True)
    if isinstance(data, dict) and "local" in data:
        return Target(True, data["local"] if isinstance(data["local"], str) else None, remembered=True)
    return None


def remember(target: Target | None) -> Path:
    """Make target the default (None: forget it); the file's path."""
    path = _current_file()
    if target is None:
        path.unlink(missing_ok=True)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"inventory": str(target.inventory.resolve())} if target.inventory else {"local": target.name}
    path.write_text(json.dumps(data) + "\n")
    return path


def resolve(local: bool, name: str | None, inventory: Path | None, command: str) -> Target:
    """The target the options name, else the remembered one; NoCluster when neither."""
    if inventory is not None and (local or name is not None):
        raise UsageError(f"{command}: pass --local [NAME] or --inventory DIR, not both")
    if inventory is not None:
        if not (inventory / "hosts.yml").is_file():
            raise NoCluster(f"{inventory} is not a slurmforge inventory (no hosts.yml); fix: pass the directory "
                            "`slurmforge up --local` or `slurmforge inventory` wrote (.../inventories/<cluster>)")
        return Target(False, None, inventory)
    if local or name is not None:
        if name is not None and not NAME_RE.match(name):
            raise NoCluster(f"--local {name!r}: not a cluster name (lower case letters, digits and '-')")
        return Target(True, name)
    found = remembered()
    if found is None:
        raise NoCluster(f"{command}: no cluster named; fix: --local [NAME] (this machine's), --inventory DIR "
                        "(any other), or remember one: `slurmforge use --local NAME`")
    return found


def split_local(argv: list[str]) -> list[str]:
    """argv with `--local NAME` and `--local=NAME` as `--local --cluster NAME`: `--local`
    takes an optional value, which click cannot express. After a command with a positional
    argument, the next token is the cluster's name only when it is one on this machine."""
    out: list[str] = []
    command = next((a for a in argv if not a.startswith("-")), "")
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--local="):
            out += ["--local", "--cluster", arg.split("=", 1)[1]]
        elif arg == "--local" and i + 1 < len(argv) and _is_name(argv[i + 1], command):
            out += ["--local", "--cluster", argv[i + 1]]
            i += 1
        else:
            out.append(arg)
        i += 1
    return out


def _is_name(token: str, command: str) -> bool:
    if token.startswith("-") or not NAME_RE.match(token):
        return False
    return command not in POSITIONAL_COMMANDS or (inventories_root() / token / "cluster.yaml").is_file()
