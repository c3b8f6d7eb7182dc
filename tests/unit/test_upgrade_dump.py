"""The accounting database's dump before an upgrade (slurmforge.upgrade.dump): the password from
slurmdbd.conf's Include reaches mysqldump only through a 0600 defaults file, removed after;
never an argument; the dump lands 0600, whole or not at all."""

from __future__ import annotations

import gzip
import os
import stat
import sys
from pathlib import Path

import pytest

from slurmforge.errors import ProvisionError
from slurmforge.upgrade.dump import DUMP_SCRIPT, backups_dir, dump_argv, write_dump

pytestmark = pytest.mark.unit

SECRET = 's3cr"et pass'

FAKE_MYSQLDUMP = """#!/usr/bin/env python3
import os, stat, sys
extra = sys.argv[1].split("=", 1)[1]
mode = stat.S_IMODE(os.stat(extra).st_mode)
with open(os.environ["SEEN"], "w") as seen:
    seen.write(repr(sys.argv) + "\\n" + oct(mode) + "\\n" + extra + "\\n" + open(extra).read())
sys.stdout.write("-- dump of " + sys.argv[-1] + "\\n")
sys.exit(int(os.environ.get("FAIL", "0")))
"""


@pytest.fixture
def host_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mysqldump"
    fake.write_text(FAKE_MYSQLDUMP.replace("/usr/bin/env python3", sys.executable))
    fake.chmod(0o755)
    (tmp_path / "storage.conf").write_text(f"StoragePass={SECRET}\n")
    (tmp_path / "slurmdbd.conf").write_text(
        f"DbdHost=dev-controller\nStorageHost=localhost\nStorageLoc=slurm_acct_db\nStorageUser=slurm\n"
        f"# a comment\nInclude {tmp_path / 'storage.conf'}\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SEEN", str(tmp_path / "seen"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


def test_the_password_goes_through_a_0600_file_never_argv(host_side: Path, tmp_path: Path) -> None:
    argv = [sys.executable, "-c", DUMP_SCRIPT, str(host_side / "slurmdbd.conf")]
    out = write_dump(argv, backups_dir("dev", tmp_path / "state"), "dev.sql.gz", "dev-controller")
    assert gzip.decompress(out.read_bytes()) == b"-- dump of slurm_acct_db\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and stat.S_IMODE(out.parent.stat().st_mode) == 0o700
    argv_seen, mode, extra, defaults = (host_side / "seen").read_text().split("\n", 3)
    assert SECRET not in argv_seen and "--single-transaction" in argv_seen and SECRET not in " ".join(argv)
    assert mode == "0o600" and not Path(extra).exists()  # removed after the dump
    assert 'password="s3cr\\"et pass"' in defaults and 'user="slurm"' in defaults
    assert SECRET not in " ".join(dump_argv())


def test_a_failed_dump_leaves_no_file(host_side: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL", "2")
    where = backups_dir("dev", tmp_path / "state")
    argv = [sys.executable, "-c", DUMP_SCRIPT, str(host_side / "slurmdbd.conf")]
    with pytest.raises(ProvisionError, match="the backup of the accounting database on dev-controller failed"):
        write_dump(argv, where, "dev.sql.gz", "dev-controller")
    assert list(where.iterdir()) == []
    assert not any(p.name.startswith("slurmforge-dump-") for p in host_side.iterdir())


def test_slurms_state_and_configuration_are_archived_by_tar_while_slurmctld_writes(tmp_path: Path) -> None:
    """Slurm's upgrade guide's minimum: StateSaveLocation and the configuration directory, beside
    the database. GNU tar's exit 1 (a file changed while read: slurmctld saving state) is taken;
    a missing directory (exit 2) is the backup's one-line failure, leaving no file."""
    import subprocess
    import tarfile

    from slurmforge.upgrade.dump import SLURM_CONFIG, state_argv

    argv = state_argv("/srv/slurm/slurmctld")
    assert argv[-2:] == ["srv/slurm/slurmctld", SLURM_CONFIG.lstrip("/")] and "--directory=/" in argv
    root = tmp_path / "root"
    (root / "srv/slurm/slurmctld").mkdir(parents=True)
    (root / "srv/slurm/slurmctld/job_state").write_text("state")
    (root / "etc/slurm").mkdir(parents=True)
    (root / "etc/slurm/slurm.conf").write_text("ClusterName=dev\n")
    here = [a.replace("--directory=/", f"--directory={root}") for a in argv]
    out = write_dump(here, tmp_path / "backups" / "dev-1", "slurm-state.tar.gz", "dev-controller", ok=(0, 1))
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(out.parent).st_mode) == stat.S_IMODE(os.stat(out.parent.parent).st_mode) == 0o700
    with tarfile.open(out) as archive:
        assert {"srv/slurm/slurmctld/job_state", "etc/slurm/slurm.conf"} <= set(archive.getnames())
    assert subprocess.run(["tar", "--version"], capture_output=True, text=True).stdout.startswith("tar (GNU tar)")
    (root / "etc/slurm/slurm.conf").unlink()
    (root / "etc/slurm").rmdir()
    with pytest.raises(ProvisionError, match=r"the backup of Slurm's state on dev-controller failed: .*etc/slurm"):
        write_dump(here, tmp_path / "backups" / "dev-2", "slurm-state.tar.gz", "dev-controller", "Slurm's state",
                   ok=(0, 1))
    assert list((tmp_path / "backups" / "dev-2").iterdir()) == []
