"""A running local cluster seen from the host: commands as root in the controller, batch jobs
submitted by a user on the login node and their states in squeue and sacct, the cluster's
containers, the scheduler service's /metrics. Used by the integration tests and by the
benches that act on a live cluster; the faults they inject are in tests/harness/faults.py.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from slurmforge.contract import SERVICE_PORT
from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host, HostRole, controller_names
from slurmforge.local.podman import Podman
from slurmforge.local.provider import LABEL
from slurmforge.monitoring import controller_address
from slurmforge.spec import Cluster

T = TypeVar("T")

IN_SERVICE = ("idle", "mixed", "allocated")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
"""What this machine trusts (a TLS-intercepting proxy's CA, if any): a publish that pip-installs
passes it to the build node (`modules publish --pip-cert`), as an admin behind such a proxy does."""


def pip_cert_args() -> list[str]:
    return ["--pip-cert", str(HOST_CA)] if HOST_CA.exists() else []
"""`sinfo %T` of a node that takes jobs."""


def node_state_command(node: str) -> str:
    """The shell command that prints `node`'s `sinfo %T` state once: `sinfo -N` lists a
    node once per partition it is in (a pool in two partitions printed "idle\nidle")."""
    return f"sinfo -h -N -n {node} -o %T | head -n 1"


def wait_until(check: Callable[[], T], timeout: float, what: str, every: float = 0.3) -> T:
    """Poll `check` until it returns something true; that value. ProvisionError after
    `timeout` seconds, naming `what` was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ProvisionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


@dataclass
class LiveCluster:
    name: str
    controller: str
    login: str
    user: str
    """Who submits the jobs (on the login node, from their home directory)."""
    address: str
    """The controller's address (the scheduler service listens there)."""
    podman: Podman = field(default_factory=Podman)
    backups: tuple[str, ...] = ()
    """The backup controllers (head.backup_controller), in Slurm's order."""

    @classmethod
    def of(cls, spec: Cluster, hosts: Sequence[Host], user: str | None = None,
           podman: Podman | None = None) -> LiveCluster:
        """The cluster of an inventory (`read_inventory`, `find_cluster`); jobs by `user`,
        else the spec's first user."""
        login = next(h.name for h in hosts if h.role is HostRole.LOGIN)
        primary, *backups = controller_names(spec)
        return cls(spec.name, primary, login, user or spec.users[0].name, controller_address(hosts),
                   podman or Podman(), tuple(backups))

    def root(self, command: str, timeout: float = 60) -> str:
        """`command` (bash) as root in the controller; its output. ProvisionError when it fails."""
        return self.podman.exec(self.controller, ["bash", "-lc", command], timeout=timeout).stdout

    def on(self, node: str, command: str, timeout: float = 60) -> str:
        """`command` (bash) as root on `node`; its output. ProvisionError when it fails."""
        return self.podman.exec(node, ["bash", "-lc", command], timeout=timeout).stdout

    def submit(self, args: str) -> str:
        """`sbatch --parsable ARGS` as the user on the login node; the job id."""
        out = self.podman.exec(self.login, ["bash", "-lc", f"sbatch --parsable {args}"], user=self.user,
                               workdir=f"/home/{self.user}", timeout=60).stdout
        return out.strip().split(";")[0]

    def squeue_answer(self, job: str) -> str | None:
        """The job's state in squeue, "" once squeue no longer lists it (or never knew it), None
        when squeue had no answer (could not reach slurmctld: restarting, busy, failing over)."""
        said = self.root(f"squeue -h -j {job} -o %T 2>&1; echo \"squeue-exit=$?\"")
        lines = said.strip().splitlines()
        if lines and lines[-1] == "squeue-exit=0":
            return "".join(lines[:-1]).strip()
        return "" if "Invalid job id" in said else None

    def squeue_state(self, job: str) -> str:
        """The job's state in squeue; "" once squeue no longer lists it, or gave no answer."""
        return self.squeue_answer(job) or ""

    def queue_state(self, job: str, attempts: int = 10) -> str:
        """The job's state as Slurm has it: squeue's while squeue lists it, else sacct's (a job
        that left the queue: COMPLETED, NODE_FAIL, ...). A squeue with no answer is asked again
        a second later, up to `attempts` times: an answer not had is not a job gone, which
        `squeue_state`'s "" cannot tell apart."""
        for _ in range(attempts):
            state = self.squeue_answer(job)
            if state:
                return state
            if state == "":
                return self.sacct_states(job).get(job, "")
            time.sleep(1)
        raise ProvisionError(f"squeue had no answer for job {job} in {attempts} tries")

    def sacct_states(self, *jobs: str) -> dict[str, str]:
        """Job id -> its state in sacct ("COMPLETED", "CANCELLED by 0", ...)."""
        out = self.root(f"sacct -n -X -P -j {','.join(jobs)} -o JobID,State")
        return dict(line.strip().split("|", 1) for line in out.splitlines() if "|" in line)

    def slurm_state(self, node: str) -> str:
        return self.root(node_state_command(node)).strip()

    def nodes_in_transition(self) -> list[str]:
        """Nodes powering up (#) or down (%, ! queued), and powered-down nodes (~) whose
        machine still runs (the service removes it on its next loop): a machine may be made
        or removed any moment."""
        rows = [row for row in (line.split() for line in self.root("sinfo -h -N -o '%N %T'").splitlines())
                if len(row) == 2]
        moving = {name for name, state in rows if state.endswith(("#", "%", "!"))}
        resting = {name for name, state in rows if state.endswith("~")}
        return sorted(moving | (resting & self.running_containers() if resting else set()))

    def power_down(self, node: str, timeout: float = 180) -> None:
        """`node` in power save, its machine gone, as a cold start needs it: asked of Slurm
        when it is not (a job of a test before may have powered it up; Slurm powers it down
        once it is idle), then awaited."""
        if not self.slurm_state(node).endswith("~"):
            self.root(f"scontrol update nodename={node} state=power_down")

        def is_off() -> bool:
            return self.slurm_state(node).endswith("~") and node not in self.running_containers()

        wait_until(is_off, timeout, f"{node} powered down", every=1)

    def controller_up(self) -> bool:
        """The primary's slurmctld answers (with a backup, `scontrol ping` names both)."""
        return f"at {self.controller} is UP" in self.root("scontrol ping || true")

    def running_containers(self) -> set[str]:
        """The cluster's containers (podman label slurmforge.cluster) that run now."""
        return {c.name for c in self.podman.containers(f"{LABEL}={self.name}") if c.is_running}

    def metrics(self) -> str:
        """The scheduler service's /metrics; "" when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{self.address}:{SERVICE_PORT}/metrics", timeout=10) as answer:
                return str(answer.read().decode())
        except OSError:
            return ""

    def is_holding(self, reason: str = "slurm-view") -> bool:
        """The service says on /metrics that it holds actions back for `reason`."""
        return f'slurmforge_service_holding{{reason="{reason}"}} 1' in self.metrics()
