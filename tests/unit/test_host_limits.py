"""prepare_host raises the inotify limits many systemd containers need, never lowers them."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmforge.errors import HostError
from slurmforge.local.host import SYSCTLS, raise_kernel_limits


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
