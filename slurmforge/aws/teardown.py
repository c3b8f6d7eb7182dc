"""Releasing what the scheduler service launched, before a cluster's stack is destroyed.

On AWS the pool machines are not resources of the Pulumi stack: the scheduler service
launches them (CreateFleet) and terminates them. `pulumi destroy` alone would leave every
running pool node behind (billed), and its VPC could not be deleted while their network
interfaces live in its subnets. `slurmforge down --inventory DIR` therefore:

1. stops the scheduler service on every controller (a service that keeps running would
   launch again for the jobs still pending), over each host's inventory connection;
2. terminates every pool machine of the cluster the provider lists (the `slurmforge:cluster`
   and `slurmforge:pool` tags every launch of the service carries), through the same
   provider and settings the service itself runs with;
3. waits until the cloud reports none of them alive.

Slurm's jobs on those machines end with them; the head nodes (and a local accounting
database on the controller), the Ceph hosts, storage and network are the stack's: the
provider never lists them, and `pulumi destroy` removes them afterwards.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmforge.contract import SERVICE_UNIT
from slurmforge.errors import ProvisionError, SlurmforgeError
from slurmforge.hosts import Host, HostRole
from slurmforge.inventory import VARS_FILE, read_inventory, read_provider_settings
from slurmforge.provider import Instance, InstanceState, Machines, build_provider

ALIVE = frozenset({InstanceState.PENDING, InstanceState.RUNNING, InstanceState.STOPPING, InstanceState.STOPPED})
"""States of a machine that still exists (a stopped instance keeps its volume and its
network interface)."""


@dataclass(frozen=True)
class Released:
    stopped_on: tuple[str, ...]
    """Controllers whose scheduler service was stopped."""
    terminated: dict[str, int]
    """pool -> machines terminated."""
    seconds: float


StopService = Callable[[Host], str | None]
"""Stops the service on one controller; returns why it could not, or None."""


def stop_service_over_connection(host: Host) -> str | None:
    from slurmforge.remote.node import executor_for

    try:
        done = executor_for(host).run(["systemctl", "stop", SERVICE_UNIT], timeout=90)
    except SlurmforgeError as exc:
        return str(exc)
    return None if done.ok else done.reason()


def provider_settings(inventory_dir: Path) -> dict[str, Any]:
    """The scheduler service's provider settings the inventory hands its role."""
    settings = read_provider_settings(inventory_dir)
    if settings is None:
        raise ProvisionError(f"{inventory_dir / VARS_FILE} has no scheduler service provider settings; "
                             "fix: regenerate the inventory (`slurmforge inventory`)")
    return settings


def release(inventory_dir: Path, *, stop_service: StopService | None = None,
            machines: Machines | None = None, force: bool = False, timeout: float = 600,
            poll: float = 5, clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep) -> Released:
    """Stop the service on the controllers, then terminate every pool machine and wait until
    none is alive. `force`: go on when a controller cannot be reached (it is gone)."""
    spec, hosts = read_inventory(inventory_dir)
    if spec.target.kind == "local":
        raise ProvisionError("the local target is removed with `slurmforge down --local`")
    if spec.target.kind == "static":
        raise ProvisionError("a static target's machines are yours: slurmforge launched none, so there is "
                             "nothing to release")
    start = clock()
    stop = stop_service or stop_service_over_connection
    stopped, unreachable = [], []
    for host in (h for h in hosts if h.role is HostRole.CONTROLLER):
        why = stop(host)
        if why is None:
            stopped.append(host.name)
        else:
            unreachable.append(f"{host.name}: {why}")
    if unreachable and not force:
        raise ProvisionError(f"could not stop the scheduler service on {'; '.join(unreachable)}; nothing "
                             "terminated (a running service would launch again); fix: reach the controller, "
                             "or add --force if it is gone")
    if machines is None:
        machines = build_provider(spec, provider_settings(inventory_dir))
    alive = _alive(machines)
    terminated = Counter(i.pool or "?" for i in alive)
    if alive:
        machines.terminate(alive)
    while alive := _alive(machines):
        if clock() - start > timeout:
            raise ProvisionError(f"{len(alive)} machine(s) still alive after {timeout:.0f} s: "
                                 f"{', '.join(sorted(i.id for i in alive)[:10])}; fix: run `slurmforge down "
                                 "--inventory` again, or look at them in the EC2 console")
        machines.terminate([i for i in alive if i.state is not InstanceState.STOPPING])
        sleep(poll)
    return Released(tuple(stopped), dict(sorted(terminated.items())), clock() - start)


def _alive(machines: Machines) -> list[Instance]:
    return [i for i in machines.list_instances() if i.state in ALIVE]


def summary(released: Released) -> str:
    count = sum(released.terminated.values())
    pools = ", ".join(f"{pool}: {n}" for pool, n in released.terminated.items())
    service = f"scheduler service stopped on {', '.join(released.stopped_on)}" if released.stopped_on \
        else "no scheduler service reached (--force)"
    return (f"{service}; terminated {count} pool machine(s){f' ({pools})' if pools else ''} in "
            f"{released.seconds:.1f} s; the stack's resources go with `pulumi destroy`")
