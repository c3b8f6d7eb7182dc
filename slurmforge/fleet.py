"""The cluster's running machines, for what must reach every one of them now - dynamic pool
nodes included, which no rollout's Ansible reaches: a rotated munge key
(slurmforge.rotate), the spec's users and groups after a rollout (`push_accounts`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from slurmforge.contract import JOIN_PROGRAM
from slurmforge.errors import ProvisionError, RemoteError
from slurmforge.hosts import Host, HostRole, controller_name
from slurmforge.node.kit import pool_hosts_file
from slurmforge.remote.node import executor_for
from slurmforge.spec import Cluster

NODE_TIMEOUT = 60
POOL_MACHINE_SSH = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
"""How a pool machine the inventory does not list is reached (AWS: through the jump host, at
its private address): with no known-hosts entry. Each machine the scheduler service launches
makes new host keys at its first boot, and an address comes back with another machine's (a
static node replaced, a dynamic one powered up again): a recorded key would refuse every
machine after the first, and with BatchMode no new one is accepted ("Host key verification
failed": the AWS rehearsal's rollout, the scheduler service having launched a static node).
The jump host's own key is still checked (ssh applies these options to the last hop only);
the playbooks' Ansible checks no host key at all (playbooks/ansible.cfg)."""


def controller(spec: Cluster, hosts: Sequence[Host]) -> Host:
    for host in hosts:
        if host.name == controller_name(spec):
            return host
    raise ProvisionError(f"no host {controller_name(spec)} (the controller) in the inventory")


def dynamic_nodes(spec: Cluster, hosts: Sequence[Host]) -> list[Host]:
    """Every dynamic pool node the scheduler service has a machine for (the kit's pool hosts,
    read on the controller): as the inventory lists it (a local container), else at its
    address, reached the way the controller is (AWS: through the same jump host)."""
    head = controller(spec, hosts)
    listed = {h.name: h for h in hosts}
    try:
        read = executor_for(head).run(["cat", pool_hosts_file(spec)], timeout=NODE_TIMEOUT)
    except RemoteError as exc:
        raise ProvisionError(str(exc)) from None
    found: list[Host] = []
    # no file: the scheduler service has written none yet, so it has no machine
    for line in read.stdout.splitlines() if read.ok else []:
        parts = line.split()
        if len(parts) != 2 or line.startswith("#"):
            continue
        address, name = parts
        known = listed.get(name)
        if known is None:
            found.append(Host(name, address, HostRole.COMPUTE, dynamic=True, connection=pool_connection(head, address)))
        elif known.dynamic:
            found.append(known)
    return found


def pool_connection(head: Host, address: str) -> dict[str, str]:
    """A pool machine's connection: the controller's (its user, become, jump host), at the
    machine's address, with no known-hosts entry (POOL_MACHINE_SSH)."""
    common = " ".join(part for part in (head.connection.get("ansible_ssh_common_args", ""), POOL_MACHINE_SSH) if part)
    return {**head.connection, "ansible_host": address, "ansible_ssh_common_args": common}


def running_nodes(spec: Cluster, hosts: Sequence[Host]) -> list[Host]:
    """Every Slurm machine up now: the inventory's fixed hosts but Ceph's, and the dynamic
    pool nodes with a machine."""
    return [h for h in hosts if h.role is not HostRole.CEPH and not h.dynamic] + dynamic_nodes(spec, hosts)


def on_each(hosts: Sequence[Host], work: Callable[[Host], None]) -> None:
    """`work` on every host at once; the first failure raised once all ended."""
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        for future in [pool.submit(work, h) for h in hosts]:
            future.result()


GONE_WAIT = 30.0
"""Seconds a dynamic node that failed `work` gets to leave the pool hosts (its machine
released by the service) before its failure counts."""


def on_each_machine(spec: Cluster, hosts: Sequence[Host], nodes: Sequence[Host],
                    work: Callable[[Host], None]) -> list[Host]:
    """`work` on every node at once, on a busy cluster: a dynamic node whose machine went
    away meanwhile (Slurm powered it down; the service released it) is dropped - a machine
    made later joins with the current kit and secrets - and the nodes left are returned. A
    failure on a fixed host, or on a dynamic node still listed after GONE_WAIT s of tries,
    is raised."""
    failed: dict[str, ProvisionError] = {}

    def guarded(host: Host) -> None:
        try:
            work(host)
        except ProvisionError as exc:
            failed[host.name] = exc

    on_each(nodes, guarded)
    gone: set[str] = set()
    fixed = {h.name for h in nodes if not h.dynamic}
    deadline = time.monotonic() + GONE_WAIT
    while failed.keys() - fixed:
        listed = {h.name: h for h in dynamic_nodes(spec, hosts)}
        for name in sorted(failed.keys() - fixed):
            if name not in listed:
                gone.add(name)
                del failed[name]
        retry = [listed[n] for n in sorted(failed.keys() - fixed)]
        if not retry or time.monotonic() > deadline:
            break
        time.sleep(5)
        for host in retry:
            del failed[host.name]
        on_each(retry, guarded)
    if failed:
        raise failed[min(failed)]
    return [h for h in nodes if h.name not in gone]


def push_accounts(spec: Cluster, hosts: Sequence[Host]) -> list[str]:
    """The node kit's users and groups (the rollout published them) applied now on every
    running dynamic node - the join program's kit step, as at its next boot - so a user added
    to the spec runs jobs there without a reboot. The nodes that changed, by name."""
    changed: list[str] = []

    def apply(host: Host) -> None:
        try:
            done = executor_for(host).run([JOIN_PROGRAM, "--steps", "kit", host.name], timeout=NODE_TIMEOUT)
        except RemoteError as exc:
            raise ProvisionError(str(exc)) from None
        if not done.ok:
            raise ProvisionError(f"the spec's users did not reach {host.name}: {done.reason()}")
        if "changed" in done.stdout:
            changed.append(host.name)

    on_each_machine(spec, hosts, dynamic_nodes(spec, hosts), apply)
    return sorted(set(changed))
