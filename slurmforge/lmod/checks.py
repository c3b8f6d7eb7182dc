"""Rules that relate a module's name, kind and dependencies to other modules.

Each check returns Problems (module:field, what is wrong, the fix); `catalog_problems`
runs them all so that one run names every mistake.
"""

from __future__ import annotations

import difflib
import re
from collections import defaultdict
from collections.abc import Mapping

from slurmforge.errors import Problem
from slurmforge.lmod.definition import (
    LIB_RE,
    SCHEME_FIX,
    AnyDefinition,
    MetaModule,
    PythonModule,
    VenvModule,
    is_scheme_name,
    lib_package,
    python_suffix,
    python_version,
)

Modules = Mapping[str, AnyDefinition]
PIN_RE = re.compile(r"^\s*(?P<pkg>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*==\s*(?P<ver>[^\s;,]+)")


def catalog_problems(modules: Modules, complete: bool = True, names: set[str] | None = None) -> list[Problem]:
    """Every rule over the typed definitions. When some definitions did not type-check
    (`complete` False), only the rules that cannot be misled by a missing one run;
    `names` are all module names, typed or not."""
    problems: list[Problem] = []
    for full in sorted(names or modules, key=_sort_key):
        d = modules.get(full)
        problems += naming(full, d)
        if d is not None:
            problems += venv_pin(full, d) + meta(full, d)
        if d is not None and complete:
            problems += dependencies(full, d, modules) + python_match(full, d, modules)
    return problems + flags(modules) + (cycles(modules) if complete else [])


def _sort_key(full: str) -> tuple[str, ...]:
    return tuple(full.rpartition("/")[::2])


def naming(full: str, d: AnyDefinition | None) -> list[Problem]:
    if not is_scheme_name(full):
        return [Problem(full, "the name breaks the naming scheme", SCHEME_FIX, show_value=False)]
    lib = LIB_RE.match(full) is not None
    if isinstance(d, PythonModule) and python_version(full) is None:
        return [Problem(f"{full}:kind", "a python module must be named apps/python/<X.Y>",
                        "rename it to apps/python/<X.Y>, the interpreter's version", "python")]
    if isinstance(d, VenvModule) and not lib:
        return [Problem(f"{full}:kind", "a venv module must live under libs/python/",
                        "name it libs/python/<package>/<version>-python-<X.Y>", "venv")]
    if lib and isinstance(d, PythonModule | MetaModule):
        return [Problem(f"{full}:kind", "libs/python/ holds venv, tree and debian modules",
                        "use kind: venv, or move it under apps/", d.kind)]
    return []


def dependencies(full: str, d: AnyDefinition, modules: Modules) -> list[Problem]:
    problems = []
    for i, dep in enumerate(d.depends_on):
        where = f"{full}:depends_on[{i}]"
        if dep == full:
            problems.append(Problem(where, "a module cannot depend on itself", "remove the entry", dep))
        elif dep not in modules:
            close = difflib.get_close_matches(dep, [m for m in modules if m != full], n=1, cutoff=0.75)
            fix = f"did you mean {close[0]}?" if close else f"add modules/{dep}.yaml or fix the name"
            problems.append(Problem(where, "unknown module", fix, dep))
    if len(set(d.depends_on)) != len(d.depends_on):
        problems.append(Problem(f"{full}:depends_on", "lists a module twice", "remove the duplicate",
                                show_value=False))
    return problems


def _python_of(dep: str, modules: Modules) -> str | None:
    """The Python X.Y a dependency brings: its own version, or its -python-X.Y suffix."""
    if isinstance(modules.get(dep), PythonModule):
        version = python_version(dep)
        return ".".join(version.split(".")[:2]) if version else None
    return python_suffix(dep)


def python_match(full: str, d: AnyDefinition, modules: Modules) -> list[Problem]:
    """A libs/python module runs on the Python its name says, and on only that one."""
    suffix = python_suffix(full)
    if suffix is None:
        return []
    pythons = [dep for dep in d.depends_on if isinstance(modules.get(dep), PythonModule)]
    problems = []
    if not pythons and isinstance(d, VenvModule) and all(dep in modules for dep in d.depends_on):
        problems.append(Problem(f"{full}:depends_on", "no Python module to build the venv with",
                                f"add apps/python/{suffix} to depends_on", show_value=False))
    if len(pythons) > 1:
        problems.append(Problem(f"{full}:depends_on", "depends on more than one Python module",
                                "keep one apps/python/<X.Y>", ", ".join(pythons)))
    for i, dep in enumerate(d.depends_on):
        have = _python_of(dep, modules)
        if have is not None and have != suffix:
            problems.append(Problem(
                f"{full}:depends_on[{i}]", f"brings Python {have} but the name says python-{suffix}",
                f"depend on a python-{suffix} module, or rename this one to ...-python-{have}", dep))
    return problems


def venv_pin(full: str, d: AnyDefinition) -> list[Problem]:
    """libs/python/six/1.16.0-python-3.13 installs six==1.16.0 (or 1.16.0+local)."""
    named = lib_package(full)
    if not isinstance(d, VenvModule) or named is None:
        return []
    package, version = named
    for line in d.requirements:
        match = PIN_RE.match(line)
        if match and _normal(match["pkg"]) == _normal(package):
            pinned = match["ver"]
            if pinned == version or pinned.startswith(version + "+"):
                return []
            return [Problem(f"{full}:requirements", f"pins {package}=={pinned} but the name says {version}",
                            f"pin {package}=={version}, or name the module after {pinned}", line)]
    return [Problem(f"{full}:requirements", f"no requirement pins {package}=={version}",
                    f"add '{package}=={version}' (the name's package and version)", show_value=False)]


def _normal(package: str) -> str:
    return re.sub(r"[-_.]+", "-", package).lower()


def meta(full: str, d: AnyDefinition) -> list[Problem]:
    if not isinstance(d, MetaModule):
        return []
    problems = []
    if not d.depends_on:
        problems.append(Problem(f"{full}:depends_on", "a meta module that loads nothing",
                                "list the modules it loads", show_value=False))
    for field, entries in (("prepend_path", d.prepend_path), ("append_path", d.append_path)):
        for var, paths in entries.items():
            for i, path in enumerate(paths):
                if not path.startswith("/"):
                    problems.append(Problem(f"{full}:{field}.{var}[{i}]", "a meta module installs nothing, "
                                            "so a relative path has no prefix", "use an absolute path", path))
    for var, value in d.setenv.items():
        if "{prefix}" in value:
            problems.append(Problem(f"{full}:setenv.{var}", "a meta module has no {prefix}",
                                    "use an absolute path", value))
    return problems


def flags(modules: Modules) -> list[Problem]:
    problems = []
    defaults: dict[str, list[str]] = defaultdict(list)
    for full, d in modules.items():
        if d.default:
            defaults[full.rpartition("/")[0]].append(full)
        if d.default and d.deprecated:
            problems.append(Problem(f"{full}:default", "a deprecated version cannot be the default",
                                    "drop default: true or deprecated: true", show_value=False))
    for name, fulls in sorted(defaults.items()):
        if len(fulls) > 1:
            versions = ", ".join(sorted(f.rpartition("/")[2] for f in fulls))
            problems.append(Problem(f"{name}:default", f"more than one default version ({versions})",
                                    "keep default: true on one version", show_value=False))
    return problems


def cycles(modules: Modules) -> list[Problem]:
    """Each dependency cycle once, as a -> b -> a, reported on its first module."""
    problems: list[Problem] = []
    done: set[str] = set()
    seen: set[frozenset[str]] = set()

    def walk(full: str, stack: list[str]) -> None:
        if full in stack:
            loop = stack[stack.index(full):]
            if frozenset(loop) not in seen:
                seen.add(frozenset(loop))
                problems.append(Problem(f"{min(loop)}:depends_on", "dependency cycle: " + " -> ".join(
                    [*_rotate(loop), min(loop)]), "remove one of these depends_on entries", show_value=False))
            return
        if full in done or full not in modules:
            return
        for dep in modules[full].depends_on:
            if dep != full:  # reported by `dependencies`
                walk(dep, [*stack, full])
        done.add(full)

    for full in sorted(modules):
        walk(full, [])
    return problems


def _rotate(loop: list[str]) -> list[str]:
    start = loop.index(min(loop))
    return loop[start:] + loop[:start]
