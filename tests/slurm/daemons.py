"""The node image's slurmctld on a rendered config, in a judge container (tests/judge.py).

Each rendered config runs in its own container from the node image, with a private munged
and a throwaway key, files in a temp dir under /tmp (bind-mounted, same path inside). The
config is adapted (see `adapt_for_tmp`) only where running there needs it: host, user,
paths, ports, munge socket. The container's /etc/hosts and /etc/group get the spec's node
names and groups, as the rollout gives a real controller. Removing the container ends
every daemon in it.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from slurmforge.contract import JOIN_PROGRAM
from slurmforge.hosts import controller_names
from slurmforge.node.program import JoinSettings, render_join
from slurmforge.spec import Cluster
from slurmforge.spec.nodes import node_names
from slurmforge.spec.routing import JOB_SUBMIT_SCRIPT
from tests.judge import Judge, node_image

NODES_READY_SOURCE = Path(__file__).resolve().parents[2] / "roles/slurm_controller/files/slurmforge-nodes-ready"
START_TIMEOUT = 30.0
COMMAND_TIMEOUT = 15
AS_RENDERED = ("gres.conf", "cgroup.conf", JOB_SUBMIT_SCRIPT)
"""Files slurmctld reads next to slurm.conf, used as rendered."""
# A judge container has no cgroup hierarchy of its own to give jobs: with a slurmd in it,
# jobs are found and confined by process instead. These settings only decide how a job's
# processes are tracked on the node; scheduling, priority and preemption stay as rendered,
# and so does when the Prolog runs (Alloc: what the rendered Contain implies, without the
# cgroup container).
SLURMD_OVERRIDE = {"ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none",
                   "JobAcctGatherType": "jobacct_gather/none", "PrologFlags": "Alloc"}


PORT_RANGE = range(20000, 32000)
"""Ports handed to test daemons: below Linux's ephemeral range (32768 and up), so no
outgoing connection in the judge's network namespace can hold one when a daemon binds it."""
_ports = itertools.count(random.randrange(len(PORT_RANGE)))


def free_port() -> int:
    """A port no other daemon of this test run was given and no outgoing connection takes.

    The daemons listen in the judge's network namespace, not this process's, so a port
    this process finds free says nothing about the judge: an ephemeral port free here was
    held there by a connection (the CI failure "Unable to bind listen port"). Ports come
    from PORT_RANGE in turn, from a random start so two test runs on one machine do not
    walk the same sequence, and each is still checked free here."""
    for _ in range(len(PORT_RANGE)):
        port = PORT_RANGE[next(_ports) % len(PORT_RANGE)]
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {PORT_RANGE.start}-{PORT_RANGE.stop - 1}")


@dataclass(frozen=True)
class RunDir:
    """Where one slurmctld run keeps everything."""

    root: Path
    conf: Path
    state: Path
    ctld_log: Path
    ctld_pid: Path
    ctld_out: Path
    munge_socket: Path
    munge_key: Path
    munge_out: Path
    jwt_key: Path
    power_stub: Path
    nodes_ready: Path
    slurmd_spool: Path
    slurmd_log: Path
    slurmd_out: Path

    @classmethod
    def create(cls) -> RunDir:
        # munged refuses a socket whose directories are not searchable by everyone, and
        # pytest's tmp_path sits under a 0700 directory: use a 0755 dir of our own in /tmp
        root = Path(tempfile.mkdtemp(prefix="slurmforge-slurmctld-"))
        root.chmod(0o755)
        (root / "state").mkdir()
        # AuthAltParameters' key: slurmctld and slurmdbd refuse to start without it
        jwt_key = root / "jwt_hs256.key"
        jwt_key.write_bytes(secrets.token_bytes(32))
        jwt_key.chmod(0o600)
        return cls(root=root, conf=root / "slurm.conf", state=root / "state", ctld_log=root / "slurmctld.log",
                   ctld_pid=root / "slurmctld.pid", ctld_out=root / "slurmctld.out",
                   munge_socket=root / "munge.socket", munge_key=root / "munge.key", munge_out=root / "munged.out",
                   jwt_key=jwt_key, power_stub=root / "power-stub", nodes_ready=root / "slurmforge-nodes-ready",
                   slurmd_spool=root / "spool", slurmd_log=root / "slurmd.log", slurmd_out=root / "slurmd.out")

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# The backup controller a spec may name does not run here. Its address must not be this
# host's: Linux routes 0.0.0.0/8 and 127/8 to the judge itself, where slurmctld asking
# itself for control raced its own listener ("Insane message length"). TCP to a multicast
# address fails in the kernel at once (tcp_v4_connect: ENETUNREACH), on every network.
BACKUP_ADDRESS = "224.0.0.1"


def adapt_for_tmp(rendered: str, run: RunDir, host: str, slurmctld_port: int, slurmd_port: int,
                  settings: Mapping[str, str] | None = None, slurmdbd_port: int | None = None,
                  slurmd: bool = False) -> str:
    """The rendered slurm.conf, changed only where running in a temp dir needs it (and,
    with `slurmd`, where a slurmd in the judge container needs it).

    NodeName and PartitionName lines, and every key not named here, pass through as
    rendered (the test checks that). `settings`: more keys to set (tests/slurm/test_billing.py
    runs jobs without systemd's cgroups); `slurmdbd_port`: a slurmdbd runs in the judge
    (start_slurmdbd): AccountingStorage* and GRES billing weights stay, pointed at it.
    """
    override: dict[str, str | None] = {
        # slurmctld only starts on the host SlurmctldHost names: the judge container
        "SlurmctldHost": host,
        # the temp dir is root's
        "SlurmUser": "root",
        # state, log and pid files in the temp dir instead of /var
        "StateSaveLocation": str(run.state),
        "SlurmctldLogFile": str(run.ctld_log),
        "SlurmctldPidFile": str(run.ctld_pid),
        # free ports, so a Slurm already running on this machine is not disturbed
        "SlurmctldPort": str(slurmctld_port),
        "SlurmdPort": str(slurmd_port),
        # slurmctld and scontrol talk to the private munged, not /run/munge
        "AuthInfo": f"socket={run.munge_socket}",
        "AuthAltParameters": f"jwt_key={run.jwt_key}",
        **(settings or {}),
    }
    if slurmd:
        override |= {"SlurmdUser": "root", "SlurmdSpoolDir": str(run.slurmd_spool),
                     "SlurmdLogFile": str(run.slurmd_log), "SlurmdPidFile": str(run.root / "slurmd.pid"),
                     **SLURMD_OVERRIDE}
    only_if_rendered = {
        # power saving needs executable programs or slurmctld disables it (and skips
        # checking its settings); the service is not installed here: a no-op stub
        "ResumeProgram": str(run.power_stub),
        "SuspendProgram": str(run.power_stub),
        "ResumeFailProgram": str(run.power_stub),
        # the real program, from the role that installs it (copied into the run dir)
        "PrologSlurmctld": str(run.nodes_ready),
        # the node's health check judges a joined node's mounts and devices: none here
        "HealthCheckProgram": str(run.power_stub),
        # a backup's standby restart (tests/unit/test_ctld_standby_restart.py runs the real
        # programs): they write under slurmctld's systemd RuntimeDirectory, which is not here
        "SlurmctldPrimaryOnProg": str(run.power_stub),
        "SlurmctldPrimaryOffProg": str(run.power_stub),
    }
    # no slurmdbd runs here: slurmctld refuses AccountingStorageTRES/Enforce without it
    slurmdbd = slurmdbd_port is not None
    drop_prefix = "AccountingStorage"
    if slurmdbd_port is not None:
        drop_prefix = "\0"  # no key starts with it
        # slurmctld, sacctmgr and squeue reach the judge's slurmdbd with the private munged
        override |= {"AccountingStorageHost": host, "AccountingStoragePort": str(slurmdbd_port),
                     "AccountingStoragePass": str(run.munge_socket)}

    lines = [line if slurmdbd else without_gres_weights(line) for line in rendered.splitlines()]
    seen: set[str] = set()
    out: list[str] = []
    for line in lines:
        key = line.split("=", 1)[0] if "=" in line and not line.startswith("#") else ""
        if key.startswith(drop_prefix):
            continue
        if key == "SlurmctldHost" and key in seen:
            # a backup controller keeps its name, at an address where nothing listens: the
            # judge's slurmctld is the primary and finds no backup to hand control to
            out.append(f"{line.split('(', 1)[0]}({BACKUP_ADDRESS})")
            continue
        if key == "AuthInfo":  # the rendered options stay, the private munged's socket added
            seen.add(key)
            out.append(f"{line},{override[key]}")
            continue
        if key in override or key in only_if_rendered:
            seen.add(key)
            value = override[key] if key in override else only_if_rendered[key]
            if value is not None:
                out.append(f"{key}={value}")
            continue
        out.append(line)
    missing = [f"{k}={v}" for k, v in override.items() if k not in seen and v is not None]
    header = 1 if out and out[0].startswith("#") else 0
    return "\n".join([*out[:header], *missing, *out[header:]]) + "\n"


def adapt_slurmdbd_conf(rendered: str, run: RunDir, host: str, port: int, password: str) -> str:
    """The rendered slurmdbd.conf, changed only where running in a temp dir needs it: host,
    user, port, log and pid files, munge socket, and the password the rollout would put in
    the included file (the MariaDB in the judge: start_mariadb)."""
    override = {"DbdHost": host, "DbdPort": str(port), "SlurmUser": "root", "LogFile": str(run.root / "slurmdbd.log"),
                "PidFile": str(run.root / "slurmdbd.pid"), "AuthInfo": f"socket={run.munge_socket}",
                "AuthAltParameters": f"jwt_key={run.jwt_key}"}
    out = []
    for line in rendered.splitlines():
        key = line.split("=", 1)[0] if "=" in line and not line.startswith("#") else ""
        if line.startswith("Include "):
            out.append(f"StoragePass={password}")
        elif key not in override:
            out.append(line)
    return "\n".join([*out, *(f"{k}={v}" for k, v in override.items())]) + "\n"


def start_mariadb(judge: Judge, run: RunDir, database: str, user: str, password: str) -> None:
    """The node image's MariaDB, in the container's own /var/lib/mysql (as roles/slurmdbd
    makes it: root through the unix socket only), with the accounting database and user."""
    judge.run(["mariadb-install-db", "--user=mysql", "--datadir=/var/lib/mysql", "--skip-test-db"], timeout=120,
              check=True)
    judge.run(["install", "-d", "-o", "mysql", "/run/mysqld"], check=True)
    judge.spawn(["mariadbd", "--user=mysql", "--datadir=/var/lib/mysql"], run.root / "mariadb.out")
    deadline = time.monotonic() + START_TIMEOUT
    while judge.run(["test", "-S", "/run/mysqld/mysqld.sock"]).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"mariadbd did not start:\n{(run.root / 'mariadb.out').read_text(errors='replace')}")
        time.sleep(0.2)
    judge.run(["mariadb", "-e", f"CREATE DATABASE {database}; CREATE USER '{user}'@'localhost' IDENTIFIED BY "
               f"'{password}'; GRANT ALL ON {database}.* TO '{user}'@'localhost';"], check=True)


def start_accounting(judge: Judge, run: RunDir, spec: Cluster, rendered: Mapping[str, str]) -> None:
    """A slurmdbd in the judge on the rendered slurmdbd.conf, with the node image's MariaDB
    holding the spec's database and user (a throwaway password) and a private munged; the
    run dir's slurm.conf is the rendered one pointed at it (slurmctld is not started)."""
    password = os.urandom(12).hex()
    dbd_port = free_port()
    run.conf.write_text(adapt_for_tmp(rendered["slurm.conf"], run, judge.hostname, free_port(), free_port(),
                                      slurmdbd_port=dbd_port))
    (run.root / "slurmdbd.conf").write_text(adapt_slurmdbd_conf(rendered["slurmdbd.conf"], run, judge.hostname,
                                                                dbd_port, password))
    start_munged(judge, run)
    db = spec.accounting.database
    start_mariadb(judge, run, db.name, db.user, password)
    start_slurmdbd(judge, run)


def start_slurmdbd(judge: Judge, run: RunDir) -> None:
    """slurmdbd reads slurmdbd.conf next to slurm.conf (SLURM_CONF's directory): root's, 0600."""
    (run.root / "slurmdbd.conf").chmod(0o600)
    judge.spawn(["env", f"SLURM_CONF={run.conf}", "slurmdbd", "-D"], run.root / "slurmdbd.out")
    deadline = time.monotonic() + START_TIMEOUT
    while "slurmdbd version" not in _text(run.root / "slurmdbd.log"):
        if time.monotonic() > deadline or not judge.is_running("slurmdbd -D"):
            raise RuntimeError(f"slurmdbd did not start:\n{_text(run.root / 'slurmdbd.out')}\n"
                               f"{_text(run.root / 'slurmdbd.log')}")
        time.sleep(0.2)


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def without_gres_weights(line: str) -> str:
    """A PartitionName line without the GRES/... items of its TRESBillingWeights: GRES
    TRES exist only through AccountingStorageTRES, which needs slurmdbd (slurmctld exits
    on a weight for a TRES it lacks). tests/slurm/test_billing.py judges them with slurmdbd."""
    if not line.startswith("PartitionName=") or "TRESBillingWeights=" not in line:
        return line
    fields = []
    for part in line.split(" "):
        if part.startswith("TRESBillingWeights="):
            key, _, value = part.partition("=")
            part = f"{key}=" + ",".join(w for w in value.split(",") if not w.upper().startswith("GRES/"))
        fields.append(part)
    return " ".join(fields)


def power_stub_script() -> str:
    return "#!/bin/sh\nexit 0\n"


def etc_hosts_with(host: str, names: Iterable[str]) -> str:
    """The judge's /etc/hosts with the node names on 127.0.0.1: slurmctld resolves every
    non-CLOUD node at start and turns an unresolvable one into FUTURE (hidden), 10 s each."""
    return f"127.0.0.1 localhost {host}\n127.0.0.1 " + " ".join(names) + "\n"


def etc_group_with(image_group: str, groups: Iterable[tuple[str, int]]) -> str:
    """The image's /etc/group plus the spec's groups, so AllowGroups resolves as on a real controller."""
    have = {line.split(":", 1)[0] for line in image_group.splitlines()}
    extra = "".join(f"{name}:x:{gid}:\n" for name, gid in groups if name not in have)
    return image_group + extra


def install_etc(judge: Judge, run: RunDir, names: Iterable[str], groups: Iterable[tuple[str, int]]) -> None:
    hosts, group = run.root / "hosts", run.root / "group"
    hosts.write_text(etc_hosts_with(judge.hostname, names))
    group.write_text(etc_group_with(judge.run(["cat", "/etc/group"], check=True).stdout, groups))
    judge.run(["sh", "-c", 'cat "$1" > /etc/hosts && cat "$2" > /etc/group', "sh", str(hosts), str(group)],
              check=True)


def start_munged(judge: Judge, run: RunDir) -> None:
    run.munge_key.write_bytes(os.urandom(1024))  # a throwaway key, never the machine's
    run.munge_key.chmod(0o400)
    judge.spawn(["munged", "--foreground", f"--socket={run.munge_socket}", f"--key-file={run.munge_key}",
                 f"--pid-file={run.root / 'munged.pid'}", f"--seed-file={run.root / 'munged.seed'}",
                 f"--log-file={run.root / 'munged.log'}"], run.munge_out)
    deadline = time.monotonic() + START_TIMEOUT
    while not run.munge_socket.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"munged did not start:\n{run.munge_out.read_text(errors='replace')}")
        time.sleep(0.05)


def start_slurmctld(judge: Judge, run: RunDir) -> None:
    # -D: foreground; -c: start from empty state (the state dir is new anyway)
    judge.spawn(["slurmctld", "-D", "-c", "-f", str(run.conf)], run.ctld_out)


def scontrol(judge: Judge, run: RunDir, *args: str) -> tuple[int, str, str]:
    done = judge.run(["scontrol", *args], env={"SLURM_CONF": str(run.conf)}, timeout=COMMAND_TIMEOUT)
    return done.returncode, done.stdout, done.stderr


def wait_until_up(judge: Judge, run: RunDir) -> float:
    """Seconds until `scontrol ping` reports the controller UP; RuntimeError otherwise."""
    start = time.monotonic()
    while time.monotonic() - start < START_TIMEOUT:
        if "is UP" in scontrol(judge, run, "ping")[1]:
            return time.monotonic() - start
        if not judge.is_running("slurmctld -D"):
            break
        time.sleep(0.2)
    log = run.ctld_log.read_text(errors="replace") if run.ctld_log.exists() else "(no log file)"
    output = run.ctld_out.read_text(errors="replace") if run.ctld_out.exists() else ""
    raise RuntimeError(f"slurmctld did not come up in {judge.image}\n--- output\n{output}\n--- {run.ctld_log}\n{log}")


# scontrol -o: one record a line, `Key=value` pairs separated by spaces; a value may hold
# '=' (CfgTRES=cpu=2,mem=1G) but a key always follows whitespace.
_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][\w:/.]*)=")


def parse_oneliner(line: str) -> dict[str, str]:
    matches = list(_KEY.finditer(line))
    record = {}
    for match, after in zip(matches, [*matches[1:], None], strict=True):
        end = after.start() if after else len(line)
        record[match.group(1)] = line[match.end():end].strip()
    return record


def parse_records(text: str, key: str) -> dict[str, dict[str, str]]:
    records = [parse_oneliner(line) for line in text.splitlines() if line.strip()]
    return {r[key]: r for r in records}


@dataclass(frozen=True)
class SlurmInJudge:
    """A slurmctld (and maybe a slurmd) running in a judge container: its Slurm commands."""

    spec: Cluster
    run: RunDir
    judge: Judge

    def slurm(self, *argv: str, timeout: int = 30) -> str:
        """A Slurm command's output; AssertionError (with the end of slurmctld's log) if it fails."""
        done = self.judge.run(argv, env={"SLURM_CONF": str(self.run.conf)}, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr or done.stdout}\n{self.log()[-3000:]}"
        return done.stdout

    def log(self) -> str:
        return self.run.ctld_log.read_text(errors="replace") if self.run.ctld_log.exists() else ""


def write_config(spec: Cluster, rendered: Mapping[str, str], run: RunDir, judge: Judge, slurmd: bool = False) -> None:
    """The rendered files in the run dir (slurm.conf adapted), the programs slurm.conf
    names, and the spec's node names and groups in the judge's /etc."""
    run.conf.write_text(adapt_for_tmp(rendered["slurm.conf"], run, judge.hostname, free_port(), free_port(),
                                           slurmd=slurmd))
    for name in AS_RENDERED:
        (run.root / name).write_text(rendered[name])
    run.power_stub.write_text(power_stub_script())
    run.power_stub.chmod(0o755)
    shutil.copy2(NODES_READY_SOURCE, run.nodes_ready)
    names = [name for pool in spec.pools for name in node_names(spec, pool)]
    install_etc(judge, run, names, ((g.name, g.gid) for g in spec.groups))
    if slurmd:
        install_join_program(judge, spec, run)


def install_join_program(judge: Judge, spec: Cluster, run: RunDir) -> None:
    """The rendered join program where slurm.conf's Prolog names it, as on every node (for
    machines you own: the controllers' names on the judge's loopback)."""
    settings = JoinSettings(target="static", controllers=tuple((name, "127.0.0.1") for name in controller_names(spec)))
    program = run.root / "slurmforge-join"
    program.write_text(render_join(spec, settings))
    judge.run(["install", "-D", "-m", "0755", str(program), JOIN_PROGRAM], check=True)


def start_slurmd(judge: Judge, run: RunDir, node: str) -> None:
    """A slurmd that is `node` (the judge's /etc/hosts puts every node name on 127.0.0.1),
    in the foreground; returns once slurmctld has it idle."""
    run.slurmd_spool.mkdir(exist_ok=True)
    judge.spawn(["slurmd", "-D", "-N", node, "-f", str(run.conf)], run.slurmd_out)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if scontrol(judge, run, "show", "node", node, "-o")[1].find("State=IDLE") >= 0:
            return
        time.sleep(0.2)
    log = run.slurmd_log.read_text(errors="replace") if run.slurmd_log.exists() else "(no log file)"
    output = run.slurmd_out.read_text(errors="replace") if run.slurmd_out.exists() else ""
    raise RuntimeError(f"slurmd {node} did not come up idle\n--- output\n{output}\n--- {run.slurmd_log}\n{log}")


@contextmanager
def running_slurmctld(spec: Cluster, rendered: Mapping[str, str], judge: Judge | None = None,
                      node: str | None = None) -> Iterator[tuple[Judge, RunDir]]:
    """slurmctld up on the rendered config, in `judge` or a judge container of its own
    (removed after); RuntimeError (with its log) when it does not come up. Several may run
    in one judge (each on its own ports, munged and state). With `node`, a slurmd that is
    that node runs too, and jobs really run there."""
    own = judge is None
    box = Judge(node_image()) if judge is None else judge
    run = RunDir.create()
    try:
        write_config(spec, rendered, run, box, slurmd=node is not None)
        start_munged(box, run)
        start_slurmctld(box, run)
        wait_until_up(box, run)
        if node is not None:
            start_slurmd(box, run, node)
        yield box, run
    finally:
        if own:
            box.remove()
        run.remove()
