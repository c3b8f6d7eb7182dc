"""Progress of a long operation, the one way every command shows it: on a terminal, one line
on stderr rewritten in place - the phase, the steps done of how many, the current host or
task, the time so far (redrawn every second, so the time moves while a step runs) - while
every result (a phase done, a note, the summary) is a line of its own on stdout. stderr not
a terminal (a pipe, a log): no progress at all, only the results, the same bytes either way.

`Progress` is what a long operation reports (the rollout's Ansible events, the node image
build's steps, the live-cluster checks); `ProgressLine` draws it; `ui.PhaseDisplay` strings
lines together into a command's phases.

Standard library only: commands that start fast (validate) use it.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

TICK = 1.0
"""Seconds between two redraws of a line whose step has not changed (its time moves on)."""


@dataclass
class Progress:
    """Where a long operation is: the current play (Ansible) and task or step, the host it
    was last heard from, and the counts known so far (0: not known)."""

    play: str = ""
    task: str = ""
    hosts_done: int = 0
    """Hosts done with the current task."""
    tasks_done: int = 0
    host: str = ""
    tasks_total: int = 0
    plays_done: int = 0
    plays_total: int = 0

    def text(self, room: int = 0) -> str:
        """One line: `play 3/15 Controller - slurmctld › task 41: Install slurmctld · dev-controller`;
        in `room` characters (0: any) the play's name gives way first, then the count of hosts
        done, then the task's name is cut: the counts and the host stay."""
        count = f"{self.plays_done + 1}/{self.plays_total}" if self.plays_total else ""
        play = f"play {count} {self.play} ›".replace("  ", " ") if self.play else ""
        task = ""
        if self.task:
            total = f"/{self.tasks_total}" if self.tasks_total else ""
            task = f"{'task ' if self.play else ''}{self.tasks_done}{total}: {self.task}" if self.tasks_done \
                else self.task
        done = f", {self.hosts_done} done" if self.hosts_done > 1 else ""
        host = f"· {self.host}" if self.host else ""
        short_play = f"play {count} ›" if play and count else play
        line = ""
        for line in (" ".join(p for p in (play, task, host + done) if p),
                     " ".join(p for p in (short_play, task, host + done) if p),
                     " ".join(p for p in (short_play, task, host) if p)):
            if room <= 0 or len(line) <= room:
                return line
        if task:  # the task's name is cut, the rest stays
            keep = max(12, len(task) - (len(line) - room) - 1)
            line = line.replace(task, task[:keep] + "…", 1)
        return line if len(line) <= room else line[:room - 1] + "…"


class ProgressLine:
    """`title: current (14 s)` on `stream` (stderr) while a terminal shows it; update() changes
    what it says, say() prints a result line on `out` (stdout) above it, done() clears it.
    Nothing of the line at all when `stream` is not a terminal."""

    def __init__(self, title: str, stream: TextIO | None = None, tick: float = TICK,
                 out: TextIO | None = None) -> None:
        self.title = title.split(" (")[0]  # the phase's name without its explanation: room for the step
        self.stream = stream or sys.stderr
        self.out = out or sys.stdout
        self.shown = self.stream.isatty()
        self.started = time.monotonic()
        self.current: str | Progress = ""
        self.width = 0
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.ticker: threading.Thread | None = None
        if self.shown and tick > 0:
            self.ticker = threading.Thread(target=self._tick, args=(tick,), name="progress", daemon=True)
            self.ticker.start()
        with self.lock:
            self._draw()

    def update(self, current: str | Progress) -> None:
        """What the line says after the title: a text, or where an operation is (fitted to the terminal)."""
        with self.lock:
            self.current = current
            self._draw()

    def say(self, text: str) -> None:
        """A result line (a note, a phase done) on `out`, above the progress line, which stays:
        the line is cleared first, where both share a terminal."""
        with self.lock:
            self._clear()
            self.out.write(text + "\n")
            self.out.flush()
            self._draw()

    def seconds(self) -> float:
        return time.monotonic() - self.started

    def done(self) -> None:
        self.stopped.set()
        if self.ticker is not None:
            self.ticker.join()
        with self.lock:
            self._clear()
            self.shown = False

    def _tick(self, every: float) -> None:
        while not self.stopped.wait(every):
            with self.lock:
                self._draw()

    def _draw(self) -> None:
        if not self.shown:
            return
        room = max(20, shutil.get_terminal_size((80, 24)).columns - 1)  # a line that wraps is not redrawn in place
        elapsed = f" ({self.seconds():.0f} s)"
        current = self.current.text(room - len(self.title) - len(elapsed) - 2) \
            if isinstance(self.current, Progress) else self.current
        line = f"{self.title}: {current}" if current else self.title
        if len(line) + len(elapsed) > room:
            line = line[:room - len(elapsed) - 1] + "…"
        line += elapsed
        self.stream.write("\r" + line.ljust(self.width))
        self.width = len(line)
        self.stream.flush()

    def _clear(self) -> None:
        if self.shown and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0
