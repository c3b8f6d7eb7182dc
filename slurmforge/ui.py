"""The phases of a long command (`up`, `rollout`): one line per phase done, with its time,
and while a phase runs its progress line (slurmforge.progress: the step, the current host or
task, the time so far) - on stderr, so stdout holds only the command's results. Full logs
go to a file; this shows only progress."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from slurmforge.console import paint
from slurmforge.progress import Progress, ProgressLine


class PhaseDisplay:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.line: ProgressLine | None = None
        self.timings: list[tuple[str, float]] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        line = self.line = ProgressLine(name, self.stream)
        try:
            yield
        except BaseException:
            self._end(line, paint("✗", "31", self.stream), name)
            raise
        self.timings.append((name, line.seconds()))
        self._end(line, paint("✓", "32", self.stream), name)

    def _end(self, line: ProgressLine, mark: str, name: str) -> None:
        line.done()
        self.line = None
        self.write(f"{mark} {name} {paint(f'({line.seconds():.1f} s)', '2', self.stream)}")

    def event(self, progress: Progress) -> None:
        """Where the phase is now (an Ansible task, a build step, a check)."""
        if self.line is not None:
            self.line.update(progress)

    def note(self, text: str) -> None:
        if self.line is not None:
            self.line.say(text)
        else:
            self.write(text)

    def write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
