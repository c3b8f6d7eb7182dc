"""`slurmforge up --local`: validate -> host -> image -> inventory -> nodes -> rollout
-> scheduler service -> validate the live cluster -> sample job.

What is local lives here: this machine, the node image, the containers of the fixed hosts
(head nodes, Ceph hosts, static nodes). A dynamic pool node has no container while it is
powered down: the scheduler service makes a fresh one when Slurm powers the node up, and it
joins at boot with the join program, so no rollout ever reaches it (`up` removes a stopped
one an older release left, and leaves running ones: they may run jobs). The steps every target shares are
elsewhere: the inventory (`inventory.write_inventory`), the rollout that skips current hosts
and the sample job (`slurmforge.bringup`, whose rollout `slurmforge rollout --inventory`
runs too), the validation (`validation.validate_inventory`, passed in by the CLI).

Each phase is a named step reported to a `Phases` sink (the CLI's progress display).
A spec that fails validation never starts a container.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slurmforge.bringup import (
    Phases,
    await_ready,
    fixed_hosts,
    inventory_dir,
    log_path,
    push_users,
    roll_out_changed,
    sample_job,
)
from slurmforge.contract import SERVICE_UNIT, settings_json
from slurmforge.distro import release_tuple
from slurmforge.drain import REBUILD, Drain, JobPolicy, controller_client, drain, finish
from slurmforge.fleet import controller as controller_host
from slurmforge.hosts import HostRole, controller_name, controller_names
from slurmforge.inventory import JOIN, RENDERED, write_inventory
from slurmforge.local.api import ensure_api_service
from slurmforge.local.host import prepare_host
from slurmforge.local.image_cache import NAMESPACE, ensure_images, slurm_version
from slurmforge.local.podman import Podman
from slurmforge.local.provider import LABEL, LocalProvider
from slurmforge.render import state_save_location
from slurmforge.rollout import RolloutResult
from slurmforge.secrets import ensure_secrets
from slurmforge.spec import Cluster, load_spec
from slurmforge.takeover import BEFORE_MARKER, check_takeover, state_release

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
    drain_seconds: float | None = None
    """How long the jobs on drained nodes took to leave them (None: nothing was drained)."""
    requeued: list[int] = field(default_factory=list)


def up(spec_path: Path, ui: Phases, run_sample_job: bool = True,
       validate: Callable[[Path], None] | None = None, image_namespace: str = NAMESPACE,
       full_rollout: bool = False, drains: list[Drain] | None = None, policy: JobPolicy | None = None) -> UpReport:
    """`drains`: the plan's nodes to drain before their machines are made again or removed
    (slurmforge.drain); `policy`: what happens to their jobs."""
    spec = load_spec(spec_path)  # SpecError here: nothing was created
    log = log_path(spec.name, "up")
    report = UpReport(spec.name, inventory_dir(spec), log)
    with ui.phase("prepare this machine (packages, podman settings)"):
        prepare_host()
    podman = Podman()
    with ui.phase("node image (built once, cached by content hash)"):
        os = spec.images.distro()
        image = ensure_images(podman, log, image_namespace, os=os, on_wait=ui.note, on_step=ui.event)
        # the scheduler service in the controller starts nodes through it: one that cannot is replaced
        ensure_api_service(probe_image=image)
    provider = LocalProvider(spec, image, podman, join_program=report.inventory / RENDERED / JOIN)
    check_takeover(spec.name, cluster_release(podman, provider), os)  # before any container changes
    ensure_secrets(spec.name)
    with ui.phase("inventory"):
        settings = provider.service_settings()
        write_inventory(spec, spec_path, provider.hosts(), report.inventory, provider_settings=settings_json(settings))
    drains = with_stale(drains or [], provider.stale_nodes())
    client = controller_client(controller_host(spec, provider.hosts())) if drains else None
    since = 0.0
    if client is not None:
        with ui.phase("drain the nodes made again or removed"):
            drained = drain(client, drains, policy or JobPolicy(), ui.note)
            report.drain_seconds, report.requeued, since = drained.seconds, drained.requeued, drained.since
    # the scheduler service keeps running throughout, as on every target: jobs go on starting
    # and ending while `up` converges the cluster, and Slurm powers nodes up and down for them
    with ui.phase("start nodes (podman, systemd)"):
        hosts = provider.provision()
    with ui.phase("roll out (Ansible)"):
        # a dynamic node joins by itself when the service makes its machine
        report.rollout = roll_out_changed(report.inventory, fixed_hosts(hosts), log, ui, full_rollout)
        ceph_play = next((sec for play, sec in report.rollout.plays.items() if play.startswith(CEPH_PLAY)), None)
        if ceph_play is not None:
            ui.note(f"Ceph play of the rollout: {ceph_play:.1f} s")
        if report.rollout.ok and report.rollout.skipped_hosts < len(fixed_hosts(hosts)):
            push_users(report.inventory, ui)
    if client is not None and report.rollout.ok:
        with ui.phase("resume the rebuilt nodes"):
            finish(client, drains, since, ui.note)
    with ui.phase("scheduler service"):
        # running already unless a rollout skipped its controllers and it had stopped; the
        # one beside the slurmctld in control leads
        for controller in controller_names(spec):
            podman.exec(controller, ["systemctl", "start", SERVICE_UNIT], timeout=60)
    with ui.phase("the cluster answers (Ceph, every static node in service)"):
        await_ready(hosts, controller_host(spec, hosts), ui)
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


def with_stale(drains: list[Drain], stale: list[str]) -> list[Drain]:
    """The plan's drains, and the static nodes `provision` would make again that the plan does not
    name (a new node image, another container description): drained too, never made again
    under their jobs."""
    named = {n for d in drains for n in d.nodes}
    extra = tuple(n for n in stale if n not in named)
    return drains + ([Drain(extra, "made again (a new node image or container description)", REBUILD)]
                     if extra else [])


SINFO_NODES = ("sinfo", "-N", "-h", "-o", "%N %T %v")
"""Every node (once per partition), its state and its slurmd's version as it registered
(sinfo(1): `%v` "the version of the running slurmd daemon"; N/A before one has)."""


def sinfo_nodes(podman: Podman, spec: Cluster) -> str:
    """SINFO_NODES' answer on the controller ('' when it does not answer): node_states and
    node_versions read it."""
    return podman.exec(controller_name(spec), list(SINFO_NODES), check=False, timeout=20).stdout


def node_states(sinfo: str) -> dict[str, str]:
    """SINFO_NODES' answer -> node -> state ('idle', 'idle~' when powered down, ...)."""
    return {cols[0]: cols[1] for cols in (line.split() for line in sinfo.splitlines()) if len(cols) >= 2}


def node_versions(sinfo: str) -> dict[str, str]:
    """SINFO_NODES' answer -> node -> its slurmd's version, for the nodes whose slurmd registered."""
    return {cols[0]: cols[2] for cols in (line.split() for line in sinfo.splitlines())
            if len(cols) >= 3 and cols[2][:1].isdigit()}


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
