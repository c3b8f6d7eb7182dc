"""The steps of a bring-up that do not depend on the target: once the machines exist, roll the
inventory out on the hosts whose last rollout was another one, and run a sample job on the
login node. Hosts are reached through the inventory's own connection (podman exec for a
local container, ssh otherwise: `remote.node.executor_for`), never through a provider.

`slurmforge up --local` runs them around what only the local target does (image, containers,
powered-down nodes); `slurmforge rollout --inventory` rolls out any inventory, an AWS stack's
or a local cluster's, with the same skip. Both end by waiting until the cluster answers
(`await_ready`): a bring-up that returns 0 has a cluster that runs jobs. Writing the
inventory (`inventory.write_inventory`) and validating the live cluster
(`validation.validate_inventory`) are the other shared steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from slurmforge.contract import DIGEST_FILE
from slurmforge.errors import ProvisionError, RemoteError, SlurmAnswerError
from slurmforge.hosts import Host, HostRole
from slurmforge.remote.executor import Completed, Executor
from slurmforge.remote.node import executor_for
from slurmforge.rollout import (
    Progress,
    RolloutResult,
    mark_text,
    roll_out,
    rollout_digests,
    skipped_parts,
    stale_parts,
)
from slurmforge.slurm.client import NODES_COMMAND, NodeState, parse_nodes
from slurmforge.slurm.reasons import HEALTH_REASON
from slurmforge.spec import Cluster
from slurmforge.state_dirs import default_inventory
from slurmforge.state_dirs import log_dir as log_dir  # where rollouts log (bringup.log_dir)

"""root's log directory (log_dir)."""
SAMPLE_JOB = "#!/bin/bash\n#SBATCH -N 2\nsrun hostname | sort\n"


class Phases(Protocol):
    """Where a bring-up reports its progress (the CLI's display)."""

    def phase(self, name: str) -> AbstractContextManager[None]: ...
    def event(self, progress: Progress) -> None: ...
    def note(self, text: str) -> None: ...


def inventory_dir(spec: Cluster) -> Path:
    """Where a cluster's generated inventory goes, whatever its target (state_dirs.default_inventory)."""
    return default_inventory(spec.name)


def log_path(cluster: str, action: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return log_dir() / f"{cluster}-{action}-{stamp}.log"


def rollout_mark(host: Host) -> str:
    """The digest of the host's last complete rollout (playbooks/rollout_mark.yml); "" when it
    has none or it cannot be read: the host is then rolled out, and Ansible says what is wrong."""
    try:
        done = executor_for(host).run(["cat", DIGEST_FILE], timeout=30)
    except RemoteError:  # podman or ssh could not reach it
        return ""
    return done.stdout.strip() if done.ok else ""


def fixed_hosts(hosts: Sequence[Host]) -> list[Host]:
    """The hosts a rollout reaches, on every target: all but the dynamic pool nodes, whose
    machines exist only while Slurm has them powered up and join by themselves (the join
    program at boot)."""
    return [h for h in hosts if not h.dynamic]


def roll_out_changed(inventory: Path, hosts: Sequence[Host], log: Path, ui: Phases, full: bool = False,
                     read_mark: Callable[[Host], str] = rollout_mark) -> RolloutResult:
    """Roll out (site.yml's playbooks) on those of `hosts` whose last successful rollout differs
    from this one's inputs for that host (rollout_digests: new or recreated hosts; every host
    when the roles or what every host reads changed; the controllers alone for a change only
    they read, such as a QoS or a partition's limits). `full` runs it on all of them: the way
    to repair drift by hand, and what proves the roles idempotent (changed=0). Hosts not in
    `hosts` are never touched."""
    by_name = {h.name: h for h in hosts}
    digests = rollout_digests(inventory, hosts)
    stale = stale_parts([h.name for h in hosts], digests, lambda name: read_mark(by_name[name]), full)
    if not stale:
        ui.note("every node already has this exact rollout: nothing to do (--full-rollout runs Ansible anyway)")
        return RolloutResult(ok=True, skipped_hosts=len(hosts))
    skipped = skipped_parts(stale)
    if skipped:
        ui.note(f"rolling out {', '.join(sorted(set().union(*stale.values())))} on {', '.join(stale)}; "
                f"nothing changed for {', '.join(skipped)}")
    ceph = [h.name for h in hosts if h.role is HostRole.CEPH]
    # the playbooks mark each host not current first and current at their end (playbooks/rollout_mark.yml)
    result = roll_out(inventory, ceph, log, ui.event, limit=list(stale),
                      marks={h: mark_text(digests[h]) for h in stale}, skip_parts=skipped)
    result.skipped_hosts = len(hosts) - len(stale)
    return result


def push_users(inventory: Path, ui: Phases) -> list[str]:
    """After a rollout that published the node kit: the spec's users and groups on every
    running dynamic node too (no Ansible reaches those; slurmforge.fleet). The nodes that
    changed."""
    from slurmforge.fleet import push_accounts
    from slurmforge.inventory import read_inventory

    spec, hosts = read_inventory(inventory)
    changed = push_accounts(spec, hosts)
    if changed:
        ui.note(f"users and groups changed on the running dynamic node(s) {', '.join(changed)}")
    return changed


READY_TIMEOUT = 180.0
"""How long a bring-up waits for the cluster to answer: a node's health check runs every 30 s,
and lifts a drain of its own once what it checks answers again."""
IN_SERVICE = frozenset({"idle", "mixed", "allocated"})
"""Base states of a node that takes jobs (`scontrol show nodes --json`; COMPLETING, PLANNED,
RESERVED are flags beside them)."""
CEPH_HEALTH = ["timeout", "20", "ceph", "health", "--connect-timeout", "15"]
CEPH_UNITS = ["systemctl", "list-units", "--failed", "--no-legend", "--plain", "ceph-*"]


def node_label(node: NodeState) -> str:
    """How a node out of service is said: its base state, then what keeps it out."""
    words = ["drained" if node.is_drained() else "draining"] if node.is_drain() else [node.state]
    if node.is_not_responding():
        words.append("not responding")
    if not node.is_powered():
        words.append("powered down")
    return ", ".join(words)


def node_problems(nodes: Sequence[NodeState], static: Sequence[str]) -> tuple[list[str], list[str]]:
    """Slurm's nodes (`NODES_COMMAND`) -> (problems, notes) for the static compute nodes: a
    node that is not in service, or does not answer, is a problem unless an admin took it out
    (a drain whose reason is not the health check's: left as it is, a note)."""
    seen = {node.name: node for node in nodes}
    problems, notes = [], []
    for name in static:
        node = seen.get(name)
        if node is None:
            problems.append(f"{name}: not in Slurm's node list")
            continue
        answering = not node.is_not_responding() and node.is_powered()
        if node.state in IN_SERVICE and not node.is_drain() and answering:
            continue
        said = f"{name}: {node_label(node)}" + (f" ({node.reason})" if node.reason else "")
        if node.is_drain() and answering and not node.reason.startswith(HEALTH_REASON):
            notes.append(f"{said}: taken out by an admin, left as it is")
            continue
        problems.append(said)
    return problems, notes


def ceph_problem(health: Completed | None, failed_units: str) -> str | None:
    """What stops Ceph from serving CephFS, from `CEPH_HEALTH` on a Ceph host (None: it could
    not be run) and that host's failed Ceph units; None when it serves."""
    answer = health.stdout.strip() if health is not None and health.ok else ""
    if answer.startswith(("HEALTH_OK", "HEALTH_WARN")):
        return None
    units = ", ".join(line.split()[0] for line in failed_units.splitlines() if line.split())
    said = answer.splitlines()[0] if answer else "no answer from its monitors"
    return f"Ceph: {said}" + (f" (failed: {units}; `journalctl -u` on the Ceph host says why)" if units else "")


def await_ready(hosts: Sequence[Host], controller: Host, ui: Phases, timeout: float = READY_TIMEOUT,
                every: float = 3.0) -> None:
    """Wait until Ceph serves (when the cluster has it) and every static compute node is in
    service; ProvisionError naming what is not after `timeout`. Dynamic nodes are the
    scheduler service's: they have no machine until Slurm powers them up."""
    static = [h.name for h in hosts if h.role is HostRole.COMPUTE and not h.dynamic]
    ceph = next((h for h in hosts if h.role is HostRole.CEPH), None)
    deadline = time.monotonic() + timeout
    while True:
        problems: list[str] = []
        notes: list[str] = []
        if ceph is not None:
            node = executor_for(ceph)
            try:
                health = node.run(CEPH_HEALTH, timeout=30)
                failed = "" if health.ok else node.run(CEPH_UNITS, timeout=30).stdout
                if (said := ceph_problem(health, failed)) is not None:
                    problems.append(said)
            except RemoteError as exc:
                problems.append(f"Ceph: {ceph.name} unreachable: {exc}")
        if static:
            try:
                answer = executor_for(controller).run(list(NODES_COMMAND), timeout=30)
                if answer.ok:
                    found, notes = node_problems(parse_nodes(answer.stdout), static)
                    problems += found
                else:
                    problems.append(f"slurmctld: no answer ({answer.reason()})")
            except RemoteError as exc:
                problems.append(f"{controller.name} unreachable: {exc}")
            except SlurmAnswerError as exc:
                problems.append(f"slurmctld: {exc}")
        if not problems:
            for note in notes:
                ui.note(note)
            return
        if time.monotonic() > deadline:
            raise ProvisionError(f"the cluster is not ready after {timeout:.0f} s: {'; '.join(problems)}")
        time.sleep(every)


def sample_job(login: Host, user: str, home: str) -> str:
    """sbatch --wait a 2-node job on the login node as `user`; its output (written to the
    shared home, so the login node reads what the compute node wrote)."""
    root, as_user = executor_for(login), executor_for(login, user)
    script = f"/tmp/slurmforge-sample-{user}.sh"
    _on(root, ["sh", "-c", f"printf '%s' '{SAMPLE_JOB}' > {script} && chmod 755 {script}"])
    res = _on(as_user, ["sbatch", "--wait", "--parsable", "-D", home, "-o", "slurmforge-sample-%j.out", script],
              timeout=180)
    job = res.stdout.strip().split(";")[0]
    out = _on(as_user, ["cat", f"{home}/slurmforge-sample-{job}.out"], check=False)
    return f"job {job}:\n{out.stdout.strip()}"


def _on(node: Executor, argv: list[str], timeout: float = 120, check: bool = True) -> Completed:
    """argv on the node; ProvisionError when the node cannot be reached, or (`check`) when the
    command fails."""
    try:
        done = node.run(argv, timeout=timeout)
    except RemoteError as exc:
        raise ProvisionError(str(exc)) from None
    if check and not done.ok:
        raise ProvisionError(f"{' '.join(argv[:3])} on {node.name} failed: {done.reason()}")
    return done
