"""Prometheus file_sd targets for the node exporters of dynamic (elastic) nodes, and of
static pool nodes on AWS.

Static hosts (controller, login, static pool nodes) are in prometheus.yml itself, from the
inventory - except AWS's static pool nodes, which the inventory does not hold (the service
launches their instances, and a replaced one has a new address): the service lists them.
A node is only a scrape target while Slurm has it powered and registered: a powered-down
node is not a down target (no alert, no failed validation).
The service rewrites the file every loop from the `scontrol show nodes --json` it already read;
Prometheus picks a changed file up by itself (inotify), without a reload.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from slurmforge.contract import NODE_EXPORTER_PORT
from slurmforge.service.files import replace_if_changed
from slurmforge.service.topology import Topology
from slurmforge.slurm.client import NodeState


def is_scrapable(node: NodeState) -> bool:
    """Powered, past its boot (registered with slurmctld), not on its way down."""
    return node.is_powered() and not node.is_powering_up() and not node.is_down()


def dynamic_targets(topology: Topology, nodes: Iterable[NodeState],
                    port: int = NODE_EXPORTER_PORT) -> list[dict[str, Any]]:
    """One file_sd group per dynamic node to scrape now (by address; `instance` is the
    node name, as for static hosts), sorted by node name; static pool nodes too where the
    inventory cannot list them (Topology.static_scraped_by_service)."""
    chosen = []
    for node in nodes:
        info = topology.nodes.get(node.name)
        listed_here = info is not None and (not info.static or topology.static_scraped_by_service)
        if info is not None and listed_here and is_scrapable(node):
            chosen.append((node.name, node.address or node.name, info.pool))
    return [{"targets": [f"{address}:{port}"], "labels": {"instance": name, "pool": pool, "role": "compute"}}
            for name, address, pool in sorted(chosen)]


def write_targets(path: Path, groups: list[dict[str, Any]]) -> bool:
    """Atomically replace the file when its content changes; True when written."""
    return replace_if_changed(path, json.dumps(groups, indent=1, sort_keys=True) + "\n", "scrape targets")
