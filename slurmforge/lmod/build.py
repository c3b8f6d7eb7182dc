"""Build one module version's files into a staging directory, and check them.

Builds run on a node through an Executor, into `<stage>/install`, which the publisher
later renames to the version's final prefix. A venv records absolute paths (script
shebangs, `activate`, `pyvenv.cfg`), so after the checks those are rewritten from the
staging path to the final one (what venv-pack does); nothing else in a pure-Python
venv names its own location.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Mapping, Sequence

from slurmforge.errors import ModuleError
from slurmforge.lmod.definition import (
    AnyDefinition,
    DebianModule,
    MetaModule,
    ModuleName,
    PythonModule,
    TreeModule,
    VenvModule,
    python_version,
    software_version,
    verify_imports,
)
from slurmforge.lmod.modulefile import DEB_MULTIARCH
from slurmforge.remote.executor import Executor, check, exists, make_dirs, remove_tree

log = logging.getLogger(__name__)

VERSION_CODE = "import sys; print('.'.join(map(str, sys.version_info[:3])))"
# `pip freeze` for every distribution, in a tenth of pip's start-up time
FREEZE_CODE = ("import importlib.metadata as m; "
               "print(*sorted({f'{d.name}=={d.version}' for d in m.distributions()}), sep='\\n')")


def build_install(ex: Executor, mn: ModuleName, d: AnyDefinition, install: str, final: str,
                  python_prefix: str | None, pip_env: Mapping[str, str] | None = None,
                  debian_prefixes: Sequence[str] = ()) -> None:
    """Files of `mn` into `install` (which must not exist), checked, with paths that name
    `final`. `python_prefix` is the published prefix of a venv's Python module; `pip_env`
    is added to pip's environment (PIP_CERT, PIP_INDEX_URL, ...); `debian_prefixes` those of
    the debian modules a debian module depends on (what they carry is not unpacked again)."""
    if isinstance(d, PythonModule):
        build_python(ex, mn, d, install, final)
    elif isinstance(d, VenvModule):
        if python_prefix is None:
            raise ModuleError(f"{mn}: no published Python module to build the venv with")
        build_venv(ex, mn, d, install, final, python_prefix, pip_env)
    elif isinstance(d, TreeModule):
        build_tree(ex, mn, d, install)
    elif isinstance(d, DebianModule):
        build_debian(ex, mn, d, install, python_prefix, debian_prefixes)
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


PACKAGES_LOCK = "packages.lock"
"""In a debian module's prefix: `package=version`, a line for each package unpacked there."""
ALTERNATIVES = ("blas", "lapack")
"""Library directories Debian links into the multiarch one with update-alternatives (a
package's maintainer script, which unpacking does not run): linked here the same way."""
UNPACK = r"""
set -eu
archives=$1 root=$2 skip=$3
for deb in "$archives"/*.deb; do
    line=$(dpkg-deb --showformat='${Package}=${Version}' -W "$deb")
    if grep -qxF "${line%%=*}" "$skip"; then continue; fi
    dpkg-deb -x "$deb" "$root"
    echo "$line"
done
"""


def build_debian(ex: Executor, mn: ModuleName, d: DebianModule, install: str, python_prefix: str | None,
                 debian_prefixes: Sequence[str] = ()) -> None:
    """The packages and what they need beyond the build node's own packages (the node image:
    every node runs it) downloaded with the build node's apt sources into a private apt
    state next to `install`, each unpacked there unless a debian module it depends on
    carries it already; the first package's version checked against the name."""
    apt = f"{install}.apt"
    opts = ["-q", "-o", f"Dir::State::Lists={apt}/lists", "-o", f"Dir::Cache={apt}",
            "-o", f"Dir::Cache::archives={apt}/archives", "-o", "Debug::NoLocking=1"]
    make_dirs(ex, f"{apt}/lists/partial", f"{apt}/archives/partial", install)
    try:
        check(ex, ["apt-get", *opts, "update"], f"{mn}: apt-get update")
        check(ex, ["apt-get", *opts, "install", "-y", "--download-only", "--no-install-recommends", *d.packages],
              f"{mn}: downloading {', '.join(d.packages)} and what they need")
        carried = [f"{prefix}/{PACKAGES_LOCK}" for prefix in debian_prefixes]
        check(ex, ["sh", "-c", 'cat -- "$@" 2>/dev/null | cut -d= -f1 > "$0"', f"{apt}/carried", *carried],
              f"{mn}: reading what its dependencies carry")
        unpacked = check(ex, ["sh", "-c", UNPACK, "sh", f"{apt}/archives", install, f"{apt}/carried"],
                         f"{mn}: unpacking the packages")
    finally:
        remove_tree(ex, apt)
    lock = dict(line.split("=", 1) for line in unpacked.stdout.split() if "=" in line)
    ex.write_file(f"{install}/{PACKAGES_LOCK}", "".join(f"{p}={v}\n" for p, v in sorted(lock.items())))
    main = d.packages[0]
    if main not in lock:
        raise ModuleError(f"{mn}: {main} is in the node image already (or a dependency carries it): nothing "
                          "to publish; fix: use it without a module, or name another package first")
    want = software_version(mn.full)
    have = lock[main].split(":", 1)[-1]
    if not (have == want or have.startswith((f"{want}.", f"{want}+", f"{want}-", f"{want}~"))):
        raise ModuleError(f"{mn}: the release's {main} is {lock[main]}, not {want}; "
                          f"fix: name the module after {have.split('-')[0]}")
    libdir = f"{install}/usr/lib/{DEB_MULTIARCH}"
    for sub in ALTERNATIVES:
        check(ex, ["sh", "-c", 'for f in "$0"/"$1"/*.so*; do [ -e "$f" ] || continue; '
                               'n=${f##*/}; [ -e "$0/$n" ] || ln -s "$1/$n" "$0/$n"; done', libdir, sub],
              f"{mn}: linking {sub} as update-alternatives would")
    for rel, target in sorted(d.links.items()):  # what update-alternatives would link
        make_dirs(ex, posixpath.dirname(f"{install}/{rel}"))
        check(ex, ["ln", "-s", "--", target, f"{install}/{rel}"], f"{mn}: linking {rel} (it must not exist yet)")
        if not ex.run(["test", "-e", f"{install}/{rel}"]).ok:  # -e follows the link
            raise ModuleError(f"{mn}: links: {rel} -> {target} leads to nothing in the prefix; "
                              "fix: name a file the packages hold, relative to the link's directory")
    for rel, text in sorted(d.write_files.items()):  # what the module adds, checked with the rest below
        make_dirs(ex, posixpath.dirname(f"{install}/{rel}"))
        ex.write_file(f"{install}/{rel}", text)
    missing = [f for f in d.files if not exists(ex, f"{install}/{f}")]
    if missing:
        raise ModuleError(f"{mn}: missing after the unpacking: {', '.join(missing)}; fix: check packages or files")
    if d.imports:
        paths = [f"{p}/usr/lib/python3/dist-packages" for p in (install, *debian_prefixes)]
        libs = ":".join(f"{p}/usr/lib/{DEB_MULTIARCH}:{p}/usr/lib" for p in (install, *debian_prefixes))
        python = f"{python_prefix}/bin/python" if python_prefix else "python3"
        code = f"import sys; sys.path[:0] = {paths!r}; import " + ", ".join(d.imports)
        check(ex, ["env", f"LD_LIBRARY_PATH={libs}", python, "-I", "-c", code], f"{mn}: import {', '.join(d.imports)}")


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
