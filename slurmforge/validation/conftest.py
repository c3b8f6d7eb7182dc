"""The live-cluster validation suite: testinfra checks usable against any slurmforge
inventory (`slurmforge validate --inventory DIR`, which runs pytest on this directory with
--inventory DIR)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
import testinfra  # type: ignore[import-untyped]
import testinfra.host  # type: ignore[import-untyped]
from testinfra.backend.base import BaseBackend, CommandResult  # type: ignore[import-untyped]

from slurmforge.connection import becomes_root, close_control, container, ssh_argv
from slurmforge.contract import JWT_KEY_FILE
from slurmforge.hosts import Host, HostRole, controller_name
from slurmforge.image import RECORD
from slurmforge.render import MAIL_PROGRAM
from slurmforge.spec import Cluster
from slurmforge.spec.models import Ceph
from slurmforge.validation import CURRENT_IMAGE
from slurmforge.validation.facts import (
    LISTENING,
    HostFacts,
    active,
    ask,
    enabled,
    found_wanted,
    in_parallel,
    mounted,
    read,
    restart,
    shell,
    stat,
)
from slurmforge.validation.problems import tell

SSH_TIMEOUT = 600
"""One command's limit (the slowest check's command takes seconds)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--inventory", action="store", default=None, help="a slurmforge inventory directory")
    parser.addoption(CURRENT_IMAGE, action="store", default=None,
                     help="the inputs digest of the cluster's current node image")


class InventorySsh(BaseBackend):  # type: ignore[misc]
    """testinfra over ssh exactly as the inventory reaches the host (slurmforge.connection:
    user, port, key, common args such as AWS's ProxyJump through the login node, become),
    one shared connection per host for the whole run."""

    NAME = "ssh"

    def __init__(self, host: Host, control_dir: Path | None) -> None:
        super().__init__(host.name, sudo=becomes_root(host))
        self.argv = ssh_argv(host, control_dir)

    def get_sudo_command(self, command: str, sudo_user: str | None) -> str:
        return str(self.quote("sudo -n /bin/sh -c %s", command))  # never wait for a password

    def command(self, command: str, *args: str) -> list[str]:
        """The local argument list that runs `command` (testinfra's %s quoting) on the host."""
        return [*self.argv, "--", self.get_command(command, *args)]

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        argv = self.command(command, *args)
        proc = subprocess.run(argv, capture_output=True, timeout=SSH_TIMEOUT, check=False)
        if proc.returncode == 255:  # ssh's own failure, not the command's
            raise RuntimeError(f"cannot reach {self.hostname} over ssh: {proc.stderr.decode(errors='replace')[-300:]}")
        return self.result(proc.returncode, self.encode(argv[-1]), proc.stdout, proc.stderr)


class NamedHost(testinfra.host.Host):  # type: ignore[misc]
    """testinfra's Host whose failed command is one line: the host, the command, its exit
    code and last line of output, what was wanted."""

    _host_cache: ClassVar[dict[Any, Any]] = {}

    def run_expect(self, expected: list[int], command: str, *args: str, **kwargs: Any) -> CommandResult:
        __tracebackhide__ = True
        out = self.run(command, *args, **kwargs)
        if out.rc not in expected:
            said = (out.stderr.strip() or out.stdout.strip()).splitlines()[-1:] or [""]
            raise AssertionError(found_wanted(self.backend.hostname, f"`{out.command.decode(errors='replace')}`",
                                              f"exit {out.rc} {said[0][-200:]}".strip(),
                                              "exit " + " or ".join(map(str, expected))))
        return out

    def check_output(self, command: str, *args: str, **kwargs: Any) -> str:
        __tracebackhide__ = True
        return str(self.run_expect([0], command, *args, **kwargs).stdout.rstrip("\r\n"))


def connect(host: Host, control_dir: Path | None = None) -> testinfra.host.Host:
    """podman exec for a local container (fastest), ssh as the inventory says otherwise."""
    local = container(host)
    if local:
        return NamedHost.get_host(f"podman://{local}")
    backend = InventorySsh(host, control_dir)
    node = NamedHost(backend)
    backend.set_host(node)
    return node


@dataclass
class CheckedCluster:
    """The cluster the checks judge, as its inventory describes it and reached through the
    inventory's own connections (podman exec, or SSH through the jump host). Not the test
    harness's podman driver of the local cluster (tests/harness/live.py: LiveCluster)."""

    spec: Cluster
    hosts: list[Host]
    control_dir: Path | None = None
    """Where the ssh connections shared by the run's commands live."""
    inventory: Path | None = None

    @property
    def up_hosts(self) -> list[Host]:
        """Slurm hosts that are running now (dynamic pool nodes rest powered down);
        Ceph hosts are not Slurm nodes (see ceph_hosts)."""
        return [h for h in self.hosts if not h.dynamic and h.role is not HostRole.CEPH]

    @property
    def ceph_hosts(self) -> list[Host]:
        return [h for h in self.hosts if h.role is HostRole.CEPH]

    def by_role(self, role: HostRole) -> list[Host]:
        return [h for h in self.up_hosts if h.role is role]

    def controller(self) -> testinfra.host.Host:
        return self.connect(next(h for h in self.hosts if h.name == controller_name(self.spec)))

    def connect(self, host: Host) -> testinfra.host.Host:
        return connect(host, self.control_dir)


@pytest.fixture(scope="session")
def live(request: pytest.FixtureRequest) -> Iterator[CheckedCluster]:
    from slurmforge.inventory import read_inventory

    inventory = request.config.getoption("--inventory")
    if not inventory:
        pytest.skip("no --inventory given: the live-cluster suite needs a running cluster")
    spec, hosts = read_inventory(Path(inventory))
    with tempfile.TemporaryDirectory(prefix="sf-ssh-") as control:
        yield CheckedCluster(spec, hosts, Path(control), Path(inventory))
        for host in hosts:  # end the shared connections this run opened
            if not container(host):
                subprocess.run(close_control(ssh_argv(host, Path(control))), capture_output=True, check=False)


DAEMONS = ("munge", "slurmctld", "slurmd", "slurmdbd", "mariadb", "sackd", "slurmrestd", "prometheus",
           "prometheus-alertmanager")
"""The daemons whose place the checks judge (test_daemons_run_only_where_they_belong)."""
RESTARTED = ("munge", "slurmctld", "slurmd", "slurmdbd", "mariadb", "sackd", "slurmrestd")
"""Daemons that must come back by themselves after a crash, where they run."""
MUNGE_KEY = "/etc/munge/munge.key"
SLURM_CONF = "/etc/slurm/slurm.conf"
SACKD_CONF = "/run/slurm/conf/slurm.conf"
LMODRC = "/etc/lmod/lmodrc.lua"
MODULES = "bash -lc 'module -t avail 2>&1'"
MODULES_WALKED = "bash -lc 'module -t --ignore_cache avail 2>&1'"
PACKAGES = "dpkg-query -W -f='${Package} ${Version}\\n' | sha256sum | cut -d' ' -f1"
FAILED_UNITS = "systemctl list-units --failed --no-legend --plain"
LOGIN_SINFO = "env -u SLURM_CONF sinfo -h -o %P"
DMA_CONF = "/etc/dma/dma.conf"
SENDMAIL = "/usr/sbin/sendmail"


def ceph_commands(ceph: Ceph) -> list[str]:
    """The ceph commands whose JSON the Ceph checks judge (asked on the first Ceph host)."""
    return ["health", "osd stat", f"fs get {ceph.fs_name}", "osd pool ls detail"]


@dataclass(frozen=True)
class SharedPath:
    """A path every reader sees as the writer does: proven by a probe file."""

    path: str
    writer: Host
    readers: list[Host]
    content: str

    @property
    def probe(self) -> str:
        return f"{self.path.rstrip('/')}/.slurmforge-validate-{self.writer.name}"


def shared_paths(live: CheckedCluster) -> list[SharedPath]:
    """Home and software on every Slurm host, Slurm's state on every controller, CephFS
    (with storage.ceph) on every Slurm host."""
    mounts = live.spec.storage.nas.mounts
    hosts = live.up_hosts
    controllers = live.by_role(HostRole.CONTROLLER)
    paths = [SharedPath(mounts.home, hosts[0], hosts[1:], "shared"),
             SharedPath(mounts.software, hosts[0], hosts[1:], "shared"),
             SharedPath(mounts.slurm_state, controllers[0], controllers[1:], "shared")]
    if live.spec.storage.ceph is not None:
        paths.append(SharedPath(live.spec.storage.ceph.mount, hosts[0], hosts, "ceph"))
    return paths


def ceph_units(live: CheckedCluster, index: int, host: Host) -> list[str]:
    """The Ceph daemons the index-th Ceph host runs (its OSDs; the first also mon, mgr, mds)."""
    spec = live.spec.storage.ceph
    assert spec is not None
    units = [f"ceph-osd@{index * spec.osds_per_host + j}" for j in range(spec.osds_per_host)]
    if index == 0:
        units += [f"ceph-mon@{host.name}", f"ceph-mgr@{host.name}", f"ceph-mds@{host.name}", "ceph.target"]
    return units


def host_items(live: CheckedCluster, host: Host) -> list[tuple[str, str]]:
    """Everything the checks read from this host, as facts.host_script's items."""
    if host.role is HostRole.CEPH:
        index = live.ceph_hosts.index(host)
        units = ceph_units(live, index, host)
        ceph = live.spec.storage.ceph
        asked = [shell(f"ceph {c}", f"timeout 60 ceph {c} -f json 2>/dev/null") for c in ceph_commands(ceph)] \
            if ceph is not None and index == 0 else []
        return [LISTENING, *(active(u) for u in units), *(enabled(u) for u in units), *asked]
    items = [LISTENING, read(RECORD), *(active(d) for d in DAEMONS), *(restart(d) for d in RESTARTED), stat(MUNGE_KEY),
             stat(JWT_KEY_FILE), shell("failed units", FAILED_UNITS), read(LMODRC), shell("modules", MODULES),
             shell("modules walked", MODULES_WALKED), shell("packages", PACKAGES), stat(SLURM_CONF)]
    if host.role is HostRole.LOGIN:
        items += [stat(SACKD_CONF), shell("sinfo", LOGIN_SINFO)]
    if host.name == controller_name(live.spec):
        items += [shell("scontrol show config", "scontrol show config"), stat(MAIL_PROGRAM),
                  shell("bsd-mailx", "command -v bsd-mailx"), shell("sendmail", f"readlink -f {SENDMAIL}"),
                  read(DMA_CONF)]
    for shared in shared_paths(live):
        if host in shared.readers:  # the probe first: it mounts an automount
            items += [read(shared.probe), mounted(shared.path)]
    if (ceph := live.spec.storage.ceph) is not None:
        from slurmforge.ceph import client_name

        items += [read("/etc/fstab"), stat("/etc/ceph/ceph.client.admin.keyring"),
                  stat(f"/etc/ceph/ceph.client.{client_name(ceph)}.keyring")]
        if host is live.up_hosts[0]:  # the client key's caps: refused anything beyond the file system
            items.append(shell("ceph pool create", f"timeout 30 ceph --id {client_name(ceph)} osd pool create "
                                                   "slurmforge-validate-probe"))
    return items


@dataclass
class Facts:
    """Every host's answers (facts.HostFacts by host name), and what writing the shared
    paths' probes said (by probe path: None when written)."""

    hosts: dict[str, HostFacts]
    probes_written: dict[str, str | None]

    def __getitem__(self, host: str) -> HostFacts:
        return self.hosts[host]

    def reachable(self, hosts: list[Host]) -> list[Host]:
        """The hosts whose answers came back (unreachable names the others)."""
        return [h for h in hosts if self.hosts[h.name].error is None]

    def unreachable(self, hosts: list[Host]) -> list[str]:
        """One line per host whose commands could not run: a check judges the others."""
        return [f"{h.name}: {self.hosts[h.name].error}" for h in hosts if self.hosts[h.name].error is not None]


def write_probes(live: CheckedCluster, paths: list[SharedPath], remove: bool = False) -> dict[str, str | None]:
    """Write (or remove) every shared path's probe from its writer, writers in parallel."""
    by_writer: dict[str, list[SharedPath]] = {}
    for shared in paths:
        by_writer.setdefault(shared.writer.name, []).append(shared)

    def write(host: Host) -> HostFacts:
        items = [(s.probe, f"rm -f {s.probe}" if remove else f"echo {s.content} > {s.probe}")
                 for s in by_writer[host.name]]
        return ask(host.name, live.connect(host), items)

    done = in_parallel([h for h in live.hosts if h.name in by_writer], write)
    out: dict[str, str | None] = {}
    for shared in paths:
        answers = done[shared.writer.name]
        answer = answers.answers.get(shared.probe)
        out[shared.probe] = answers.error if answer is None else (None if answer.rc == 0 else answer.out.strip())
    return out


@pytest.fixture(scope="session")
def current_image(request: pytest.FixtureRequest) -> str | None:
    """The inputs digest every running host's RECORD should name (validation.image_args)."""
    found = request.config.getoption(CURRENT_IMAGE)
    return str(found) if found else None


@pytest.fixture(scope="session")
def facts(live: CheckedCluster) -> Facts:
    """Every host read once, all hosts at once (after the shared paths' probes are written)."""
    paths = shared_paths(live)
    written = write_probes(live, paths)
    try:
        hosts = in_parallel([*live.up_hosts, *live.ceph_hosts],
                            lambda h: ask(h.name, live.connect(h), host_items(live, h)),
                            lambda done, total, waiting: tell(hosts=[done, total], waiting=waiting))
    finally:
        write_probes(live, paths, remove=True)
    return Facts(hosts, written)


def probe_problems(shared: SharedPath, facts: Facts) -> list[str]:
    """The writer wrote the path's probe, and every reader reads it back."""
    if (why := facts.probes_written[shared.probe]) is not None:
        return [found_wanted(shared.writer.name, f"writing {shared.probe}", why or "a failure", "a written file")]
    wrong = facts.unreachable(shared.readers)
    for host in facts.reachable(shared.readers):
        node = facts[host.name]
        got = node.text(f"read {shared.probe}").strip() if node.ok(f"read {shared.probe}") else "nothing"
        if got != shared.content:
            wrong.append(found_wanted(host.name, f"{shared.writer.name}'s {shared.probe}", got[:80] or "nothing",
                                      f"'{shared.content}' (the same file)"))
    return wrong
