"""The live-cluster checks read each host once: one /bin/sh script of many small commands,
each answer under its own header, the hosts asked in parallel; a failed check names the
host, what it found and what it wanted. The scripts run here in a real shell (testinfra's
local backend), as they run on a node through podman exec or ssh."""

from __future__ import annotations

import hashlib
import inspect
import os
import pwd
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import testinfra  # type: ignore[import-untyped]

from slurmforge.hosts import Host, HostRole
from slurmforge.local.provider import LocalProvider
from slurmforge.spec import load_spec
from slurmforge.validation import test_ceph as ceph_checks
from slurmforge.validation import test_cluster as checks
from slurmforge.validation.conftest import CheckedCluster, Facts, InventorySsh, NamedHost, host_items, shared_paths
from slurmforge.validation.facts import (
    Answer,
    HostFacts,
    Unreachable,
    ask,
    found_wanted,
    host_script,
    in_parallel,
    listening,
    listens,
    parse_answers,
    read,
    shell,
    stat,
)

pytestmark = pytest.mark.unit

HERE = testinfra.get_host("local://")
ROOT = Path(__file__).resolve().parents[2]


def test_a_failed_check_line_names_host_found_and_wanted() -> None:
    assert found_wanted("dev-cpu-01", "munged", "not running", "running") == \
        "dev-cpu-01: munged found not running, wanted running"


def test_every_item_answers_under_its_key_whatever_the_others_do(tmp_path: Path) -> None:
    items = [shell("two lines", "echo one; echo two"), shell("fails", "echo oops >&2; exit 3"),
             shell("no newline", "printf last"), shell("empty", "true"),
             shell("looks like a header", "echo '@@sf-000000000000 rc 9'")]
    answers = parse_answers(HERE.run(host_script(items, "@@sf-abc")).stdout, "@@sf-abc")
    assert answers == {"two lines": Answer(0, "one\ntwo"), "fails": Answer(3, "oops"),
                       "no newline": Answer(0, "last"), "empty": Answer(0, ""),
                       "looks like a header": Answer(0, "@@sf-000000000000 rc 9")}


def test_stat_and_read_of_a_file_and_of_a_missing_one(tmp_path: Path) -> None:
    key = tmp_path / "munge.key"
    key.write_bytes(b"secret")
    key.chmod(0o400)
    facts = ask("here", HERE, [stat(str(key)), stat(str(tmp_path / "none")), read(str(key))])
    me = pwd.getpwuid(os.getuid()).pw_name
    assert facts.text(f"stat {key}").split() == ["400", me, hashlib.sha256(b"secret").hexdigest()]
    assert not facts.ok(f"stat {tmp_path / 'none'}")
    assert facts.text(f"read {key}") == "secret"


def test_a_host_that_cannot_be_asked_fails_the_checks_that_need_it_with_its_line() -> None:
    class Gone:
        def run(self, command: str, *args: str) -> object:
            raise RuntimeError("cannot reach dev-cpu-02 over ssh: Connection refused")

    facts = ask("dev-cpu-02", Gone(), [shell("x", "true")])
    with pytest.raises(Unreachable, match=r"^dev-cpu-02: cannot reach dev-cpu-02 over ssh: Connection refused$"):
        facts.ok("x")
    broken = ask("dev-cpu-02", HERE, [shell("x", "true"), ("y", "exit 0; (")])  # the script does not parse
    assert broken.error is not None and broken.error.startswith("the checks' commands did not run")
    with pytest.raises(Unreachable):
        broken.text("x")


def test_hosts_are_asked_at_once() -> None:
    hosts = [Host(f"n-{i}", "10.0.0.1", HostRole.COMPUTE) for i in range(6)]
    start = time.monotonic()
    got = in_parallel(hosts, lambda h: ask(h.name, HERE, [shell("slept", f"sleep 1; echo {h.name}")]))
    assert time.monotonic() - start < 4  # one after the other: 6 s
    assert {name: f.text("slept") for name, f in got.items()} == {h.name: h.name for h in hosts}


SS = """LISTEN 0      4096   10.89.7.12:9100 0.0.0.0:*
LISTEN 0      128       0.0.0.0:22   0.0.0.0:*
LISTEN 0      4096         [::]:111     [::]:*
LISTEN 0      4096            *:9093       *:*
LISTEN 0      4096   [fe80::1%eth0]:8080  [::]:*
"""


def test_listening_sockets_as_testinfra_judges_them() -> None:
    sockets = listening(SS)
    assert listens(sockets, "10.89.7.12", 9100) and not listens(sockets, "0.0.0.0", 9100)
    assert listens(sockets, "0.0.0.0", 22) and not listens(sockets, "10.89.7.12", 22)
    assert listens(sockets, "10.89.7.12", 111)  # every IPv6 address is every address
    assert listens(sockets, "0.0.0.0", 9093) and listens(sockets, "10.89.7.12", 9093)
    assert ("fe80::1", 8080) in sockets
    assert not listens(sockets, "10.89.7.12", 9094)


def test_unreachable_facts_say_why() -> None:
    with pytest.raises(Unreachable, match=r"^n-01: container gone$"):
        HostFacts("n-01", error="container gone").get("anything")


def test_a_failed_command_is_one_line_naming_host_command_and_exit() -> None:
    here = NamedHost.get_host("local://")
    with pytest.raises(AssertionError) as failed:
        here.check_output("echo first >&2; echo 'no such unit' >&2; exit 3")
    assert str(failed.value) == (f"{here.backend.hostname}: `echo first >&2; echo 'no such unit' >&2; exit 3` "
                                 "found exit 3 no such unit, wanted exit 0")
    assert here.check_output("echo fine") == "fine"


def test_found_and_wanted_stay_on_one_line() -> None:
    assert found_wanted("dev-login", "sacct", "rc 1: error: timed out\nsacct: error: no database", "an answer") == \
        "dev-login: sacct found rc 1: error: timed out sacct: error: no database, wanted an answer"


# ------------------------------------------------------------ the checks over gathered facts

class Offline(CheckedCluster):
    """The example local cluster's spec and hosts; asking a host anything is a failure here."""

    def connect(self, host: Host) -> testinfra.host.Host:
        raise RuntimeError(f"a unit test asked {host.name}")


def local_cluster() -> CheckedCluster:
    spec = load_spec(ROOT / "examples" / "local.yaml")
    return Offline(spec, LocalProvider(spec, "img").hosts())


def gathered(live: CheckedCluster, answer: Callable[[str, str], Answer], gone: str = "") -> Facts:
    """Every host's answers to exactly what conftest.host_items asks it (none from `gone`)."""
    hosts = {h.name: HostFacts(h.name, {key: answer(h.name, key) for key, _ in host_items(live, h)})
             if h.name != gone else HostFacts(h.name, error="no such container")
             for h in [*live.up_hosts, *live.ceph_hosts]}
    return Facts(hosts, {s.probe: None for s in shared_paths(live)})


ASKS_MORE = {"test_prometheus_sends_alerts_to_alertmanager",
             "test_every_host_runs_the_clusters_current_image"}  # the image: test_validation_images.py
FACT_CHECKS = [check for module in (checks, ceph_checks) for name, check in vars(module).items()
               if name.startswith("test_") and "facts" in inspect.signature(check).parameters
               and name not in ASKS_MORE]


@pytest.mark.parametrize("check", FACT_CHECKS, ids=lambda c: c.__name__)
def test_every_check_reads_only_what_each_host_is_asked(check: Callable[..., None]) -> None:
    """A check judging gathered facts finds each answer it needs: no key missing (KeyError);
    a wrong answer is a failed check, whose lines each name a host."""
    live = local_cluster()
    facts = gathered(live, lambda host, key: Answer(1, ""))
    try:
        check(live, facts) if "ceph" not in inspect.signature(check).parameters else check(ceph=live, facts=facts)
    except AssertionError as failed:
        lines = [line.strip() for line in str(failed).split("\nassert ")[0].splitlines()]
        assert lines and all(line.split(":")[0] in {h.name for h in live.hosts} for line in lines), lines


def test_a_daemon_that_stays_down_after_a_crash_is_named_with_its_setting() -> None:
    live = local_cluster()

    def answer(host: str, key: str) -> Answer:
        if key == "restart slurmd" and host == "dev-cpu-01":
            return Answer(0, "no")
        return Answer(0, "on-failure") if key.startswith("restart ") else Answer(0 if key == "active slurmd" else 3, "")

    with pytest.raises(AssertionError) as failed:
        checks.test_daemons_restart_after_a_failure(live, gathered(live, answer))
    assert str(failed.value).splitlines()[0] == "dev-cpu-01: slurmd's Restart= found no, wanted on-failure or always"
    # a host that cannot be asked is named, and the others are still judged
    with pytest.raises(AssertionError) as failed:
        checks.test_daemons_restart_after_a_failure(live, gathered(live, answer, gone="dev-cpu-02"))
    assert [line.strip() for line in str(failed.value).split("\nassert ")[0].splitlines()] == [
        "dev-cpu-02: no such container", "dev-cpu-01: slurmd's Restart= found no, wanted on-failure or always"]


def test_a_shared_path_a_reader_cannot_see_names_reader_and_probe() -> None:
    live = local_cluster()
    home = shared_paths(live)[0]
    reader = home.readers[0].name

    def answer(host: str, key: str) -> Answer:
        if key == f"read {home.probe}":
            return Answer(1, "cat: no such file") if host == reader else Answer(0, "shared")
        return Answer(0, "nfs")

    with pytest.raises(AssertionError) as failed:
        checks.test_shared_mounts_present_and_shared(live, gathered(live, answer))
    assert str(failed.value).splitlines()[0] == (f"{reader}: {home.writer.name}'s {home.probe} found nothing, "
                                                 "wanted 'shared' (the same file)")


def test_the_script_survives_the_ssh_and_sudo_quoting() -> None:
    """Over ssh with become the script travels as `sudo -n /bin/sh -c '<script>'`, parsed by
    the remote shell: run here as that shell would (sudo itself left out)."""
    backend = InventorySsh(Host("n-01", "10.0.0.1", HostRole.COMPUTE, connection={"ansible_become": "true"}), None)
    items = [shell("quotes", "echo \"it's\" '$HOME' $((1 + 2))"), shell("exit", "exit 7")]
    command = backend.get_command(host_script(items, "@@sf-q"))
    assert command.startswith("sudo -n /bin/sh -c ")
    out = HERE.run(command.removeprefix("sudo -n ")).stdout
    assert parse_answers(out, "@@sf-q") == {"quotes": Answer(0, "it's $HOME 3"), "exit": Answer(7, "")}
