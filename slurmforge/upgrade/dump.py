"""A dump of the accounting database before an upgrade touches slurmdbd (Slurm's upgrade guide,
"Create Backups": "MySQL database (if slurmdbd is configured)").

`mysqldump --single-transaction` (a consistent snapshot of InnoDB tables without locking
slurmdbd out) of slurmdbd's StorageLoc runs on the slurmdbd host, with the credentials
slurmdbd.conf (and its Include, where slurmforge keeps StoragePass) holds: the script reads
them there and hands them to mysqldump in a 0600 `--defaults-extra-file` it removes after,
so the password is never in an argument list, a log or this machine's files. The gzipped dump
streams back and is written 0600 under <state root>/<cluster>/backups/.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host
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


def dump_accounting(host: Host, cluster: str, root: Path | None = None, now: float | None = None) -> Path:
    """The accounting database of `cluster`, dumped on `host` (slurmdbd's) into a 0600
    `<cluster>-accounting-<time>.sql.gz` under backups_dir; its path."""
    from slurmforge.remote.node import executor_for

    argv = executor_for(host).command(dump_argv(), None, TIMEOUT)
    return write_dump(argv, backups_dir(cluster, root), f"{cluster}-accounting-"
                      f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}.sql.gz", host.name)


def write_dump(argv: list[str], directory: Path, name: str, where: str) -> Path:
    """Run `argv` (the dump on its host), its output into directory/name, 0600 from its first
    byte (the directory 0700); a failed dump leaves no file."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    target = directory / name
    partial = directory / f".{name}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            proc = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=TIMEOUT + 60, check=False)
        if proc.returncode != 0:
            said = [ln for ln in proc.stderr.decode(errors="replace").splitlines() if ln.strip()][-1:] or \
                [f"exit code {proc.returncode}"]
            raise ProvisionError(f"the accounting database's dump on {where} failed: {said[0][:300]}; nothing was "
                                 "upgraded (is mysqldump installed there, does slurmdbd.conf name the database?)")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target
