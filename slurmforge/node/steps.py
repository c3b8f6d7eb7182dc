"""The join program's steps: one table, in the order they run, of what each step does and
which hosts run it. Everything else that names the steps reads it: the program's STEPS and
its parts (templates/node/steps/<name>.sh.j2, one function `step_<name>` each), and the
inventory, which hands every host its steps as data (`join_vars`: the rollout's --steps, the
head nodes' first pass, the steps file its boot reads) - no role or playbook names a step.

A compute node runs every step: a machine the scheduler service makes runs the program with
no arguments at boot, and is the node the rollout made. A head node runs the steps that give
it the cluster's users, mounts and names, not the GPU devices or slurmd (its roles run
slurmctld or sackd); a Ceph host, which is no Slurm node, only the node exporter.

Adding a step: its function in a new part, one row here, one test (docs/node-lifecycle.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurmforge.hosts import HostRole

HEADS = frozenset({HostRole.CONTROLLER, HostRole.LOGIN})
NODES = HEADS | {HostRole.COMPUTE}
"""Every host that is a node of the cluster (Slurm's, with the cluster's users and mounts)."""
EVERY_HOST = NODES | {HostRole.CEPH}
PARTS = "node/steps"
"""The steps' parts, under templates/."""


@dataclass(frozen=True)
class Step:
    name: str
    """Its function in the program, `step_<name>`, in templates/node/steps/<name>.sh.j2."""
    what: str
    """One line: what it makes of the machine (the program's header lists them)."""
    roles: frozenset[HostRole]
    """The hosts that run it."""
    before_kit: bool = False
    """A head node runs it in a first pass, before the rollout publishes the node kit on the
    NAS that this pass mounts (the kit is published from the controller)."""
    secrets: tuple[str, ...] = ()
    """The cluster's secrets it reads (the rollout copies them to hosts that run it)."""

    @property
    def part(self) -> str:
        return f"{PARTS}/{self.name}.sh.j2"


STEPS: tuple[Step, ...] = (
    Step("identity", "the node's name and address (first, on every run)", EVERY_HOST),
    Step("munge", "the cluster's munge key; munged running", NODES, before_kit=True, secrets=("munge.key",)),
    Step("nas", "the NAS mounts (a fresh NAS's directories made first); local scratch", NODES, before_kit=True),
    Step("kit", "the spec's users and groups, from the node kit", NODES),
    Step("hosts", "/etc/hosts: the controllers, the kit's fixed hosts, the pool hosts", NODES),
    Step("cephfs", "the CephFS client's conf, keyring and automount", NODES),
    Step("lmod", "Lmod's module path and spider cache", NODES),
    Step("exporter", "the Prometheus node exporter, on the node's address", EVERY_HOST),
    Step("gpus", "the GPU device files gres.conf names (stand-ins on the local target)", frozenset({HostRole.COMPUTE})),
    Step("slurmd", "configless slurmd; the health check's link", frozenset({HostRole.COMPUTE})),
)
"""Every step, in the order the program runs them. The first runs on every run (the others
need the node's name), and is never asked for."""


def names() -> tuple[str, ...]:
    return tuple(step.name for step in STEPS)


def host_steps(role: HostRole) -> tuple[str, ...]:
    """The steps a host of `role` runs, after the first."""
    return tuple(step.name for step in STEPS[1:] if role in step.roles)


def join_vars(role: HostRole) -> dict[str, Any]:
    """A host's join as the inventory hands it to the rollout (roles/slurm_node):
    `steps` what the rollout runs, `before_kit` a head node's first pass (none elsewhere),
    `at_boot` the steps file its boot reads (None: no file, every step - a compute node, as a
    machine the service makes), `secrets` the secrets the rollout copies for them."""
    steps = host_steps(role)
    chosen = [step for step in STEPS[1:] if step.name in steps]
    return {
        "steps": list(steps),
        "before_kit": [step.name for step in chosen if step.before_kit] if role in HEADS else [],
        "at_boot": None if steps == names()[1:] else ",".join(steps),
        "secrets": sorted({secret for step in chosen for secret in step.secrets}),
    }
