"""The Jinja environment every template of the project is rendered with: the
templates/ directory (slurmforge.package_data), StrictUndefined, no autoescape.
Jinja is imported when an environment is made, not with this module: what only names
hosts (slurmforge.render's host names, `slurmforge validate`) does not pay for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from slurmforge.package_data import templates

if TYPE_CHECKING:
    import jinja2


def make_environment(**filters: Callable[..., Any]) -> jinja2.Environment:
    """A strict environment with the given filters (callers cache it)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters.update(filters)
    return env
