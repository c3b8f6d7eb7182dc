"""Lmod as the nodes run it, in the judge (tests/judge.py): the node image's
check_module_tree_syntax, its `module` in a clean bash, and a NodeExecutor that runs the
publisher's commands (python3.13, pip, Lmod) inside the judge as on a node.

The judge bind-mounts /tmp, so a tree under a pytest tmp_path has the same path inside
and out: the tests publish through the judge and read the files here. Everything goes
through `Judge.enter` (nsenter), not `podman exec`: one publish is dozens of commands.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from slurmforge.lmod.tools import DEBIAN_LIBEXEC
from slurmforge.remote.node import NodeExecutor
from tests.judge import Judge

LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
PYTHON = "/usr/bin/python3.13"  # Debian 13's system Python, on every node


def node_executor(judge: Judge) -> NodeExecutor:
    """The publisher's executor on the judge: the NodeExecutor a local node gets, reaching
    the container through nsenter instead of `podman exec -i`."""
    return NodeExecutor(judge.name, judge.enter)


def in_judge(judge: Judge, argv: list[str], timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*judge.enter, "timeout", str(timeout), *argv], capture_output=True, text=True,
                          check=False, timeout=timeout + 15)


def readable_copy(src: Path, dst: Path) -> Path:
    """A copy of a modulefile tree that every user can read: Lmod silently skips a file
    others cannot read, and a check that reads nothing finds no error."""
    shutil.copytree(src, dst)
    for path in [dst, *dst.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dst


def check_syntax(judge: Judge, modulepath: Path) -> subprocess.CompletedProcess[str]:
    return in_judge(judge, [f"{DEBIAN_LIBEXEC}/check_module_tree_syntax", str(modulepath)])


def module(judge: Judge, root: Path, script: str, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run `script` in a clean bash on the node image where `module` is Lmod over the tree
    under `root` (stdout and stderr apart); with `cache`, Lmod reads that spider cache."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root.parent), "MODULEPATH": str(root / "modulefiles")}
    if cache is not None:
        rc = root.parent / "lmodrc.lua"
        rc.write_text(f'scDescriptT = {{ {{ ["dir"] = "{cache}", ["timestamp"] = "{cache}/timestamp" }} }}\n')
        env["LMOD_RC"] = str(rc)
    # env -i: nothing of the container's environment reaches Lmod, only what a test sets
    return in_judge(judge, ["env", "-i", *(f"{k}={v}" for k, v in env.items()),
                            "bash", "--noprofile", "--norc", "-c", f"source {LMOD_INIT}\n{script}"])
