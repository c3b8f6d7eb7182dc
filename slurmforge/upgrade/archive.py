"""Is the node image behind Debian's archive? What only the archive can answer: the packages
a new build (a new `images.refresh`) would take that the image does not hold.

Asked the same way on every target, of a machine that runs the image's packages - locally a
throwaway container of the node image, on AWS the primary controller once it runs the AMI -
with apt's own simulation (`apt-get -s dist-upgrade`: what the image's build runs, changing
nothing), over the archive the image names (roles/common/tasks/install.yml: the release, its
updates, its security suite).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from slurmforge.errors import SlurmforgeError

SCRIPT = ("apt-get update -qq >/dev/null && "
          "apt-get -s -qq -o Debug::NoLocking=1 -o APT::Get::Show-User-Simulation-Note=false dist-upgrade")
"""Run as root on a machine with the image's packages; `Inst` lines on stdout."""
# apt-get -s: "Inst PKG [INSTALLED] (CANDIDATE RELEASE [ARCH])", [INSTALLED] missing for a new package
_INST = re.compile(r"^Inst (?P<package>\S+) (?:\[(?P<installed>[^\]]+)\] )?\((?P<candidate>\S+) (?P<release>[^\[)]*)")


@dataclass(frozen=True)
class Newer:
    package: str
    installed: str
    """'' for a package a new build would add (a fix's new dependency)."""
    candidate: str
    release: str
    """Where it comes from, as apt names it: `Debian-Security:13/stable-security`."""

    def text(self) -> str:
        return f"{self.package} {self.installed or '(new)'} -> {self.candidate}"


def newer_packages(simulation: str) -> list[Newer]:
    """The packages of an `apt-get -s dist-upgrade` answer, in its order."""
    found = []
    for line in simulation.splitlines():
        if m := _INST.match(line.strip()):
            found.append(Newer(m["package"], m["installed"] or "", m["candidate"], m["release"].strip()))
    return found


SHOWN = 4


def behind_line(image: str, newer: list[Newer], today: str) -> str:
    """The one line `upgrade` says of the image and Debian's archive."""
    if not newer:
        return f"node image {image}: Debian's archive has nothing newer for it"
    security = sum("security" in n.release.lower() for n in newer)
    shown = "; ".join(n.text() for n in newer[:SHOWN]) + ("; ..." if len(newer) > SHOWN else "")
    return (f"node image {image}: Debian's archive has {len(newer)} newer package(s) for it ({security} from the "
            f"security suite: {shown}); set images.refresh: \"{today}\" in the spec to build it again from them "
            "(docs/upgrade.md, \"Patch day\")")


def archive_line(image: str, ask: Callable[[str], str]) -> str:
    """`ask(SCRIPT)`: the simulation's answer from a machine with the image's packages (it
    raises SlurmforgeError when it cannot be had: no route to the archive, a machine that
    does not answer); the line `upgrade` says either way."""
    import time

    try:
        answer = ask(SCRIPT)
    except SlurmforgeError as e:
        return f"node image {image}: Debian's archive could not be asked ({e}); the plan stands without it"
    return behind_line(image, newer_packages(answer), time.strftime("%Y-%m-%d"))
