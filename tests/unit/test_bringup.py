"""The target-neutral bring-up steps: the rollout that skips hosts whose mark is this rollout's
digest (for `up --local` and `rollout --inventory` alike), the marks read over each host's own
connection, and the sample job on the login node. Nodes are stubs that record every command
(the real ones are podman exec or ssh, tests/unit/test_modules_node.py); the playbooks are a
recorder in place of `roll_out`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from slurmforge import bringup, fleet
from slurmforge.cli import app
from slurmforge.contract import DIGEST_FILE, JOIN_PROGRAM
from slurmforge.errors import ClusterUnreachable, ProvisionError, RemoteError
from slurmforge.hosts import Host, HostRole
from slurmforge.inventory import read_inventory, write_inventory
from slurmforge.local import host
from slurmforge.local import up as local_up
from slurmforge.local.provider import LocalProvider
from slurmforge.local.up import UpReport
from slurmforge.plan import deployed
from slurmforge.plan.deployed import Deployed
from slurmforge.remote.executor import Completed
from slurmforge.render import render_all
from slurmforge.rollout import Progress, RolloutResult, mark_text, rollout_digests
from slurmforge.spec import load_spec, parse_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "examples" / "local.yaml"
DIGEST, OLD = "d" * 64, "o" * 64


class Notes:
    """A `Phases` sink that keeps what it is told."""

    def __init__(self) -> None:
        self.phases: list[str] = []
        self.notes: list[str] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.phases.append(name)
        yield

    def event(self, progress: Progress) -> None:
        pass

    def note(self, text: str) -> None:
        self.notes.append(text)


class MarkRead:
    """A node whose rollout mark is read (`cat`): its name in `read`; its other commands in `calls`."""

    def __init__(self, name: str, answers: dict[str, Completed | Exception], calls: list[list[str]],
                 read: list[str]) -> None:
        self.node, self.calls, self.read = Node(name, answers), calls, read
        self.name = name

    def run(self, argv: Sequence[str], env: Any = None, timeout: float = 0) -> Completed:
        (self.read.append(self.name) if argv[0] == "cat" else self.calls.append(list(argv)))
        return self.node.run(argv, env, timeout)


class RollOut:
    """Stands in for `rollout.roll_out`: the calls, and a result with one change per host."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.fleet: list[tuple[str | None, list[str], float]] = []
        """What the rollout ran through slurmforge.fleet after Ansible."""
        self.ready: list[list[str]] = []
        """What the bring-up asked the cluster at its end (await_ready: Ceph's health, Slurm's nodes)."""

    def __call__(self, inventory: Path, ceph_hosts: Sequence[str], log_path: Path, on_event: Any = None,
                 extravars: dict[str, Any] | None = None, limit: Sequence[str] | None = None,
                 marks: dict[str, str] | None = None, skip_parts: Sequence[str] = ()) -> RolloutResult:
        self.calls.append({"inventory": inventory, "ceph": list(ceph_hosts), "log": log_path,
                           "limit": list(limit or []), "marks": marks, "skip": list(skip_parts)})
        return RolloutResult(ok=True, changed=dict.fromkeys(limit or [], 1), seconds=12.0)


class Node:
    """An executor on one node, as root or as `user`: answers by command, records each
    (user, argv, timeout) in `calls`, which the executors of one test share."""

    def __init__(self, name: str, answers: dict[str, Completed | Exception] | None = None,
                 calls: list[tuple[str | None, list[str], float]] | None = None, user: str | None = None) -> None:
        self.name, self.answers, self.user = name, answers or {}, user
        self.calls = [] if calls is None else calls

    def run(self, argv: Sequence[str], env: Any = None, timeout: float = 0) -> Completed:
        self.calls.append((self.user, list(argv), timeout))
        key = next((word for word in argv if word in self.answers), "")
        answer = self.answers.get(key, Completed(tuple(argv), 0, "", ""))
        if isinstance(answer, Exception):
            raise answer
        return answer


def done(stdout: str = "", rc: int = 0, stderr: str = "") -> Completed:
    return Completed((), rc, stdout, stderr)


def hosts() -> list[Host]:
    return [Host("ctl", "10.0.0.2", HostRole.CONTROLLER), Host("login", "10.0.0.3", HostRole.LOGIN),
            Host("ceph-1", "10.0.0.4", HostRole.CEPH), Host("node-1", "10.0.0.5", HostRole.COMPUTE, "cpu")]


# --------------------------------------------------------------------------- the rollout's skip


NODE, CTL = {"node": DIGEST}, {"node": DIGEST, "slurmctld": "c" * 64}
"""Every host's parts and their digests here, and the controller's."""


def recorded(monkeypatch: pytest.MonkeyPatch) -> RollOut:
    """roll_out recorded; every host has the node part (DIGEST), the controller a slurmctld part too."""
    recorder = RollOut()
    monkeypatch.setattr(bringup, "roll_out", recorder)
    monkeypatch.setattr(bringup, "rollout_digests", lambda inventory, hosts: {
        h.name: CTL if h.role is HostRole.CONTROLLER else NODE for h in hosts})
    return recorder


def test_rolls_out_only_the_hosts_whose_mark_is_not_their_digest(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    recorder = recorded(monkeypatch)
    marks = {"ctl": mark_text(NODE), "login": mark_text({"node": OLD}), "ceph-1": "", "node-1": mark_text(NODE)}
    ui = Notes()
    result = bringup.roll_out_changed(tmp_path, hosts(), tmp_path / "up.log", ui,
                                      read_mark=lambda host: marks[host.name])
    assert recorder.calls == [{"inventory": tmp_path, "ceph": ["ceph-1"], "log": tmp_path / "up.log",
                               "limit": ["ctl", "login", "ceph-1"],
                               "marks": {"ctl": mark_text(CTL), "login": mark_text(NODE), "ceph-1": mark_text(NODE)},
                               "skip": ["accounting", "kit", "monitoring", "service", "slurmdbd", "spec"]}]
    assert (result.total_changed, result.skipped_hosts) == (3, 1)


def test_a_part_only_the_controller_has_rolls_out_the_controller_alone_and_only_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    recorder = recorded(monkeypatch)
    marks = {"ctl": mark_text({"node": DIGEST, "slurmctld": OLD}), "login": mark_text(NODE), "ceph-1": mark_text(NODE),
             "node-1": mark_text(NODE)}
    ui = Notes()
    result = bringup.roll_out_changed(tmp_path, hosts(), tmp_path / "up.log", ui,
                                      read_mark=lambda host: marks[host.name])
    [call] = recorder.calls
    assert (call["limit"], call["ceph"], call["marks"]) == (["ctl"], ["ceph-1"], {"ctl": mark_text(CTL)})
    assert call["skip"] == ["accounting", "kit", "monitoring", "node", "service", "slurmdbd", "spec"]
    assert result.skipped_hosts == 3
    assert ui.notes == ["rolling out slurmctld on ctl; nothing changed for accounting, kit, monitoring, node, service, "
                        "slurmdbd, spec"]


def test_nothing_to_roll_out_says_so_and_runs_no_playbook(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    recorder = recorded(monkeypatch)
    ui = Notes()
    result = bringup.roll_out_changed(tmp_path, hosts(), tmp_path / "up.log", ui,
                                      read_mark=lambda host: mark_text(CTL if host.name == "ctl" else NODE))
    assert recorder.calls == [] and result.ok and result.skipped_hosts == 4
    assert ui.notes == ["every node already has this exact rollout: nothing to do (--full-rollout runs Ansible anyway)"]


def test_full_rollout_reads_no_mark_and_takes_every_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    recorder = recorded(monkeypatch)

    def unread(host: Host) -> str:
        raise AssertionError(f"read the mark of {host.name}")

    result = bringup.roll_out_changed(tmp_path, hosts(), tmp_path / "up.log", Notes(), full=True,
                                      read_mark=unread)
    assert recorder.calls[0]["limit"] == ["ctl", "login", "ceph-1", "node-1"] and result.skipped_hosts == 0


@pytest.mark.parametrize(("answer", "mark"), [
    (done(f"{DIGEST}\n"), DIGEST),
    (done("", rc=1, stderr="cat: /etc/slurmforge/rollout.digest: No such file or directory"), ""),
    (RemoteError("cannot reach node-1 over ssh: Connection timed out"), ""),
], ids=["marked", "no-mark", "unreachable"])
def test_a_mark_is_read_over_the_hosts_own_connection(monkeypatch: pytest.MonkeyPatch,
                                                      answer: Completed | Exception, mark: str) -> None:
    node = Node("node-1", {"cat": answer})
    reached: list[Host] = []
    monkeypatch.setattr(bringup, "executor_for", lambda host: reached.append(host) or node)
    host = hosts()[3]
    assert bringup.rollout_mark(host) == mark
    assert reached == [host] and node.calls == [(None, ["cat", DIGEST_FILE], 30)]


# --------------------------------------------------------------------------- rollout --inventory


def local_inventory(tmp_path: Path) -> tuple[Path, list[Host]]:
    spec = load_spec(LOCAL)
    inventory = write_inventory(spec, LOCAL, LocalProvider(spec, "img", state_root=tmp_path / "state").hosts(),
                                tmp_path / "inventory", tmp_path / "secrets")
    return inventory, read_inventory(inventory)[1]


def rollout_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, current: set[str], *args: str,
                running: Deployed | None = None) -> tuple[Any, RollOut, list[str], list[Host]]:
    """`slurmforge rollout --inventory` on a local inventory whose `current` hosts carry
    this rollout's mark: the CLI's result, the playbook calls, the hosts whose mark was read.
    `running`: what the plan printed first reads from the controller (None: it cannot)."""
    inventory, listed = local_inventory(tmp_path)
    digests = rollout_digests(inventory.resolve(), listed)
    recorder, read = RollOut(), []

    static = [h.name for h in listed if h.role is HostRole.COMPUTE and not h.dynamic]
    # the cluster answers at the end (await_ready): scontrol show nodes --json
    answering = json.dumps({"nodes": [{"name": name, "state": ["IDLE"]} for name in static]})

    def node(host: Host) -> Node:
        mark = done(mark_text(digests[host.name]) if host.name in current else OLD)
        answers = {"cat": mark, "ceph": done("HEALTH_OK\n"), "nodes": done(answering)}
        return MarkRead(host.name, answers, recorder.ready, read)

    def controller(controllers: list[Host]) -> Deployed:
        assert [h.name for h in controllers] == ["dev-controller", "dev-controller-backup"]
        if running is None:
            raise ClusterUnreachable("cannot read the deployed cluster from its controller(s): dev-controller: down")
        return running

    def fleet_node(host: Host) -> Node:  # the pool hosts on the controller; a running dynamic node's join
        assert host.name in ("dev-controller", "dev-cpu-03"), host.name
        return Node(host.name, {"cat": done("# pool hosts\n10.89.0.30 dev-cpu-03\n"),
                                JOIN_PROGRAM: done("slurmforge-join: changed: user carol added\n")},
                    recorder.fleet)

    monkeypatch.setattr(bringup, "roll_out", recorder)
    monkeypatch.setattr(bringup, "executor_for", node)
    monkeypatch.setattr(fleet, "executor_for", fleet_node)
    monkeypatch.setattr(deployed, "read", controller)
    result = CliRunner().invoke(app, ["rollout", "--inventory", str(inventory), *args])
    return result, recorder, read, listed


def test_rollout_inventory_skips_current_hosts_and_gives_dynamic_ones_only_the_users(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result, recorder, read, listed = rollout_cli(monkeypatch, tmp_path, {"dev-controller", "dev-cpu-01"})
    static = [h.name for h in listed if not h.dynamic]
    assert result.exit_code == 0, result.output
    assert read == static and {h.name for h in listed if h.dynamic} == {
        "dev-cpu-03", "dev-cpu-04", "dev-cpu-fallback-01", "dev-cpu-spot-01", "dev-cpu-spot-02"}
    [call] = recorder.calls
    assert call["limit"] == [n for n in static if n not in ("dev-controller", "dev-cpu-01")]
    assert call["ceph"] == ["dev-ceph-01"]
    assert call["marks"] == {name: mark_text(parts) for name, parts in rollout_digests(
        (tmp_path / "inventory").resolve(), listed).items() if name in call["limit"]}
    assert call["log"] == bringup.log_dir() / "inventory-rollout.log"
    assert f"rollout changed {len(call['limit'])} thing(s) in 12 s; log {call['log']}" in result.output
    # after Ansible: the kit's users and groups on the one dynamic node with a machine, no other step
    assert [argv for _, argv, _ in recorder.fleet if argv[0] == JOIN_PROGRAM] == [
        [JOIN_PROGRAM, "--steps", "kit", "dev-cpu-03"]]
    assert "users and groups changed on the running dynamic node(s) dev-cpu-03" in result.output
    # and it ends once the cluster answers: Ceph serves, every static node in service
    asked = [argv[2:4] if argv[0] == "timeout" else argv[:3] for argv in recorder.ready]
    assert asked == [["ceph", "health"], ["scontrol", "show", "nodes"]]
    assert "✓ the cluster answers (Ceph, every static node in service)" in result.output


def test_rollout_inventory_prints_the_plan_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What runs was rolled out with ml-cpu's MaxTime at 2 days; the inventory's spec says 1 day."""
    data = yaml.safe_load(LOCAL.read_text())
    data["partitions"][0]["max_time"] = "2-00:00:00"
    text = yaml.safe_dump(data)
    running = Deployed("dev-controller", text, render_all(parse_spec(text)), "mark", nodes=[], jobs=[], partitions=[])
    result, recorder, _, _ = rollout_cli(monkeypatch, tmp_path, set(), running=running)
    assert result.exit_code == 0 and recorder.calls
    plan, _, rest = result.output.partition("rollout changed")
    assert "plan for cluster dev: 1 change(s)" in plan and "MaxTime 2-00:00:00 -> 1-00:00:00" in plan
    assert rest


def test_up_local_prints_the_plan_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`up --local` reads the local controller of the spec's name before anything changes."""
    data = yaml.safe_load(LOCAL.read_text())
    data["pools"][0]["max_nodes"] = 3
    text = yaml.safe_dump(data)
    running = Deployed("dev-controller", text, render_all(parse_spec(text)), "mark", nodes=[], jobs=[], partitions=[])
    order: list[str] = []

    def read(controllers: list[Host]) -> Deployed:
        assert [(h.name, h.connection) for h in controllers] == [
            ("dev-controller", {"slurmforge_container": "dev-controller"}),
            ("dev-controller-backup", {"slurmforge_container": "dev-controller-backup"})]
        order.append("plan")
        return running

    def up(spec: Path, display: Any, **kw: Any) -> UpReport:
        order.append("up")
        return UpReport("dev", tmp_path / "inventory", tmp_path / "log")

    monkeypatch.setattr(deployed, "read", read)
    monkeypatch.setattr(host, "require_root", lambda: None)
    monkeypatch.setattr(local_up, "up", up)
    result = CliRunner().invoke(app, ["up", str(LOCAL), "--local"])
    assert result.exit_code == 0, result.output
    assert order == ["plan", "up"]
    # pool cpu grows, dev-cpu-04 joins ml-cpu and scavenger
    assert "plan for cluster dev: 4 change(s)" in result.output
    assert result.output.index("pool") < result.output.index("cluster dev is up")


def test_rollout_inventory_goes_on_when_the_plan_cannot_be_read(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    result, recorder, _, _ = rollout_cli(monkeypatch, tmp_path, set())
    assert result.exit_code == 0 and recorder.calls
    assert "plan: cannot tell what changes (cannot read the deployed cluster" in result.output


def test_rollout_inventory_with_every_host_current_runs_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    static = {h.name for h in local_inventory(tmp_path / "probe")[1] if not h.dynamic}
    result, recorder, _, _ = rollout_cli(monkeypatch, tmp_path, static)
    assert result.exit_code == 0 and recorder.calls == []
    assert "every node already has this exact rollout: nothing to do" in result.output


def test_rollout_inventory_full_rollout_takes_every_static_host(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    result, recorder, read, listed = rollout_cli(monkeypatch, tmp_path, set(), "--full-rollout")
    assert result.exit_code == 0 and read == []
    assert recorder.calls[0]["limit"] == [h.name for h in listed if not h.dynamic]


# --------------------------------------------------------------------------- the sample job


def executors(answers: dict[str, Completed | Exception], login: Host | None = None
              ) -> tuple[Any, list[tuple[str | None, list[str], float]]]:
    """A stand-in for `executor_for(host, user)` on the login node, and the calls it records."""
    calls: list[tuple[str | None, list[str], float]] = []

    def executor_for(host: Host, user: str | None = None) -> Node:
        assert login is None or host == login
        return Node(host.name, answers, calls, user)

    return executor_for, calls


def test_sample_job_runs_as_the_user_and_reads_the_output_from_the_shared_home(
        monkeypatch: pytest.MonkeyPatch) -> None:
    login = Host("dev-login", "10.89.7.12", HostRole.LOGIN, connection={"slurmforge_container": "dev-login"})
    stand_in, calls = executors({"sbatch": done("42;dev\n"), "cat": done("dev-cpu-01\ndev-cpu-02\n")}, login)
    monkeypatch.setattr(bringup, "executor_for", stand_in)
    assert bringup.sample_job(login, "alice", "/home/alice") == "job 42:\ndev-cpu-01\ndev-cpu-02"
    script = "/tmp/slurmforge-sample-alice.sh"
    assert calls == [
        (None, ["sh", "-c", f"printf '%s' '{bringup.SAMPLE_JOB}' > {script} && chmod 755 {script}"], 120),
        ("alice", ["sbatch", "--wait", "--parsable", "-D", "/home/alice", "-o", "slurmforge-sample-%j.out", script],
         180),
        ("alice", ["cat", "/home/alice/slurmforge-sample-42.out"], 120),
    ]


@pytest.mark.parametrize(("answer", "message"), [
    (done("", rc=1, stderr="sbatch: error: Batch job submission failed: Invalid account"),
     "sbatch --wait --parsable on dev-login failed: sbatch: error: Batch job submission failed: Invalid account"),
    (RemoteError("cannot reach dev-login through podman: Error: no container with name or ID"),
     "cannot reach dev-login through podman: Error: no container with name or ID"),
], ids=["refused", "unreachable"])
def test_a_sample_job_that_fails_is_a_provision_error(monkeypatch: pytest.MonkeyPatch,
                                                      answer: Completed | Exception, message: str) -> None:
    stand_in, calls = executors({"sbatch": answer})
    monkeypatch.setattr(bringup, "executor_for", stand_in)
    with pytest.raises(ProvisionError) as failed:
        bringup.sample_job(Host("dev-login", "10.89.7.12", HostRole.LOGIN), "alice", "/home/alice")
    assert str(failed.value) == message and len(calls) == 2  # no output read for a job that never ran


@pytest.mark.parametrize(("euid", "xdg", "state", "logs"), [
    (0, None, "/var/lib/slurmforge", "/var/log/slurmforge"),
    (1000, None, "/home/ann/.local/state/slurmforge", "/home/ann/.local/state/slurmforge/log"),
    (1000, "/srv/ann", "/srv/ann/slurmforge", "/srv/ann/slurmforge/log")])
def test_secrets_and_logs_are_roots_or_the_users_own(euid: int, xdg: str | None, state: str, logs: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An AWS cluster is built, rolled out and validated from an admin's own account: its
    secrets and logs go to their state directory, never to root's."""
    from slurmforge.state_dirs import secrets_dir

    monkeypatch.setattr(os, "geteuid", lambda: euid)
    monkeypatch.setenv("HOME", "/home/ann")
    if xdg is None:
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_STATE_HOME", xdg)
    assert secrets_dir("mlpools") == Path(state) / "mlpools" / "secrets"
    assert bringup.log_dir() == Path(logs)
