"""Build one module version's files into a staging directory, and check them.

Builds run on a node through an Executor, into `<stage>/install`, which the publisher
later renames to the version's final prefix. A venv records absolute paths (script
shebangs, `activate`, `pyvenv.cfg`), so after the checks those are rewritten from the
staging path to the final one (what venv-pack does); nothing else in a pure-Python
venv names its own location.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from slurmforge.errors import ModuleError
from slurmforge.modules.definition import (
    AnyDefinition,
    MetaModule,
    ModuleName,
    PythonModule,
    TreeModule,
    VenvModule,
    python_version,
    verify_imports,
)
from slurmforge.modules.executor import Executor, check, exists, make_dirs

log = logging.getLogger(__name__)

VERSION_CODE = "import sys; print('.'.join(map(str, sys.version_info[:3])))"
# `pip freeze` for every distribution, in a tenth of pip's start-up time
FREEZE_CODE = ("import importlib.metadata as m; "
               "print(*sorted({f'{d.name}=={d.version}' for d in m.distributions()}), sep='\\n')")


def build_install(ex: Executor, mn: ModuleName, d: AnyDefinition, install: str, final: str,
                  python_prefix: str | None, pip_env: Mapping[str, str] | None = None) -> None:
    """Files of `mn` into `install` (which must not exist), checked, with paths that name
    `final`. `python_prefix` is the published prefix of a venv's Python module; `pip_env`
    is added to pip's environment (PIP_CERT, PIP_INDEX_URL, ...)."""
    if isinstance(d, PythonModule):
        build_python(ex, mn, d, install, final)
    elif isinstance(d, VenvModule):
        if python_prefix is None:
            raise ModuleError(f"{mn}: no published Python module to build the venv with")
        build_venv(ex, mn, d, install, final, python_prefix, pip_env)
    elif isinstance(d, TreeModule):
        build_tree(ex, mn, d, install)
    elif isinstance(d, MetaModule):
        return


def build_python(ex: Executor, mn: ModuleName, d: PythonModule, install: str, final: str) -> None:
    version = python_version(mn.full) or ""
    if d.venv:
        check(ex, [d.interpreter, "-m", "venv", install], f"{mn}: creating a venv of {d.interpreter}")
    else:
        make_dirs(ex, f"{install}/bin")
        minor = ".".join(version.split(".")[:2])
        for link in ("python", "python3", f"python{minor}"):
            check(ex, ["ln", "-s", "--", d.interpreter, f"{install}/bin/{link}"], f"{mn}: linking {link}")
    have = check(ex, [f"{install}/bin/python", "-I", "-c", VERSION_CODE], f"{mn}: running {d.interpreter}")
    actual = have.stdout.strip()
    if actual.split(".")[: len(version.split("."))] != version.split("."):
        raise ModuleError(f"{mn}: {d.interpreter} is Python {actual}, not {version}; "
                          f"fix: point interpreter at a Python {version}")
    if d.venv:
        relocate(ex, install, final)


def build_venv(ex: Executor, mn: ModuleName, d: VenvModule, install: str, final: str,
               python_prefix: str, pip_env: Mapping[str, str] | None = None) -> None:
    python = f"{install}/bin/python"
    check(ex, [f"{python_prefix}/bin/python", "-m", "venv", install], f"{mn}: creating the venv")
    ex.write_file(f"{install}/requirements.txt", "\n".join(d.requirements) + "\n")
    check(ex, [python, "-I", "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
               "-r", f"{install}/requirements.txt"], f"{mn}: pip install", env=pip_env)
    imports = verify_imports(mn.full, d)
    if imports:
        check(ex, [python, "-I", "-c", "import " + ", ".join(imports)], f"{mn}: import {', '.join(imports)}")
    frozen = check(ex, [python, "-I", "-c", FREEZE_CODE], f"{mn}: listing the installed packages")
    ex.write_file(f"{install}/requirements.lock", frozen.stdout)  # exactly what was installed
    relocate(ex, install, final)


def build_tree(ex: Executor, mn: ModuleName, d: TreeModule, install: str) -> None:
    src = d.source
    make_dirs(ex, install)
    if src.tarball is not None:
        if src.sha256 is not None:
            summed = check(ex, ["sha256sum", "--", src.tarball], f"{mn}: reading {src.tarball}")
            if summed.stdout.split()[0] != src.sha256:
                raise ModuleError(f"{mn}: {src.tarball} has sha256 {summed.stdout.split()[0]}, "
                                  f"not {src.sha256}; fix: check the file, then the definition's sha256")
        check(ex, ["tar", "-xf", src.tarball, "-C", install, "--no-same-owner",
                   f"--strip-components={src.strip_components}"], f"{mn}: unpacking {src.tarball}")
    elif src.path is not None:
        check(ex, ["cp", "-a", "--", f"{src.path}/.", install], f"{mn}: copying {src.path}")
    missing = [f for f in d.files if not exists(ex, f"{install}/{f}")]
    if missing:
        raise ModuleError(f"{mn}: missing after the install: {', '.join(missing)}; "
                          "fix: check source (and strip_components) or the files list")


def relocate(ex: Executor, install: str, final: str) -> None:
    """Rewrite `install` to `final` where a venv wrote its own path."""
    places = [p for p in (f"{install}/bin", f"{install}/pyvenv.cfg") if exists(ex, p)]
    found = ex.run(["grep", "-rlIF", "--", install, *places])
    if found.rc == 1:  # nothing names the staging path
        return
    if not found.ok:
        raise ModuleError(f"finding staging paths in {install} failed on {ex.name}: {found.reason()}")
    files = found.stdout.split()
    log.debug("relocating %d files from %s to %s", len(files), install, final)
    pattern = install.replace(".", r"\.")  # the tree root and names hold no '#' (checked)
    check(ex, ["sed", "-i", "-e", f"s#{pattern}#{final}#g", "--", *files], f"relocating {install}")
