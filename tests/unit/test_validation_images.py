"""Which node image each host runs: `validate --inventory` names a host on another image than
the cluster's current one (slurmforge/validation/images.py, test_cluster's check over the
facts every host answered), `status` reads every host's RECORD at once
(slurmforge/image_record.py read_records)."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from test_validation_facts import gathered, local_cluster

from slurmforge.errors import NodeUnreachable
from slurmforge.hosts import Host, HostRole
from slurmforge.image_record import UNREAD, image_cell, read_records
from slurmforge.local import manage
from slurmforge.local.podman import ContainerInfo
from slurmforge.validation import image_args
from slurmforge.validation import test_cluster as checks
from slurmforge.validation.facts import Answer
from slurmforge.validation.images import READ, image_problems, upgrade_fix

pytestmark = pytest.mark.unit

CURRENT = "c0ffee00c0ffee00"
OLD = "01d01d000000beef"
FIX = "slurmforge upgrade --inventory /inv"


def record(digest: str) -> str:
    return json.dumps({"base": "debian-13", "inputs": digest, "slurm": "24.11.5-4+deb13u1"}) + "\n"


def judged(records: dict[str, Answer], gone: str = "") -> list[str]:
    live = local_cluster()
    facts = gathered(live, lambda host, key: records.get(host, Answer(0, record(CURRENT))) if key == READ
                     else Answer(0, ""), gone)
    return image_problems(live.up_hosts, facts.hosts, CURRENT, FIX)


def test_hosts_on_the_current_image_pass() -> None:
    assert judged({}) == []


def test_a_host_on_another_image_is_one_line_naming_it_both_images_and_the_fix() -> None:
    assert judged({"dev-cpu-02": Answer(0, record(OLD))}) == [
        "dev-cpu-02: node image found 01d01d000000, wanted c0ffee00c0ff (the cluster's current image); "
        "fix: slurmforge upgrade --inventory /inv"]


def test_a_host_without_a_record_and_one_that_cannot_be_asked_are_each_named() -> None:
    wrong = judged({"dev-login": Answer(1, "cat: /usr/share/slurmforge/image.json: No such file or directory")},
                   gone="dev-cpu-01")
    assert wrong == [
        "dev-login: node image found no record (/usr/share/slurmforge/image.json), wanted c0ffee00c0ff "
        "(the cluster's current image); fix: slurmforge upgrade --inventory /inv",
        "dev-cpu-01: its node image could not be read (no such container)"]


def test_the_check_holds_every_running_host_to_the_current_image() -> None:
    live = replace(local_cluster(), inventory=Path("/inv"))
    facts = gathered(live, lambda host, key: Answer(0, record(OLD if host == "dev-gpu-01" else CURRENT))
                     if key == READ else Answer(0, ""))
    with pytest.raises(AssertionError) as failed:
        checks.test_every_host_runs_the_clusters_current_image(live, facts, CURRENT)
    assert str(failed.value).split("\nassert ")[0] == (
        "dev-gpu-01: node image found 01d01d000000, wanted c0ffee00c0ff (the cluster's current image); "
        "fix: sudo slurmforge upgrade --local dev")
    with pytest.raises(pytest.skip.Exception, match="target local"):  # none given: nothing to hold them to
        checks.test_every_host_runs_the_clusters_current_image(live, facts, None)


def test_the_command_line_hands_the_current_image_to_the_suite() -> None:
    assert image_args("c0ffee00c0ffee00") == ["--current-image=c0ffee00c0ffee00"] and image_args(None) == []


def test_the_fix_names_the_target() -> None:
    assert upgrade_fix(True, "dev", "/inv") == "sudo slurmforge upgrade --local dev"
    assert upgrade_fix(False, "prod", "/inv") == "slurmforge upgrade --inventory /inv"


# ------------------------------------------------------------ status: every host's RECORD at once

LATENCY = 0.1
"""A `podman exec` of `cat` on a running container (its client and conmon starting): ~0.1 s."""


def test_status_reads_ten_hosts_in_about_one_reads_time() -> None:
    hosts = local_cluster().hosts[:10]
    assert len(hosts) == 10

    def reader(host: Host) -> str | None:
        time.sleep(LATENCY)
        if host.name == hosts[3].name:
            raise NodeUnreachable(f"cannot reach {host.name} through podman")
        return "" if host.name == hosts[4].name else record(CURRENT)

    started = time.perf_counter()
    found = read_records(hosts, reader)
    took = time.perf_counter() - started
    assert took < 3 * LATENCY, f"{took:.2f} s for 10 hosts: read one after the other ({10 * LATENCY:.1f} s)"
    assert list(found) == [h.name for h in hosts]  # the hosts' order
    assert found[hosts[3].name] is None and image_cell(found[hosts[3].name]) == UNREAD
    assert found[hosts[4].name] == "" and image_cell("") == UNREAD  # no RECORD
    assert image_cell(found[hosts[0].name]) == CURRENT[:12]


class SlowPodman:
    """The local cluster's podman as `status --local` asks it: `ps` and the controller's sinfo,
    each taking LATENCY."""

    def __init__(self, hosts: list[Host]) -> None:
        self.hosts = hosts

    def containers(self, label: str) -> list[ContainerInfo]:
        time.sleep(LATENCY)
        return [ContainerInfo(h.name, "running", 4242, {}, "img") for h in self.hosts]

    def exec(self, name: str, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        time.sleep(LATENCY)
        sinfo = "".join(f"{h.name} idle 24.11.5\n" for h in self.hosts if h.pool)
        return subprocess.CompletedProcess(argv, 0, sinfo, "")


def test_status_local_costs_one_read_more_than_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """`status --local` on the example cluster (its dynamic nodes powered up: every host runs),
    each podman call LATENCY: before, `ps` and sinfo; now also every host's RECORD, at once."""
    live = local_cluster()
    podman = SlowPodman(live.hosts)
    monkeypatch.setattr(manage, "require_root", lambda: None)
    monkeypatch.setattr(manage, "find_cluster", lambda name: (live.spec, live.hosts))
    monkeypatch.setattr(manage, "Podman", lambda: podman)

    def reader(host: Host) -> str | None:
        time.sleep(LATENCY)
        return record(CURRENT)

    started = time.perf_counter()
    podman.containers("")
    podman.exec("", [])
    before = time.perf_counter() - started
    started = time.perf_counter()
    table = manage.status_table(None, reader)
    now = time.perf_counter() - started
    running = len(live.hosts)
    print(f"status --local, {running} running hosts, {LATENCY:.2f} s a podman call: before {before:.2f} s, "
          f"now {now:.2f} s (read one after the other: {before + running * LATENCY:.2f} s)")
    assert now < before + 2 * LATENCY
    shown = {row[0]: row for row in table.rows}
    assert {row[6] for row in table.rows} == {CURRENT[:12]}
    assert shown["dev-cpu-01"][7:] == ("24.11.5-4+deb13u1", "24.11.5")


def test_an_inventory_of_hosts_and_spec_alone_names_no_current_image(tmp_path: Path) -> None:
    """A hand-written inventory (a jump host's: hosts.yml and the spec, no group_vars) is
    validated without the image check, not stopped by a traceback (the live suite's jump host
    test met it)."""
    from slurmforge.inventory import HOSTS_FILE, SPEC_COPY, hosts_document
    from slurmforge.package_data import examples
    from slurmforge.spec import load_spec
    from slurmforge.upgrade_start import current_image

    spec = load_spec(examples() / "local.yaml")
    (tmp_path / SPEC_COPY).write_text((examples() / "local.yaml").read_text())
    (tmp_path / HOSTS_FILE).write_text(yaml.safe_dump(hosts_document(spec, [Host("dev-login", "10.0.0.2",
                                                                            HostRole.LOGIN)]), sort_keys=False))
    assert current_image(tmp_path) is None
