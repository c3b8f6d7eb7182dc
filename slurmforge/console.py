"""What every command shares (`slurmforge` and `slurmforge modules`): how it fails (one
line per problem on stderr and the error's exit code, never a traceback), how it prints a
line, and how it asks for a table's format (slurmforge.tables).

Standard library and typer only: every command, `--help` too, imports this module, and a
command pays at start for all it imports (tests/unit/test_startup.py keeps the heavy ones
out). Progress on a terminal is slurmforge.progress's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Annotated, NoReturn, TextIO, TypeVar

import typer

from slurmforge.errors import ModuleError, RemoteError, RolloutError, SlurmforgeError, SpecError
from slurmforge.tables import FORMAT_HELP, Format

T = TypeVar("T")

FormatOpt = Annotated[Format | None, typer.Option("--format", help=FORMAT_HELP, case_sensitive=False,
                                                  show_default=False)]


def paint(text: str, style: str, stream: TextIO) -> str:
    """text in an SGR style ('31' red, '1' bold) when stream is a terminal and NO_COLOR is unset."""
    return f"\x1b[{style}m{text}\x1b[0m" if stream.isatty() and not os.environ.get("NO_COLOR") else text


def say(text: str) -> None:
    """One line of a command's result, on stdout."""
    typer.echo(text)


def note(text: str) -> None:
    """One line about what a command did, on stderr (stdout stays the result)."""
    typer.echo(text, err=True)


def error(message: str) -> None:
    """`error <message>` on stderr."""
    note(f"{paint('error', '31', sys.stderr)} {message}")


def fail(message: str, code: int = 2) -> NoReturn:
    """`error <message>` on stderr, then exit with code."""
    error(message)
    raise typer.Exit(code)


def report_errors(fn: Callable[[], T], verbose: bool = False, interrupted: str = "interrupted") -> T:
    """Run fn; a SlurmforgeError becomes its one-line message(s) and exit code. verbose adds
    a failed module build's output; interrupted is what Ctrl-C prints (exit 130)."""
    try:
        return fn()
    except SpecError as exc:
        for problem in exc.problems:
            error(f"{exc.source}: {problem.line()}")
        note(f"{len(exc.problems)} problem(s) in {exc.source or 'the input'}")
        raise typer.Exit(exc.exit_code) from None
    except RolloutError as exc:
        error(f"{exc.phase}: task {paint(exc.task, '1', sys.stderr)} failed on {paint(exc.host, '1', sys.stderr)}")
        note(f"  {exc.message}")
        if exc.log:
            note(f"  full log: {exc.log}")
        raise typer.Exit(exc.exit_code) from None
    except SlurmforgeError as exc:
        error(str(exc))
        if verbose and isinstance(exc, ModuleError | RemoteError) and exc.detail:
            note(exc.detail.rstrip())
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        note(interrupted)
        raise typer.Exit(130) from None
