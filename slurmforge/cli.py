"""The slurmforge command line. People-facing messages live here; everything below
raises typed errors that `main` turns into one line and an exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console

from slurmforge.errors import SlurmforgeError, SpecError
from slurmforge.render import CONFIG_FILES, render, render_all
from slurmforge.spec import Cluster, load_spec

app = typer.Typer(
    name="slurmforge",
    help="One cluster.yaml to a working Slurm cluster: validate, render, bring up, check.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

SpecArg = Annotated[Path, typer.Argument(help="The cluster spec.", show_default=True)]
DEFAULT_SPEC = Path("cluster.yaml")

T = TypeVar("T")


def report(fn: Callable[[], T]) -> T:
    """Run fn; a SlurmforgeError becomes its one-line message(s) and exit code."""
    try:
        return fn()
    except SpecError as exc:
        for problem in exc.problems:
            err.print(f"[red]error[/red] {exc.source}: {problem.line()}", markup=True)
        err.print(f"{len(exc.problems)} problem(s) in {exc.source or 'the spec'}")
        raise typer.Exit(exc.exit_code) from None
    except SlurmforgeError as exc:
        err.print(f"[red]error[/red] {exc}")
        raise typer.Exit(exc.exit_code) from None


def load(spec: Path) -> Cluster:
    return report(lambda: load_spec(spec))


@app.command()
def validate(
    spec: SpecArg = DEFAULT_SPEC,
) -> None:
    """Check a spec: every problem at once, exit 2 when invalid."""
    cluster = load(spec)
    nodes = sum(p.max_nodes for p in cluster.pools)
    out.print(
        f"{spec}: valid - cluster '{cluster.name}' ({cluster.target.kind}), "
        f"{len(cluster.pools)} pools, {nodes} nodes at most, {len(cluster.partitions)} partitions"
    )


@app.command("render")
def render_cmd(
    spec: SpecArg = DEFAULT_SPEC,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Write every config file here.")] = None,
    show: Annotated[
        str | None, typer.Option(help=f"Print one file: {', '.join(CONFIG_FILES)}.")
    ] = None,
) -> None:
    """Render slurm.conf, gres.conf, cgroup.conf and slurmdbd.conf from the spec."""
    if show is not None and show not in CONFIG_FILES:
        err.print(f"[red]error[/red] --show {show}: not a config file; use one of {', '.join(CONFIG_FILES)}")
        raise typer.Exit(2)
    if out_dir is None and show is None:
        err.print("[red]error[/red] nothing to do; pass --out DIR or --show slurm.conf")
        raise typer.Exit(2)
    cluster = load(spec)
    if show is not None:
        sys.stdout.write(render(cluster, show, source=spec.name))
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, text in render_all(cluster, source=spec.name).items():
                (out_dir / name).write_text(text)
        except OSError as exc:
            err.print(f"[red]error[/red] cannot write to {out_dir}: {exc.strerror}")
            raise typer.Exit(1) from None
        err.print(f"wrote {', '.join(CONFIG_FILES)} to {out_dir}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
