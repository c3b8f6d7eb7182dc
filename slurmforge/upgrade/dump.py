"""The backups Slurm's upgrade guide asks for before an upgrade ("Create Backups": "At a minimum,
back up the following: StateSaveLocation ..., Entire slurm configuration directory ..., MySQL
database (if slurmdbd is configured)"), taken on the primary controller and kept 0600 in one
directory per upgrade under <state root>/<cluster>/backups/:

- `slurm-state.tar.gz`: StateSaveLocation and /etc/slurm, with GNU tar while slurmctld runs
  (slurmctld writes each state file whole and renames it into place, so every file in the
  archive is one it wrote; a file changed while tar read it is a warning, not a failure);
- `accounting.sql.gz` when accounting is on: `mysqldump --single-transaction` (a consistent
  snapshot of InnoDB tables without locking slurmdbd out) of slurmdbd's StorageLoc, with the
  credentials slurmdbd.conf (and its Include, where slurmforge keeps StoragePass) holds: the
  script reads them there and hands them to mysqldump in a 0600 `--defaults-extra-file` it
  removes after, so the password is never in an argument list, a log or this machine's files.

Each streams back gzipped and is written 0600 from its first byte; a failed one leaves no file.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host
from slurmforge.spec import Cluster
from slurmforge.state_dirs import state_root

SLURMDBD_CONF = "/etc/slurm/slurmdbd.conf"
TIMEOUT = 3600.0

# Runs on the slurmdbd host as `python3 -c DUMP_SCRIPT CONF`: the script is constant, the
# conf's path an argument; the password travels only through the 0600 file.
DUMP_SCRIPT = r'''
import gzip, os, shutil, subprocess, sys, tempfile

def read(path, into):
    with open(path) as conf:
        for line in conf:
            line = line.split("#", 1)[0].strip()
            if line.lower().startswith("include "):
                read(line.split(None, 1)[1].strip(), into)
            elif "=" in line:
                key, value = line.split("=", 1)
                into[key.strip().lower()] = value.strip()
    return into

conf = read(sys.argv[1], {})
fd, extra = tempfile.mkstemp(prefix="slurmforge-dump-", suffix=".cnf")
try:
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("[client]\n")
        for key, name in (("storageuser", "user"), ("storagepass", "password"), ("storagehost", "host"),
                          ("storageport", "port")):
            if conf.get(key):
                out.write('%s="%s"\n' % (name, conf[key].replace("\\", "\\\\").replace('"', '\\"')))
    dump = subprocess.Popen(["mysqldump", "--defaults-extra-file=" + extra, "--single-transaction", "--quick",
                             "--routines", "--triggers", "--databases", conf.get("storageloc", "slurm_acct_db")],
                            stdout=subprocess.PIPE)
    with gzip.GzipFile(fileobj=sys.stdout.buffer, mode="wb") as packed:
        shutil.copyfileobj(dump.stdout, packed)
    sys.exit(dump.wait())
finally:
    os.unlink(extra)
'''


def backups_dir(cluster: str, root: Path | None = None) -> Path:
    return (root or state_root()) / cluster / "backups"


def dump_argv() -> list[str]:
    """What runs on the slurmdbd host: no secret in it."""
    return ["python3", "-c", DUMP_SCRIPT, SLURMDBD_CONF]


SLURM_CONFIG = "/etc/slurm"
STATE = "slurm-state.tar.gz"
ACCOUNTING = "accounting.sql.gz"


def state_argv(state_save_location: str) -> list[str]:
    """GNU tar of StateSaveLocation and the configuration directory to stdout; exit 1 is
    tar's "some files differ" (changed while read), which the caller takes."""
    return ["tar", "--create", "--gzip", "--file=-", "--warning=no-file-changed", "--directory=/",
            state_save_location.lstrip("/"), SLURM_CONFIG.lstrip("/")]


def take_backups(host: Host, spec: Cluster, root: Path | None = None, now: float | None = None) -> Path:
    """Slurm's state and configuration, and the accounting database when accounting is on, from
    `host` (the primary controller, slurmdbd's host) into a new 0700 directory
    `<cluster>-<time>` under backups_dir; its path."""
    from slurmforge.remote.node import executor_for
    from slurmforge.render import state_save_location

    node = executor_for(host)
    directory = backups_dir(spec.name, root) / f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}"
    write_dump(node.command(state_argv(state_save_location(spec)), None, TIMEOUT), directory, STATE, host.name,
               "Slurm's state directory and configuration", ok=(0, 1))
    if spec.accounting.enabled:
        write_dump(node.command(dump_argv(), None, TIMEOUT), directory, ACCOUNTING, host.name,
                   "the accounting database")
    return directory


def write_dump(argv: list[str], directory: Path, name: str, where: str, what: str = "the accounting database",
               ok: tuple[int, ...] = (0,)) -> Path:
    """Run `argv` (the dump on its host), its output into directory/name, 0600 from its first
    byte (the directory and its parent 0700); a failed dump (an exit code not in `ok`) leaves
    no file."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for made in (directory.parent, directory):
        os.chmod(made, 0o700)
    target = directory / name
    partial = directory / f".{name}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=TIMEOUT + 60, check=False)
        if proc.returncode not in ok:
            said = [ln for ln in proc.stderr.decode(errors="replace").splitlines()  # tar's trailer says nothing
                    if ln.strip() and "Exiting with failure status" not in ln][-1:] or [f"exit code {proc.returncode}"]
            raise ProvisionError(f"the backup of {what} on {where} failed: {said[0][:300]}; nothing was upgraded")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target
