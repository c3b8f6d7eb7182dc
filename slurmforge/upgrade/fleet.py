"""The upgrade's steps on a real cluster: head hosts upgraded in place, compute nodes replaced.

Head hosts are pets on every target (AWS head instances ignore AMI changes: stacks/head.py;
they keep their disks and addresses): `in_place` runs the image pipeline's own playbook
(playbooks/image.yml, through playbooks/upgrade.yml: apt first takes the current packages of
the release the suite pins, with daemons kept from restarting) on that one host over the
inventory's connection, restarts the step's daemons in Slurm's order and waits for each to
answer, rolls the host's configuration out again (image.yml leaves no daemon enabled: the
rollout enables what the host runs), and only then writes the image's RECORD and PACKAGES
there: a host that says it runs the image has finished its step.

Static compute nodes are drained (slurmforge.drain, the JobPolicy), made again from the new
image - locally their container (LocalProvider.remake), on AWS a new instance from the launch
template `pulumi up` pointed at the new AMI (drain.replace: the scheduler service relaunches
it) - and resumed once their new slurmd registers (drain.finish). Dynamic nodes are powered
down (idle) or powered down when their jobs end (busy: POWER_DOWN_ASAP, which drains them;
Slurm clears that drain when it powers them down, power_save.c): their next power-up boots the
new image.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slurmforge.bringup import Phases, roll_out_changed
from slurmforge.drain import REBUILD, ROLLOUT_REASON, Drain, JobPolicy, drain, finish, replace
from slurmforge.errors import ProvisionError, SlurmforgeError
from slurmforge.hosts import Host
from slurmforge.image import PACKAGES, RECORD, playbook_vars
from slurmforge.image_record import record_digest
from slurmforge.provider import InstanceState, Machines
from slurmforge.remote.node import executor_for
from slurmforge.slurm.client import SlurmClient
from slurmforge.spec import Cluster
from slurmforge.upgrade.plan import Step
from slurmforge.upgrade.versions import CTLD, DBD, SACKD, SLURMD, Versions

if TYPE_CHECKING:
    from slurmforge.local.provider import LocalProvider

Remake = Callable[[list[str], list[Drain]], None]
"""Makes drained static nodes' machines again from the new image (the target's own way)."""
MachineImage = Callable[[str], str | None]
"""A pool node the inventory does not list (AWS: the scheduler service's machines): the inputs
digest of the image its machine runs, None when it has none (or it cannot be told)."""
UPGRADE_PLAYBOOK = "upgrade.yml"
ANSWER_TIMEOUT = 180.0
# `sh -c RUNNING sh DAEMON`: the daemon's installed version (its Debian package, named as the
# daemon: `-V` says "slurm-wlm 24.11.5" for the servers and sackd has no -V at all), then what
# its process runs: a binary the upgrade replaced under it reads "... (deleted)" (/proc/<pid>/exe)
RUNNING = ('pid=$(systemctl show -p MainPID --value "$1".service 2>/dev/null); '
           'echo "slurm $(dpkg-query -W -f=\'${Version}\' "$1" 2>/dev/null)"; '
           '[ -n "$pid" ] && [ "$pid" != 0 ] && readlink "/proc/$pid/exe" || echo not-running')
PACKAGES_SCRIPT = "dpkg-query -W -f='${Package} ${Version}\\n' | sort"


@dataclass(frozen=True)
class TargetImage:
    digest: str
    """Its inputs digest (RECORD's `inputs`): what a host on it says."""
    slurm: str
    record: dict[str, object]


def daemon_state(answer: str) -> tuple[str, bool]:
    """(installed version, whether its process runs a replaced binary) from RUNNING's answer."""
    lines = [ln.strip() for ln in answer.splitlines() if ln.strip()]
    version = lines[0].removeprefix("slurm").strip() if lines and lines[0].startswith("slurm") else ""
    return version, any(ln.endswith("(deleted)") for ln in lines[1:])


class ClusterFleet:
    """What every target shares: the head hosts, the versions, the Slurm client, the drain."""

    def __init__(self, spec: Cluster, hosts: Sequence[Host], inventory: Path, client: SlurmClient,
                 target: TargetImage, log: Path, ui: Phases, policy: JobPolicy, remake: Remake,
                 machine_image: MachineImage | None = None) -> None:
        self.spec, self.hosts, self.inventory, self.client = spec, list(hosts), inventory, client
        self.remake, self.machine_image = remake, machine_image
        self.by_name = {h.name: h for h in hosts}
        self.target, self.log, self.ui, self.policy = target, log, ui, policy
        self.upgraded: set[str] = set()
        """Head hosts whose packages this run brought to the image already (the primary's slurmdbd
        step, then its slurmctld step: the image's playbook runs once, 64 s of the AWS rehearsal's)."""

    # ---------------------------------------------------------------- asking the hosts

    def host_image(self, name: str) -> str | None:
        if name not in self.by_name:  # a pool machine the inventory does not list (AWS)
            return self.machine_image(name) if self.machine_image is not None else None
        try:
            return record_digest(executor_for(self.by_name[name]).read_file(RECORD))
        except SlurmforgeError:  # unreachable, unreadable: not known to be on the image
            return None

    def daemon(self, name: str, daemon: str) -> tuple[str, bool]:
        done = executor_for(self.by_name[name]).run(["sh", "-c", RUNNING, "sh", daemon], timeout=60)
        return daemon_state(done.stdout)

    def versions(self, before: dict[str, dict[str, str]]) -> Versions:
        """What each daemon runs now; a process whose binary the upgrade replaced runs what it
        ran when the upgrade began (`before`)."""
        from slurmforge.hosts import HostRole, controller_names

        running: dict[str, dict[str, str]] = {}
        heads = [(DBD, controller_names(self.spec)[:1] if self.spec.accounting.enabled else []),
                 (CTLD, controller_names(self.spec)),
                 (SACKD, [h.name for h in self.hosts if h.role is HostRole.LOGIN])]
        for daemon, names in heads:
            for name in names:
                version, replaced = self.daemon(name, daemon)
                old = before.get(daemon, {}).get(name)
                if version:
                    running.setdefault(daemon, {})[name] = old if replaced and old else version
        running[SLURMD] = {n.name: n.version for n in self.client.nodes() if n.version}
        return Versions(running)

    def stale_daemons(self, name: str, daemons: Sequence[str]) -> list[str]:
        return [d for d in daemons if self.daemon(name, d)[1]]

    # ---------------------------------------------------------------- head hosts, in place

    def in_place(self, step: Step, restart: Sequence[str], last: bool) -> None:
        """The image's steps on the step's host, then `restart` (in this order), then - when
        it is the host's last step - its rollout and its RECORD."""
        from slurmforge.rollout import run_playbook

        for name in step.hosts:
            if name not in self.upgraded and self.host_image(name) != self.target.digest:
                from slurmforge.image import service_wheels

                os_ = self.spec.images.distro()
                # the install tasks copy the locked wheels from this machine (the build's inputs)
                extravars = {**playbook_vars(os_), "slurmforge_image_wheels": str(service_wheels(os_))}
                run_playbook(UPGRADE_PLAYBOOK, str(self.inventory / "hosts.yml"), self.log, self.ui.event,
                             extravars, limit=name, phase=f"upgrade {name} in place")
                self.upgraded.add(name)
            for daemon in restart:
                self.restart(name, daemon)
            if last:
                host = self.by_name[name]
                result = roll_out_changed(self.inventory, [host], self.log, self.ui, full=True)
                if not result.ok:
                    raise ProvisionError(f"the rollout of {name} after its upgrade failed; see {self.log}")
                self.write_record(name)

    def restart(self, name: str, daemon: str) -> None:
        node = executor_for(self.by_name[name])
        done = node.run(["systemctl", "restart", daemon], timeout=120)
        if not done.ok:
            raise ProvisionError(f"restarting {daemon} on {name} failed: {done.reason()}; the host keeps its new "
                                 f"packages: see `journalctl -u {daemon}` there, then run `slurmforge upgrade` again")
        check = {DBD: ["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], CTLD: ["scontrol", "ping"],
                 SACKD: ["systemctl", "is-active", "sackd"]}[daemon]
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while not (answer := node.run(check, timeout=60)).ok or (daemon == CTLD and name not in answer.stdout):
            if time.monotonic() > deadline:
                raise ProvisionError(f"{daemon} on {name} did not answer within {ANSWER_TIMEOUT:.0f} s of its "
                                     f"restart ({answer.reason()}); see `journalctl -u {daemon}` there")
            time.sleep(2)

    def write_record(self, name: str) -> None:
        """The image's RECORD and PACKAGES on the host, with the Slurm its packages now hold."""
        node = executor_for(self.by_name[name])
        packages = node.run(["sh", "-c", PACKAGES_SCRIPT], timeout=120)
        slurm = next((ln.split()[1] for ln in packages.stdout.splitlines() if ln.startswith("slurm-client ")), "")
        record = {**self.target.record, "slurm": slurm, "packages": len(packages.stdout.splitlines()),
                  "in_place": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        node.run(["mkdir", "-p", str(Path(RECORD).parent)], timeout=60)
        node.write_file(PACKAGES, packages.stdout)
        node.write_file(RECORD, json.dumps(record, sort_keys=True) + "\n")

    # ---------------------------------------------------------------- compute nodes

    def replace_static(self, step: Step) -> list[int]:
        """Drain the batch, make its machines again from the new image, resume each once its
        new slurmd registers; the jobs requeued."""
        drains = [Drain(step.hosts, "upgrade to a new node image", REBUILD)]
        drained = drain(self.client, drains, self.policy, self.ui.note)
        self.remake(list(step.hosts), drains)
        finish(self.client, drains, drained.since, self.ui.note)
        return drained.requeued

    def release_dynamic(self, step: Step) -> None:
        idle = list(step.idle)
        busy = [n for n in step.hosts if n not in idle]
        reason = f"reason={ROLLOUT_REASON} powered down to boot the new node image"
        if idle:
            self.client.update_nodes(idle, "state=power_down", reason)
        if busy:  # scontrol(1): "drain the node(s) and mark them for power down"; reason optional
            self.client.update_nodes(busy, "state=power_down_asap", reason)

    def dynamic_done(self, step: Step) -> bool:
        nodes = {n.name: n for n in self.client.nodes()}
        return all(name not in nodes or not nodes[name].is_powered() or "POWER_DOWN" in nodes[name].flags
                   or self.host_image(name) == self.target.digest for name in step.hosts)


def local_remake(provider: LocalProvider) -> Remake:
    """The local target: each drained static node's container made again from the new image."""
    return lambda nodes, drains: provider.remake(nodes)


def aws_machine_image(machines: Machines, ami: str, digest: str) -> MachineImage:
    """AWS: a pool node's image, told by its instance's AMI - `digest` when every live machine
    of the node boots `ami` (the one `pulumi up` baked from those inputs, as the inventory
    names it), else the AMI it boots. The admin's workstation reaches pool machines by no SSH
    (each new machine has new host keys, at an address an earlier one may have had)."""
    def image(name: str) -> str | None:
        live = [i for i in machines.list_instances()
                if i.node == name and i.state in (InstanceState.PENDING, InstanceState.RUNNING)]
        if not live:
            return None
        return digest if all(i.image == ami for i in live) else next((i.image for i in live if i.image != ami), None)

    return image


def aws_remake(client: SlurmClient) -> Remake:
    """AWS (and the rehearsal): the drained static nodes set DOWN with the scheduler service's
    reason; the service launches each a new instance from the pool's launch template, which
    `pulumi up` pointed at the new AMI."""
    def remake(nodes: list[str], drains: list[Drain]) -> None:
        replace(client, drains)

    return remake
