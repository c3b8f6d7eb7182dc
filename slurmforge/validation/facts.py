"""What the live-cluster checks read from each host, read once: one command per host (a
shell script of the few dozen small commands the checks need, each answer in a section
of its own), the hosts asked in parallel. A check then judges the answers in Python and
names, per problem, the host, what it found and what it wanted (`found_wanted`).

Shared storage is proven by a probe file: each path's writer writes one (`write_probes`,
before the hosts are read), every reader's script reads it back, and the writer removes it
afterwards (`remove_probes`).
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Protocol

from slurmforge.hosts import Host

PARALLEL = 8
"""Hosts read at once (each is one command waiting on its host, not work here). On AWS each
opens its connection through the login node: sshd's MaxStartups (10 by default) starts
refusing handshakes beyond 10 in flight."""


class Runner(Protocol):
    """What a connection to a host needs for this module: testinfra's Host.run."""

    def run(self, command: str, *args: str) -> object: ...


@dataclass(frozen=True)
class Answer:
    rc: int
    out: str
    """stdout and stderr together, as the command printed them."""


@dataclass
class HostFacts:
    """One host's answers by key (see host_script), or why it could not be asked."""

    host: str
    answers: dict[str, Answer] = field(default_factory=dict)
    error: str | None = None

    def get(self, key: str) -> Answer:
        if self.error is not None:
            raise Unreachable(f"{self.host}: {self.error}")
        if key not in self.answers:
            raise KeyError(f"{self.host}: nothing gathered for {key!r}")
        return self.answers[key]

    def ok(self, key: str) -> bool:
        return self.get(key).rc == 0

    def text(self, key: str) -> str:
        return self.get(key).out


class Unreachable(AssertionError):
    """A host whose commands could not run: the checks that need it fail with this line."""


def found_wanted(host: str, what: str, found: object, wanted: object) -> str:
    """The one line a failed check prints per problem."""
    return f"{host}: {what} found {_one_line(found)}, wanted {_one_line(wanted)}"


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


# ------------------------------------------------------------------ what a host is asked

def active(unit: str) -> tuple[str, str]:
    """`systemctl is-active`: rc 0 when the unit runs (testinfra's Service.is_running)."""
    return f"active {unit}", f"systemctl is-active --quiet {shlex.quote(unit)}"


def enabled(unit: str) -> tuple[str, str]:
    return f"enabled {unit}", f"systemctl is-enabled --quiet {shlex.quote(unit)}"


def restart(unit: str) -> tuple[str, str]:
    return f"restart {unit}", f"systemctl show -p Restart --value {shlex.quote(unit)}"


def stat(path: str) -> tuple[str, str]:
    """`<octal mode> <owner> <sha256>`; rc 1 when the path does not exist."""
    q = shlex.quote(path)
    return f"stat {path}", f"test -e {q} && printf '%s %s %s\\n' \"$(stat -Lc '%a %U' {q})\" " \
                           f"\"$(sha256sum < {q} | cut -d' ' -f1)\""


def read(path: str) -> tuple[str, str]:
    q = shlex.quote(path)
    return f"read {path}", f"cat {q}"


def mounted(path: str) -> tuple[str, str]:
    """The file system types mounted on path (an automount: autofs, then the file system)."""
    return f"mounted {path}", f"findmnt -n -o FSTYPE --mountpoint {shlex.quote(path)}"


def shell(key: str, command: str) -> tuple[str, str]:
    return key, command


def host_script(items: Iterable[tuple[str, str]], marker: str) -> str:
    """One /bin/sh script printing every item's output (stderr with it) and exit code under
    a header line `marker key`; a failing item does not stop the others."""
    parts = []
    for key, command in items:
        parts.append(f"printf '%s\\n' {shlex.quote(f'{marker} {key}')}; ( {command} ) 2>&1 </dev/null; "
                     f"printf '\\n%s %s\\n' {shlex.quote(marker + ' rc')} $?")
    return "\n".join(parts)


def parse_answers(text: str, marker: str) -> dict[str, Answer]:
    """host_script's output, back into answers by key."""
    answers: dict[str, Answer] = {}
    key: str | None = None
    body: list[str] = []
    for line in text.split("\n"):
        if line.startswith(f"{marker} rc ") and key is not None:
            answers[key] = Answer(int(line.split()[-1]), "\n".join(body[:-1] if body and body[-1] == "" else body))
            key, body = None, []
        elif line.startswith(f"{marker} "):
            key, body = line[len(marker) + 1:], []
        elif key is not None:
            body.append(line)
    return answers


def ask(name: str, node: Runner, items: list[tuple[str, str]]) -> HostFacts:
    """Run one host's script; a host that cannot be reached is a HostFacts with its error."""
    marker = f"@@sf-{secrets.token_hex(6)}"
    try:
        res = node.run(host_script(items, marker))
    except Exception as exc:  # ssh down, container gone: the checks name it per host
        return HostFacts(name, error=str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__)
    stdout = str(getattr(res, "stdout", ""))
    answers = parse_answers(stdout, marker)
    missing = [key for key, _ in items if key not in answers]
    if missing:
        stderr = str(getattr(res, "stderr", "")).strip()
        return HostFacts(name, answers, error=f"the checks' commands did not run (rc {getattr(res, 'rc', '?')}"
                                               f"{': ' + stderr.splitlines()[-1] if stderr else ''})")
    return HostFacts(name, answers)


def in_parallel(hosts: list[Host], work: Callable[[Host], HostFacts],
                on_host: Callable[[int, int, list[str]], None] | None = None) -> dict[str, HostFacts]:
    """work(host) for every host at once; the results by host name. on_host(done, total,
    waiting) hears of each host that answered, with the hosts still asked."""
    if not hosts:
        return {}
    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(hosts))) as pool:
        futures = {pool.submit(work, h): h.name for h in hosts}
        waiting = [h.name for h in hosts]
        for done, future in enumerate(as_completed(futures), 1):
            waiting.remove(futures[future])
            if on_host is not None:
                on_host(done, len(hosts), waiting)
        return {f.host: f for f in (future.result() for future in futures)}


LISTENING = ("listening", "ss -Htln")


def listening(ss_output: str) -> set[tuple[str, int]]:
    """`ss -Htln`'s listening TCP sockets as (address, port); `*` is both wildcards."""
    out: set[tuple[str, int]] = set()
    for line in ss_output.splitlines():
        cols = line.split()
        if len(cols) < 4 or ":" not in cols[3]:
            continue
        address, port = cols[3].rsplit(":", 1)
        address = address.strip("[]").split("%")[0]
        if not port.isdigit():
            continue
        out |= {("::", int(port)), ("0.0.0.0", int(port))} if address == "*" else {(address, int(port))}
    return out


def listens(sockets: set[tuple[str, int]], address: str, port: int) -> bool:
    """testinfra's Socket.is_listening: on the address itself, or on every IPv6 (and so
    every) address."""
    return (address, port) in sockets or ("::", port) in sockets
