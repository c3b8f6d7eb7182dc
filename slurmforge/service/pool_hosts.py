"""The pool hosts: `address name` of every pool node the service has a machine for, in the
node kit on the NAS (contract.KIT_POOL_HOSTS), so that pool node names resolve on every node
without a DNS server (docs/node-lifecycle.md, "Names").

The service knows a machine's address as soon as it has one: the launch returns it (the
local container's fixed address; an EC2 instance's private address, which it has while
still pending), or, when EC2 does not know a fresh instance yet, the next listing of the
machines has it. The bindings (state.py)
say which node each machine is; an address is remembered by machine, so a node whose new
machine has no address yet is left out rather than given the old one's.

Written by the leader only (a standby's service touches nothing), at the end of every loop
and right after each launch, and only when the content changes (service.files). The join
program's hosts step reads it on every node: when it joins, in Slurm's Prolog before a job
starts there, and every 30 s (slurmforge-hosts.timer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from slurmforge.provider import Instance, InstanceState
from slurmforge.service.files import replace_if_changed
from slurmforge.service.state import Binding

HEADER = ("# slurmforge pool hosts: the pool nodes the scheduler service has a machine for, written by it;"
          " the join program adds them to /etc/hosts\n")
ADDRESSED = frozenset({InstanceState.PENDING, InstanceState.RUNNING})
"""A machine in these states keeps its address; a stopped or terminated one's is forgotten."""


def pool_hosts_text(bindings: Mapping[str, Binding], addresses: Mapping[str, str]) -> str:
    """One `address name` line per bound node whose machine's address is known, by name."""
    lines = [f"{addresses[b.instance]} {node}\n" for node, b in sorted(bindings.items()) if b.instance in addresses]
    return HEADER + "".join(lines)


class PoolHosts:
    """The file and what the service has learned of its machines' addresses."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.addresses: dict[str, str] = {}
        """instance id -> its address"""
        self.listed = False
        """The cloud was listed once since the service started: before that it knows too
        little to write (it would drop every node whose launch it did not see)."""

    def learn(self, instances: Iterable[Instance], listing: bool = False) -> None:
        """Addresses from a launch's result or (`listing`) a complete list of the machines."""
        for inst in instances:
            if inst.state not in ADDRESSED:
                self.addresses.pop(inst.id, None)
            elif inst.address:
                self.addresses[inst.id] = inst.address
        self.listed = self.listed or listing

    def publish(self, bindings: Mapping[str, Binding]) -> bool:
        """Write the file when it differs from what the bindings say now; True when written."""
        if not self.listed:
            return False
        bound = {b.instance for b in bindings.values()}
        self.addresses = {i: a for i, a in self.addresses.items() if i in bound}
        return replace_if_changed(self.path, pool_hosts_text(bindings, self.addresses), "pool hosts")
