"""Publish module versions into a shared tree, and move its defaults.

A publish builds in `<root>/.staging/<name>/<version>.<random>`, checks the files and
the modulefile (Lmod's own syntax check), then renames the install directory and the
modulefile into place. The modulefile's rename is the moment the version appears in
`module avail` on every node; a build that fails before it only removes its staging
directory, so the published tree and the manifest stay byte for byte as they were.
Every change then rewrites the manifest (temp file + rename) and refreshes Lmod's
spider cache.
"""

from __future__ import annotations

import logging
import posixpath
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

from slurmforge.errors import ModuleError, SpecError
from slurmforge.lmod.build import build_install
from slurmforge.lmod.catalog import Catalog
from slurmforge.lmod.definition import (
    AnyDefinition,
    ModuleName,
    checksum,
    has_prefix,
    natural_key,
    parse_definition,
)
from slurmforge.lmod.definition import canonical as canonical_definition
from slurmforge.lmod.modulefile import render_modulefile, render_modulerc
from slurmforge.lmod.plan import Step, StepKind, plan_steps
from slurmforge.lmod.tools import Lmod
from slurmforge.lmod.tree import Entry, Event, Manifest, Tree, parse_manifest, utc_now_iso
from slurmforge.remote.executor import Executor, check, exists, make_dirs, remove_tree, rename, write_atomic

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Actor:
    """Who makes the change (SUDO_USER/USER, read by the CLI) and the clock."""

    who: str
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def stamp(self) -> str:
        return utc_now_iso(self.now())


class ModuleTree:
    """One published tree, changed through one node."""

    def __init__(self, ex: Executor, tree: Tree, actor: Actor, lmod: Lmod | None = None,
                 token: Callable[[], str] = lambda: secrets.token_hex(4),
                 pip_env: Mapping[str, str] | None = None) -> None:
        self.ex, self.tree, self.actor, self.lmod, self.token = ex, tree, actor, lmod, token
        self.pip_env = dict(pip_env or {})
        self.cluster: str | None = None
        """The cluster whose tree this is (None: a tree on this machine)."""

    # ------------------------------------------------------------------ reading

    def manifest(self) -> Manifest:
        return parse_manifest(self.ex.read_file(self.tree.manifest_path), self.tree.manifest_path)

    def plan(self, catalog: Catalog, wanted: list[str]) -> list[Step]:
        """What `publish wanted` would do, dependencies first."""
        unknown = catalog.unknown(wanted)
        if unknown:
            raise SpecError(unknown, "modules")
        m = self.manifest()
        leftovers = {full for full in catalog.resolve(wanted)
                     if full not in m.modules and self._has_files(ModuleName.parse(full))}
        return plan_steps(catalog, wanted, m, leftovers, self.tree)

    def entries(self) -> list[Entry]:
        m = self.manifest()
        return [m.modules[full] for full in sorted(m.modules, key=natural_key)]

    def _has_files(self, mn: ModuleName) -> bool:
        return exists(self.ex, self.tree.modulefile(mn)) or exists(self.ex, self.tree.prefix(mn))

    # ------------------------------------------------------------------ changing

    def publish(self, catalog: Catalog, wanted: list[str],
                on_step: Callable[[Step], None] = lambda step: None) -> list[Step]:
        """Publish `wanted` and what they depend on. Refuses everything when any version
        is refused (changed content, leftovers); modules published before a failing
        build stay published."""
        with self._locked():
            steps = self.plan(catalog, wanted)
            refused = [s for s in steps if s.action is StepKind.REFUSED]
            if refused:
                more = f" (and {len(refused) - 1} more: see `modules plan`)" if len(refused) > 1 else ""
                raise ModuleError(f"{refused[0].module}: {refused[0].detail}{more}; nothing was published")
            changed = False
            try:
                for step in steps:
                    on_step(step)  # before the work: a venv build takes seconds
                    if step.action is StepKind.BUILD:
                        self._publish_one(ModuleName.parse(step.module), catalog.get(step.module))
                    elif step.action is StepKind.DEPRECATE:
                        self._deprecate(ModuleName.parse(step.module))
                    changed = changed or step.action in (StepKind.BUILD, StepKind.DEPRECATE)
            finally:
                if changed:
                    self._refresh()
            return steps

    def set_default(self, full: str) -> Step:
        mn = ModuleName.parse(full)
        with self._locked():
            m = self.manifest()
            if m.entry(full).deprecated:
                raise ModuleError(f"{full} is deprecated and cannot be the default; fix: pick another version")
            current = m.default_of(mn.name)
            if current == mn.version:
                return Step(full, StepKind.UNCHANGED, "already the default")
            event = Event(action="default", module=full, by=self.actor.who, at=self.actor.stamp(),
                          previous=f"{mn.name}/{current}" if current else None)
            self._save(m.with_defaults(mn.name, [*m.defaults.get(mn.name, []), mn.version], event), mn.name)
            self._refresh()
            return Step(full, StepKind.DEFAULT, f"was {mn.name}/{current}" if current
                        else "no default before (Lmod picked the highest version)")

    def rollback(self, name: str) -> Step:
        with self._locked():
            m = self.manifest()
            stack = m.defaults.get(name, [])
            if len(stack) < 2:
                raise ModuleError(f"{name}: no earlier default recorded in the manifest "
                                  f"(defaults so far: {', '.join(stack) or 'none'}); fix: use `modules default`")
            previous = f"{name}/{stack[-2]}"
            if m.entry(previous).deprecated:
                raise ModuleError(f"{name}: the previous default {previous} is deprecated; "
                                  "fix: make another version the default with `modules default`")
            event = Event(action="rollback", module=previous, by=self.actor.who, at=self.actor.stamp(),
                          previous=f"{name}/{stack[-1]}")
            self._save(m.with_defaults(name, stack[:-1], event), name)
            self._refresh()
            return Step(previous, StepKind.DEFAULT, f"back from {name}/{stack[-1]}")

    def deprecate(self, full: str) -> Step:
        mn = ModuleName.parse(full)
        with self._locked():
            if self.manifest().entry(full).deprecated:
                return Step(full, StepKind.UNCHANGED, "already deprecated")
            self._deprecate(mn)
            self._refresh()
            return Step(full, StepKind.DEPRECATE, "hidden from module avail, still loads with a message")

    # ------------------------------------------------------------------ steps

    def _publish_one(self, mn: ModuleName, d: AnyDefinition) -> None:
        stage = self.tree.stage(mn, self.token())
        make_dirs(self.ex, stage)
        try:
            prefix = self.tree.prefix(mn) if has_prefix(d) else None
            if prefix is not None:
                build_install(self.ex, mn, d, f"{stage}/install", prefix, self._python_prefix(d),
                              self.pip_env, self._prefixes_of(d, "debian"))
            staged_mf = f"{stage}/modulefiles/{mn.name}/{mn.version}.lua"
            make_dirs(self.ex, posixpath.dirname(staged_mf))
            self.ex.write_file(staged_mf, render_modulefile(mn, d, prefix, deprecated=d.deprecated))
            if self.lmod is not None:
                self.lmod.check_syntax(self.ex, f"{stage}/modulefiles")
            # every user on every node reads the tree, whatever a tarball or `cp -a` brought
            check(self.ex, ["chmod", "-R", "a+rX", "--", stage], f"{mn}: making it readable")
            self._commit(mn, d, stage, prefix, staged_mf)
        finally:
            remove_tree(self.ex, stage)

    def _commit(self, mn: ModuleName, d: AnyDefinition, stage: str, prefix: str | None, staged_mf: str) -> None:
        m = self.manifest()
        at = self.actor.stamp()
        entry = Entry(name=mn.name, version=mn.version, kind=d.kind, checksum=checksum(mn.full, d),
                      published_by=self.actor.who, published_at=at, deprecated=d.deprecated,
                      definition=canonical_definition(d))
        new = m.with_entry(mn.full, entry, Event(action="publish", module=mn.full, by=self.actor.who, at=at))
        if d.default:
            new = new.with_defaults(mn.name, [*m.defaults.get(mn.name, []), mn.version],
                                    Event(action="default", module=mn.full, by=self.actor.who, at=at))
        if prefix is not None:
            make_dirs(self.ex, posixpath.dirname(prefix))
            rename(self.ex, f"{stage}/install", prefix)
        final_mf = self.tree.modulefile(mn)
        make_dirs(self.ex, posixpath.dirname(final_mf))
        if d.default or d.deprecated:  # before the modulefile appears: never visible unhidden
            self._write(self.tree.modulerc(mn.name), self._modulerc(new, mn.name))
        rename(self.ex, staged_mf, final_mf)  # the version appears in `module avail` here
        self._write(self.tree.manifest_path, new.to_json())
        log.info("published %s by %s", mn, self.actor.who)

    def _deprecate(self, mn: ModuleName) -> None:
        m = self.manifest()
        entry = m.entry(mn.full)
        if m.default_of(mn.name) == mn.version:
            raise ModuleError(f"{mn} is the default of {mn.name}; fix: make another version the default "
                              "first (`modules default`), then deprecate it")
        d = parse_definition(entry.definition)
        prefix = self.tree.prefix(mn) if has_prefix(d) else None
        event = Event(action="deprecate", module=mn.full, by=self.actor.who, at=self.actor.stamp())
        new = m.with_entry(mn.full, entry.model_copy(update={"deprecated": True}), event)
        self._write(self.tree.modulerc(mn.name), self._modulerc(new, mn.name))
        self._write(self.tree.modulefile(mn), render_modulefile(mn, d, prefix, deprecated=True))
        self._write(self.tree.manifest_path, new.to_json())

    def _python_prefix(self, d: AnyDefinition) -> str | None:
        found = self._prefixes_of(d, "python")
        return found[0] if found else None

    def _prefixes_of(self, d: AnyDefinition, kind: str) -> list[str]:
        """The published prefixes of the modules of `kind` that `d` depends on."""
        m = self.manifest()
        return [self.tree.prefix(ModuleName.parse(dep)) for dep in d.depends_on
                if dep in m.modules and m.modules[dep].kind == kind]

    # ------------------------------------------------------------------ state

    def _modulerc(self, m: Manifest, name: str) -> str:
        return render_modulerc(name, m.default_of(name), m.hidden(name))

    def _save(self, m: Manifest, name: str) -> None:
        self._write(self.tree.modulerc(name), self._modulerc(m, name))
        self._write(self.tree.manifest_path, m.to_json())

    def _write(self, path: str, text: str) -> None:
        make_dirs(self.ex, self.tree.staging_dir)
        write_atomic(self.ex, path, text, self.tree.scratch(self.token()))

    def _refresh(self) -> None:
        if self.lmod is not None and self.lmod.refresh_cache(self.ex, self.tree.modulepath):
            log.info("refreshed the Lmod spider cache in %s", self.lmod.cache_dir)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.tree.lock_path
        make_dirs(self.ex, self.tree.state_dir)
        if not self.ex.run(["mkdir", "--", lock]).ok:  # mkdir is atomic: one winner
            holder = (self.ex.read_file(f"{lock}/owner") or "someone").strip()
            raise ModuleError(f"the module tree is locked by {holder}; fix: wait for that change to finish, "
                              f"or remove {lock} if none is running")
        self.ex.write_file(f"{lock}/owner", f"{self.actor.who} since {self.actor.stamp()}\n")
        try:
            yield
        finally:
            remove_tree(self.ex, lock)
