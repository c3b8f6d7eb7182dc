"""The cluster spec: models, cross-field checks and the loader."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slurmforge.spec.models import API_VERSION, Cluster

if TYPE_CHECKING:
    from slurmforge.spec.loader import load_spec, parse_spec, validate_data

__all__ = ["API_VERSION", "Cluster", "load_spec", "parse_spec", "validate_data"]


def __getattr__(name: str) -> Any:
    # the loader imports the checks, which import slurmforge.spec.nodes, which imports the
    # models: load it on first use so that importing the models alone has no cycle
    if name in ("load_spec", "parse_spec", "validate_data"):
        from slurmforge.spec import loader

        return getattr(loader, name)
    raise AttributeError(name)
