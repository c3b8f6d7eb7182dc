"""The kernel CephFS mount a node gets (AWS, machines you own) is judged by the node image's
own `mount.ceph`: the join program's cephfs step writes its fstab line from the node kit's
ceph.conf, and mount.ceph must read the monitors and the file system out of them - the one
source of the mount (the msgr2 `mon_host` vectors the renderer writes used to be pasted
into the mount's source, which the kernel client cannot parse). No kernel Ceph in a
container: the mount stops at loading the module, after mount.ceph said what it resolved."""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from slurmforge.ceph import client_name, monitors, render_ceph_conf
from slurmforge.local.provider import LocalProvider
from slurmforge.node.program import local_settings, render_join
from slurmforge.spec import load_spec
from tests.judge import node_image

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]
FSID = "7d9a0e6c-1111-2222-3333-444455556666"
KEY = "AQBA7UZnAAAAABAAp2Ljr1XFNRi5y7UlgS0GEg=="  # a well-formed cephx key (not a cluster's)


def test_the_kernel_mount_reads_its_monitors_from_the_kits_ceph_conf(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples/local.yaml")
    assert spec.storage.ceph is not None
    hosts = LocalProvider(spec, "img").hosts()
    program = render_join(spec, replace(local_settings(spec, hosts), target="aws"))  # the kernel client
    kit = tmp_path / "kit"
    (kit / "private").mkdir(parents=True)
    (kit / "ceph.conf").write_text(render_ceph_conf(spec, hosts, FSID))
    client = client_name(spec.storage.ceph)
    (kit / "private" / f"ceph.client.{client}.keyring").write_text(f"[client.{client}]\n\tkey = {KEY}\n")
    (tmp_path / "join.sh").write_text(program)
    script = f"""
        set -euo pipefail
        mkdir -p /tmp/bin && printf '#!/bin/sh\\nexit 0\\n' > /tmp/bin/systemctl && chmod +x /tmp/bin/systemctl
        export PATH=/tmp/bin:$PATH SLURMFORGE_JOIN_SOURCE_ONLY=1
        . {tmp_path}/join.sh
        KIT={shlex.quote(str(kit))}
        step_cephfs
        grep ' {spec.storage.ceph.mount} ceph ' /etc/fstab
        mount -v {spec.storage.ceph.mount} 2>&1 || true
    """
    done = subprocess.run(["podman", "run", "--rm", "--privileged", "-v", "/tmp:/tmp", node_image(),
                           "bash", "-c", script], capture_output=True, text=True, timeout=120, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    line = next(line for line in out.splitlines() if f" {spec.storage.ceph.mount} ceph " in line)
    assert line.split()[:3] == [f"{client}@.{spec.storage.ceph.fs_name}=/", spec.storage.ceph.mount, "ceph"], line
    addresses = ",".join(f"{h.address}:3300" for h in monitors(hosts))
    assert f'mount.ceph: resolved to: "{addresses}"' in out, out
    assert f"new device syntax: {client}@{FSID}.{spec.storage.ceph.fs_name}=/" in out, out
