"""What every command shares (`slurmforge` and `slurmforge modules`): how it fails (one
line per problem on stderr and the error's exit code, never a traceback) and how it asks
for a table's format (slurmforge.tables)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from slurmforge.errors import ModuleError, RolloutError, SlurmforgeError, SpecError
from slurmforge.tables import FORMAT_HELP, Format

T = TypeVar("T")

err = Console(stderr=True, highlight=False, soft_wrap=True)

FormatOpt = Annotated[Format | None, typer.Option("--format", help=FORMAT_HELP, case_sensitive=False,
                                                  show_default=False)]


def report_errors(fn: Callable[[], T], verbose: bool = False, interrupted: str = "interrupted") -> T:
    """Run fn; a SlurmforgeError becomes its one-line message(s) and exit code. verbose adds
    a failed module build's output; interrupted is what Ctrl-C prints (exit 130)."""
    try:
        return fn()
    except SpecError as exc:
        for problem in exc.problems:
            err.print(f"[red]error[/red] {escape(f'{exc.source}: {problem.line()}')}")
        err.print(f"{len(exc.problems)} problem(s) in {exc.source or 'the input'}")
        raise typer.Exit(exc.exit_code) from None
    except RolloutError as exc:
        err.print(f"[red]error[/red] {exc.phase}: task [bold]{escape(exc.task)}[/bold] failed on "
                  f"[bold]{escape(exc.host)}[/bold]")
        err.print(f"  {escape(exc.message)}")
        if exc.log:
            err.print(f"  full log: {exc.log}")
        raise typer.Exit(exc.exit_code) from None
    except SlurmforgeError as exc:
        err.print(f"[red]error[/red] {escape(str(exc))}")
        if verbose and isinstance(exc, ModuleError) and exc.detail:
            err.print(escape(exc.detail.rstrip()))
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        err.print(interrupted)
        raise typer.Exit(130) from None
