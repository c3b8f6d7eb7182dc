"""The phases of a long command (`up`, `rollout`): what they did on stdout - a line per
phase done with its time (`✓ roll out (Ansible) (182.4 s)`), every note (`drained
dev-gpu-01: waiting for job(s) 42 to end`) - and while a phase runs, its progress line on
stderr (slurmforge.progress: the step, the current host or task, the time so far), on a
terminal only. Piped, stdout is the same bytes whatever stderr is. Full logs go to a file;
this shows only progress and results."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from slurmforge.console import paint
from slurmforge.progress import Progress, ProgressLine


class PhaseDisplay:
    def __init__(self, out: TextIO | None = None, progress: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        """Where the phases done and the notes go (the command's results)."""
        self.progress = progress or sys.stderr
        """Where the progress line is drawn, when it is a terminal."""
        self.line: ProgressLine | None = None
        self.timings: list[tuple[str, float]] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        line = self.line = ProgressLine(name, self.progress, out=self.out)
        try:
            yield
        except BaseException:
            self._end(line, paint("✗", "31", self.out), name)
            raise
        self.timings.append((name, line.seconds()))
        self._end(line, paint("✓", "32", self.out), name)

    def _end(self, line: ProgressLine, mark: str, name: str) -> None:
        line.done()
        self.line = None
        self.write(f"{mark} {name} {paint(f'({line.seconds():.1f} s)', '2', self.out)}")

    def event(self, progress: Progress) -> None:
        """Where the phase is now (an Ansible task, a build step, a check)."""
        if self.line is not None:
            self.line.update(progress)

    def note(self, text: str) -> None:
        """A line of what the phase did, on stdout (the progress line, if any, stays below it)."""
        if self.line is not None:
            self.line.say(text)
        else:
            self.write(text)

    def write(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()
