"""`slurmforge up --local`: validate -> host -> image -> nodes -> inventory -> rollout
-> power down dynamic nodes -> validate the live cluster -> sample job.

What is local lives here: this machine, the node image, the containers, and the dynamic
nodes booted for the rollout and put to rest after it. The steps every target shares are
elsewhere: the inventory (`inventory.write_inventory`), the rollout that skips current hosts
and the sample job (`slurmforge.bringup`, whose rollout `slurmforge rollout --inventory`
runs too), the validation (`validation.validate_inventory`, passed in by the CLI).

Each phase is a named step reported to a `Phases` sink (the CLI's progress display).
A spec that fails validation never starts a container.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slurmforge.bringup import Phases, inventory_dir, log_path, roll_out_changed, sample_job
from slurmforge.contract import DIGEST_FILE, HOLD_FILE, SERVICE_UNIT
from slurmforge.distro import Distro, distro, release_tuple
from slurmforge.hosts import Host, HostRole
from slurmforge.inventory import write_inventory
from slurmforge.local.api import ensure_api_service
from slurmforge.local.host import prepare_host
from slurmforge.local.image import NAMESPACE, ensure_images, slurm_version
from slurmforge.local.podman import Podman
from slurmforge.providers.base import InstanceState
from slurmforge.providers.local import LABEL, LocalProvider
from slurmforge.render import controller_name, controller_names, state_save_location
from slurmforge.rollout import EventSink, RolloutResult, rollout_digest, run_playbook
from slurmforge.secrets import ensure_secrets
from slurmforge.spec import Cluster, load_spec
from slurmforge.upgrade import BEFORE_MARKER, check_takeover, state_release

CEPH_PLAY = "Ceph"
"""playbooks/site.yml's Ceph play starts with this."""


@dataclass
class UpReport:
    cluster: str
    inventory: Path
    log: Path
    rollout: RolloutResult | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)
    job_output: str = ""
    login: str = ""


def up(spec_path: Path, ui: Phases, run_sample_job: bool = True,
       validate: Callable[[Path], None] | None = None, image_namespace: str = NAMESPACE,
       full_rollout: bool = False) -> UpReport:
    spec = load_spec(spec_path)  # SpecError here: nothing was created
    log = log_path(spec.name, "up")
    report = UpReport(spec.name, inventory_dir(spec), log)
    with ui.phase("prepare this machine (packages, podman settings)"):
        prepare_host()
        ensure_api_service()  # the scheduler service in the controller starts nodes through it
    podman = Podman()
    with ui.phase("node image (built once, cached by content hash)"):
        os = distro(spec.images.base)
        image = ensure_images(podman, lambda builder: bake_node_image(builder, os, log, ui.event), image_namespace,
                              os=os)
    provider = LocalProvider(spec, image, podman)
    check_takeover(spec.name, cluster_release(podman, provider), os)  # before any container changes
    ensure_secrets(spec.name)
    with ui.phase("inventory"):
        write_inventory(spec, spec_path, provider.hosts(), report.inventory)
        digest = rollout_digest(report.inventory)
    with ui.phase("start nodes (podman, systemd)"):
        _pause_service(podman, spec)
        _settle(podman, spec)
        resting = _powered_down_nodes(provider)
        # a powered-down node that already has this rollout stays down (like an instance
        # that does not exist yet on AWS): only stale ones boot to be rolled out
        current = frozenset(n for n in resting if _read_stopped(podman, n, DIGEST_FILE) == digest)
        _hold(podman, resting - current)
        hosts = provider.provision(keep_stopped=current)
    with ui.phase("roll out (Ansible)"):
        # never the powered-down nodes left out above
        up_hosts = [h for h in hosts if h.name not in current]
        report.rollout = roll_out_changed(report.inventory, up_hosts, log, ui, digest, full_rollout,
                                          extravars={"scheduler_service_paused": True})
        report.rollout.skipped_hosts += len(current)
        ceph_play = next((sec for play, sec in report.rollout.plays.items() if play.startswith(CEPH_PLAY)), None)
        if ceph_play is not None:
            ui.note(f"Ceph play of the rollout: {ceph_play:.1f} s")
    with ui.phase("power down dynamic nodes"):
        _rest(podman, provider, spec, hosts)
    with ui.phase("scheduler service"):
        for controller in controller_names(spec):  # the one beside the slurmctld in control leads
            podman.exec(controller, ["systemctl", "start", SERVICE_UNIT], timeout=60)
    if validate is not None:
        with ui.phase("validate the live cluster (testinfra)"):
            validate(report.inventory)
    login = next(h for h in hosts if h.role is HostRole.LOGIN)
    report.login = login.name
    if run_sample_job and spec.users:
        with ui.phase(f"sample job as {spec.users[0].name}"):
            home = f"{spec.storage.nas.mounts.home.rstrip('/')}/{spec.users[0].name}"
            report.job_output = sample_job(login, spec.users[0].name, home)
    return report


def _read_stopped(podman: Podman, node: str, path: str) -> str:
    """A file of a container that is not running (`podman cp` streams a tar archive)."""
    res = subprocess.run(["podman", "cp", f"{node}:{path}", "-"], capture_output=True, timeout=60)
    if res.returncode != 0:
        return ""
    with tarfile.open(fileobj=io.BytesIO(res.stdout)) as tar:
        member = tar.extractfile(tar.getmembers()[0]) if tar.getmembers() else None
        return member.read().decode().strip() if member else ""


def bake_node_image(builder: str, os: Distro, log: Path, on_event: EventSink | None) -> None:
    """The image playbook on a builder container (what `ensure_images` commits)."""
    inventory = {"all": {"hosts": {builder: {"ansible_connection": "containers.podman.podman"}}}}
    run_playbook("image.yml", inventory, log, on_event, phase="image", extravars=os.image_vars())


def _powered_down_nodes(provider: LocalProvider) -> set[str]:
    """Dynamic nodes that are powered down now, or will be new: they rest after the rollout."""
    existing = {i.node: i for i in provider.list_instances()}
    return {h.name for h in provider.hosts() if h.dynamic and
            (h.name not in existing or existing[h.name].state is not InstanceState.RUNNING)}


def _pause_service(podman: Podman, spec: Cluster) -> None:
    """The scheduler service stops machines Slurm sees as powered down: it pauses while
    `up` boots those nodes for the rollout, and starts again once they rest."""
    for controller in controller_names(spec):
        info = podman.container(controller)
        if info is not None and info.is_running:
            podman.exec(controller, ["systemctl", "stop", SERVICE_UNIT], check=False, timeout=60)


def _settle(podman: Podman, spec: Cluster, timeout: float = 45) -> None:
    """Wait until no node is changing state: a start or stop the paused service asked the
    podman API for still completes after the service is gone (seen: a node powering down
    while `up` rolled it out)."""
    deadline, previous = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        nodes = podman.containers(f"{LABEL}={spec.name}")
        states = {c.name: c.state for c in nodes}
        if states == previous and not any(c.state == "stopping" and not c.is_dead for c in nodes):
            return
        previous = states
        time.sleep(2)


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
    # every dynamic node loses its hold, whatever its state: a held node the service
    # starts later would never register
    running = {i.node for i in provider.list_instances() if i.state is InstanceState.RUNNING}
    for host in hosts:
        if host.dynamic and host.name in running:
            podman.exec(host.name, ["rm", "-f", HOLD_FILE], check=False)
    provider.stop(names)


def _is_restable(state: str) -> bool:
    """Powered down or on its way, or up without jobs (sinfo %T: idle~, idle%, idle, down*...)."""
    return state.endswith(("~", "%")) or state.rstrip("*") in ("idle", "down")


def slurm_states(podman: Podman, spec: Cluster) -> dict[str, str]:
    """node -> Slurm state (sinfo -N: 'idle', 'idle~' when powered down, ...)."""
    res = podman.exec(controller_name(spec), ["sinfo", "-N", "-h", "-o", "%N %T"], check=False, timeout=20)
    states = {}
    for line in res.stdout.splitlines():
        node, _, state = line.partition(" ")
        states[node] = state
    return states


def cluster_release(podman: Podman, provider: LocalProvider) -> str | None:
    """The Slurm release that ran this cluster: the marker next to its state on this
    machine's NAS directory, else the oldest Slurm among the images its containers run
    (their controller holds the accounting database); None for a new cluster."""
    mount = provider.spec.storage.nas.mounts.slurm_state
    source = next(src for src, target in provider.nas_binds() if target == mount)
    relative = Path(state_save_location(provider.spec)).relative_to(mount)
    found = state_release(source / relative)
    if found is not None:
        return found
    images = {c.image for c in podman.containers(f"{LABEL}={provider.spec.name}")}
    releases = [slurm_version(podman, image) or BEFORE_MARKER for image in sorted(images)]
    return min(releases, key=release_tuple, default=None)
