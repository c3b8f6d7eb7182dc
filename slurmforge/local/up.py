"""`slurmforge up --local`: validate -> host -> image -> nodes -> inventory -> rollout
-> power down dynamic nodes -> validate the live cluster -> sample job.

Each phase is a named step reported to a `Phases` sink (the CLI's progress display).
A spec that fails validation never starts a container.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from slurmforge.inventory import write_inventory
from slurmforge.local.api import ensure_api_service
from slurmforge.local.host import prepare_host
from slurmforge.local.image import NAMESPACE, ensure_images
from slurmforge.local.podman import Podman
from slurmforge.providers.base import Host, HostRole, InstanceState
from slurmforge.providers.local import LocalProvider
from slurmforge.render import controller_name
from slurmforge.rollout import Progress, RolloutResult, run_playbook
from slurmforge.secrets import ensure_secrets
from slurmforge.spec import Cluster, load_spec

REPO = Path(__file__).resolve().parents[2]
INVENTORIES = REPO / "inventories"
HOLD_FILE = "/etc/slurmforge/hold"
SERVICE_UNIT = "slurmforge-service"
SAMPLE_JOB = "#!/bin/bash\n#SBATCH -N 2\nsrun hostname | sort\n"


class Phases(Protocol):
    def phase(self, name: str) -> AbstractContextManager[None]: ...
    def event(self, progress: Progress) -> None: ...
    def note(self, text: str) -> None: ...


@dataclass
class UpReport:
    cluster: str
    inventory: Path
    log: Path
    rollout: RolloutResult | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)
    job_output: str = ""
    login: str = ""


def log_path(cluster: str, action: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("/var/log/slurmforge") / f"{cluster}-{action}-{stamp}.log"


def inventory_dir(spec: Cluster) -> Path:
    return INVENTORIES / spec.name


def up(spec_path: Path, ui: Phases, run_sample_job: bool = True,
       validate: Callable[[Path], None] | None = None, image_namespace: str = NAMESPACE) -> UpReport:
    spec = load_spec(spec_path)  # SpecError here: nothing was created
    log = log_path(spec.name, "up")
    report = UpReport(spec.name, inventory_dir(spec), log)
    with ui.phase("prepare this machine (packages, podman settings)"):
        prepare_host()
        ensure_api_service()  # the scheduler service in the controller starts nodes through it
    podman = Podman()
    with ui.phase("node image (built once, cached by content hash)"):
        image = ensure_images(podman, lambda builder: _bake(builder, log, ui), image_namespace)
    provider = LocalProvider(spec, image, podman)
    resting = _powered_down_nodes(provider)
    ensure_secrets(spec.name)
    with ui.phase("start nodes (podman, systemd)"):
        _pause_service(podman, spec)
        _hold(podman, resting)
        hosts = provider.provision()
    with ui.phase("inventory"):
        write_inventory(spec, spec_path, hosts, report.inventory)
    with ui.phase("roll out (Ansible)"):
        report.rollout = run_playbook("site.yml", str(report.inventory), log, ui.event,
                                      extravars={"scheduler_service_paused": True})
    with ui.phase("power down dynamic nodes"):
        _rest(podman, provider, spec, hosts)
    with ui.phase("scheduler service"):
        podman.exec(controller_name(spec), ["systemctl", "start", SERVICE_UNIT], timeout=60)
    if validate is not None:
        with ui.phase("validate the live cluster (testinfra)"):
            validate(report.inventory)
    report.login = next(h.name for h in hosts if h.role is HostRole.LOGIN)
    if run_sample_job and spec.users:
        with ui.phase(f"sample job as {spec.users[0].name}"):
            home = f"{spec.storage.nas.mounts.home.rstrip('/')}/{spec.users[0].name}"
            report.job_output = sample_job(podman, report.login, spec.users[0].name, home)
    return report


def _bake(builder: str, log: Path, ui: Phases) -> None:
    inventory = {"all": {"hosts": {builder: {"ansible_connection": "containers.podman.podman"}}}}
    run_playbook("image.yml", inventory, log, ui.event, phase="image")


def _powered_down_nodes(provider: LocalProvider) -> set[str]:
    """Dynamic nodes that are powered down now, or will be new: they rest after the rollout."""
    existing = {i.node: i for i in provider.list_instances()}
    return {h.name for h in provider.hosts() if h.dynamic and
            (h.name not in existing or existing[h.name].state is not InstanceState.RUNNING)}


def _pause_service(podman: Podman, spec: Cluster) -> None:
    """The scheduler service stops machines Slurm sees as powered down: it pauses while
    `up` boots those nodes for the rollout, and starts again once they rest."""
    info = podman.container(controller_name(spec))
    if info is not None and info.is_running:
        podman.exec(controller_name(spec), ["systemctl", "stop", SERVICE_UNIT], check=False, timeout=60)


def _hold(podman: Podman, nodes: set[str]) -> None:
    """Existing powered-down nodes boot for the rollout with slurmd held (no registration)."""
    for name in sorted(nodes):
        if podman.container(name) is not None:
            podman.run(["cp", "/dev/null", f"{name}:{HOLD_FILE}"], check=False)


def _rest(podman: Podman, provider: LocalProvider, spec: Cluster, hosts: list[Host]) -> None:
    """Power down every dynamic node without jobs: the ones `up` booted for the rollout
    (Slurm sees them powered down, state ends in '~') and new ones whose slurmd
    registered (idle, powered up). Nodes running jobs stay up."""
    states = slurm_states(podman, spec)
    names = [h.name for h in hosts if h.dynamic and _is_restable(states.get(h.name, "~"))]
    up_nodes = [n for n in names if not states.get(n, "~").endswith("~")]
    if up_nodes:
        podman.exec(controller_name(spec), ["scontrol", "update", f"nodename={','.join(up_nodes)}",
                                            "state=power_down_force", "reason=slurmforge up: rest"],
                    check=False, timeout=30)
    for name in names:
        podman.exec(name, ["rm", "-f", HOLD_FILE], check=False)
    provider.stop(names)


def _is_restable(state: str) -> bool:
    """Powered down already, or up without jobs (sinfo %T: idle, idle~, idle*, down*...)."""
    return state.endswith("~") or state.rstrip("*") in ("idle", "down")


def slurm_states(podman: Podman, spec: Cluster) -> dict[str, str]:
    """node -> Slurm state (sinfo -N: 'idle', 'idle~' when powered down, ...)."""
    res = podman.exec(controller_name(spec), ["sinfo", "-N", "-h", "-o", "%N %T"], check=False, timeout=20)
    states = {}
    for line in res.stdout.splitlines():
        node, _, state = line.partition(" ")
        states[node] = state
    return states


def sample_job(podman: Podman, login: str, user: str, home: str) -> str:
    """sbatch --wait a 2-node job on the login node as `user`; its output (written to the
    shared home, so the login node reads what the compute node wrote)."""
    script = f"/tmp/slurmforge-sample-{user}.sh"
    podman.exec(login, ["sh", "-c", f"printf '%s' '{SAMPLE_JOB}' > {script} && chmod 755 {script}"])
    res = podman.exec(login, ["sbatch", "--wait", "--parsable", "-D", home, "-o", "slurmforge-sample-%j.out",
                              script], user=user, timeout=180)
    job = res.stdout.strip().split(";")[0]
    out = podman.exec(login, ["cat", f"{home}/slurmforge-sample-{job}.out"], user=user, check=False)
    return f"job {job}:\n{out.stdout.strip()}"
