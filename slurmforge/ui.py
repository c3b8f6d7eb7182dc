"""The progress display: one line per phase with its time, a spinner naming the
Ansible task running now. Full logs go to a file; this shows only progress."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.status import Status

from slurmforge.rollout import Progress


class PhaseDisplay:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.status: Status | None = None
        self.current = ""
        self.timings: list[tuple[str, float]] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.current = name
        started = time.monotonic()
        with self.console.status(f"[bold]{name}[/bold]", spinner="dots") as status:
            self.status = status
            try:
                yield
            except BaseException:
                self.console.print(f"[red]✗[/red] {name} [dim]({time.monotonic() - started:.1f} s)[/dim]")
                raise
            finally:
                self.status = None
        seconds = time.monotonic() - started
        self.timings.append((name, seconds))
        self.console.print(f"[green]✓[/green] {name} [dim]({seconds:.1f} s)[/dim]")

    def event(self, progress: Progress) -> None:
        if self.status is not None:
            play = f"{progress.play} › " if progress.play else ""
            self.status.update(f"[bold]{self.current}[/bold]  [dim]{play}{progress.task}[/dim]")

    def note(self, text: str) -> None:
        self.console.print(text)
