"""Every module definition in `modules/`, loaded and checked together.

Validation gathers every problem (one line each: module, field, what is wrong, the
fix) and raises them at once as a SpecError; nothing is published from a catalog
with problems.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from slurmforge.errors import Problem, SpecError
from slurmforge.lmod import definition as d
from slurmforge.lmod.checks import catalog_problems
from slurmforge.lmod.definition import KIND_MODELS, AnyDefinition, natural_key, parse_definition
from slurmforge.spec.document import YamlProblem, read_yaml

MESSAGES = {"string_pattern_mismatch": "not allowed here", "too_short": "needs at least one entry"}
PATTERN_FIXES = {
    d.ENV_NAME_RE: "use an environment variable name (letters, digits, '_')",
    d.ABS_PATH_RE: "use an absolute path without spaces",
    d.REL_PATH_RE: "use a path inside the install prefix, without '..' or spaces",
    d.PATH_ENTRY_RE: "use a path without spaces (relative ones are inside the install prefix)",
    d.MODULE_REF_RE: "use a full module name such as apps/python/3.13",
    d.REQUIREMENT_RE: "use a pip requirement line such as six==1.16.0 (no pip options)",
    d.PY_MODULE_RE: "use a Python module name such as six or google.protobuf",
    d.SHA256_RE: "use the 64 lowercase hex digits of sha256sum",
}


@dataclass(frozen=True)
class Catalog:
    """Valid definitions by full name (apps/python/3.13)."""

    modules: Mapping[str, AnyDefinition]

    def get(self, full: str) -> AnyDefinition:
        return self.modules[full]

    def names(self) -> list[str]:
        return sorted(self.modules, key=natural_key)

    def resolve(self, wanted: Iterable[str]) -> list[str]:
        """`wanted` and everything they depend on, dependencies first; KeyError on an
        unknown name (callers check names with `unknown`)."""
        order: list[str] = []

        def visit(full: str) -> None:
            if full in order:
                return
            for dep in self.modules[full].depends_on:
                visit(dep)
            order.append(full)

        for full in wanted:
            visit(full)
        return order

    def unknown(self, wanted: Iterable[str]) -> list[Problem]:
        problems = []
        for full in wanted:
            if full not in self.modules:
                close = difflib.get_close_matches(full, list(self.modules), n=1)
                fix = f"did you mean {close[0]}?" if close else "add modules/<name>/<version>.yaml first"
                problems.append(Problem(full, "no such module definition", fix, show_value=False))
        return problems


def load_catalog(directory: str | Path) -> Catalog:
    """Every `<name>/<version>.yaml` under `directory`; SpecError with every problem."""
    root = Path(directory)
    if not root.is_dir():
        raise SpecError([Problem("", f"no such directory: {root}", "pass the modules/ directory")], str(root))
    raw: dict[str, object] = {}
    problems: list[Problem] = []
    for path in sorted(root.rglob("*.yaml")):
        full = path.relative_to(root).with_suffix("").as_posix()
        data, problem = _read_yaml(path.read_text(), full)
        if problem:
            problems.append(problem)
        else:
            raw[full] = data
    return validate_catalog(raw, str(root), problems)


def load_bundle(path: str | Path) -> Catalog:
    """A single YAML file mapping full names to definitions (tests, examples)."""
    text = Path(path).read_text()
    data, problem = _read_yaml(text, "")
    if problem:
        raise SpecError([problem], str(path))
    if not isinstance(data, dict):
        raise SpecError([Problem("", "not a mapping of module names to definitions",
                                 "write 'apps/python/3.13: {kind: python, ...}' lines")], str(path))
    return validate_catalog({str(k): v for k, v in data.items()}, str(path))


def validate_catalog(raw: Mapping[str, object], source: str, problems: list[Problem] | None = None) -> Catalog:
    found = list(problems or [])
    modules: dict[str, AnyDefinition] = {}
    for full, data in raw.items():
        try:
            modules[full] = parse_definition(data)
        except ValidationError as exc:
            found += [_problem(full, data, err) for err in exc.errors()]
    found += catalog_problems(modules, complete=not found, names=set(raw))
    if found:
        raise SpecError(found, source)
    return Catalog(modules)


def _read_yaml(text: str, where: str) -> tuple[object, Problem | None]:
    """The spec's YAML reader (bounded depth, size and aliases; no constructor that can
    crash): a module definition is written by an admin, as a spec is."""
    try:
        return read_yaml(text), None
    except YamlProblem as exc:
        return None, Problem(where, exc.text(), exc.fix)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return None, Problem(where, f"YAML syntax error at {at}: {reason}", "fix the YAML syntax")


def _field(loc: tuple[int | str, ...]) -> str:
    out = ""
    for i, part in enumerate(loc):
        if i == 0 and part in KIND_MODELS:  # the union's tag
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "[key]" and not part.startswith("function-"):
            out += f".{part}" if out else part
    return out


def _problem(full: str, data: object, err: Any) -> Problem:
    loc = tuple(err["loc"])
    path = f"{full}:{_field(loc)}" if _field(loc) else full
    kind = err["type"]
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        value = data.get("kind") if isinstance(data, dict) else None
        return Problem(f"{full}:kind", "unknown module kind", f"use kind: {', '.join(KIND_MODELS)}", value)
    if kind == "model_attributes_type" or (kind == "model_type" and not loc):
        return Problem(full, "the definition is not a mapping", "write key: value lines", show_value=False)
    if kind == "extra_forbidden":
        return Problem(path, "unknown key", _key_fix(data, loc), show_value=False)
    if kind == "missing":
        return Problem(path, "required key is missing", "add it", show_value=False)
    message = MESSAGES.get(kind) or str(err["msg"]).removeprefix("Value error, ")
    value = err.get("input")
    small = isinstance(value, str | int | float | bool) and len(str(value)) <= 80
    fix = {"string_pattern_mismatch": PATTERN_FIXES.get(str(err.get("ctx", {}).get("pattern")), ""),
           "bool_type": "use true or false", "bool_parsing": "use true or false",
           "list_type": "use a list: [a, b]", "dict_type": "use a mapping (key: value lines)",
           "too_short": "add at least one entry"}.get(kind, "")
    return Problem(path, message[0].lower() + message[1:], fix, value if small else None)


def _key_fix(data: object, loc: tuple[int | str, ...]) -> str:
    kind = data.get("kind") if isinstance(data, dict) else None
    model = KIND_MODELS.get(str(kind))
    if model is None or len(loc) != 2:
        return "remove it"
    options = sorted(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), options, n=1)
    return f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(options)}"
