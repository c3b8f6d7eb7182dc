"""One module definition: `modules/<name>/<version>.yaml`, typed.

The file's path is the module's full name (`modules/apps/python/3.13.yaml` is
`apps/python/3.13`), so a name is written once. Cross-module rules (dependencies,
cycles, the Python suffix of a venv) live in `lmod/catalog.py`.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

# Seed 002's scheme: apps/<name>/<version> and libs/python/<pkg>/<version>-python-<X.Y>.
PART = r"[a-z0-9][a-z0-9._+-]*"
VERSION = r"[0-9][A-Za-z0-9._+-]*"
APP_RE = re.compile(rf"^apps/(?P<pkg>{PART})/(?P<version>{VERSION})$")
LIB_RE = re.compile(rf"^libs/python/(?P<pkg>{PART})/(?P<version>(?P<pkgver>[0-9][A-Za-z0-9._+]*)"
                    rf"(?:-[A-Za-z0-9._+-]+)?-python-(?P<py>[0-9]+\.[0-9]+))$")
PYTHON_RE = re.compile(r"^apps/python/(?P<version>[0-9]+\.[0-9]+(?:\.[0-9]+)?)$")
SCHEME_FIX = "name it apps/<name>/<version> or libs/python/<package>/<version>-python-<X.Y>"
# A published version is immutable (lmod/plan.py refuses a changed definition under it), so a
# changed definition of the same software is a new version: its revision, `-r<N>` after the
# software's version (apps/openmpi/5.0-r2, libs/python/torch/2.6.0-r3-python-3.13).
REVISION_RE = re.compile(r"-r[0-9]+$")

# What the checksum leaves out: tree state that `default`/`deprecate` change later.
MUTABLE_FIELDS = frozenset({"default", "deprecated"})
# Fields added after versions were published: left out of the checksum while empty, so that a
# version published before keeps its checksum (and is not refused as changed).
LATER_FIELDS = frozenset({"write_files", "links"})

ENV_NAME_RE = r"^[A-Za-z_][A-Za-z0-9_]*$"
ABS_PATH_RE = r"^/[^\s]*$"
REL_PATH_RE = r"^(?!/)(?!(.*/)?\.\.(/|$))[^\s]+$"
PATH_ENTRY_RE = r"^[^\s]+$"
MODULE_REF_RE = r"^[a-z0-9][A-Za-z0-9._+/-]*$"
REQUIREMENT_RE = r"^[A-Za-z0-9][^\n]*$"
PY_MODULE_RE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
SHA256_RE = r"^[0-9a-f]{64}$"
EnvName = Annotated[str, Field(pattern=ENV_NAME_RE)]
AbsPath = Annotated[str, Field(pattern=ABS_PATH_RE)]
RelPath = Annotated[str, Field(pattern=REL_PATH_RE)]
PathEntry = Annotated[str, Field(pattern=PATH_ENTRY_RE)]
ModuleRef = Annotated[str, Field(pattern=MODULE_REF_RE)]
Requirement = Annotated[str, Field(pattern=REQUIREMENT_RE)]
PyModule = Annotated[str, Field(pattern=PY_MODULE_RE)]
Sha256 = Annotated[str, Field(pattern=SHA256_RE)]


@dataclass(frozen=True, order=True)
class ModuleName:
    """`apps/python/3.13` = name `apps/python` + version `3.13` (Lmod's split)."""

    name: str
    version: str

    @classmethod
    def parse(cls, full: str) -> ModuleName:
        name, sep, version = full.rpartition("/")
        if not sep or not name or not version:
            raise ValueError(f"{full!r} is not NAME/VERSION")
        return cls(name, version)

    @property
    def full(self) -> str:
        return f"{self.name}/{self.version}"

    def __str__(self) -> str:
        return self.full


def natural_key(full: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key: apps/python/3.9 before apps/python/3.11."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", full))


def is_scheme_name(full: str) -> bool:
    return bool(APP_RE.match(full) or LIB_RE.match(full))


def python_suffix(full: str) -> str | None:
    """`3.10` for libs/python/torch/1.13.1-cuda-11.7-python-3.10, else None."""
    match = LIB_RE.match(full)
    return match["py"] if match else None


def python_version(full: str) -> str | None:
    """`3.13` for apps/python/3.13 (or 3.13.5): the interpreter's own version."""
    match = PYTHON_RE.match(full)
    return match["version"] if match else None


def software_version(full: str) -> str:
    """The version of the software a module is named after: `5.0` for apps/openmpi/5.0-r2,
    `2.6.0` for libs/python/torch/2.6.0-r3-python-3.13 (a revision is the definition's own)."""
    named = lib_package(full)
    return named[1] if named else REVISION_RE.sub("", full.rpartition("/")[2])


def lib_package(full: str) -> tuple[str, str] | None:
    """(package, package version) named by a libs/python module: ('torch', '1.13.1')."""
    match = LIB_RE.match(full)
    return (match["pkg"], match["pkgver"]) if match else None


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, regex_engine="python-re")


class Common(Model):
    """What every kind has. Relative path entries are inside the install prefix;
    `{prefix}` in a setenv value is replaced by it."""

    depends_on: list[ModuleRef] = []
    """Modules loaded first (Lmod depends_on): full names like apps/python/3.13."""
    prepend_path: dict[EnvName, list[PathEntry]] = {}
    append_path: dict[EnvName, list[PathEntry]] = {}
    setenv: dict[EnvName, str] = {}
    help: str = ""
    whatis: str = ""
    """One line: what it is (shown by `module whatis` and `module spider`)."""
    category: str = ""
    default: bool = False
    """Become the default version when first published (later: `modules default`)."""
    deprecated: bool = False
    """Hidden from `module avail`, still loadable, with a message on load."""


class PythonModule(Common):
    """A Python interpreter that is already on every node, linked (or a venv of it)."""

    kind: Literal["python"]
    interpreter: AbsPath
    venv: bool = False
    """Make a venv of the interpreter (gives users pip) instead of linking it."""


class VenvModule(Common):
    """pip requirements in a venv of the Python module it depends on."""

    kind: Literal["venv"]
    requirements: Annotated[list[Requirement], Field(min_length=1)]
    """pip requirement lines; pin the package the name is about: six==1.16.0."""
    imports: list[PyModule] = []
    """Imported after the install to verify it (default: the package name)."""


class TreeSource(Model):
    tarball: AbsPath | None = None
    sha256: Sha256 | None = None
    strip_components: Annotated[int, Field(ge=0, le=8)] = 0
    path: AbsPath | None = None

    @model_validator(mode="after")
    def _one_source(self) -> TreeSource:
        if (self.tarball is None) == (self.path is None):
            raise ValueError("give exactly one of tarball or path")
        if self.path is not None and (self.sha256 or self.strip_components):
            raise ValueError("sha256 and strip_components only apply to a tarball")
        return self


class TreeModule(Common):
    """Files installed from a tarball or copied from an existing path on the node."""

    kind: Literal["tree"]
    source: TreeSource
    files: list[RelPath] = []
    """Paths that must exist after the install (the build's check)."""


WRITE_FILE_LIMIT = 16384
"""Bytes of one `write_files` entry: a shim or a config file, not a program."""

DebPackage = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9+.-]+$")]


class DebianModule(Common):
    """Packages of the nodes' Debian release, unpacked into the module's prefix together with
    every package they need that the node image lacks: nothing is installed on a node, and a
    node born later has them through the shared tree like every module."""

    kind: Literal["debian"]
    packages: Annotated[list[DebPackage], Field(min_length=1)]
    """Debian package names. The first is the one the module's name is about: its version
    must be the name's (apps/openmpi/5.0: openmpi-bin 5.0.7-1)."""
    imports: list[PyModule] = []
    """Imported after the unpacking to verify it (with the module's own paths)."""
    files: list[RelPath] = []
    """Paths that must exist after the unpacking (the build's check)."""
    write_files: dict[RelPath, Annotated[str, Field(max_length=WRITE_FILE_LIMIT)]] = {}
    """Small files the module adds to what the packages hold (`relative path: text`), written
    after the unpacking and before the checks: what the packaged software needs to run here
    that the distribution does not configure (a shim, a config file). Part of the checksum."""
    links: dict[RelPath, RelPath] = {}
    """Symbolic links the module adds (`relative path: target`, the target relative to the
    link's directory): what Debian's update-alternatives would link when the packages are
    installed (usr/bin/mpicc: mpicc.openmpi), which unpacking does not run. Each must lead to
    a file of the prefix. Part of the checksum."""


class MetaModule(Common):
    """Only loads other modules."""

    kind: Literal["meta"]


Definition = Annotated[PythonModule | VenvModule | TreeModule | DebianModule | MetaModule,
                       Field(discriminator="kind")]
DEFINITION = TypeAdapter[PythonModule | VenvModule | TreeModule | DebianModule | MetaModule](Definition)
KIND_MODELS: dict[str, type[Common]] = {
    "python": PythonModule, "venv": VenvModule, "tree": TreeModule, "debian": DebianModule, "meta": MetaModule,
}
AnyDefinition = PythonModule | VenvModule | TreeModule | DebianModule | MetaModule


def has_prefix(definition: AnyDefinition) -> bool:
    """Does the module install files (meta modules do not)?"""
    return not isinstance(definition, MetaModule)


def canonical(definition: AnyDefinition) -> dict[str, Any]:
    """The definition as plain JSON data (what the manifest stores)."""
    return definition.model_dump(mode="json")


def checksum(full: str, definition: AnyDefinition) -> str:
    """sha256 over canonical JSON of the content (not the default/deprecated flags)."""
    data = {k: v for k, v in canonical(definition).items()
            if k not in MUTABLE_FIELDS and (v or k not in LATER_FIELDS)}
    text = json.dumps({"name": full, "definition": data}, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def parse_definition(data: object) -> AnyDefinition:
    """Typed definition from YAML/JSON data; pydantic's ValidationError otherwise."""
    return DEFINITION.validate_python(data)


def verify_imports(full: str, definition: VenvModule) -> list[str]:
    """What the build imports to check a venv: the listed ones, or the package name."""
    if definition.imports:
        return list(definition.imports)
    named = lib_package(full)
    return [named[0].replace("-", "_")] if named else []
