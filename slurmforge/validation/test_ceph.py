"""Ceph on a live cluster (when the spec has storage.ceph): healthy enough to serve,
every OSD up and in, CephFS mounted on every Slurm node, clients holding only their
file-system key, daemons that come back at boot."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slurmforge.validation.conftest import CheckedCluster, Facts, ceph_units, probe_problems, shared_paths
from slurmforge.validation.facts import found_wanted


@pytest.fixture
def ceph(live: CheckedCluster) -> CheckedCluster:
    if live.spec.storage.ceph is None:
        pytest.skip("the spec has no storage.ceph")
    return live


def ceph_json(live: CheckedCluster, facts: Facts, *args: str) -> Any:
    """A ceph command's JSON (conftest.ceph_commands, read on the first Ceph host): an object
    or a list, as the command gives it."""
    mon, command = live.ceph_hosts[0].name, f"ceph {' '.join(args)}"
    answer = facts[mon].get(command)
    assert answer.rc == 0, found_wanted(mon, f"`{command}`", f"exit {answer.rc}", "its JSON")
    return json.loads(answer.out)


def test_ceph_health_is_not_error(ceph: CheckedCluster, facts: Facts) -> None:
    health = ceph_json(ceph, facts, "health")
    checks = "; ".join(c["summary"]["message"] for c in health.get("checks", {}).values())
    assert health["status"] in ("HEALTH_OK", "HEALTH_WARN"), found_wanted(
        ceph.ceph_hosts[0].name, "ceph health", f"{health['status']} {checks}".strip(), "HEALTH_OK or HEALTH_WARN")
    if health["status"] == "HEALTH_WARN":  # shown in the report, not a failure
        print("ceph health:", "; ".join(c["summary"]["message"] for c in health.get("checks", {}).values()))


def test_every_osd_is_up_and_in(ceph: CheckedCluster, facts: Facts) -> None:
    want = ceph.spec.storage.ceph.osd_count  # type: ignore[union-attr]
    stat = ceph_json(ceph, facts, "osd", "stat")
    got = (stat["num_osds"], stat["num_up_osds"], stat["num_in_osds"])
    assert got == (want, want, want), found_wanted(ceph.ceph_hosts[0].name, "OSDs (all, up, in)",
                                                   "{} {} {}".format(*got), f"{want} {want} {want}")


def test_the_file_system_has_an_active_mds_and_the_spec_replication(ceph: CheckedCluster, facts: Facts) -> None:
    spec = ceph.spec.storage.ceph
    assert spec is not None
    fs = ceph_json(ceph, facts, "fs", "get", spec.fs_name)["mdsmap"]
    mon = ceph.ceph_hosts[0].name
    states = [info["state"] for info in fs["info"].values()]
    wrong = [] if "up:active" in states else [found_wanted(mon, f"{spec.fs_name}'s MDS", " ".join(states) or "none",
                                                            "one up:active")]
    wrong += [found_wanted(mon, f"pool {pool['pool_name']}'s replication", pool["size"], spec.replication)
              for pool in ceph_json(ceph, facts, "osd", "pool", "ls", "detail")
              if pool["pool_name"].startswith(f"{spec.fs_name}_") and pool["size"] != spec.replication]
    assert not wrong, "\n".join(wrong)


def test_cephfs_is_mounted_and_shared_on_every_node(ceph: CheckedCluster, facts: Facts) -> None:
    shared = shared_paths(ceph)[-1]
    mount = shared.path
    wrong = probe_problems(shared, facts)
    for host in facts.reachable(shared.readers):
        node = facts[host.name]
        # an automount: autofs, and the file system once accessed
        fstypes = node.text(f"mounted {mount}").split()
        if not {"fuse.ceph-fuse", "ceph"} & set(fstypes):
            wrong.append(found_wanted(host.name, mount, " ".join(fstypes) or "no mount",
                                      "CephFS (ceph or fuse.ceph-fuse)"))
        fstab = [line.split() for line in node.text("read /etc/fstab").splitlines()]
        if not any(len(f) > 2 and f[1] == mount and f[2] in ("fuse.ceph", "ceph") for f in fstab):
            wrong.append(found_wanted(host.name, f"{mount} in /etc/fstab", "no entry",
                                      "one (else lost at the next boot)"))
    assert not wrong, "\n".join(wrong)


def test_slurm_nodes_hold_only_the_file_system_key(ceph: CheckedCluster, facts: Facts) -> None:
    spec = ceph.spec.storage.ceph
    assert spec is not None
    from slurmforge.ceph import client_name

    admin, keyring = "/etc/ceph/ceph.client.admin.keyring", f"/etc/ceph/ceph.client.{client_name(spec)}.keyring"
    wrong = facts.unreachable(ceph.up_hosts)
    for host in facts.reachable(ceph.up_hosts):
        node = facts[host.name]
        if node.ok(f"stat {admin}"):
            wrong.append(found_wanted(host.name, admin, "a key", "none (client.admin stays on the Ceph hosts)"))
        got = node.text(f"stat {keyring}").split()[:2] if node.ok(f"stat {keyring}") else ["no", "file"]
        if got != ["600", "root"]:
            wrong.append(found_wanted(host.name, f"{keyring} mode and owner", " ".join(got), "600 root"))
    # the key's caps cover the file system, not the cluster
    res = facts[ceph.up_hosts[0].name].get("ceph pool create")
    if not (res.rc != 0 and "EACCES" in res.out):
        wrong.append(found_wanted(ceph.up_hosts[0].name, f"client.{client_name(spec)} creating a pool",
                                  f"rc {res.rc} {res.out.strip()[-120:]}", "EACCES"))
    assert not wrong, "\n".join(wrong)


def test_ceph_daemons_start_at_boot(ceph: CheckedCluster, facts: Facts) -> None:
    wrong = facts.unreachable(ceph.ceph_hosts)
    for index, host in enumerate(ceph.ceph_hosts):
        if not facts.reachable([host]):
            continue
        node = facts[host.name]
        for unit in ceph_units(ceph, index, host):
            state = [word for ok, word in ((node.ok(f"active {unit}"), "running"),
                                           (node.ok(f"enabled {unit}"), "enabled")) if ok]
            if len(state) != 2:
                wrong.append(found_wanted(host.name, unit, " and ".join(state) or "neither running nor enabled",
                                          "running and enabled"))
    assert not wrong, "\n".join(wrong)
