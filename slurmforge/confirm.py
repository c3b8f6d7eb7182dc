"""Asking before a destructive or job-affecting action, as terraform's apply does: the
command shows what it will do, then on a terminal asks for `yes`; `--yes` (or
`--auto-approve`) answers for the operator; with no terminal to ask on and no `--yes` it
refuses in one line (exit 13, NotConfirmed) rather than act unasked in a script.

Standard library and typer only (every command imports it at start).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, TextIO

import typer

from slurmforge.errors import NotConfirmed

YesOpt = Annotated[bool, typer.Option(
    "--yes", "--auto-approve", "-y",
    help="Do it without asking (needed when there is no terminal to ask on).")]


def confirm(action: str, what: Sequence[str], yes: bool, stdin: TextIO | None = None,
            stderr: TextIO | None = None) -> None:
    """Show `what` (one line each) on stderr, then ask; return when confirmed, raise
    NotConfirmed otherwise. `action` completes "Type yes to ...". Nothing to show: nothing to ask."""
    stdin, stderr = stdin or sys.stdin, stderr or sys.stderr
    if not what:
        return
    for line in what:
        stderr.write(f"{line}\n")
    if yes:
        return
    if not stdin.isatty():
        raise NotConfirmed(f"{action}: not confirmed; no terminal to ask on, so pass --yes to {action} "
                           "(nothing was changed)")
    stderr.write(f"Type yes to {action}: ")
    stderr.flush()
    answer = stdin.readline().strip()
    if answer != "yes":
        raise NotConfirmed(f"{action}: not confirmed (answered {answer!r}, not 'yes'); nothing was changed")
