"""Ceph's layout, keys and config: what the roles get from the spec and the hosts."""

from __future__ import annotations

import base64
import re
import stat
import struct
import time
from pathlib import Path

import pytest
import yaml

from slurmforge.ceph import (
    LOCAL_OSD_MEMORY_TARGET,
    client_caps,
    failure_domain,
    min_size,
    monitor_count,
    osd_slots,
    render_ceph_conf,
)
from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host, HostRole
from slurmforge.inventory import HOSTS_FILE, VARS_FILE, read_inventory, write_inventory
from slurmforge.local.host import MIN_FREE_PERCENT
from slurmforge.local.provider import LocalProvider
from slurmforge.secrets import CEPH_FSID, CEPH_SECRETS, cephx_key, ensure_ceph_secrets
from slurmforge.spec import Cluster, load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "examples" / "local.yaml"
POOLS_AWS = ROOT / "examples" / "pools-aws.yaml"


def ceph_host(i: int) -> Host:
    return Host(f"c-ceph-{i}", f"10.0.0.{i}", HostRole.CEPH)


def test_cephx_key_has_ceph_authtools_format() -> None:
    key = cephx_key(now=1700000000.25)
    raw = base64.b64decode(key, validate=True)
    assert len(raw) == 12 + 16 and len(key) == 40
    kind, sec, nsec, length = struct.unpack("<hiih", raw[:12])
    assert (kind, sec, nsec, length) == (1, 1700000000, 250000000, 16)
    assert cephx_key() != cephx_key()  # 16 random bytes each
    assert abs(struct.unpack("<hiih", base64.b64decode(cephx_key())[:12])[1] - time.time()) < 5


def test_ceph_secrets_are_made_once_and_private(tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    ensure_ceph_secrets(directory)
    first = {name: (directory / name).read_text() for name in CEPH_SECRETS}
    ensure_ceph_secrets(directory)
    assert {name: (directory / name).read_text() for name in CEPH_SECRETS} == first
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert all(stat.S_IMODE((directory / name).stat().st_mode) == 0o600 for name in CEPH_SECRETS)
    assert len(set(first.values())) == len(CEPH_SECRETS)  # no key is another's


@pytest.mark.parametrize(("hosts", "mons"), [(1, 1), (2, 1), (3, 3), (4, 3), (7, 3)])
def test_an_odd_number_of_monitors_at_most_three(hosts: int, mons: int) -> None:
    assert monitor_count(hosts) == mons


def test_local_example_fails_over_osds_and_aws_over_hosts() -> None:
    local, aws = load_spec(LOCAL), load_spec(POOLS_AWS)
    assert local.storage.ceph is not None and aws.storage.ceph is not None
    assert (failure_domain(local), min_size(local.storage.ceph)) == ("osd", 1)
    assert (failure_domain(aws), min_size(aws.storage.ceph)) == ("host", 2)


def test_osd_ids_and_uuids_are_stable_per_host_and_slot() -> None:
    spec = load_spec(POOLS_AWS)
    hosts = [ceph_host(i) for i in range(1, 4)]
    slots = osd_slots(spec, hosts)
    assert [[s.id for s in slots[h.name]] for h in hosts] == [[0], [1], [2]]
    assert osd_slots(spec, hosts) == slots
    assert len({s.uuid for ss in slots.values() for s in ss}) == 3


def test_aws_ceph_conf_keeps_cephs_memory_defaults_and_fails_over_hosts() -> None:
    spec = load_spec(POOLS_AWS)
    conf = render_ceph_conf(spec, [ceph_host(i) for i in range(1, 5)], "f00d")
    assert "mon_initial_members = c-ceph-1, c-ceph-2, c-ceph-3\n" in conf
    assert "mon_host = [v2:10.0.0.1:3300,v1:10.0.0.1:6789],[v2:10.0.0.2:3300,v1:10.0.0.2:6789]," in conf
    assert "osd_crush_chooseleaf_type = 1\n" in conf and "osd_pool_default_min_size = 2\n" in conf
    assert "osd_memory_target" not in conf and "bluestore_block_size" not in conf and "[osd]" not in conf
    assert "mon_data_avail" not in conf  # a monitor's own disk: Ceph's defaults


def written_local(tmp_path: Path) -> tuple[Cluster, Path, Path]:
    spec = load_spec(LOCAL)
    provider = LocalProvider(spec, "img", state_root=tmp_path / "state")
    out, secrets = tmp_path / "inventory", tmp_path / "secrets"
    write_inventory(spec, LOCAL, provider.hosts(), out, secrets)
    return spec, out, secrets


def test_local_inventory_has_ceph_groups_layout_and_conf(tmp_path: Path) -> None:
    spec, out, secrets = written_local(tmp_path)
    groups = yaml.safe_load((out / HOSTS_FILE).read_text())["all"]["children"]
    name = f"{spec.name}-ceph-01"
    assert list(groups["ceph"]["hosts"]) == [name]
    assert {g: list(v["hosts"]) for g, v in groups["ceph"]["children"].items()} == {
        "ceph_mon": [name], "ceph_mgr": [name], "ceph_mds": [name], "ceph_osd": [name]}
    assert name not in str(groups["slurm_cluster"])  # not a Slurm node
    layout = yaml.safe_load((out / VARS_FILE).read_text())["slurmforge_ceph"]
    assert [o["id"] for o in layout["osds"][name]] == [0, 1, 2]
    assert (layout["replication"], layout["min_size"], layout["mount"], layout["client"]) == (2, 1, "/data", "data-fs")
    assert layout["client_caps"] == client_caps(spec.storage.ceph)  # type: ignore[arg-type]
    conf = (out / "rendered" / "ceph.conf").read_text()
    assert f"fsid = {(secrets / CEPH_FSID).read_text()}\n" in conf
    assert "osd_crush_chooseleaf_type = 0\n" in conf and f"osd_memory_target = {LOCAL_OSD_MEMORY_TARGET}\n" in conf
    assert f"bluestore_block_size = {4 * 2**30}\n" in conf
    # the monitor shares this machine's disk: it must never refuse to start while `up` would
    # start the cluster (slurmforge.local.host.check_disk), nor stay quiet until then
    crit = float(re.search(r"^mon_data_avail_crit = (\S+)$", conf, re.M).group(1))  # type: ignore[union-attr]
    warn = float(re.search(r"^mon_data_avail_warn = (\S+)$", conf, re.M).group(1))  # type: ignore[union-attr]
    assert crit < warn <= MIN_FREE_PERCENT
    _, hosts = read_inventory(out)
    assert [h.name for h in hosts if h.role is HostRole.CEPH] == [name]


def test_no_ceph_key_in_any_inventory_file(tmp_path: Path) -> None:
    _, out, secrets = written_local(tmp_path)
    keys = [p.read_text() for p in secrets.glob("ceph.*.key")]
    assert len(keys) == 3
    for path in (p for p in out.rglob("*") if p.is_file()):
        assert not any(key in path.read_text() for key in keys), path


def test_local_ceph_hosts_start_first_and_keep_their_data_on_the_host(tmp_path: Path) -> None:
    spec = load_spec(LOCAL)
    provider = LocalProvider(spec, "img", state_root=tmp_path)
    hosts = provider.hosts()
    assert (hosts[0].name, hosts[0].role) == (f"{spec.name}-ceph-01", HostRole.CEPH)
    args = provider.container(hosts[0], hosts).run_args()
    assert f"{tmp_path / spec.name / 'ceph' / hosts[0].name}:/var/lib/ceph" in args
    assert not any(a.endswith(":/home") for a in args)  # no NAS on a storage host
    assert "--privileged" in provider.container(hosts[1], hosts).run_args()  # /dev/fuse for ceph-fuse on Slurm nodes


def test_ceph_without_ceph_hosts_is_one_line_error(tmp_path: Path) -> None:
    spec = load_spec(LOCAL)
    hosts = [h for h in LocalProvider(spec, "img", state_root=tmp_path).hosts() if h.role is not HostRole.CEPH]
    with pytest.raises(ProvisionError, match=r"^storage.ceph: no Ceph hosts .* fix: "):
        write_inventory(spec, LOCAL, hosts, tmp_path / "inv", tmp_path / "secrets")
