"""Read cluster.yaml once: YAML -> typed spec -> cross-field checks.

Every problem is collected and raised together as a SpecError; nothing here prints.
"""

from __future__ import annotations

import difflib
import gc
import re
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from slurmforge.errors import Problem, SpecError
from slurmforge.spec.checks import run_checks
from slurmforge.spec.document import MAX_BYTES, YamlProblem, read_yaml
from slurmforge.spec.models import (
    ABS_PATH_RE,
    AMI_RE,
    API_VERSION,
    CLUSTER_NAME_RE,
    DB_NAME_RE,
    EMAIL_RE,
    FEATURE_RE,
    HTTP_URL_RE,
    KEY_NAME_RE,
    NAME_RE,
    POSIX_NAME_RE,
    PROM_DURATION_RE,
    REGION_RE,
    SLURM_NAME_RE,
    TEXT_RE,
    AwsTarget,
    Cluster,
    LocalTarget,
    StaticTarget,
)

TARGETS: dict[str, type[BaseModel]] = {"aws": AwsTarget, "local": LocalTarget, "static": StaticTarget}

# Keys people write (from Slurm, ParallelCluster or older slurmforge) -> the spec's name.
# A hint is only given where the new name is a key of the same section.
RENAMED = {
    "instance_type": "instance_types",
    "instance": "instance_types",
    "instances": "instance_types",
    "min": "min_nodes",
    "max": "max_nodes",
    "min_count": "min_nodes",
    "max_count": "max_nodes",
    "MaxNodes": "max_nodes",
    "MaxTime": "max_time",
    "DefaultTime": "default_time",
    "AllowGroups": "allow_groups",
    "AllowAccounts": "allow_accounts",
    "Default": "default",
    "State": "state",
    "PriorityTier": "priority_tier",
    "PreemptMode": "preempt_mode",
    "OverSubscribe": "oversubscribe",
    "QOS": "qos",
    "PartitionName": "name",
    "Nodes": "pools",
    "nodes": "pools",
    "queues": "partitions",
    "idle_time": "idle_seconds",
    "idle_timeout": "idle_seconds",
    "scaledown_idletime": "idle_seconds",
    "SuspendTime": "idle_seconds",
    "ResumeTimeout": "resume_timeout",
    "memory": "memory_mb",
    "real_memory": "memory_mb",
    "RealMemory": "memory_mb",
    "apiVersion": "api_version",
    "version": "api_version",
    "cluster_name": "name",
    "ClusterName": "name",
    "spot": "market",
    "capacity_type": "market",
    "gpu_count": "gpus",
    "gpus_per_node": "gpus",
    "feature": "features",
    "Features": "features",
    "Weight": "weight",
    "availability_zones": "zones",
    "type": "kind",
}

# Fixes for required keys, by path (list indices as []); others get "add <key>:".
MISSING = {
    "api_version": f"add 'api_version: {API_VERSION}' as the first line",
    "name": "add name: (lowercase letters and digits, e.g. ml)",
    "target": "add target: with kind: aws, local or static",
    "pools": "add pools: with at least one pool",
    "partitions": "add partitions: with at least one partition",
    "storage": "add storage: with nas: (kind efs, nfs or bind)",
    "storage.nas": "add nas: with kind efs, nfs or bind",
    "pools[].max_nodes": "add max_nodes: (the most nodes this pool may have)",
    "partitions[].pools": "add pools: (the pools whose nodes the partition holds)",
    "target.region": "add region: (e.g. us-east-1)",
    "target.key_name": "add key_name: the EC2 key pair Ansible logs in with over SSH (create one in the target region: "
                       "aws ec2 create-key-pair --key-name <name> --query KeyMaterial --output text > "
                       "~/.ssh/<name>.pem; chmod 600 it)",
    "target.controller": "add controller: with name and address",
}

# Field patterns -> (message, fix).
PATTERNS = {
    NAME_RE: ("not an allowed name", "lowercase letters, digits and '-', starting with a letter, at most 32"),
    SLURM_NAME_RE: ("not an allowed name", "letters, digits, '_' and '-', starting with a letter"),
    FEATURE_RE: ("not an allowed feature", "letters, digits, '_', '.' and '-' (no spaces or commas)"),
    POSIX_NAME_RE: ("not a POSIX user/group name", "lowercase letters, digits, '_', '.' and '-', a letter or '_' "
                    "first, at most 32"),
    ABS_PATH_RE: ("not an absolute path", "start with '/'; letters, digits, '.', '_', '-', '+' and '@'"),
    DB_NAME_RE: ("not a database name RDS and MariaDB take", "a letter, then letters, digits and '_', at most 64 "
                 "(e.g. slurm_acct_db)"),
    CLUSTER_NAME_RE: ("not an allowed cluster name", "lowercase letters and digits, a letter first, at most 20"),
    REGION_RE: ("not an AWS region", "use a region such as eu-west-1"),
    AMI_RE: ("not an AMI id", "use an id such as ami-0123456789abcdef0"),
    KEY_NAME_RE: ("not an EC2 key pair name", "the name of a key pair in the target region: ASCII letters, digits, "
                  "spaces and punctuation, at most 255 characters"),
    PROM_DURATION_RE: ("not a duration", "a number and a unit: 30s, 5m, 4h or 1d"),
    EMAIL_RE: ("not a mail address", "use e.g. oncall@example.org"),
    HTTP_URL_RE: ("not an http(s) URL", "use e.g. https://hooks.example.org/alerts"),
}


def text_problem(value: str) -> tuple[str, str]:
    """(message, fix) for text Slurm prints that it would not print back as written
    (models.TEXT_RE): the first character that is wrong, and why."""
    for char in value:
        code = f"U+{ord(char):04X}"
        name = unicodedata.name(char, "")
        if char in "\"'":
            return (f"a quote ({char}): sacctmgr stores it as a backtick, so every rollout would set the text again",
                    "leave the quotes out")
        if f"a{char}b".splitlines() != [f"a{char}b"]:
            return (f"a line break ({code}{' ' + name if name else ''}): sacctmgr prints the text on two lines, "
                    "and every rollout would set it again", "write it on one line")
        if unicodedata.category(char) == "Cc":
            return (f"a control character ({code}): terminals act on it when sacctmgr, sshare or sacct print it",
                    "leave it out")
    return "not one line of plain text", "no line breaks, control characters or quotes"


def load_spec(path: str | Path) -> Cluster:
    """The validated spec in `path`; SpecError with every problem otherwise."""
    source = str(path)
    try:
        with Path(path).open("rb") as handle:
            raw = handle.read(MAX_BYTES + 1)  # bounded: /dev/zero or a huge file must not fill memory
        if len(raw) > MAX_BYTES:
            raise SpecError([Problem("", f"{source} is larger than {MAX_BYTES // 2**20} MiB",
                                     "pass your cluster.yaml (a spec is a few kilobytes)")], source)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        problem = Problem("", f"no such file: {source}", "pass the path to your cluster.yaml")
        raise SpecError([problem], source) from None
    except IsADirectoryError:
        raise SpecError([Problem("", f"{source} is a directory", "pass the path to your cluster.yaml")],
                        source) from None
    except UnicodeDecodeError:
        raise SpecError([Problem("", f"{source} is not a text file", "pass your cluster.yaml (YAML text)")],
                        source) from None
    except OSError as exc:
        raise SpecError([Problem("", f"cannot read {source}: {exc.__class__.__name__}", "pass a readable YAML file")],
                        source) from None
    del raw  # the text is all that is read from here on (a large spec's bytes need not stay)
    return parse_spec(text, source)


@contextmanager
def _without_gc() -> Iterator[None]:
    """The cyclic garbage collector would walk the growing tree of a large spec again and
    again while it is read and validated (4x the time for 100,000 users); a spec holds no
    cycles, so nothing is lost by pausing it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse_spec(text: str, source: str = "<string>", checks: bool = True) -> Cluster:
    """The spec in `text`; SpecError with every problem. `checks=False` leaves out the
    cross-field checks (the models' own rules still hold): for a spec that was deployed by
    another slurmforge, read to compare against, never to deploy."""
    with _without_gc():
        return _parse_spec(text, source, checks)


def _parse_spec(text: str, source: str, checks: bool = True) -> Cluster:
    try:
        data = read_yaml(text)
    except YamlProblem as exc:
        raise SpecError([Problem("", exc.text(), exc.fix)], source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        found = Problem("", f"YAML syntax error{where}: {problem}", "fix the YAML syntax")
        raise SpecError([found], source) from None
    except UnicodeError:  # a str with lone surrogates, from a caller that built the text itself
        raise SpecError([Problem("", "the text is not valid Unicode", "pass your cluster.yaml (UTF-8 text)")],
                        source) from None
    if data is None:
        raise SpecError([Problem("", "the file is empty", f"start with 'api_version: {API_VERSION}'")], source)
    if not isinstance(data, dict):
        kind = {list: "a list", str: "plain text", bool: "a boolean"}.get(type(data), "a number")
        raise SpecError([Problem("", f"the file is {kind}, not a YAML mapping",
                                 f"write key: value lines, starting with 'api_version: {API_VERSION}'")], source)
    return _validate(data, source, consume=True, checks=checks)


# Top-level keys with this prefix are left out before validation: a place for the
# anchors that merge keys copy from (as in docker compose files).
EXTENSION_PREFIX = "x-"


def validate_data(data: dict[str, Any], source: str = "<data>") -> Cluster:
    """The validated spec of plain data (as YAML gives it); SpecError with every problem."""
    return _validate(data, source, consume=False)


def _validate(data: dict[str, Any], source: str, consume: bool, checks: bool = True) -> Cluster:
    """`consume`: the data is the loader's own and may be used up (see _validate_lists)."""
    data = {key: value for key, value in data.items() if not str(key).startswith(EXTENSION_PREFIX)}
    version = data.get("api_version")
    if version is not None and version != API_VERSION:
        # another version is another schema: its other errors would only mislead
        raise SpecError([Problem("api_version", "unsupported api_version", f"use {API_VERSION}", version)], source)
    if consume:
        _validate_lists(data)
    try:
        spec = Cluster.model_validate(data)
    except ValidationError as exc:
        total = exc.error_count()
        if total > MAX_PROBLEMS:  # wording a million errors costs seconds: word those of a sample
            exc = _sample_errors(data) or exc
        errors = exc.errors(include_url=False)[:MAX_PROBLEMS]
        raise SpecError(bounded([_problem(err) for err in errors], total), source) from None
    problems = run_checks(spec, most=MAX_COUNTED) if checks else []
    if problems:
        raise SpecError(bounded(problems[:MAX_PROBLEMS], len(problems), exact=len(problems) <= MAX_COUNTED), source)
    return spec


# Lists validated ahead in chunks of this many items (see _validate_lists).
CHUNK = 1024


@cache
def _model_lists(model: type[BaseModel] = Cluster, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path, item model) of every list of models in the spec that nested models
    reach (users, accounting.accounts, pools, ...)."""
    found = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if get_origin(annotation) is list:
            item = _inner_model(get_args(annotation)[0])
            if item is not None:
                found.append(((*path, name), item))
        else:
            inner = _inner_model(annotation)
            if inner is not None and inner is not model:
                found += _model_lists(inner, (*path, name))
    return found


@cache
def _list_adapter(item: type[BaseModel]) -> TypeAdapter[list[BaseModel]]:
    """The validator of a list of `item`, built when a spec first has such a long list
    (building one costs milliseconds of a small spec's start-up)."""
    return TypeAdapter(list[item])  # type: ignore[valid-type]


def _validate_lists(data: dict[str, Any]) -> None:
    """Validate the spec's lists of models ahead, a chunk at a time, each valid chunk
    replacing its mappings by models (the whole spec's validation then takes the models as
    they are): a large spec then never holds all its mappings and all its models at once
    (a 10 MB spec's peak memory). At the first chunk that fails the rest of that list is
    left as it is: validating the whole reports every problem with its path."""
    for path, item in _model_lists():
        items: Any = data
        for key in path:
            items = items.get(key) if isinstance(items, dict) else None
        if not isinstance(items, list) or len(items) <= CHUNK:
            continue
        adapter = _list_adapter(item)
        for start in range(0, len(items), CHUNK):
            try:
                items[start:start + CHUNK] = adapter.validate_python(items[start:start + CHUNK])
            except ValidationError:
                break


# Problems reported at most: the first ones, then how many more (a 10 MB file can hold a
# million mistakes; nobody reads past the first screens, and each costs time to word).
MAX_PROBLEMS = 1000
# Cross-field problems counted at most (the checks stop past it: "more than 9,001 more").
MAX_COUNTED = 10 * MAX_PROBLEMS


def _sample_errors(data: dict[str, Any]) -> ValidationError | None:
    """The errors of the spec cut to its first few thousand values (the first errors of the
    whole, mostly: its lists and mappings keep their first items)."""
    budget = [20 * MAX_PROBLEMS]

    def cut(value: object) -> object:
        budget[0] -= 1
        if isinstance(value, dict):
            return {k: cut(v) for k, v in list(value.items())[:max(budget[0], 1)]}
        if isinstance(value, list):
            return [cut(v) for v in value[:max(budget[0], 1)]]
        return value

    try:
        Cluster.model_validate(cut(data))
    except ValidationError as exc:
        return exc
    return None


def bounded(problems: list[Problem], total: int, exact: bool = True) -> list[Problem]:
    """The first MAX_PROBLEMS problems of `total` (or more, when not `exact`), and a line
    saying how many are left out."""
    if total <= MAX_PROBLEMS:
        return problems
    more = f"{total - MAX_PROBLEMS + 1:,}" if exact else f"more than {total - MAX_PROBLEMS:,}"
    return [*problems[:MAX_PROBLEMS - 1], Problem("", f"{more} more problem(s) not shown",
                                                  "fix the ones above and validate again")]


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
            if part in TARGETS:
                continue
        out += f".{part}" if out else part
        skip_next_tag = part == "target"
    return out


def _problem(err: Any) -> Problem:
    loc = tuple(err["loc"])
    path = _path(loc)
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        return Problem(path, "unknown key", _unknown_key_fix(str(loc[-1]), _model_at(loc[:-1])), show_value=False)
    if kind == "missing":
        fix = MISSING.get(re.sub(r"\[\d+\]", "[]", path), f"add {loc[-1]}:")
        return Problem(path, "required key is missing", fix, show_value=False)
    if kind == "union_tag_not_found":
        return Problem(f"{path}.kind", "required key is missing", "add kind: aws, local or static", show_value=False)
    if kind == "union_tag_invalid":
        return Problem(f"{path}.kind", "unknown target kind", "use kind: aws, local or static", ctx.get("tag"))
    if kind == "string_pattern_mismatch":
        pattern = ctx.get("pattern", "")
        if pattern == TEXT_RE and isinstance(value, str):
            message, fix = text_problem(value)
        else:
            message, fix = PATTERNS.get(pattern, ("does not match the allowed form", f"match {pattern}"))
        return Problem(path, message, fix, value)
    key = next((str(part) for part in reversed(loc) if isinstance(part, str)), "")
    if kind in ONE_VALUE_KINDS and isinstance(value, list | dict):
        return _not_one_value(path, key, value)
    if kind in ("int_parsing", "float_parsing") and key in FIELD_UNITS and isinstance(value, str):
        return _number_problem(path, key, value, whole=kind == "int_parsing")
    value = value if _small(value) else None
    if kind in ("model_type", "model_attributes_type", "dict_type"):  # not pydantic's "instance of Pool"
        return Problem(path, "should be a mapping", "write key: value lines under it (or remove it)", value)
    if "fix" in ctx:  # our own field errors (models.field_error)
        return Problem(path, err["msg"], ctx["fix"], value)
    message = err["msg"].removeprefix("Value error, ")
    return Problem(path, message[0].lower() + message[1:], _fix_for(kind, ctx, key), value)


# pydantic's errors for a field that takes one value: given a list or mapping, the fix is
# to keep one value, not to quote it.
ONE_VALUE_KINDS = frozenset({"string_type", "int_type", "float_type", "bool_type"})
# Why a field takes one value, where that is not plain from its name.
ONE_VALUE_WHY = {
    "default_cpu_pool": " (jobs that name no partition and ask for no GPUs all go to one pool's partition)",
    "default_gpu_pool": " (jobs that name no partition and ask for GPUs all go to one pool's partition)",
}


def _not_one_value(path: str, key: str, value: list[Any] | dict[str, Any]) -> Problem:
    what = "a list" if isinstance(value, list) else "a mapping"
    first = value[0] if isinstance(value, list) and value else None
    example = f", e.g. {key}: {first}" if isinstance(first, str | int | float) and _small(first) else ""
    return Problem(path, f"{what}, but {key} takes one value", f"keep one{example}{ONE_VALUE_WHY.get(key, '')}",
                   value)


# Numbers whose unit their field names: (unit, factors of the units people write with a
# number, into it). A value written with a unit (memory_mb: 256G) gets the number to write.
_MIB: dict[str, float] = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}
_GIB: dict[str, float] = {"m": 1 / 1024, "g": 1, "t": 1024}
_SECONDS: dict[str, float] = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_HOURS: dict[str, float] = {"h": 1, "d": 24}
FIELD_UNITS: dict[str, tuple[str, dict[str, float]]] = {
    "memory_mb": ("MiB", _MIB), "default_mem_per_cpu_mb": ("MiB", _MIB),
    "volume_gb": ("GiB", _GIB), "osd_size_gb": ("GiB", _GIB), "size_gb": ("GiB", _GIB), "retention_gb": ("GB", _GIB),
    "idle_seconds": ("seconds", _SECONDS), "resume_timeout": ("seconds", _SECONDS),
    "pending_minutes": ("minutes", {"m": 1.0, "h": 60.0, "d": 1440.0}),
    "retention_days": ("days", {"d": 1.0, "w": 7.0}),
    "storage_full_percent": ("percent", {"%": 1.0}),
    "gpu_hours": ("GPU-hours", _HOURS), "cpu_hours": ("CPU-hours", _HOURS), "billing_hours": ("billing hours", _HOURS),
    "price_per_hour": ("US dollars per hour", {}),
}
_WITH_UNIT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z%]+)\s*")
_UNIT_WORDS = {"sec": "s", "secs": "s", "second": "s", "seconds": "s", "min": "m", "mins": "m", "minute": "m",
               "minutes": "m", "hr": "h", "hrs": "h", "hour": "h", "hours": "h", "day": "d", "days": "d",
               "week": "w", "weeks": "w"}


def _number_problem(path: str, key: str, value: str, whole: bool) -> Problem:
    """A number field given text: with a unit it knows, the number to write instead."""
    unit, factors = FIELD_UNITS[key]
    kind = "a whole number" if whole else "a number"
    found = _WITH_UNIT.fullmatch(value)
    if found:
        word = found[2].lower()
        letter = _UNIT_WORDS.get(word, word[0] if factors is _MIB or factors is _GIB else word)
        if letter in factors:
            number = float(found[1]) * factors[letter]
            if not whole or number.is_integer():
                written = int(number) if number.is_integer() else round(number, 3)
                same = f" ({value.strip()} in {unit})" if factors[letter] != 1 else ""
                return Problem(path, f"{key} is {kind} of {unit}, without a unit", f"write {key}: {written}{same}",
                               value)
        return Problem(path, f"{key} is {kind} of {unit}, without a unit",
                       f"write the number of {unit} alone, e.g. {key}: {found[1]}", value)
    return Problem(path, f"not {kind}", f"write {kind} of {unit}", value)


def _unknown_key_fix(key: str, parent: type[BaseModel] | None) -> str:
    options = sorted(parent.model_fields) if parent else []
    if key in RENAMED and (parent is None or RENAMED[key] in options):
        return f"rename it to '{RENAMED[key]}'"
    close = difflib.get_close_matches(key, options, n=1)
    if close:
        return f"did you mean '{close[0]}'?"
    return f"allowed keys: {', '.join(options)}" if options else "remove it"


def _small(value: object) -> bool:
    return isinstance(value, str | int | float | bool) and len(str(value)) <= 80


def _fix_for(kind: str, ctx: dict[str, Any], key: str) -> str:
    unit = FIELD_UNITS[key][0] if key in FIELD_UNITS else ""
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"use a whole number of {unit}" if unit else "use a whole number"
    if kind in ("bool_parsing", "bool_type"):
        return "use true or false"
    if kind == "string_type":
        return "use a string (quote it)"
    if kind in ("list_type", "tuple_type"):
        return "use a YAML list (one '- item' per line, or a flow list)"
    if kind in ("literal_error", "enum"):
        return f"use {ctx.get('expected', 'an allowed value')}"
    if kind == "greater_than":
        return f"use a value above {ctx.get('gt')}"
    if kind == "greater_than_equal":
        return f"use a value >= {ctx.get('ge')}"
    if kind in ("less_than_equal", "less_than"):
        return f"use a value <= {ctx.get('le', ctx.get('lt'))}"
    if kind in ("float_parsing", "float_type", "finite_number"):
        return f"write a number of {unit or 'your choice'}"
    if kind == "too_short":
        return "add at least one entry"
    return "see docs/spec.md for this key"


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class at a location, to suggest the keys it allows."""
    model: Any = Cluster
    in_dict = False  # the next part is a key of a mapping field (target.nodes.<pool>)
    for part in loc:
        if isinstance(part, int) or in_dict:
            in_dict = False
            continue
        fields = getattr(model, "model_fields", None)
        if fields and part in fields:
            annotation = fields[part].annotation
            in_dict = getattr(annotation, "__origin__", None) is dict
            model = _inner_model(annotation)
        elif part in TARGETS:  # the tag pydantic puts in the path of target.<kind>
            model = TARGETS[part]
        else:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    """list[Pool] -> Pool, Ceph | None -> Ceph, Target union -> None (resolved by tag)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    meta = getattr(annotation, "__metadata__", None)
    if meta is not None:
        return _inner_model(annotation.__origin__)
    args = getattr(annotation, "__args__", None)
    if args:
        models = [a for a in (_inner_model(x) for x in args) if a is not None]
        return models[0] if len(models) == 1 else None
    return None
