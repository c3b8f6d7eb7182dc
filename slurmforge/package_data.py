"""Where slurmforge's own files are, however it was installed: the one answer every caller asks.

The wheel holds the whole product inside the package: the playbooks, roles and templates the
rollout and the renderer use, the Pulumi program and the example specs (pyproject.toml's
wheel target moves the source tree's playbooks/, roles/, templates/, stacks/ and examples/
into it), the live-cluster validation suite (slurmforge/validation) and the data files
(slurmforge/data). In a clone -
an editable install, the source tree itself on sys.path - the same directories sit beside the
package, so there is one copy of each file and every caller finds it here.
"""

from __future__ import annotations

from functools import cache
from importlib import resources, util
from pathlib import Path

from slurmforge.errors import MissingExtra

PACKAGE = "slurmforge"
SHIPPED = ("playbooks", "roles", "templates", "stacks", "examples")
"""The source tree's directories the wheel carries inside the package, under the same names."""


@cache
def package_dir() -> Path:
    """The slurmforge package's directory (Ansible and pytest need real files: no zip import)."""
    found = resources.files(PACKAGE)
    if not isinstance(found, Path):
        raise FileNotFoundError(f"slurmforge is imported from {found}, not from a directory: install it with pip")
    return found


@cache
def root() -> Path:
    """The directory holding SHIPPED (playbooks/, roles/, ...): the package itself when
    installed from a wheel, the source tree (the package's parent) in a clone."""
    for candidate in (package_dir(), package_dir().parent):
        if all((candidate / name).is_dir() for name in SHIPPED):
            return candidate
    raise FileNotFoundError(f"slurmforge's {', '.join(SHIPPED)} are neither in {package_dir()} nor beside it: "
                            "reinstall slurmforge")


def playbooks() -> Path:
    return root() / "playbooks"


def roles() -> Path:
    return root() / "roles"


def templates() -> Path:
    return root() / "templates"


def stacks() -> Path:
    """The Pulumi program (a Pulumi project's `main`, or imported as slurmforge.stacks when installed)."""
    return root() / "stacks"


def examples() -> Path:
    """The example specs (local.yaml: the local cluster `up --local` makes by default)."""
    return root() / "examples"


def validation_suite() -> Path:
    """The live-cluster checks `slurmforge validate --inventory` runs (a pytest suite)."""
    return package_dir() / "validation"


def data(name: str) -> Path:
    """A data file of the package (slurmforge/data: the instance catalog, prices, word lists)."""
    return package_dir() / "data" / name


def require(module: str, extra: str, needed_by: str) -> None:
    """Raise MissingExtra, one line naming the extra to install, unless `module` is importable."""
    if util.find_spec(module) is None:
        raise MissingExtra(f"{needed_by} needs {module}, which is not installed: "
                           f"pipx install 'slurmforge[{extra}]' (or pip install 'slurmforge[{extra}]')")
