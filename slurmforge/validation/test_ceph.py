"""Ceph on a live cluster (when the spec has storage.ceph): healthy enough to serve,
every OSD up and in, CephFS mounted on every Slurm node, clients holding only their
file-system key, daemons that come back at boot."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slurmforge.validation.conftest import LiveCluster


@pytest.fixture
def ceph(live: LiveCluster) -> LiveCluster:
    if live.spec.storage.ceph is None:
        pytest.skip("the spec has no storage.ceph")
    return live


def ceph_json(live: LiveCluster, *args: str) -> Any:
    """A ceph command's JSON: an object or a list, as the command gives it."""
    mon = live.connect(live.ceph_hosts[0])
    return json.loads(mon.check_output(f"timeout 60 ceph {' '.join(args)} -f json"))  # args: our own words


def test_ceph_health_is_not_error(ceph: LiveCluster) -> None:
    health = ceph_json(ceph, "health")
    assert health["status"] in ("HEALTH_OK", "HEALTH_WARN"), health
    if health["status"] == "HEALTH_WARN":  # shown in the report, not a failure
        print("ceph health:", "; ".join(c["summary"]["message"] for c in health.get("checks", {}).values()))


def test_every_osd_is_up_and_in(ceph: LiveCluster) -> None:
    want = ceph.spec.storage.ceph.osd_count  # type: ignore[union-attr]
    stat = ceph_json(ceph, "osd", "stat")
    assert (stat["num_osds"], stat["num_up_osds"], stat["num_in_osds"]) == (want, want, want), stat


def test_the_file_system_has_an_active_mds_and_the_spec_replication(ceph: LiveCluster) -> None:
    spec = ceph.spec.storage.ceph
    assert spec is not None
    fs = ceph_json(ceph, "fs", "get", spec.fs_name)["mdsmap"]
    assert any(info["state"] == "up:active" for info in fs["info"].values()), fs["info"]
    for pool in ceph_json(ceph, "osd", "pool", "ls", "detail"):
        if pool["pool_name"].startswith(f"{spec.fs_name}_"):
            assert pool["size"] == spec.replication, pool["pool_name"]


def test_cephfs_is_mounted_and_shared_on_every_node(ceph: LiveCluster) -> None:
    mount = ceph.spec.storage.ceph.mount  # type: ignore[union-attr]
    hosts = ceph.up_hosts
    writer = ceph.connect(hosts[0])
    probe = f"{mount.rstrip('/')}/.slurmforge-validate-{hosts[0].name}"
    writer.check_output(f"echo ceph > {probe}")
    try:
        for host in hosts:
            node = ceph.connect(host)
            assert node.file(probe).content_string.strip() == "ceph", f"{host.name} can't see {probe}"
            # an automount: autofs, and the file system once accessed
            fstypes = node.check_output(f"findmnt -n -o FSTYPE {mount}").split()
            assert {"fuse.ceph-fuse", "ceph"} & set(fstypes), f"{host.name}: {mount} is {fstypes or 'not mounted'}"
            fstab = [line.split() for line in node.file("/etc/fstab").content_string.splitlines()]
            assert any(len(f) > 2 and f[1] == mount and f[2] in ("fuse.ceph", "ceph") for f in fstab), \
                f"{host.name}: {mount} is not in /etc/fstab (lost at the next boot)"
    finally:
        writer.run(f"rm -f {probe}")


def test_slurm_nodes_hold_only_the_file_system_key(ceph: LiveCluster) -> None:
    spec = ceph.spec.storage.ceph
    assert spec is not None
    from slurmforge.ceph import client_name

    for host in ceph.up_hosts:
        node = ceph.connect(host)
        assert not node.file("/etc/ceph/ceph.client.admin.keyring").exists, f"{host.name} holds client.admin"
        keyring = node.file(f"/etc/ceph/ceph.client.{client_name(spec)}.keyring")
        assert keyring.exists and keyring.mode == 0o600 and keyring.user == "root", host.name
    # the key's caps cover the file system, not the cluster
    node = ceph.connect(ceph.up_hosts[0])
    res = node.run(f"timeout 30 ceph --id {client_name(spec)} osd pool create slurmforge-validate-probe")
    assert res.rc != 0 and "EACCES" in res.stderr, f"client.{client_name(spec)} may create pools: {res.stderr}"


def test_ceph_daemons_start_at_boot(ceph: LiveCluster) -> None:
    spec = ceph.spec.storage.ceph
    assert spec is not None
    for index, host in enumerate(ceph.ceph_hosts):
        node = ceph.connect(host)
        units = [f"ceph-osd@{index * spec.osds_per_host + j}" for j in range(spec.osds_per_host)]
        if index == 0:
            units += [f"ceph-mon@{host.name}", f"ceph-mgr@{host.name}", f"ceph-mds@{host.name}", "ceph.target"]
        for unit in units:
            service = node.service(unit)
            assert service.is_enabled and service.is_running, f"{host.name}: {unit}"
