"""Module publishing: LMOD module definitions (`modules/`), their Lua modulefiles, and
the engine that publishes them into a shared tree through an Executor."""

from __future__ import annotations

from slurmforge.modules.catalog import Catalog, load_bundle, load_catalog
from slurmforge.modules.definition import ModuleName
from slurmforge.modules.executor import Completed, Executor, LocalExecutor
from slurmforge.modules.lmod import Lmod
from slurmforge.modules.plan import Action, Step
from slurmforge.modules.publisher import Actor, ModuleTree
from slurmforge.modules.tree import Manifest, Tree

__all__ = [
    "Action", "Actor", "Catalog", "Completed", "Executor", "Lmod", "LocalExecutor", "Manifest",
    "ModuleName", "ModuleTree", "Step", "Tree", "load_bundle", "load_catalog",
]
