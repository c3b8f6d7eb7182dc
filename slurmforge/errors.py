"""Error types, each mapped to one CLI exit code and a one-line message."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class SlurmforgeError(Exception):
    """Base class: every error the CLI turns into one line and an exit code."""

    exit_code = 1


# A problem line stays short whatever the input holds: a value is shown up to this many
# characters (then its length), other parts up to PART_CHARS.
VALUE_CHARS = 80
PART_CHARS = 400


def one_line(text: str, limit: int = PART_CHARS) -> str:
    """text on one line (control characters and line separators escaped), at most about
    `limit` characters (then its length)."""
    cut = text if len(text) <= limit else text[:limit]
    if not cut.isprintable():
        cut = "".join(c if c.isprintable() else repr(c)[1:-1] for c in cut)
    return cut if len(text) <= limit else f"{cut}... ({len(text):,} characters)"


def shown(value: object) -> str:
    """A value as a problem line shows it: repr, shortened; a list or mapping by its size
    (its repr can be enormous: aliases share one list many times)."""
    if isinstance(value, str):
        if len(value) <= VALUE_CHARS:
            return repr(value)
        return f"{value[:VALUE_CHARS]!r}... ({len(value):,} characters)"
    if isinstance(value, bool | int | float) or value is None:
        return one_line(repr(value), VALUE_CHARS)
    if isinstance(value, list | tuple | dict | set):
        kind = "a mapping" if isinstance(value, dict) else "a list"
        return f"{kind} of {len(value):,} item(s)"
    return one_line(repr(value), VALUE_CHARS)


def listing(items: list[str], most: int = 8) -> str:
    """'a, b, c' -- or the first `most` and how many there are in all."""
    if len(items) <= most:
        return ", ".join(items)
    return f"{', '.join(items[:most])}, ... ({len(items):,} in all)"


class SortedListing:
    """listing(sorted(items)) as text, worked out when first shown and only once: a check
    that finds 100,000 unknown names must not sort the known ones for each."""

    def __init__(self, items: Iterable[str]) -> None:
        self._items = items
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = listing(sorted(self._items))
        return self._text


@dataclass(frozen=True)
class Problem:
    """One validation finding: where, what was there, what is wrong, how to fix it."""

    path: str
    message: str
    fix: str = ""
    value: object = None
    show_value: bool = True

    def line(self) -> str:
        """One line, of bounded length, whatever the spec holds."""
        got = f" (got {shown(self.value)})" if self.show_value and self.value is not None else ""
        fix = f"; fix: {one_line(self.fix)}" if self.fix else ""
        where = f"{one_line(self.path, 200)}: " if self.path else ""
        return f"{where}{one_line(self.message)}{got}{fix}"


class SpecError(SlurmforgeError):
    """The cluster spec cannot be read or is invalid. Carries every problem found."""

    exit_code = 2

    def __init__(self, problems: list[Problem], source: str = "") -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: {len(problems)} problem(s)" if source else "invalid spec")


class UsageError(SlurmforgeError):
    """Options that do not go together, or a value no command can take."""

    exit_code = 2


class MissingExtra(SlurmforgeError):
    """A command needs an optional part of slurmforge (pyproject.toml's extras) that is not installed."""

    exit_code = 2


class ProvisionError(SlurmforgeError):
    """Creating or changing infrastructure failed."""

    exit_code = 3


class UpgradeRefused(ProvisionError):
    """The node image's Slurm cannot take over the cluster's state (nothing was changed)."""


class RolloutError(SlurmforgeError):
    """An Ansible rollout failed: the phase, host, task and message."""

    exit_code = 4

    def __init__(self, phase: str, host: str, task: str, message: str, log: str = "") -> None:
        self.phase, self.host, self.task, self.message, self.log = phase, host, task, message, log
        super().__init__(f"{phase}: task '{task}' failed on {host}: {message}")


class ValidationFailed(SlurmforgeError):
    """The live-cluster validation (testinfra) found problems."""

    exit_code = 5


class SlurmCommandError(SlurmforgeError):
    """A Slurm command returned non-zero."""

    exit_code = 6

    def __init__(self, cmd: list[str], rc: int, stderr: str) -> None:
        self.cmd, self.rc, self.stderr = cmd, rc, stderr
        super().__init__(f"{' '.join(cmd)} exited {rc}: {stderr.strip()[:300]}")


class SlurmAnswerError(SlurmforgeError):
    """A Slurm command answered, but not with something to act on: errors in its JSON,
    not JSON at all, or a part missing. The scheduler service treats it as "unknown"."""

    exit_code = 6

    def __init__(self, command: str, problem: str) -> None:
        self.command, self.problem = command, problem
        super().__init__(f"{command}: {problem}")


class HostError(SlurmforgeError):
    """The machine cannot run what was asked (not root, podman missing, ...)."""

    exit_code = 7


class ModuleError(SlurmforgeError):
    """Building, publishing or changing a module in the shared software tree failed or
    was refused (a changed definition under an existing version, a locked tree, ...)."""

    exit_code = 8

    def __init__(self, message: str, detail: str = "") -> None:
        self.detail = detail
        super().__init__(message)


class RemoteError(SlurmforgeError):
    """A command run on one machine (slurmforge.remote: here, or a node through podman or
    ssh) failed, or a file there could not be read or written; `detail`: the command and its
    output, which --verbose shows. Exit 8, as when the module tree's change failed on it."""

    exit_code = 8

    def __init__(self, message: str, detail: str = "") -> None:
        self.detail = detail
        super().__init__(message)


class NodeUnreachable(RemoteError):
    """podman or ssh could not reach a node at all (not the command on it failing): the
    cluster is unreachable (exit 11), whichever command was reaching it. A RemoteError
    still, for the callers that treat an unreachable node as "not known"."""

    exit_code = 11


class ClusterUnreachable(SlurmforgeError):
    """A running cluster cannot be reached or read (its controller does not answer through
    podman or ssh, or answers something else)."""

    exit_code = 11


class NeedsRoot(HostError):
    """The local cluster's containers belong to root's podman: a command on it run by
    anyone else would only see an empty podman (exit 7, like every HostError)."""

    def __init__(self) -> None:
        super().__init__("the local cluster runs in root's podman: run the command with sudo")


class NotConfirmed(SlurmforgeError):
    """A destructive or job-affecting action was not confirmed: declined at the prompt, or
    asked with no terminal to answer on and without --yes."""

    exit_code = 13


class NoCluster(SlurmforgeError):
    """No cluster was named and none is remembered, or the one named does not exist."""

    exit_code = 14


class VersionOrderRefused(SlurmforgeError):
    """An upgrade step would break Slurm's version order (a slurmd newer than its slurmctld,
    a slurmctld newer than slurmdbd, or a jump wider than Slurm's compatibility window):
    refused before the step changes anything (slurmforge.upgrade.versions)."""

    exit_code = 15


PLAN_CHANGES_EXIT = 12
"""`plan --detailed-exitcode` (and `modules plan`'s): the plan has changes."""


@dataclass(frozen=True)
class ExitCode:
    code: int
    cause: str


EXIT_CODES = (
    ExitCode(0, "done (plan: it could plan, whatever it found)"),
    ExitCode(1, "unexpected failure, or a file could not be written"),
    ExitCode(2, "bad input: invalid spec or options, a missing extra"),
    ExitCode(3, "making or changing infrastructure failed"),
    ExitCode(4, "the Ansible rollout failed (task, host and log named)"),
    ExitCode(5, "the live cluster failed its validation"),
    ExitCode(6, "a Slurm command failed or answered nonsense"),
    ExitCode(7, "not root for the local cluster (use sudo), podman missing"),
    ExitCode(8, "the module tree refused a change, or a command on a node failed"),
    ExitCode(9, "report: Prometheus has no data, or no report written"),
    ExitCode(10, "cost: sacct's output could not be read"),
    ExitCode(11, "the cluster cannot be reached (podman, ssh, no answer)"),
    ExitCode(PLAN_CHANGES_EXIT, "plan --detailed-exitcode: the plan has changes"),
    ExitCode(13, "not confirmed: declined, or no terminal and no --yes"),
    ExitCode(14, "no cluster: none named or remembered, or no such one"),
    ExitCode(15, "upgrade: a step would break Slurm's version order (refused)"),
    ExitCode(130, "interrupted (Ctrl-C)"),
)
"""Every exit code of the command line, one cause each (`slurmforge --help`, docs/cli.md)."""


def exit_code_table() -> str:
    return "\n".join(f"{e.code:>4}  {e.cause}" for e in EXIT_CODES)
