"""The node image's distribution, and the versions of what it ships that slurmforge's
rendered configs and roles depend on. One record per `images.base`; everything that
needs the distribution (the local image build, the AWS image pipeline, the renderer,
the upgrade check) reads it from here.

Debian 12 (Slurm 22.05) is no longer offered: Slurm 24.11 cannot take over a 22.05
cluster's state or accounting database (it upgrades only from 23.02 or later), and
nothing tests the old image any more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurmforge.contract import node_vars


@dataclass(frozen=True)
class Distro:
    base: str
    """The spec's `images.base`."""
    suite: str
    """Debian's code name: what debootstrap builds the local base image from."""
    parent_ami: str
    """The name of Debian's official AMI the AWS image build starts from: pinned, so a new
    Debian AMI rebakes nothing until this moves (docs/node-image.md)."""
    slurm_release: str
    """The Slurm release series its packages carry ("24.11"): what the renderer writes for."""
    python: str
    """The system Python's version: the scheduler service's venv and its offline wheels."""
    upgrades_from: str
    """The oldest Slurm release whose state and accounting database this Slurm takes over."""
    refresh: str = ""
    """The spec's `images.refresh`: a label of the image's build, part of its change key, so a
    new one builds the image again from the release's current packages (patch day)."""

    def image_vars(self) -> dict[str, Any]:
        """What the image playbook's install tasks need (every target; the inventory holds
        the same): the distribution's Python and suite, and the on-node paths, ports and the service
        venv's requirements of slurmforge.contract; the refresh label when there is one."""
        refresh = {"slurmforge_image_refresh": self.refresh} if self.refresh else {}
        return {"slurmforge_python_version": self.python, "slurmforge_debian_suite": self.suite, **node_vars(),
                **refresh}


DEBIAN_13 = Distro(base="debian-13", suite="trixie", parent_ami="debian-13-amd64-20251117-2299", slurm_release="24.11",
                   python="3.13", upgrades_from="23.02")
DISTROS = {d.base: d for d in (DEBIAN_13,)}
DEFAULT_BASE = DEBIAN_13.base
RETIRED = {"debian-12": "Slurm 22.05; Slurm 24.11 upgrades only from 23.02 or later"}
"""Bases slurmforge built before, with why they are gone (named in the spec error)."""

def distro(base: str) -> Distro:
    return DISTROS[base]


def release_tuple(release: str) -> tuple[int, int]:
    """'24.11.5-1' or '24.11' -> (24, 11)."""
    major, minor = release.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def is_upgradable(old: str, new: Distro) -> bool:
    """Can `new`'s Slurm take over state and accounting written by Slurm `old`? Never
    backwards, and forwards only from `new.upgrades_from` on."""
    o = release_tuple(old)
    return release_tuple(new.upgrades_from) <= o <= release_tuple(new.slurm_release)
