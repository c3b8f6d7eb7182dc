"""What publishing would do: classify every wanted version (and its dependencies)
against the manifest first, act second."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from slurmforge.lmod.catalog import Catalog
from slurmforge.lmod.definition import AnyDefinition, ModuleName, checksum, has_prefix
from slurmforge.lmod.tree import Manifest, Tree


class StepKind(StrEnum):
    BUILD = "build"
    UNCHANGED = "unchanged"
    DEPRECATE = "deprecate"
    DEFAULT = "default"
    REFUSED = "refused"


@dataclass(frozen=True)
class Step:
    module: str
    action: StepKind
    detail: str = ""


def plan_steps(catalog: Catalog, wanted: list[str], manifest: Manifest, leftovers: set[str],
               tree: Tree) -> list[Step]:
    """One step per module in dependency order. `leftovers`: versions that are not in
    the manifest but have files in the tree (an interrupted publish, a hand edit)."""
    return [_step(full, catalog.get(full), manifest, full in leftovers, tree) for full in catalog.resolve(wanted)]


def _step(full: str, d: AnyDefinition, manifest: Manifest, leftover: bool, tree: Tree) -> Step:
    mn = ModuleName.parse(full)
    entry = manifest.modules.get(full)
    if entry is None and leftover:
        paths = tree.modulefile(mn) + (f" or {tree.prefix(mn)}" if has_prefix(d) else "")
        return Step(full, StepKind.REFUSED, f"not in the manifest, but {paths} exists (an interrupted publish?); "
                                          "fix: remove it, then publish again")
    if entry is None:
        return Step(full, StepKind.BUILD, _build_detail(d, manifest.default_of(mn.name)))
    want = checksum(full, d)
    if entry.checksum != want:
        return Step(full, StepKind.REFUSED, f"already published with different content ({entry.checksum[:19]} by "
                                          f"{entry.published_by}, now {want[:19]}); versions are immutable; "
                                          "fix: publish the change as a new version")
    if d.deprecated and not entry.deprecated:
        if manifest.default_of(mn.name) == mn.version:
            return Step(full, StepKind.REFUSED, "the definition says deprecated, but it is the default; "
                                              "fix: make another version the default first")
        return Step(full, StepKind.DEPRECATE, "the definition says deprecated")
    return Step(full, StepKind.UNCHANGED, f"published {entry.published_at} by {entry.published_by}")


def _build_detail(d: AnyDefinition, current_default: str | None) -> str:
    parts: list[str] = [d.kind]
    if d.default:
        parts.append(f"becomes the default (now {current_default or 'none'})")
    if d.deprecated:
        parts.append("published deprecated (hidden)")
    return ", ".join(parts)
