"""Which node image each host runs, against the cluster's current one: one line per host on
another image (or whose image cannot be told), naming the host, its image, the current one
and the fix. A host's image is its RECORD's inputs digest (slurmforge.image_record);
the current one is slurmforge.upgrade_start.current_image's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurmforge.hosts import Host
from slurmforge.image import RECORD
from slurmforge.image_record import SHORT, record_digest
from slurmforge.validation.facts import HostFacts, found_wanted

READ = f"read {RECORD}"
"""The key of a host's RECORD among its facts (facts.read)."""


def upgrade_fix(local: bool, cluster: str, inventory: str) -> str:
    """The command that brings every host to the current image (docs/upgrade.md)."""
    return f"sudo slurmforge upgrade --local {cluster}" if local else f"slurmforge upgrade --inventory {inventory}"


def image_problems(hosts: Sequence[Host], facts: Mapping[str, HostFacts], current: str, fix: str) -> list[str]:
    """Every host whose RECORD names another image than `current` (an inputs digest), has
    none, or could not be read."""
    wanted = f"{current[:SHORT]} (the cluster's current image)"
    wrong = []
    for host in hosts:
        node = facts[host.name]
        if node.error is not None:
            wrong.append(f"{host.name}: its node image could not be read ({node.error})")
            continue
        answer = node.get(READ)
        digest = record_digest(answer.out) if answer.rc == 0 else None
        if digest is None:
            wrong.append(found_wanted(host.name, "node image", f"no record ({RECORD})", wanted) +
                         f"; fix: {fix}")
        elif digest != current:
            wrong.append(found_wanted(host.name, "node image", digest[:SHORT], wanted) + f"; fix: {fix}")
    return wrong
