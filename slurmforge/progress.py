"""Progress of a long operation on a terminal: one line rewritten in place - the steps done
of how many, the current host or task, the time so far - on stderr, so stdout stays the
result. Not a terminal (a pipe, a log): nothing at all, only the results.

Standard library only: commands that start fast (validate) use it.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """`title: 12/96 current (14 s)`, redrawn by step(); cleared by done()."""

    def __init__(self, title: str, total: int = 0, stream: TextIO | None = None) -> None:
        self.title, self.total = title, total
        self.stream = stream or sys.stderr
        self.shown = self.stream.isatty()
        self.started = time.monotonic()
        self.count = 0
        self.current = ""
        self.width = 0

    def step(self, current: str = "", done: int | None = None, total: int | None = None) -> None:
        self.count = self.count + 1 if done is None else done
        self.total = total or self.total
        self.current = current
        self.draw()

    def draw(self) -> None:
        if not self.shown:
            return
        steps = f" {self.count}/{self.total}" if self.total else ""
        line = f"{self.title}:{steps} {self.current} ({time.monotonic() - self.started:.0f} s)"
        self.stream.write("\r" + line[:200].ljust(self.width))
        self.width = min(len(line), 200)
        self.stream.flush()

    def done(self) -> None:
        if self.shown and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
