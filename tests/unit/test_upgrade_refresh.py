"""Patch day's two questions before a roll: which spec the new image is built from (the
cluster's own, or the user's with a new images.refresh and nothing else changed), and what
Debian's archive holds that the image does not (apt's own simulation, parsed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from slurmforge.errors import ProvisionError, SlurmforgeError
from slurmforge.inventory import SPEC_COPY
from slurmforge.upgrade.archive import archive_line, newer_packages
from slurmforge.upgrade_start import adopt_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
# apt-get -s -qq dist-upgrade on a trixie node image without its security suite (2026-11)
SIMULATION = """\
Inst login.defs [1:4.17.4-2] (1:4.17.4-2+deb13u1 Debian-Security:13/stable-security [all])
Inst libk5crypto3 [1.21.3-5+deb13u1] (1.21.3-5+deb13u2 Debian-Security:13/stable-security [amd64]) []
Inst libkrb5support0 [1.21.3-5+deb13u1] (1.21.3-5+deb13u2 Debian-Security:13/stable-security [amd64]) [libkrb5-3:amd64 ]
Inst slurm-client [24.11.5-4] (24.11.5-4+deb13u1 Debian:13.3/stable [amd64])
Inst linux-image-6.12.99-cloud-amd64 (6.12.99-1 Debian-Security:13/stable-security [amd64])
Conf login.defs (1:4.17.4-2+deb13u1 Debian-Security:13/stable-security [all])
"""


def test_apts_simulation_names_each_newer_package_and_where_it_comes_from() -> None:
    newer = newer_packages(SIMULATION)
    assert [(n.package, n.installed, n.candidate) for n in newer] == [
        ("login.defs", "1:4.17.4-2", "1:4.17.4-2+deb13u1"), ("libk5crypto3", "1.21.3-5+deb13u1", "1.21.3-5+deb13u2"),
        ("libkrb5support0", "1.21.3-5+deb13u1", "1.21.3-5+deb13u2"), ("slurm-client", "24.11.5-4", "24.11.5-4+deb13u1"),
        ("linux-image-6.12.99-cloud-amd64", "", "6.12.99-1")]
    assert newer[3].release == "Debian:13.3/stable"
    line = archive_line("c0ffee00c0ff", lambda script: SIMULATION)
    assert line.startswith("node image c0ffee00c0ff: Debian's archive has 5 newer package(s) for it (4 from the "
                           "security suite: login.defs 1:4.17.4-2 -> 1:4.17.4-2+deb13u1;")
    assert "; ...); set images.refresh: \"" in line and "\n" not in line


def test_nothing_newer_and_no_answer_are_each_one_line() -> None:
    assert archive_line("c0ffee", lambda script: "") == "node image c0ffee: Debian's archive has nothing newer for it"

    def unreachable(script: str) -> str:
        assert "apt-get -s" in script and "dist-upgrade" in script  # a simulation: it changes nothing
        raise ProvisionError("podman run --rm failed: Temporary failure resolving 'deb.debian.org'")
    line = archive_line("c0ffee", unreachable)
    assert "could not be asked (podman run --rm failed: Temporary failure resolving" in line


def _inventory(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    data = yaml.safe_load((ROOT / "examples/local.yaml").read_text())
    (inventory / SPEC_COPY).write_text(yaml.safe_dump(data))
    return inventory, data


def _write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_clusters_own_spec_or_one_with_new_images_only(tmp_path: Path) -> None:
    inventory, data = _inventory(tmp_path)
    own, source = adopt_spec(inventory, None, local=True)
    assert own.images.refresh is None and source == inventory / SPEC_COPY
    refreshed = _write(tmp_path, {**data, "images": {"refresh": "2026-11-29"}})
    spec, source = adopt_spec(inventory, refreshed, local=True)
    assert spec.images.refresh == "2026-11-29" and source == refreshed
    assert spec.images.distro().refresh == "2026-11-29"


def test_a_spec_that_changes_more_than_images_is_refused_naming_what(tmp_path: Path) -> None:
    inventory, data = _inventory(tmp_path)
    pools = [{**data["pools"][0], "max_nodes": data["pools"][0]["max_nodes"] + 1},  # type: ignore[index]
             *data["pools"][1:]]  # type: ignore[index]
    changed = _write(tmp_path, {**data, "images": {"refresh": "r2"}, "maintenance": {"max_unavailable": 2},
                                "pools": pools})
    with pytest.raises(ProvisionError, match=r"changes more than images \(maintenance, pools\): "
                                             r".*apply the rest with `sudo slurmforge up --local "):
        adopt_spec(inventory, changed, local=True)
    other = _write(tmp_path, {**data, "name": "other"})
    with pytest.raises(ProvisionError, match=r"is cluster other's spec, and the inventory .* holds cluster dev"):
        adopt_spec(inventory, other, local=True)


def test_on_aws_a_new_refresh_is_for_pulumi_first(tmp_path: Path) -> None:
    inventory, data = _inventory(tmp_path)
    same = _write(tmp_path, data)
    assert adopt_spec(inventory, same, local=False)[0].images.refresh is None
    refreshed = _write(tmp_path, {**data, "images": {"refresh": "2026-11-29"}})
    with pytest.raises(SlurmforgeError, match=r"run `pulumi up` with it, then `slurmforge inventory "
                                              r"--from-stack-outputs"):
        adopt_spec(inventory, refreshed, local=False)


@pytest.mark.parametrize("written,label", [("2026-11-29", "2026-11-29"), ("'2026-11-29'", "2026-11-29"), ("3", "3"),
                                           ("~", None), ("", None), ("null", None), ("r2.1+sec", "r2.1+sec")])
def test_images_refresh_as_users_write_it(written: str, label: str | None, tmp_path: Path) -> None:
    """YAML reads an unquoted date as a date and 3 as a number; ~, null and nothing are no label."""
    from slurmforge.spec import load_spec

    text = (ROOT / "examples/local.yaml").read_text() + f"\nimages:\n  refresh: {written}\n"
    (tmp_path / "c.yaml").write_text(text)
    assert load_spec(tmp_path / "c.yaml").images.refresh == label


def test_a_controller_whose_processes_died_with_the_host_is_ups_to_start_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a host restart podman still lists the containers as running; exec in one fails
    with an OCI error. The upgrade says what to do instead, before building anything."""
    from slurmforge.local.podman import ContainerInfo
    from slurmforge.upgrade_start import _require_running

    class Listing:
        def __init__(self, info: ContainerInfo | None) -> None:
            self.info = info

        def container(self, name: str) -> ContainerInfo | None:
            return self.info

    monkeypatch.setattr("slurmforge.local.podman.runs_in", lambda ident, pid: pid == 42)
    alive = ContainerInfo("dev-controller", "running", 42, {}, "img", "id")
    _require_running(Listing(alive), "dev", "dev-controller")  # type: ignore[arg-type]
    for info, said in ((ContainerInfo("dev-controller", "running", 7, {}, "img", "id"),
                        "is not running (its processes died with the host)"),
                       (ContainerInfo("dev-controller", "exited", 0, {}, "img", "id"), "is not running"),
                       (None, "does not exist")):
        with pytest.raises(ProvisionError, match=rf"cluster dev's controller dev-controller {re.escape(said)}: start "
                                                 r"the cluster with `sudo slurmforge up --local` first"):
            _require_running(Listing(info), "dev", "dev-controller")  # type: ignore[arg-type]
