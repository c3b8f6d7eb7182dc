"""What is deployed, read from the cluster itself: the files the last rollout left on a
controller and what Slurm and slurmdbd say now. Never the spec file on this machine: that is
what someone means to deploy, not what runs.

From the controller (the primary, else the next one that answers), in one round trip
(slurmforge/plan/gather.py runs there with its python3):
- the spec the last rollout shipped (ETC_DIR/cluster.yaml, the scheduler service's copy:
  roles/scheduler_service/tasks/settings.yml) and its rollout mark (contract.DIGEST_FILE:
  absent when the last rollout did not finish there);
- the Slurm configs as installed (roles/slurm_controller: /etc/slurm/slurm.conf, gres.conf,
  cgroup.conf, job_submit.lua, /etc/dma/dma.conf; roles/slurmdbd: /etc/slurm/slurmdbd.conf);
- `scontrol show nodes|partitions|jobs --json` (slurmctld's view: which nodes have a machine,
  which jobs run or wait where, partitions as they are now, `scontrol update` included);
- slurmdbd's QoS, accounts and users (the sacctmgr reads of slurmforge.accounting).

A `Deployed` can be saved as JSON and planned against later (`slurmforge plan --save-state`,
`--state`): the same record the tests and bench/plan_bench.py build.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmforge import accounting
from slurmforge.connection import CONTAINER
from slurmforge.contract import DIGEST_FILE, ETC_DIR
from slurmforge.errors import ClusterUnreachable, RemoteError, SlurmAnswerError
from slurmforge.hosts import Host, HostRole
from slurmforge.slurm.client import Job, NodeState, answer_items, minutes, parse_jobs, parse_nodes
from slurmforge.spec.routing import JOB_SUBMIT_SCRIPT

SPEC_FILE = f"{ETC_DIR}/cluster.yaml"
"""The spec the last rollout shipped (the scheduler service re-reads it there)."""
CONFIG_PATHS: Mapping[str, str] = {
    "slurm.conf": "/etc/slurm/slurm.conf",
    "gres.conf": "/etc/slurm/gres.conf",
    "cgroup.conf": "/etc/slurm/cgroup.conf",
    JOB_SUBMIT_SCRIPT: f"/etc/slurm/{JOB_SUBMIT_SCRIPT}",
    "slurmdbd.conf": "/etc/slurm/slurmdbd.conf",
    "dma.conf": "/etc/dma/dma.conf",
}
"""Where the rollout installs each rendered config on a controller (the roles' `dest`)."""
NODES, PARTITIONS, JOBS = (("scontrol", "show", "nodes", "--json"), ("scontrol", "show", "partitions", "--json"),
                           ("scontrol", "show", "jobs", "--json"))
GATHER = Path(__file__).with_name("gather.py")
READ_TIMEOUT = 60.0
RECORD_VERSION = 1


@dataclass(frozen=True)
class LivePartition:
    """A partition as slurmctld has it now (`scontrol update` included)."""

    name: str
    state: str
    max_time: float
    """Minutes; math.inf: UNLIMITED."""
    default_time: float
    """Minutes; 0: none set."""


@dataclass
class Deployed:
    controller: str
    """The controller it was read from."""
    spec_text: str | None
    """The spec the last rollout shipped; None: nothing was ever rolled out there."""
    configs: dict[str, str] = field(default_factory=dict)
    """Rendered file name (slurm.conf, ...) -> the text installed; a file not there is absent."""
    mark: str = ""
    """The controller's rollout mark ("" when the last rollout did not finish there)."""
    nodes: list[NodeState] | None = None
    jobs: list[Job] | None = None
    partitions: list[LivePartition] | None = None
    slurm_error: str = ""
    """Why nodes, jobs and partitions are None (slurmctld did not answer)."""
    accounting_answers: dict[tuple[str, ...], tuple[int, str, str]] = field(default_factory=dict)
    """sacctmgr's answers to accounting.state_commands(): (rc, stdout, stderr) by argv."""
    seconds: float = 0.0
    """How long reading it took."""

    def accounting_state(self) -> tuple[accounting.State | None, str]:
        """slurmdbd's QoS, accounts and users as they were read; None and why when slurmdbd
        did not answer."""

        def replay(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
            rc, out, err = self.accounting_answers.get(tuple(argv), (1, "", "not read"))
            return subprocess.CompletedProcess(list(argv), rc, out, err)

        try:
            return accounting.read_state(replay, wait=0), ""
        except accounting.AccountingError as exc:
            return None, str(exc)

    # ------------------------------------------------------------------ the record

    def to_json(self) -> dict[str, Any]:
        live = None if self.nodes is None else {
            "nodes": [[n.name, n.state, sorted(n.flags)] for n in self.nodes],
            "jobs": [[j.id, j.state, j.nodes, j.user, j.partition, j.account, j.qos, j.time_limit]
                     for j in self.jobs or []],
            "partitions": [[p.name, p.state, p.max_time, p.default_time] for p in self.partitions or []]}
        return {"version": RECORD_VERSION, "controller": self.controller, "spec": self.spec_text,
                "configs": self.configs, "mark": self.mark, "slurm": live, "slurm_error": self.slurm_error,
                "accounting": [[list(argv), *answer] for argv, answer in self.accounting_answers.items()]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Deployed:
        if data.get("version") != RECORD_VERSION:
            raise ValueError(f"not a plan state of version {RECORD_VERSION}")
        live = data.get("slurm")
        deployed = cls(str(data["controller"]), data.get("spec"), dict(data.get("configs") or {}),
                       str(data.get("mark") or ""), slurm_error=str(data.get("slurm_error") or ""),
                       accounting_answers={tuple(a[0]): (int(a[1]), str(a[2]), str(a[3]))
                                           for a in data.get("accounting") or []})
        if live is not None:
            flag_sets: dict[tuple[str, ...], frozenset[str]] = {}  # thousands of nodes share a few
            deployed.nodes = [NodeState(name, state, flag_sets.setdefault(tuple(flags), frozenset(flags)))
                              for name, state, flags in live["nodes"]]
            deployed.jobs = [Job(int(i), state, nodes, user, partition=part, account=account, qos=qos,
                                 time_limit=float(limit))
                             for i, state, nodes, user, part, account, qos, limit in live["jobs"]]
            deployed.partitions = [LivePartition(name, state, float(most), float(default))
                                   for name, state, most, default in live["partitions"]]
        return deployed


def save(deployed: Deployed, path: Path) -> None:
    path.write_text(json.dumps(deployed.to_json()))


def load(path: Path) -> Deployed:
    """A state `save` wrote; ClusterUnreachable (it stands for the cluster) when it cannot be read."""
    try:
        return Deployed.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ClusterUnreachable(f"cannot read the saved state {path}: {exc}; fix: pass a file "
                                 "`slurmforge plan --save-state` wrote") from None


# ---------------------------------------------------------------------- reading the cluster


def local_controllers(controller_names: Sequence[str]) -> list[Host]:
    """The local target's controllers: containers named like their hosts."""
    return [Host(name, name, HostRole.CONTROLLER, connection={CONTAINER: name}) for name in controller_names]


def inventory_controllers(inventory_dir: Path) -> list[Host]:
    """An inventory's controllers, the primary first, each with how to reach it (its spec
    copy is not read: it may be one this slurmforge would refuse)."""
    from slurmforge.inventory import read_hosts

    return [h for h in read_hosts(inventory_dir) if h.role is HostRole.CONTROLLER]


def read(controllers: Sequence[Host]) -> Deployed:
    """What is deployed, from the first of `controllers` that answers (the primary first: a
    backup has the same files). ClusterUnreachable when none does."""
    from slurmforge.remote.node import executor_for  # its inventory reader is not needed before here

    request = {"files": [SPEC_FILE, DIGEST_FILE, *CONFIG_PATHS.values()],
               "commands": [list(c) for c in (NODES, PARTITIONS, JOBS, *accounting.state_commands())],
               "timeout": READ_TIMEOUT / 2}
    tried = []
    started = time.monotonic()
    for host in controllers:
        try:
            done = executor_for(host).run(["python3", "-c", GATHER.read_text(), json.dumps(request)],
                                          timeout=READ_TIMEOUT)
        except RemoteError as exc:
            tried.append(f"{host.name}: {exc}")
            continue
        if not done.ok:
            tried.append(f"{host.name}: python3 answered {done.rc}: {done.reason()}")
            continue
        try:
            answer = json.loads(done.stdout)
        except ValueError:
            tried.append(f"{host.name}: did not answer JSON: {done.stdout.strip()[:120]!r}")
            continue
        deployed = from_answer(host.name, request, answer)
        deployed.seconds = time.monotonic() - started
        return deployed
    if not controllers:
        raise ClusterUnreachable("no controller to read the deployed cluster from")
    others = f"; {', '.join(h.name for h in controllers[1:])} did not answer either" if len(controllers) > 1 else ""
    raise ClusterUnreachable(f"cannot read the deployed cluster from its controller {tried[0]}{others}")


def from_answer(controller: str, request: Mapping[str, Any], answer: Mapping[str, Any]) -> Deployed:
    """A Deployed from gather.py's answer to `request`."""
    files: Mapping[str, str | None] = answer["files"]
    commands = dict(zip((tuple(c) for c in request["commands"]), answer["commands"], strict=True))
    deployed = Deployed(controller, files.get(SPEC_FILE),
                        {name: text for name, path in CONFIG_PATHS.items() if (text := files.get(path)) is not None},
                        (files.get(DIGEST_FILE) or "").strip())
    deployed.accounting_answers = {argv: (int(a[0]), str(a[1]), str(a[2])) for argv, a in commands.items()
                                   if argv not in (NODES, PARTITIONS, JOBS)}
    try:
        deployed.nodes, deployed.partitions, deployed.jobs = (
            parse_nodes(_answer(commands, NODES)), parse_partitions(_answer(commands, PARTITIONS)),
            parse_jobs(_answer(commands, JOBS)))
    except SlurmAnswerError as exc:
        deployed.nodes = deployed.partitions = deployed.jobs = None
        deployed.slurm_error = str(exc)
    return deployed


def _answer(commands: Mapping[tuple[str, ...], Sequence[Any]], argv: tuple[str, ...]) -> str:
    rc, out, err = commands[argv]
    if rc != 0:
        lines = [line for line in str(err).splitlines() if line.strip()] or [f"exit code {rc}"]
        raise SlurmAnswerError(" ".join(argv[:3]), lines[-1].strip()[:300])
    return str(out)


def parse_partitions(text: str) -> list[LivePartition]:
    """`scontrol show partitions --json` (data_parser v0.0.42): the state, MaxTime and
    DefaultTime of each partition, in minutes."""
    out = []
    for item in answer_items(text, "partitions", "partitions"):
        state = (item.get("partition") or {}).get("state") or ["UNKNOWN"]
        most = (item.get("maximums") or {}).get("time")
        out.append(LivePartition(str(item["name"]), str(state[0] if isinstance(state, list) else state).upper(),
                                 minutes(most) if isinstance(most, dict) and most.get("set") else float("inf"),
                                 minutes((item.get("defaults") or {}).get("time"))))
    return out
