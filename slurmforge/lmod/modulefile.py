"""Lmod files from a definition: the Lua modulefile (templates/modulefile.lua.j2) and
the per-name `.modulerc.lua` (default version, hidden versions).

Lmod 8.7 (Debian 13) reads `module_version(...,"default")` and `hide_version(...)`
from a `.modulerc.lua` next to the versions, as 8.6 did. Its newer `hide{}` says
nothing on load and `forbid{}` warns (nearly_message) only in a dated window before it
refuses the load, so a deprecated version's message comes from its modulefile
(LmodMessage on load).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2

from slurmforge.lmod.definition import (
    AnyDefinition,
    DebianModule,
    ModuleName,
    PythonModule,
    TreeModule,
    VenvModule,
    checksum,
    python_suffix,
    python_version,
)
from slurmforge.templating import make_environment

TEMPLATE = "modulefile.lua.j2"
DEB_MULTIARCH = "x86_64-linux-gnu"
"""Where Debian puts an amd64 node's libraries (the node image is amd64)."""


def lua(value: object) -> str:
    """A Lua double-quoted string literal of `value` (escapes quotes, backslashes and
    control characters, so no input can end the string early)."""
    out = []
    for ch in str(value):
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\{ord(ch):03d}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def lua_long(text: str) -> str:
    """A Lua long string ([==[ ... ]==]) whose level does not occur in `text`."""
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    eq = "=" * level
    return f"[{eq}[\n{text.rstrip()}\n]{eq}]"


@cache
def environment() -> jinja2.Environment:
    return make_environment(lua=lua, lua_long=lua_long)


def _paths(entries: dict[str, list[str]]) -> list[dict[str, Any]]:
    return [{"var": var, "value": p, "relative": not p.startswith("/")}
            for var, paths in entries.items() for p in paths]


def _kind_env(mn: ModuleName, d: AnyDefinition) -> dict[str, list[str]]:
    """What a kind puts on the environment by itself, before the definition's own."""
    if isinstance(d, PythonModule):
        return {"PATH": ["bin"]}
    if isinstance(d, VenvModule):
        # PYTHONPATH too, so that two libs/python modules loaded together both import
        return {"PATH": ["bin"], "PYTHONPATH": [f"lib/python{python_suffix(mn.full)}/site-packages"]}
    if isinstance(d, DebianModule):  # Debian's own layout under the prefix
        return {"PATH": ["usr/bin"], "LD_LIBRARY_PATH": [f"usr/lib/{DEB_MULTIARCH}", "usr/lib"],
                "PYTHONPATH": ["usr/lib/python3/dist-packages"]}
    return {}


def _whatis(mn: ModuleName, d: AnyDefinition) -> list[tuple[str, str]]:
    pairs = [("Name", mn.name.rsplit("/", 1)[-1]), ("Version", mn.version)]
    if d.category:
        pairs.append(("Category", d.category))
    pairs.append(("Description", d.whatis or _describe(mn, d)))
    return pairs


def _describe(mn: ModuleName, d: AnyDefinition) -> str:
    if isinstance(d, PythonModule):
        return f"Python {python_version(mn.full)} ({d.interpreter})"
    if isinstance(d, VenvModule):
        return f"Python packages: {', '.join(d.requirements)}"
    if isinstance(d, TreeModule):
        return f"installed from {d.source.tarball or d.source.path}"
    if isinstance(d, DebianModule):
        return f"Debian packages: {', '.join(d.packages)}"
    return f"loads {', '.join(d.depends_on)}"


def context(mn: ModuleName, d: AnyDefinition, prefix: str | None, deprecated: bool) -> dict[str, Any]:
    """Everything the template needs; `prefix` is the install directory (None: meta)."""
    prepend = {**_kind_env(mn, d)}
    for var, paths in d.prepend_path.items():
        prepend[var] = [*paths, *prepend.get(var, [])]
    setenv = [(var, value.replace("{prefix}", prefix or "")) for var, value in d.setenv.items()]
    return {
        "full": mn.full,
        "source": f"modules/{mn.full}.yaml",
        "checksum": checksum(mn.full, d),
        "help": d.help or f"{mn.full}: {d.whatis or _describe(mn, d)}",
        "whatis": _whatis(mn, d),
        "family": "python" if isinstance(d, PythonModule) else None,
        "depends_on": list(d.depends_on),
        "root": prefix,
        "prepend": _paths(prepend),
        "append": _paths(d.append_path),
        "setenv": setenv,
        "deprecated": deprecated,
        "deprecation": f"{mn.full} is deprecated: it still loads, but it is hidden from 'module avail' "
                       f"and will be removed. See 'module spider {mn.name}' for newer versions.",
    }


def render_modulefile(mn: ModuleName, d: AnyDefinition, prefix: str | None, deprecated: bool = False) -> str:
    return environment().get_template(TEMPLATE).render(**context(mn, d, prefix, deprecated))


def render_modulerc(name: str, default: str | None, hidden: list[str]) -> str:
    """`.modulerc.lua` of one name: two kinds of line, written from the manifest."""
    lines = [f"-- {name}: default and hidden versions, written by slurmforge from its manifest. Do not edit."]
    if default is not None:
        lines.append(f"module_version({lua(f'{name}/{default}')}, \"default\")")
    lines += [f"hide_version({lua(f'{name}/{version}')})" for version in hidden]
    return "\n".join(lines) + "\n"
