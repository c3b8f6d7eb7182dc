"""`slurmforge modules ...`: plan, publish, list, default, rollback, deprecate.

Mounted into the main CLI as `slurmforge modules`. Every command works on a cluster
(`--inventory DIR`: the tree is the cluster spec's `modules.root`, reached on its build
node through podman exec or ssh, with the spider cache the lmod role configures) or on
a local tree (`--tree PATH`, through LocalExecutor). People-facing messages live here;
errors become one line and an exit code. Like the main CLI, a command imports the
publisher when it runs, not when `slurmforge` starts. Its annotations are objects, as the
main CLI's are (slurmforge/cli.py says why).
"""

import getpass
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from slurmforge.console import FormatOpt, fail, note, paint, report_errors, say
from slurmforge.contract import LMOD_LIBEXEC, cluster_cache_dir
from slurmforge.errors import PLAN_CHANGES_EXIT, ModuleError
from slurmforge.tables import Column, Table, emit

if TYPE_CHECKING:
    from slurmforge.lmod.catalog import Catalog
    from slurmforge.lmod.plan import Step
    from slurmforge.lmod.publisher import ModuleTree
    from slurmforge.lmod.tree import Entry, Tree
    from slurmforge.remote.executor import Executor

modules_app = typer.Typer(
    name="modules",
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Publish LMOD module versions into the shared software tree, and move their defaults.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)

TreeOpt = Annotated[Path | None, typer.Option("--tree", help="A module tree root on this machine.")]
InvOpt = Annotated[Path | None, typer.Option(
    "--inventory", help="A cluster's inventory: its spec's modules.root, changed on its login node.")]
NodeOpt = Annotated[str | None, typer.Option("--node", help="Build on this node of the inventory instead.")]
LocalOpt = Annotated[bool, typer.Option(
    "--local", help="The local cluster's tree (--local NAME when there are several).")]
ClusterOpt = Annotated[str | None, typer.Option(
    "--cluster", metavar="NAME", help="The local cluster's name, as --local NAME.")]
DefsOpt = Annotated[Path, typer.Option("--modules", help="The module definitions directory.")]
LibexecOpt = Annotated[str, typer.Option("--lmod-libexec", help="Lmod's libexec directory on the node.")]
CacheOpt = Annotated[str | None, typer.Option("--lmod-cache", help="Lmod spider cache dir to refresh.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show the failing command's output.")]
EXAMPLE = "\b\nExamples:\n  {0}\n  {1}"
COLORS = {"build": "32", "unchanged": "2", "deprecate": "33", "default": "36", "refused": "31"}
"""A plan's actions in SGR colours: green, dim, yellow, cyan, red."""



def who() -> str:
    """The admin behind the change: the sudo caller first."""
    return os.environ.get("SUDO_USER") or os.environ.get("USER") or getpass.getuser()


@dataclass(frozen=True)
class Where:
    """The tree a command changes: a local path or a cluster's inventory."""

    tree: Path | None = None
    inventory: Path | None = None
    node: str | None = None
    libexec: str = LMOD_LIBEXEC
    cache: str | None = None
    pip_cert: Path | None = None
    local: bool = False
    cluster: str | None = None

    def inventory_dir(self) -> Path | None:
        """The cluster's inventory: --inventory, --local [NAME], or the remembered cluster
        (named on stderr); None for --tree."""
        from slurmforge.target import resolve

        if self.tree is not None:
            if self.inventory is not None or self.local or self.cluster is not None:
                raise ModuleError("pass --tree or a cluster (--local, --inventory), not both")
            return None
        target = resolve(self.local, self.cluster, self.inventory, "modules")
        if target.remembered:
            note(f"modules: {target.describe()} (remembered by `slurmforge use`)")
        target.require_access()
        return target.inventory_dir()

    def open(self) -> "ModuleTree":
        from slurmforge.lmod.node import open_inventory
        from slurmforge.lmod.publisher import Actor, ModuleTree
        from slurmforge.lmod.tools import Lmod
        from slurmforge.lmod.tree import Tree
        from slurmforge.remote.executor import LocalExecutor

        ex: Executor
        cache: str | None
        inventory = self.inventory_dir()
        if inventory is not None:
            spec, ex = open_inventory(inventory, self.node)
            root, cache = spec.modules.root, self.cache or cluster_cache_dir(spec.modules.root)
            name: str | None = spec.name
        else:
            if self.node is not None:
                raise ModuleError("--node needs a cluster (--local, --inventory)")
            assert self.tree is not None
            ex, root, cache, name = LocalExecutor(), str(self.tree.resolve()), self.cache, None
        tree = Tree(root)
        opened = ModuleTree(ex, tree, Actor(who()), Lmod(self.libexec, cache), pip_env=self._pip_env(ex, tree))
        opened.cluster = name
        return opened

    def _pip_env(self, ex: "Executor", tree: "Tree") -> dict[str, str]:
        """The CA bundle pip trusts, copied onto the build node (a public certificate,
        kept in the tree's state directory)."""
        from slurmforge.remote.executor import make_dirs

        if self.pip_cert is None:
            return {}
        try:
            text = self.pip_cert.read_text()
        except OSError as exc:
            raise ModuleError(f"--pip-cert {self.pip_cert}: {exc.strerror}") from None
        target = f"{tree.state_dir}/pip-ca.pem"
        if ex.read_file(target) != text:
            make_dirs(ex, tree.state_dir)
            ex.write_file(target, text)
        return {"PIP_CERT": target}


def show(step: "Step", width: int = 0) -> None:
    say(f"  {paint(f'{step.action.value:<10}', COLORS[step.action.value], sys.stdout)} "
        f"{step.module.ljust(width)}  {paint(step.detail, '2', sys.stdout)}")


def _targets(catalog: "Catalog", names: list[str] | None) -> list[str]:
    return list(names) if names else catalog.names()


PLAN_COLUMNS = (Column("action", "Action"), Column("module", "Module"), Column("detail", "Detail", wrap=True))


@modules_app.command(short_help="Show what `publish` would build or change.", epilog=EXAMPLE.format(
    "slurmforge modules plan --inventory DIR --format json",
    "sudo slurmforge modules plan --local --detailed-exitcode  # 12: changes"))
def plan(
    names: Annotated[list[str] | None, typer.Argument(help="NAME/VERSION ... (default: every definition)")] = None,
    tree: TreeOpt = None,
    inventory: InvOpt = None,
    local: LocalOpt = False,
    cluster: ClusterOpt = None,
    node: NodeOpt = None,
    modules: DefsOpt = Path("modules"),
    detailed_exitcode: Annotated[bool, typer.Option(
        "--detailed-exitcode", help="Exit 12 when there is something to change (as `slurmforge plan`).")] = False,
    fmt: FormatOpt = None,
) -> None:
    """Check the definitions and show what `publish` would build or change (without --format:
    one coloured line per module). Exit 0 when it could plan (12 with --detailed-exitcode when
    there are changes; 8 when a change would be refused)."""
    from slurmforge.lmod.catalog import load_catalog
    from slurmforge.lmod.plan import StepKind

    def run() -> "tuple[list[Step], str | None, str]":
        catalog = load_catalog(modules)
        opened = Where(tree, inventory, node, local=local, cluster=cluster).open()
        return opened.plan(catalog, _targets(catalog, names)), opened.cluster, opened.tree.root
    steps, name, root = report_errors(run)
    todo = sum(s.action in (StepKind.BUILD, StepKind.DEPRECATE) for s in steps)
    counts = {"to_change": todo, "unchanged": sum(s.action is StepKind.UNCHANGED for s in steps),
              "refused": sum(s.action is StepKind.REFUSED for s in steps)}
    summary = f"{todo} to change, {counts['unchanged']} unchanged"
    if fmt is None:
        width = max((len(s.module) for s in steps), default=0)
        for step in steps:
            show(step, width)
        say(summary)
    else:
        emit(Table(f"modules plan for {name or root}", PLAN_COLUMNS,
                   [(s.action.value, s.module, s.detail or None) for s in steps], notes=[summary],
                   meta={"cluster": name, "tree": root, **counts}), fmt)
    if counts["refused"]:
        raise typer.Exit(ModuleError.exit_code)
    if detailed_exitcode and todo:
        raise typer.Exit(PLAN_CHANGES_EXIT)


@modules_app.command(short_help="Build, check and publish module versions.", epilog=EXAMPLE.format(
    "slurmforge modules publish --all --inventory DIR",
    "sudo slurmforge modules publish libs/python/torch --local"))
def publish(
    names: Annotated[list[str] | None, typer.Argument(help="NAME/VERSION ... to publish (with dependencies)")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Publish every definition.")] = False,
    tree: TreeOpt = None,
    inventory: InvOpt = None,
    local: LocalOpt = False,
    cluster: ClusterOpt = None,
    node: NodeOpt = None,
    modules: DefsOpt = Path("modules"),
    lmod_libexec: LibexecOpt = LMOD_LIBEXEC,
    lmod_cache: CacheOpt = None,
    pip_cert: Annotated[Path | None, typer.Option(
        "--pip-cert", help="A CA bundle (on this machine) for pip on the build node: behind a TLS-intercepting "
                           "proxy, pass the bundle this machine trusts.")] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Build, check and publish versions atomically; the same definition twice is a no-op."""
    if not names and not all_:
        fail("nothing to publish; name NAME/VERSION ... or pass --all")
    from slurmforge.lmod.catalog import load_catalog
    from slurmforge.lmod.plan import StepKind

    def run() -> "list[Step]":
        catalog = load_catalog(modules)
        target = Where(tree, inventory, node, lmod_libexec, lmod_cache, pip_cert, local, cluster).open()
        return target.publish(catalog, _targets(catalog, names), on_step=show)
    steps = report_errors(run, verbose)
    built = sum(s.action is StepKind.BUILD for s in steps)
    say(f"{built} published, {sum(s.action is StepKind.UNCHANGED for s in steps)} unchanged")


MODULE_COLUMNS = (
    Column("module", "Module"), Column("kind", "Kind"), Column("flags", "Flags", scope="table"),
    Column("default", "Default", scope="data"), Column("deprecated", "Deprecated", scope="data"),
    Column("published_at", "Published at", drop=1), Column("published_by", "By"),
    Column("checksum", "Checksum", lambda v: str(v)[:19], drop=2))
"""`modules list`: the table format shows a checksum's first 19 characters (the others all)."""


@modules_app.command("list", short_help="Every published version and who published it.", epilog=EXAMPLE.format(
    "sudo slurmforge modules list --local", "slurmforge modules list --inventory DIR --format json"))
def list_cmd(tree: TreeOpt = None, inventory: InvOpt = None, local: LocalOpt = False, cluster: ClusterOpt = None,
             node: NodeOpt = None, fmt: FormatOpt = None) -> None:
    """Every published version, with its default/deprecated flags and who published it."""
    where = Where(tree, inventory, node, local=local, cluster=cluster)

    def run() -> "tuple[list[Entry], str | None, str]":
        opened = where.open()
        return opened.entries(), opened.cluster, opened.tree.root

    entries, name, root = report_errors(run)
    table = Table("", MODULE_COLUMNS, notes=[f"{len(entries)} published in {root}"],
                  meta={"cluster": name, "tree": root, "published": len(entries)})
    for e in entries:
        flags = ", ".join(f for f, on in (("default", e.default), ("deprecated", e.deprecated)) if on)
        table.rows.append((f"{e.name}/{e.version}", e.kind, flags or None, e.default, e.deprecated,
                           e.published_at, e.published_by, e.checksum))
    emit(table, fmt)


@modules_app.command(short_help="Make a published version the default.", epilog=EXAMPLE.format(
    "sudo slurmforge modules default apps/python/3.13 --local",
    "slurmforge modules default apps/python/3.13 --inventory DIR"))
def default(
    module: Annotated[str, typer.Argument(help="NAME/VERSION")],
    tree: TreeOpt = None,
    inventory: InvOpt = None,
    local: LocalOpt = False,
    cluster: ClusterOpt = None,
    node: NodeOpt = None,
    lmod_libexec: LibexecOpt = LMOD_LIBEXEC,
    lmod_cache: CacheOpt = None,
) -> None:
    """Make a published version what `module load NAME` picks."""
    where = Where(tree, inventory, node, lmod_libexec, lmod_cache, local=local, cluster=cluster)
    show(report_errors(lambda: where.open().set_default(_full(module))))


@modules_app.command(short_help="Give a module back its previous default.", epilog=EXAMPLE.format(
    "sudo slurmforge modules rollback apps/python --local", "slurmforge modules rollback apps/python --inventory DIR"))
def rollback(
    name: Annotated[str, typer.Argument(help="NAME, e.g. apps/python")],
    tree: TreeOpt = None,
    inventory: InvOpt = None,
    local: LocalOpt = False,
    cluster: ClusterOpt = None,
    node: NodeOpt = None,
    lmod_libexec: LibexecOpt = LMOD_LIBEXEC,
    lmod_cache: CacheOpt = None,
) -> None:
    """Give NAME back the default it had before the last change."""
    where = Where(tree, inventory, node, lmod_libexec, lmod_cache, local=local, cluster=cluster)
    show(report_errors(lambda: where.open().rollback(name.strip("/"))))


@modules_app.command(short_help="Hide a version from `module avail`.", epilog=EXAMPLE.format(
    "sudo slurmforge modules deprecate apps/python/3.12 --local",
    "slurmforge modules deprecate apps/python/3.12 --inventory DIR"))
def deprecate(
    module: Annotated[str, typer.Argument(help="NAME/VERSION")],
    tree: TreeOpt = None,
    inventory: InvOpt = None,
    local: LocalOpt = False,
    cluster: ClusterOpt = None,
    node: NodeOpt = None,
    lmod_libexec: LibexecOpt = LMOD_LIBEXEC,
    lmod_cache: CacheOpt = None,
) -> None:
    """Hide a version from `module avail`; it still loads, with a message."""
    where = Where(tree, inventory, node, lmod_libexec, lmod_cache, local=local, cluster=cluster)
    show(report_errors(lambda: where.open().deprecate(_full(module))))


def _full(module: str) -> str:
    if "/" not in module.strip("/"):
        raise ModuleError(f"{module!r}: use NAME/VERSION, e.g. apps/python/3.13")
    return module.strip("/")
