"""Read cluster.yaml once: YAML -> typed spec -> cross-field checks.

Every problem is collected and raised together as a SpecError; nothing here prints.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from slurmforge.errors import Problem, SpecError
from slurmforge.spec.checks import run_checks
from slurmforge.spec.models import API_VERSION, Cluster

# Keys people write (from Slurm, ParallelCluster or older slurmforge) -> the spec's name.
RENAMED = {
    "instance_type": "instance_types",
    "min": "min_nodes",
    "max": "max_nodes",
    "min_count": "min_nodes",
    "max_count": "max_nodes",
    "MaxTime": "max_time",
    "DefaultTime": "default_time",
    "AllowGroups": "allow_groups",
    "Default": "default",
    "State": "state",
    "PriorityTier": "priority_tier",
    "nodes": "pools",
    "queues": "partitions",
    "idle_time": "idle_seconds",
    "scaledown_idletime": "idle_seconds",
    "memory": "memory_mb",
    "real_memory": "memory_mb",
    "apiVersion": "api_version",
    "version": "api_version",
    "cluster_name": "name",
    "spot": "market",
    "gpu_count": "gpus",
}


def load_spec(path: str | Path) -> Cluster:
    """The validated spec in `path`; SpecError with every problem otherwise."""
    source = str(path)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        problem = Problem("", f"no such file: {source}", "pass the path to your cluster.yaml")
        raise SpecError([problem], source) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise SpecError([Problem("", f"cannot read {source}: {exc.__class__.__name__}", "pass a readable YAML file")],
                        source) from None
    return parse_spec(text, source)


def parse_spec(text: str, source: str = "<string>") -> Cluster:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        found = Problem("", f"YAML syntax error at {where}: {problem}", "fix the YAML syntax")
        raise SpecError([found], source) from None
    if not isinstance(data, dict):
        raise SpecError([Problem("", "the file is not a YAML mapping", f"start with 'api_version: {API_VERSION}'")],
                        source)
    return validate_data(data, source)


def validate_data(data: dict[str, Any], source: str = "<data>") -> Cluster:
    version = data.get("api_version")
    if version is not None and version != API_VERSION:
        raise SpecError([Problem("api_version", "unsupported api_version", f"use {API_VERSION}", version)], source)
    try:
        spec = Cluster.model_validate(data)
    except ValidationError as exc:
        raise SpecError([_problem(err) for err in exc.errors()], source) from None
    problems = run_checks(spec)
    if problems:
        raise SpecError(problems, source)
    return spec


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    skip_next_tag = False
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        if "[" in part or part.startswith("function-"):
            continue  # pydantic's validator wrappers
        if skip_next_tag:  # the discriminator tag of a tagged union (target.aws.region)
            skip_next_tag = False
            if part in ("aws", "local", "static"):
                continue
        out += f".{part}" if out else part
        skip_next_tag = part == "target"
    return out


def _problem(err: Any) -> Problem:
    loc = tuple(err["loc"])
    path = _path(loc)
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        key = str(loc[-1])
        parent = _model_at(loc[:-1])
        if key in RENAMED:
            fix = f"rename it to '{RENAMED[key]}'"
        else:
            options = sorted(parent.model_fields) if parent else []
            close = difflib.get_close_matches(key, options, n=1)
            fix = f"did you mean '{close[0]}'?" if close else (
                f"allowed keys: {', '.join(options)}" if options else "remove it")
        return Problem(path, "unknown key", fix, show_value=False)
    if kind == "missing":
        return Problem(path, "required key is missing", "add it", show_value=False)
    if kind == "union_tag_invalid" or kind == "union_tag_not_found":
        return Problem(path + ".kind" if not path.endswith("kind") else path, "unknown target kind",
                       "use kind: aws, local or static", value if kind == "union_tag_invalid" else None)
    if kind == "string_pattern_mismatch":
        pattern = err.get("ctx", {}).get("pattern", "")
        return Problem(path, "not an allowed name", _pattern_fix(pattern), value)
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    return Problem(path, message[0].lower() + message[1:], _fix_for(kind, err), value if _small(value) else None)


def _small(value: object) -> bool:
    return isinstance(value, str | int | float | bool) and len(str(value)) <= 80


def _pattern_fix(pattern: str) -> str:
    fixes = {
        "^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$": "lowercase letters, digits and '-', starting with a letter",
        "^[A-Za-z][A-Za-z0-9_-]{0,62}$": "letters, digits, '_' and '-', starting with a letter",
        "^[A-Za-z0-9_.-]{1,64}$": "letters, digits, '_', '.' and '-' (no spaces or commas)",
        "^[a-z_][a-z0-9_-]{0,31}$": "a POSIX name: lowercase letters, digits, '_' and '-'",
        "^/[^\\s,:]*$": "an absolute path without spaces, ',' or ':'",
        "^[a-z][a-z0-9]{0,19}$": "lowercase letters and digits, starting with a letter, at most 20",
        "^[a-z]{2}(-gov)?-[a-z]+-\\d$": "an AWS region such as eu-west-1",
        "^ami-[0-9a-f]{8,17}$": "an AMI id such as ami-0123456789abcdef0",
    }
    return fixes.get(pattern, f"match {pattern}")


def _fix_for(kind: str, err: Any) -> str:
    ctx = err.get("ctx", {})
    if kind in ("int_parsing", "int_type"):
        return "use a whole number"
    if kind in ("bool_parsing", "bool_type"):
        return "use true or false"
    if kind in ("string_type",):
        return "use a string (quote it)"
    if kind in ("list_type",):
        return "use a list: [a, b]"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return "use a mapping (key: value lines)"
    if kind in ("literal_error", "enum"):
        return f"use {ctx.get('expected', 'an allowed value')}"
    if kind == "greater_than_equal":
        return f"use a value >= {ctx.get('ge')}"
    if kind == "less_than_equal":
        return f"use a value <= {ctx.get('le')}"
    if kind == "too_short":
        return "add at least one entry"
    if kind == "value_error":
        return ""
    return ""


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class at a location, to suggest the keys it allows."""
    model: Any = Cluster
    for part in loc:
        if isinstance(part, int):
            continue
        if part in ("aws", "local", "static") and model is None:
            continue
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            from slurmforge.spec.models import AwsTarget, LocalTarget, StaticTarget

            tagged = {"aws": AwsTarget, "local": LocalTarget, "static": StaticTarget}
            if part in tagged:
                model = tagged[part]
                continue
            return None
        model = _inner_model(fields[part].annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    """list[Pool] -> Pool, Ceph | None -> Ceph, Target union -> None (resolved by tag)."""
    args = getattr(annotation, "__args__", None)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if args:
        models = [a for a in (_inner_model(x) for x in args) if a is not None]
        return models[0] if len(models) == 1 else None
    origin = getattr(annotation, "__origin__", None)
    if origin is not None:
        return _inner_model(getattr(annotation, "__args__", (None,))[0])
    meta = getattr(annotation, "__metadata__", None)
    if meta is not None:
        return _inner_model(annotation.__origin__)
    return None
