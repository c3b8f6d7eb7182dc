"""The published module tree on shared storage, and its manifest.

    <root>/modulefiles/<name>/<version>.lua    MODULEPATH: what `module avail` shows
    <root>/modulefiles/<name>/.modulerc.lua    the default version and hidden (deprecated) ones
    <root>/install/<name>/<version>/           the installed files of a version (immutable)
    <root>/.staging/                           builds in progress (same filesystem: renames are atomic)
    <root>/.slurmforge/manifest.json           who published what, when, with which checksum
    <root>/.slurmforge/lock                    one change at a time

The manifest is the record; `.modulerc.lua` files are rendered from it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from slurmforge.errors import ModuleError
from slurmforge.lmod.definition import ModuleName

# The root goes into argv and sed expressions: keep it to plain path characters.
ROOT_RE = re.compile(r"^/[A-Za-z0-9._/+-]*[A-Za-z0-9._+-]$")


@dataclass(frozen=True)
class Tree:
    root: str

    def __post_init__(self) -> None:
        if not ROOT_RE.match(self.root) or "/../" in f"{self.root}/":
            raise ModuleError(f"module tree root {self.root!r}: use an absolute path of letters, digits, "
                              "'.', '_', '+', '-' and '/' (no trailing '/')")

    @property
    def modulepath(self) -> str:
        return f"{self.root}/modulefiles"

    @property
    def state_dir(self) -> str:
        return f"{self.root}/.slurmforge"

    @property
    def manifest_path(self) -> str:
        return f"{self.state_dir}/manifest.json"

    @property
    def lock_path(self) -> str:
        return f"{self.state_dir}/lock"

    @property
    def staging_dir(self) -> str:
        return f"{self.root}/.staging"

    def modulefile(self, mn: ModuleName) -> str:
        return f"{self.modulepath}/{mn.name}/{mn.version}.lua"

    def modulerc(self, name: str) -> str:
        return f"{self.modulepath}/{name}/.modulerc.lua"

    def prefix(self, mn: ModuleName) -> str:
        return f"{self.root}/install/{mn.name}/{mn.version}"

    def stage(self, mn: ModuleName, token: str) -> str:
        return f"{self.staging_dir}/{mn.name}/{mn.version}.{token}"

    def scratch(self, token: str) -> str:
        return f"{self.staging_dir}/.write.{token}"


# --------------------------------------------------------------------------- manifest


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Entry(Record):
    name: str
    version: str
    kind: str
    checksum: str
    published_by: str
    published_at: str
    default: bool = False
    deprecated: bool = False
    definition: dict[str, Any]
    """The canonical definition: re-renders the modulefile without the repo."""


class Event(Record):
    action: Literal["publish", "default", "rollback", "deprecate"]
    module: str
    by: str
    at: str
    previous: str | None = None


class Manifest(Record):
    format: Literal[1] = 1
    modules: dict[str, Entry] = {}
    defaults: dict[str, list[str]] = {}
    """Per name, every version made default in turn; the last one is the default now.
    `rollback` drops the last one."""
    history: list[Event] = []

    def entry(self, full: str) -> Entry:
        if full not in self.modules:
            raise ModuleError(f"{full} is not published in this tree (see `modules list`)")
        return self.modules[full]

    def default_of(self, name: str) -> str | None:
        versions = self.defaults.get(name, [])
        return versions[-1] if versions else None

    def hidden(self, name: str) -> list[str]:
        return sorted(e.version for e in self.modules.values() if e.name == name and e.deprecated)

    def with_entry(self, full: str, entry: Entry, event: Event) -> Manifest:
        return self.model_copy(update={"modules": {**self.modules, full: entry},
                                       "history": [*self.history, event]})

    def with_defaults(self, name: str, versions: list[str], event: Event) -> Manifest:
        """`versions` becomes the default stack of `name`; entries' default flags follow."""
        current = versions[-1] if versions else None
        modules = {full: e.model_copy(update={"default": e.version == current}) if e.name == name else e
                   for full, e in self.modules.items()}
        return self.model_copy(update={"modules": modules, "defaults": {**self.defaults, name: versions},
                                       "history": [*self.history, event]})

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_none=True), indent=2, sort_keys=True) + "\n"


def parse_manifest(text: str | None, where: str) -> Manifest:
    if text is None:
        return Manifest()
    try:
        return Manifest.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ModuleError(f"{where}: not a slurmforge manifest ({loc}: {first['msg']}); "
                          "restore it from the tree's backup or fix it by hand") from None


def utc_now_iso(now: datetime) -> str:
    return now.replace(microsecond=0).isoformat().replace("+00:00", "Z")
