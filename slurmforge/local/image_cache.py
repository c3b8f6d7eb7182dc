"""The identical OS image, built once and cached.

base:  debootstrap of the node distribution (Debian 13) (systemd, python3), imported into
       podman: the local stand-in for Debian's official AMI.
node:  the image pipeline (slurmforge.image: the image playbook - roles' install tasks
       only, no cluster secrets or config - run by build.sh with Debian's ansible-core) in a
       builder container from the base, committed. The AWS build instance runs the same.

Both are tagged with a hash of what went into them, so a cached image is reused
exactly when nothing that built it changed.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os as os_
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from slurmforge.distro import DEBIAN_13, Distro
from slurmforge.errors import ProvisionError
from slurmforge.image import (
    BUILD_SCRIPT,
    IMAGE_PLAYBOOK,
    PACKAGES,
    RECORD,
    WORKDIR,
    image_key,
    prepare_inputs,
    read_record,
)
from slurmforge.local.host import debian_mirror
from slurmforge.local.podman import Podman, run_lines
from slurmforge.package_data import root as package_root
from slurmforge.progress import Progress
from slurmforge.rollout import count_plays

log = logging.getLogger(__name__)

NAMESPACE = "slurmforge"  # image names: localhost/<namespace>-base, -node (bench uses its own)
BASE_PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3", "python3-apt", "ca-certificates",
                 "iproute2", "procps", "sudo", "less", "util-linux")
# Nodes are privileged containers: the host's udev owns its devices, and a container's
# `udevadm trigger` at boot (systemd-udev-trigger) would replay every host device's events.
MASKED_UNITS = ("systemd-udevd.service", "systemd-udevd-control.socket", "systemd-udevd-kernel.socket",
                "systemd-udev-trigger.service", "systemd-udev-settle.service",
                "getty@tty1.service", "console-getty.service", "systemd-timesyncd.service",
                "systemd-remount-fs.service", "systemd-modules-load.service",  # no kernel modules in a container
                "sys-kernel-config.mount", "sys-kernel-debug.mount")


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:12]


def base_tag(namespace: str = NAMESPACE, os: Distro = DEBIAN_13) -> str:
    digest = _digest([os.suite.encode(), " ".join(BASE_PACKAGES).encode(), " ".join(MASKED_UNITS).encode()])
    return f"localhost/{namespace}-base:{digest}"


def node_tag(base: str, namespace: str = NAMESPACE, root: Path | None = None, os: Distro = DEBIAN_13) -> str:
    """The base image's tag and the image pipeline's change key (slurmforge.image.image_key:
    what the build reads, the AMI's key too): a rollout's configuration rebuilds nothing."""
    return f"localhost/{namespace}-node:{_digest([base.encode(), image_key(os, root=root).encode()])}"


OnStep = Callable[[Progress], None]
"""Hears of each step of a build as its output names it (BuildSteps)."""
DEBOOTSTRAP_TIMEOUT = 1800


class BuildSteps:
    """A build's current step, read from its output's lines as they come: debootstrap's
    `I: Retrieving ...`, apt's `Unpacking`/`Setting up`, the image playbook's `PLAY [..]` and
    `TASK [..]` (counted), build.sh's own `slurmforge-image:` lines."""

    APT = re.compile(r"^(Get:\d+|Unpacking|Setting up) (\S+)")

    def __init__(self, on_step: OnStep | None, plays_total: int = 0) -> None:
        self.on_step = on_step
        self.progress = Progress(plays_total=plays_total)

    def __call__(self, line: str) -> None:
        step = self.read(line.strip())
        if step and self.on_step is not None:
            self.on_step(self.progress)

    def read(self, line: str) -> bool:
        """True when the line starts another step (self.progress says which)."""
        shown = self.progress
        if found := re.match(r"^(PLAY|TASK) \[(.*)\]", line):
            if found.group(1) == "PLAY":
                shown.plays_done += bool(shown.play)
                shown.play, shown.task = found.group(2), ""
            else:
                shown.task, shown.tasks_done = found.group(2), shown.tasks_done + 1
            return True
        task = ""
        if line.startswith(("I: ", "slurmforge-image: ")):
            task = line.split(": ", 1)[1][:120]
        elif found := self.APT.match(line):
            task = "apt-get update" if found.group(1).startswith("Get:") else \
                f"apt: {found.group(1).lower()} {found.group(2)}"
        if task:  # outside the playbook (apt's lines, the script's own)
            self.progress = Progress(task=task, plays_total=shown.plays_total)
        return bool(task)


def build_base(podman: Podman, tag: str, os: Distro = DEBIAN_13, on_step: OnStep | None = None) -> None:
    if shutil.which("debootstrap") is None:
        raise ProvisionError("debootstrap is missing: apt-get install debootstrap")
    with tempfile.TemporaryDirectory(prefix="slurmforge-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
               os.suite, str(rootfs), debian_mirror()]
        code, output = run_lines(cmd, BuildSteps(on_step), DEBOOTSTRAP_TIMEOUT)
        if code != 0:
            tail = output.strip().splitlines()[-3:]
            raise ProvisionError(f"debootstrap failed: {' | '.join(tail)}")
        _prepare_rootfs(rootfs)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        podman.run(["import", "--change", "CMD=/sbin/init", "-", tag], stdin=tar.stdout)
        tar.wait()


def _prepare_rootfs(rootfs: Path) -> None:
    (rootfs / "etc/machine-id").write_text("")
    (rootfs / "etc/hostname").unlink(missing_ok=True)
    systemd = rootfs / "etc/systemd/system"
    for unit in MASKED_UNITS:
        link = systemd / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    # keep the image small and apt quiet in the builder
    for path in (rootfs / "var/cache/apt/archives").glob("*.deb"):
        path.unlink()
    (rootfs / "etc/apt/apt.conf.d/90slurmforge").write_text(
        'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n')


SLURM_VERSION_LABEL = "slurmforge.slurm-version"
"""The node image's label holding the exact Slurm version its packages installed."""
BUILD_TIMEOUT = 3600


def build_node(podman: Podman, base: str, tag: str, log_path: Path, os: Distro = DEBIAN_13,
               on_step: OnStep | None = None) -> None:
    """The image pipeline (slurmforge.image) in a builder container from the base: its
    inputs copied to WORKDIR, build.sh run there - what the AWS build instance runs - then
    committed as the node image, labelled with the Slurm version the build recorded."""
    builder = f"slurmforge-image-builder-{tag.rsplit(':', 1)[-1]}"  # two builds never share one
    podman.remove_container(builder)
    podman.run(["run", "-d", "--name", builder, "--hostname", builder, base, "sleep", "infinity"])
    try:
        with tempfile.TemporaryDirectory(prefix="slurmforge-image-") as tmp:
            inputs = Path(tmp) / "inputs"
            prepare_inputs(inputs, os)
            record = run_build(podman, builder, inputs, log_path, os, on_step)
        podman.run(["commit", "--change", "CMD=/sbin/init", "--change",
                    f"LABEL {SLURM_VERSION_LABEL}={record['slurm']}", builder, tag])
    finally:
        podman.remove_container(builder)


def run_build(podman: Podman, container: str, inputs: Path, log_path: Path, os: Distro = DEBIAN_13,
              on_step: OnStep | None = None) -> dict[str, object]:
    """The image pipeline's build on a running container: `inputs` (prepare_inputs') copied to
    WORKDIR, build.sh run there, its output appended to `log_path` as it comes (each step
    passed to on_step); the build's record, checked (read_record). A failed build raises
    ProvisionError with its telling line."""
    podman.run(["cp", str(inputs), f"{container}:{WORKDIR}"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    steps = BuildSteps(on_step, count_plays(package_root() / IMAGE_PLAYBOOK))  # what prepare_inputs copied
    with log_path.open("a") as log_file:
        def line(text: str) -> None:
            log_file.write(text + "\n")
            steps(text)

        code, output = podman.exec_lines(container, ["bash", f"{WORKDIR}/{BUILD_SCRIPT}"], line,
                                         timeout=BUILD_TIMEOUT)
    if code != 0:
        tail = [line for line in output.splitlines() if line.strip()]
        why = next((line for line in reversed(tail) if line.startswith(("slurmforge-image:", "fatal:"))),
                   tail[-1] if tail else f"exit {code}")
        raise ProvisionError(f"node image build failed: {why.strip()[:300]} (log: {log_path})")
    return read_record(podman.exec(container, ["cat", RECORD]).stdout,
                       podman.exec(container, ["cat", PACKAGES]).stdout, os)


IMAGE_LOCK = Path("/run/lock/slurmforge-image.lock")


def ensure_images(podman: Podman, log_path: Path, namespace: str = NAMESPACE,
                  lock: Path = IMAGE_LOCK, os: Distro = DEBIAN_13,
                  on_wait: Callable[[str], None] | None = None, on_step: OnStep | None = None) -> str:
    """The node image's tag, building base and node images only when missing (each step of
    the build passed to on_step). One build at a time on this machine: a second `up` waits
    for the first - saying once, through on_wait, whose build it waits for - and then reuses
    its image."""
    base = base_tag(namespace, os)
    node = node_tag(base, namespace, os=os)
    if podman.image_exists(base) and podman.image_exists(node):
        return node
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a+") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held.seek(0)
            holder = held.read().strip() or "another slurmforge"
            if on_wait is not None:
                on_wait(f"waiting for the node image build of {holder} on this machine (lock {lock}); "
                        "this one then uses it")
            if on_step is not None:
                on_step(Progress(task=f"waiting for {holder.split(',')[0]}'s build to end (lock {lock})"))
            fcntl.flock(held, fcntl.LOCK_EX)
        held.truncate(0)  # who builds, for the next `up` that waits
        held.write(f"{holder_text(node)}\n")
        held.flush()
        if not podman.image_exists(base):
            log.info("building base image %s (debootstrap)", base)
            build_base(podman, base, os, on_step)
        if not podman.image_exists(node):
            log.info("building node image %s (the image pipeline)", node)
            build_node(podman, base, node, log_path, os, on_step)
            prune_older(podman, node)
            prune_older(podman, base)
        held.truncate(0)
    return node


def holder_text(tag: str) -> str:
    """What the image lock says about the build holding it: `slurmforge pid 4242, since 12:03:07, for <tag>`."""
    return f"slurmforge pid {os_.getpid()}, since {time.strftime('%H:%M:%S')}, for {tag}"


def image_record(podman: Podman, tag: str) -> str:
    """The node image's RECORD as it holds it ('' when it has none): read from a throwaway
    container of it, no network."""
    return podman.run(["run", "--rm", "--network", "none", "--entrypoint", "cat", tag, RECORD], check=False)


def slurm_version(podman: Podman, tag: str) -> str:
    """The exact Slurm version a node image holds (its label; '' for an image built before
    slurmforge recorded it, which were all Debian 12 images with Slurm 22.05)."""
    rows = podman.json(["image", "inspect", tag])
    labels = ((rows[0].get("Config") or {}).get("Labels") or {}) if rows else {}
    return str(labels.get(SLURM_VERSION_LABEL, ""))


def purge_images(podman: Podman, namespace: str = NAMESPACE) -> list[str]:
    """Remove the local target's own cached images - every tag of its base and node
    repositories - that no container uses (`podman rmi` without --force refuses those: another
    cluster's image stays). Nothing else: not the user's images, not other tools' caches. The
    tags removed."""
    removed = []
    for repository in (f"localhost/{namespace}-base", f"localhost/{namespace}-node"):
        rows = podman.json(["images", "--format", "json", "--filter", f"reference={repository}"])
        tags = {name for row in rows for name in (row.get("Names") or []) if name.rsplit(":", 1)[0] == repository}
        removed += [tag for tag in sorted(tags) if podman.remove_image(tag)]
    return removed


def prune_older(podman: Podman, current: str) -> None:
    """Remove the other tags of `current`'s repository (1.4 GB each, one per change of an
    install task) — but never one a container still uses: `podman rmi` without --force
    refuses those (a cluster not yet brought up again keeps its image)."""
    repository = current.rsplit(":", 1)[0]
    rows = podman.json(["images", "--format", "json", "--filter", f"reference={repository}"])
    tags = {name for row in rows for name in (row.get("Names") or []) if name.rsplit(":", 1)[0] == repository}
    for tag in sorted(tags - {current}):
        if podman.remove_image(tag):
            log.info("removed older image %s", tag)
