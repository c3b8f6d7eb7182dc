"""Make this machine able to run the local cluster: root, Debian packages, podman
settings (each with why it is needed, below). Idempotent."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from slurmforge.errors import HostError, NeedsRoot
from slurmforge.state_dirs import SECRETS_ROOT

log = logging.getLogger(__name__)

PACKAGES = ("podman", "runc", "debootstrap", "uidmap", "iptables")
CONTAINERS_CONF = Path("/etc/containers/containers.conf")
# (section, key, value): PID 1 is not systemd; crun 1.8 refuses the hybrid cgroup
# layout; the sandbox cannot raise limits to podman's defaults.
PODMAN_SETTINGS = (
    ("engine", "cgroup_manager", '"cgroupfs"'),
    ("engine", "runtime", '"runc"'),
    ("containers", "default_ulimits", '["nofile=20000:20000", "nproc=32768:32768"]'),
)
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# every node runs systemd, which takes several inotify instances: the kernel default of
# 128 per user is gone at ~25 containers (a second cluster, the bench) and the next
# container's systemd never finishes booting
SYSCTLS = {"fs.inotify.max_user_instances": 1024, "fs.inotify.max_user_watches": 524288}
SYSCTL_CONF = Path("/etc/sysctl.d/60-slurmforge.conf")
PROC_SYS = Path("/proc/sys")
# The local cluster writes to this machine's disk: the node image and containers (podman's
# storage), and its NAS, database and Ceph (the state root). Ceph's monitor refuses to start
# when its disk has less than mon_data_avail_crit percent free - the share an unprivileged
# user may use (statfs f_bavail), not root's reserve - and the local ceph.conf sets that to
# 1 % (templates/ceph.conf.j2); below these, `up` stops before a daemon does.
DISK_PATHS = (Path("/var/lib/containers"), SECRETS_ROOT)
MIN_FREE_BYTES = 5 * 2**30
MIN_FREE_PERCENT = 2.0


def require_root() -> None:
    if os.geteuid() != 0:
        raise NeedsRoot()


def missing_packages(packages: tuple[str, ...] = PACKAGES) -> list[str]:
    missing = []
    for name in packages:
        res = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True)
        if "install ok installed" not in res.stdout:
            missing.append(name)
    return missing


def install_packages(packages: list[str]) -> None:
    if not packages:
        return
    if shutil.which("apt-get") is None:
        raise HostError(f"missing {', '.join(packages)} and no apt-get here: install them, then re-run")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]):
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if res.returncode != 0:
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["?"]
            raise HostError(f"{' '.join(cmd[:2])} failed: {tail[0]}")


def configure_podman(path: Path = CONTAINERS_CONF) -> bool:
    """Ensure the three settings; keep everything else in the file. True if changed."""
    text = path.read_text() if path.exists() else ""
    new = text
    for section, key, value in PODMAN_SETTINGS:
        new = _set_toml_key(new, section, key, value)
    if new == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)
    return True


def _set_toml_key(text: str, section: str, key: str, value: str) -> str:
    header = f"[{section}]"
    lines = text.splitlines()
    if header not in (line.strip() for line in lines):
        return text.rstrip("\n") + ("\n\n" if text.strip() else "") + f"{header}\n{key} = {value}\n"
    out, in_section, done = [], False, False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            if in_section and not done:
                out.append(f"{key} = {value}")
                done = True
            in_section = stripped == header
        elif in_section and re.match(rf"^{re.escape(key)}\s*=", stripped):
            if not done:
                out.append(f"{key} = {value}")
                done = True
            continue
        out.append(line)
    if in_section and not done:
        out.append(f"{key} = {value}")
    return "\n".join(out) + "\n"


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (nodes install from the same place)."""
    for source in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            text = source.read_text()
        except OSError:
            continue
        for match in re.finditer(r"(?:URIs:\s*|^deb\s+(?:\[[^]]*\]\s+)?)(\S+)", text, re.M):
            uri = match.group(1)
            if uri.rstrip("/").endswith("/debian"):
                return uri.rstrip("/")
    return DEFAULT_MIRROR


def raise_kernel_limits(proc_sys: Path = PROC_SYS, conf: Path = SYSCTL_CONF) -> list[str]:
    """Raise (never lower) the SYSCTLS now and at boot; returns what was raised."""
    raised = []
    for key, want in SYSCTLS.items():
        path = proc_sys / key.replace(".", "/")
        try:
            if int(path.read_text().split()[0]) < want:
                path.write_text(f"{want}\n")
                raised.append(f"{key}={want}")
        except (OSError, ValueError) as exc:
            raise HostError(f"cannot raise {key} to {want} ({exc}); as root: sysctl -w {key}={want}") from None
    text = "# written by slurmforge: many systemd containers on one host\n" + "".join(
        f"{key} = {value}\n" for key, value in SYSCTLS.items())
    if not conf.exists() or conf.read_text() != text:
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(text)
    return raised


def disk_free(path: Path) -> tuple[int, float]:
    """(bytes, percent of the file system) an unprivileged process may still write where
    `path` is (its nearest existing parent): what Ceph's monitor measures."""
    while not path.exists():
        path = path.parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, 100.0 * st.f_bavail / st.f_blocks if st.f_blocks else 0.0


def check_disk(paths: tuple[Path, ...] = DISK_PATHS,
               free: Callable[[Path], tuple[int, float]] = disk_free) -> None:
    """HostError, one line, when a disk the local cluster writes to is too full for it to run."""
    for path in paths:
        avail, percent = free(path)
        if avail < MIN_FREE_BYTES or percent < MIN_FREE_PERCENT:
            raise HostError(
                f"the disk holding {path} has {avail / 2**30:.1f} GiB ({percent:.1f} %) free; the local "
                f"cluster needs {MIN_FREE_BYTES // 2**30} GiB and {MIN_FREE_PERCENT:g} % (below 1 % Ceph's "
                f"monitor refuses to start): free space (`podman image prune`, old clones) and run it again")


def prepare_host() -> None:
    """Everything `up --local` needs from the machine, installed or fixed idempotently."""
    require_root()
    check_disk()
    install_packages(missing_packages())
    if configure_podman():
        log.info("wrote podman settings to %s", CONTAINERS_CONF)
    for setting in raise_kernel_limits():
        log.info("raised %s", setting)
    if shutil.which("podman") is None:
        raise HostError("podman is not on PATH after installing it")
