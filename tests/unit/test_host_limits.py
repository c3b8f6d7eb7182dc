"""prepare_host raises the inotify limits many systemd containers need, never lowers them, and
refuses a disk too full for the cluster's daemons."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmforge.errors import HostError
from slurmforge.local.host import MIN_FREE_BYTES, SYSCTLS, check_disk, disk_free, raise_kernel_limits


def fake_proc(tmp_path: Path, values: dict[str, str]) -> Path:
    proc = tmp_path / "proc"
    for key, value in values.items():
        path = proc / key.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    return proc


def test_raises_low_limits_and_persists_them(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {"fs.inotify.max_user_instances": "128", "fs.inotify.max_user_watches": "8192"})
    conf = tmp_path / "sysctl.d" / "60-slurmforge.conf"
    raised = raise_kernel_limits(proc, conf)
    assert raised == [f"{k}={v}" for k, v in SYSCTLS.items()]
    assert (proc / "fs/inotify/max_user_instances").read_text().strip() == "1024"
    assert "fs.inotify.max_user_instances = 1024" in conf.read_text()
    assert raise_kernel_limits(proc, conf) == []  # idempotent


def test_never_lowers_a_higher_limit(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path, {"fs.inotify.max_user_instances": "8192", "fs.inotify.max_user_watches": "1048576"})
    assert raise_kernel_limits(proc, tmp_path / "60.conf") == []
    assert (proc / "fs/inotify/max_user_instances").read_text().strip() == "8192"


def test_unwritable_limit_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HostError, match=r"cannot raise fs.inotify.max_user_instances .* sysctl -w"):
        raise_kernel_limits(tmp_path / "no-proc", tmp_path / "60.conf")


GiB = 2**30


@pytest.mark.parametrize(("avail", "percent", "fails"), [
    (40 * GiB, 15.0, False),
    (15 * GiB, 5.9, False),    # what failed CI's Ceph monitor under its 5 % default: fine at 1 %
    (4 * GiB, 30.0, True),     # a small disk, nearly full: the node image alone does not fit
    (6 * GiB, 1.5, True),      # a share below the monitor's margin
])
def test_a_disk_too_full_for_the_cluster_is_one_line_error(avail: int, percent: float, fails: bool) -> None:
    paths = (Path("/var/lib/containers"), Path("/var/lib/slurmforge"))
    if not fails:
        check_disk(paths, lambda _: (avail, percent))
        return
    with pytest.raises(HostError) as err:
        check_disk(paths, lambda _: (avail, percent))
    message = str(err.value)
    assert "\n" not in message and "/var/lib/containers" in message and "free space" in message
    assert f"{avail / GiB:.1f} GiB" in message


def test_disk_free_measures_the_nearest_existing_parent(tmp_path: Path) -> None:
    avail, percent = disk_free(tmp_path / "not" / "made" / "yet")
    assert avail == disk_free(tmp_path)[0] or abs(avail - disk_free(tmp_path)[0]) < 64 * 2**20
    assert 0.0 <= percent <= 100.0 and avail > 0 and MIN_FREE_BYTES > 0
