"""Slurm's version order, kept at every step of an upgrade (pure functions).

Slurm's upgrade guide (doc/html/upgrades.shtml, 24.11): upgrade slurmdbd first, then
slurmctld, then slurmd and the login nodes' commands (sackd); "Upgrades from the previous two
major releases are compatible" - slurmdbd accepts slurmctld daemons and commands up to two
major releases older, slurmctld accepts slurmd up to two older - and from 24.11 on three
("24.11: 24.05, 23.11, 23.02"). A daemon never goes back: "Reverting an upgrade (or
downgrading) is not supported once any of the Slurm daemons have been started".

So, for the daemons a step moves to the new image's Slurm, with every other daemon as it runs:
- no slurmctld newer than a slurmdbd it reports to, no slurmd or sackd newer than a slurmctld;
- each of those pairs within the newer side's compatibility window;
- a daemon's own move forwards, and within the new release's window of the old one.
A point release is a version too: a 24.11.6 slurmd under a 24.11.5 slurmctld is refused, as
Slurm's own order asks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from slurmforge.errors import VersionOrderRefused

DBD, CTLD, SLURMD, SACKD = "slurmdbd", "slurmctld", "slurmd", "sackd"
DAEMONS = (DBD, CTLD, SLURMD, SACKD)
SERVER_OF = {CTLD: DBD, SLURMD: CTLD, SACKD: CTLD}
"""Which daemon each one talks to (and must not be newer than)."""
EARLY_RELEASES = ("20.02", "20.11", "21.08", "22.05", "23.02", "23.11")
"""Major releases before the 6-month cycle (24.05 on: YY.05 and YY.11, upgrades.shtml)."""
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def version_tuple(version: str) -> tuple[int, int, int]:
    """'24.11.5-1' (Debian's), 'slurm 24.11.5' (-V's), 'slurm-wlm 24.11.5' (Debian's -V), '24.11'
    -> (24, 11, 5) / (24, 11, 0)."""
    text = version.strip().removeprefix("slurm").removeprefix("-wlm").strip()
    found = _VERSION.match(text)
    if found is None:
        raise VersionOrderRefused(f"{version!r} is not a Slurm version")
    return int(found[1]), int(found[2]), int(found[3] or 0)


def release_index(version: str) -> int:
    """The major release's place in Slurm's release sequence (20.02 is 0)."""
    year, month, _ = version_tuple(version)
    name = f"{year:02d}.{month:02d}"
    if name in EARLY_RELEASES:
        return EARLY_RELEASES.index(name)
    if (year, month) >= (24, 5) and month in (5, 11):
        return len(EARLY_RELEASES) + (year - 24) * 2 + (month == 11)
    raise VersionOrderRefused(f"{version}: not a Slurm major release this check knows (20.02 on)")


def window(version: str) -> int:
    """How many major releases back `version` accepts (and upgrades from): 2, from 24.11 on 3."""
    return 3 if version_tuple(version)[:2] >= (24, 11) else 2


def releases_back(old: str, new: str) -> int:
    return release_index(new) - release_index(old)


@dataclass
class Versions:
    """The Slurm version each daemon runs, by daemon then host (or node)."""

    running: dict[str, dict[str, str]] = field(default_factory=dict)

    def of(self, daemon: str) -> dict[str, str]:
        return self.running.get(daemon, {})

    def moved(self, daemon: str, hosts: Iterable[str], version: str) -> Versions:
        after = {d: dict(v) for d, v in self.running.items()}
        after.setdefault(daemon, {}).update({h: version for h in hosts})
        return Versions(after)


def check_move(before: Versions, moves: Mapping[str, Iterable[str]], version: str) -> None:
    """VersionOrderRefused, one line, unless moving the daemons `moves` names (daemon -> hosts)
    to Slurm `version` keeps Slurm's order with everything else as `before` says it runs."""
    after = before
    for daemon, hosts in moves.items():
        hosts = list(hosts)
        for host in hosts:
            old = before.of(daemon).get(host)
            if old is not None:
                _own_move(daemon, host, old, version)
        after = after.moved(daemon, hosts, version)
    for daemon, hosts in moves.items():
        for host in hosts:
            _pairs(after, daemon, host)


def _own_move(daemon: str, host: str, old: str, new: str) -> None:
    if version_tuple(new) < version_tuple(old):
        raise VersionOrderRefused(f"{daemon} on {host} runs Slurm {old}; the new image has {new}: Slurm never goes "
                                  "back (upgrades.shtml, Reverting an upgrade)")
    back = releases_back(old, new)
    if back > window(new):
        raise VersionOrderRefused(
            f"{daemon} on {host} runs Slurm {old}; the new image's {new} takes over state only from {window(new)} "
            f"major release(s) back, this is {back}: upgrade through the releases between first (upgrades.shtml)")


def _pairs(after: Versions, daemon: str, host: str) -> None:
    """Every pair the moved daemon on `host` is part of: it and its server, it and its clients."""
    mine = after.of(daemon)[host]
    if daemon in SERVER_OF:
        for server_host, server in sorted(after.of(SERVER_OF[daemon]).items()):
            _pair(daemon, host, mine, SERVER_OF[daemon], server_host, server)
    for client, server_daemon in SERVER_OF.items():
        if server_daemon == daemon:
            for client_host, version in sorted(after.of(client).items()):
                _pair(client, client_host, version, daemon, host, mine)


def _pair(client: str, client_host: str, client_version: str, server: str, server_host: str,
          server_version: str) -> None:
    if version_tuple(client_version) > version_tuple(server_version):
        raise VersionOrderRefused(
            f"{client} on {client_host} would run Slurm {client_version}, newer than {server} on {server_host} "
            f"({server_version}): Slurm upgrades {server} first (upgrades.shtml: slurmdbd, slurmctld, then slurmd)")
    back = releases_back(client_version, server_version)
    if back > window(server_version):
        raise VersionOrderRefused(
            f"{client} on {client_host} runs Slurm {client_version}, {back} major releases behind {server} on "
            f"{server_host} ({server_version}), which accepts {window(server_version)}: upgrade through the "
            "releases between first (upgrades.shtml, Compatibility Window)")
