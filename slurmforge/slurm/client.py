"""slurmforge's Slurm client (the scheduler service's, the plan's, the drain's and the live-cluster
validation's): argument lists (never shell strings), JSON where Slurm has it.

Slurm 24.11 (Debian 13) facts this module relies on, checked against a running 24.11.5
slurmctld (data_parser v0.0.42; samples in tests/unit/slurm_json):
- `scontrol show nodes --json` lists every node once (`name`, `state` = a list whose first
  item is the base state and the rest flags such as CLOUD, POWERED_DOWN, POWERING_UP,
  POWERING_DOWN, NOT_RESPONDING, DRAIN; numbers such as `reason_changed_at` as
  {"set", "infinite", "number"}). `sinfo --json` no longer does: since 23.11 it groups
  nodes like sinfo's table (`"sinfo": [...]`), so read as a node list it finds none.
- `squeue --json` lists every job (`job_id`, `job_state` as a list, `nodes`, `user_name`,
  `state_reason`); filtering options are ignored.
- every JSON answer is an envelope `{"meta", "errors", "warnings", <items>}`. An answer
  with errors or without its list raises SlurmAnswerError: "unknown", never "empty"
  (docs/service.md, "Acting only on a view it can trust"). The older shapes (`state` a
  string with `state_flags` apart, plain ints, 22.05's error entries) are still read.
- SLURM_RESUME_FILE names a file descriptor of slurmctld (`/proc/<pid>/fd/N`) that is gone
  once ResumeProgram exits: `{"jobs": [{"job_id": 1, "nodes": "n-[01-02]"}],
  "all_nodes": "n-[01-03]"}` (later releases add more keys per job).
- `state=power_down_force` requeues the node's jobs, runs SuspendProgram, keeps the reason,
  clears DRAIN and DOWN, and leaves the node POWERING_DOWN for SuspendTimeout (a node that
  was DOWN shows `down` + POWER_DOWN first, until the power-save thread picks it up).
- `state=down` kills the node's jobs at once: batch jobs are requeued unless submitted
  with --no-requeue (JobRequeue defaults to 1), the others end NODE_FAIL.
- After ResumeTimeout a node is `down` + POWERED_DOWN + NOT_RESPONDING, reason
  "ResumeTimeout reached", and its jobs are requeued.
- ReturnToService=2 (the rendered slurm.conf): a DOWN node becomes idle again when its
  slurmd registers or answers at all (`validate_node_specs`, `node_did_resp` in 24.11's
  node_mgr.c), whatever set it DOWN; a DRAIN flag stays through that (`state=down` keeps
  the node's flags), and only `state=resume` clears it.
- `slurmd_start_time` is when the node's slurmd started, as it says when it registers:
  0 until one has.
- `scontrol requeue` refuses a job submitted with --no-requeue, one that is not a batch
  job and one already pending (`_job_requeue_op` in job_mgr.c). Whoever requeues it,
  slurmctld keeps a requeued job pending for the credential lifetime plus 1 s
  (`batch_requeue_fini`: AuthInfo cred_expire, 120 s by default, render.CRED_EXPIRE here)
  before it may start again.
- `scancel --signal=S JOB` signals the job's steps only (KILL_STEPS_ONLY); `--full`
  (KILL_FULL_JOB) has each node's slurmd `killpg` the batch step's process group - the
  shell, srun and whatever else the script started - and no other step directly: srun
  forwards the signal to its tasks (`_kill_all_active_steps` in slurmd/req.c,
  `_signal_jobstep` in slurmstepd/req.c).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import signal
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurmforge.errors import SlurmAnswerError, SlurmCommandError
from slurmforge.hostlists import compress, expand

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]

NODES_COMMAND = ("scontrol", "show", "nodes", "--json")
MAX_HOSTLIST_CHARS = 8192
"""A compressed hostlist argument longer than this is split over several calls."""
LAUNCH_FAILED_HELD = "launch failed requeued held"
"""A job's state_description after its batch launch failed: slurmctld requeued and held it."""
MAX_JOBS_PER_CALL = 200
MAX_ADDRESSES_PER_CALL = 256


def run_command(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)


# --------------------------------------------------------------------------- nodes


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as `scontrol show nodes --json` reports it."""

    name: str
    state: str
    """Base state, lower case: idle, allocated, mixed, down, unknown, future, ..."""
    flags: frozenset[str]
    address: str = ""
    hostname: str = ""
    reason: str = ""
    reason_changed_at: float = 0.0
    gres: str = ""
    gres_used: str = ""
    partitions: tuple[str, ...] = ()
    cpus: int = 0
    alloc_cpus: int = 0
    memory_mb: int = 0
    """RealMemory"""
    alloc_memory_mb: int = 0
    slurmd_started_at: float = 0.0
    """When the node's slurmd started (it says so when it registers); 0 before any has."""
    version: str = ""
    """Its slurmd's Slurm version, as it registered ("24.11.5"); "" before any has."""

    def is_cloud(self) -> bool:
        return "CLOUD" in self.flags

    def is_powering_up(self) -> bool:
        return "POWERING_UP" in self.flags

    def is_powering_down(self) -> bool:
        """On its way to power save: POWER_DOWN is the queued request (22.05 shows a
        DOWN node that was told `power_down_force` as `down` + POWER_DOWN until the
        power-save thread takes it), POWERING_DOWN the SuspendTimeout that follows."""
        return "POWERING_DOWN" in self.flags or "POWER_DOWN" in self.flags

    def is_powered_down(self) -> bool:
        """In power save (idle~ in sinfo), not on its way back up."""
        return "POWERED_DOWN" in self.flags and not self.is_powering_up()

    def is_powered(self) -> bool:
        """Up or on its way up: Slurm expects a machine behind it."""
        return not (self.is_powered_down() or self.is_powering_down())

    def is_idle(self) -> bool:
        return self.state == "idle"

    def is_down(self) -> bool:
        return self.state == "down"

    def is_drain(self) -> bool:
        return "DRAIN" in self.flags

    def has_jobs(self) -> bool:
        return self.state in ("allocated", "mixed") or "COMPLETING" in self.flags

    def is_drained(self) -> bool:
        """Drained and empty: safe to replace."""
        return self.is_drain() and not self.has_jobs()

    def is_not_responding(self) -> bool:
        """slurmd does not answer. A node on its way up always carries the flag until it
        registers, so that case is not counted."""
        return "NOT_RESPONDING" in self.flags and not self.is_powering_up()

    def gpus(self) -> int:
        return gres_count(self.gres)

    def gpus_used(self) -> int:
        return gres_count(self.gres_used)


@functools.lru_cache(maxsize=4096)
def gres_count(gres: str) -> int:
    """GPUs in a gres string: `gpu:4`, `gpu:v100:2(S:0-1)`, `gpu:0,mps:100` -> 4, 2, 0."""
    total = 0
    for item in _split_gres(gres):
        fields = item.split("(", 1)[0].split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def _split_gres(gres: str) -> Iterator[str]:
    depth, start = 0, 0
    for i, char in enumerate(gres):
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            yield gres[start:i]
            start = i + 1
    if gres[start:] and gres[start:] != "N/A":
        yield gres[start:]


def node_from_json(item: Mapping[str, Any]) -> NodeState:
    state, flags = _state_and_flags(item.get("state"), item.get("state_flags"))
    if not item.get("name"):
        raise SlurmAnswerError("nodes", "a node without a name")
    return NodeState(
        name=str(item["name"]),
        state=state,
        flags=flags,
        address=str(item.get("address") or ""),
        hostname=str(item.get("hostname") or ""),
        reason=str(item.get("reason") or ""),
        reason_changed_at=_number(item.get("reason_changed_at")),
        gres=str(item.get("gres") or ""),
        gres_used=str(item.get("gres_used") or ""),
        partitions=tuple(str(p) for p in item.get("partitions") or ()),
        cpus=_count(item.get("cpus")),
        alloc_cpus=_count(item.get("alloc_cpus")),
        memory_mb=_count(item.get("real_memory")),
        alloc_memory_mb=_count(item.get("alloc_memory")),
        slurmd_started_at=_number(item.get("slurmd_start_time")),
        version=str(item.get("version") or ""),
    )


def _state_and_flags(state: Any, flags: Any) -> tuple[str, frozenset[str]]:
    if isinstance(state, list):  # 23.02+: ["IDLE", "CLOUD", "POWERED_DOWN"]
        state = [str(s) for s in state]
        state, flags = (state[0] if state else "unknown"), [*state[1:], *(flags or ())]
    return str(state or "unknown").lower(), _flag_set(tuple(flags or ()))


@functools.lru_cache(maxsize=1024)
def _flag_set(flags: tuple[str, ...]) -> frozenset[str]:
    """Thousands of nodes share a handful of flag combinations: build each set once."""
    return frozenset(str(f).upper() for f in flags)


def _number(value: Any) -> float:
    if isinstance(value, dict):  # 23.02+: {"set": true, "number": 17}
        value = value.get("number")
    return float(value) if isinstance(value, int | float) else 0.0


def minutes(value: Any) -> float:
    """A time limit in minutes as 23.02+ writes it ({"set", "infinite", "number"}) or as a
    plain number; math.inf when infinite, 0 when not set."""
    if isinstance(value, dict):
        if value.get("infinite"):
            return math.inf
        if not value.get("set", True):
            return 0.0
    return _number(value)


def _count(value: Any) -> int:
    """A count as 22.05 writes it (an int) fast; 23.02's {"set", "number"} through _number."""
    return value if type(value) is int else int(_number(value))


def answer_items(text: str, key: str, command: str) -> list[Mapping[str, Any]]:
    """The list `key` of a Slurm JSON answer; SlurmAnswerError when the answer is not
    JSON, carries errors, or has no such list (a part missing is not an empty part)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmAnswerError(command, f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SlurmAnswerError(command, "not a JSON object")
    errors = data.get("errors") or []
    if errors:
        raise SlurmAnswerError(command, "; ".join(_error_text(e) for e in errors[:3]))
    items = data.get(key)
    if not isinstance(items, list):
        raise SlurmAnswerError(command, f"no '{key}' list in the answer")
    for warning in data.get("warnings") or []:
        log.debug("%s: %s", command, _error_text(warning))
    return items


def _error_text(entry: Any) -> str:
    """22.05: {"error", "errno"}; 23.02+: {"description", "error", "error_number", "source"}."""
    if not isinstance(entry, dict):
        return str(entry)
    parts = [str(entry[k]) for k in ("description", "error") if entry.get(k)]
    return ": ".join(dict.fromkeys(parts)) or json.dumps(entry, sort_keys=True)


def parse_nodes(text: str, command: str = "nodes") -> list[NodeState]:
    """`scontrol show nodes --json` output -> one NodeState per node (the first of a name wins)."""
    seen: dict[str, NodeState] = {}
    for item in answer_items(text, "nodes", command):
        node = node_from_json(item)
        seen.setdefault(node.name, node)
    return list(seen.values())


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    state: str
    """Upper case: PENDING, CONFIGURING, RUNNING, COMPLETING, ..."""
    nodes: str
    """Hostlist expression of the allocated nodes ("" while pending)."""
    user: str = ""
    partition: str = ""
    """Comma-separated when the job was submitted to several partitions (pending)."""
    account: str = ""
    reason: str = ""
    """state_reason: Resources, Priority, Dependency, ..."""
    eligible_at: float = 0.0
    """When the job could first start (eligible_time, else submit_time)."""
    tres: str = ""
    """tres_alloc_str once allocated, else tres_req_str: `cpu=2,mem=100M,node=1,gres/gpu=1`."""
    started_at: float = 0.0
    """start_time: when it started (running), when Slurm expects it to (pending; 0 unknown)."""
    description: str = ""
    """state_description: Slurm's own words, such as "launch failed requeued held"."""
    qos: str = ""
    time_limit: float = 0.0
    """Minutes (math.inf: UNLIMITED; 0: not known). A running job ends at its own limit,
    whatever its partition's MaxTime becomes (job_time_limit in 24.11's job_mgr.c)."""
    exit_signal: str = ""
    """The signal that ended the job's batch script (exit_code.signal: "USR1"), else ""."""
    excluded: str = ""
    """excluded_nodes: the hostlist the job may not use (ExcNodeList)."""
    required: str = ""
    """required_nodes: the hostlist the job must run on (-w, ReqNodeList)."""

    def node_names(self) -> list[str]:
        return expand(self.nodes) if self.nodes else []

    def is_pending(self) -> bool:
        return self.state == "PENDING"

    def is_running(self) -> bool:
        return self.state in ("RUNNING", "CONFIGURING")

    def is_held_after_failed_launch(self) -> bool:
        """Requeued and held by slurmctld because its batch launch failed (job_mgr.c)."""
        return self.is_pending() and self.description == LAUNCH_FAILED_HELD


def parse_jobs(text: str) -> list[Job]:
    jobs = []
    for item in answer_items(text, "jobs", "squeue"):
        state = item.get("job_state")
        if isinstance(state, list):
            state = state[0] if state else "UNKNOWN"
        eligible = _number(item.get("eligible_time")) or _number(item.get("submit_time"))
        jobs.append(Job(int(item["job_id"]), str(state).upper(), str(item.get("nodes") or ""),
                        str(item.get("user_name") or ""), partition=str(item.get("partition") or ""),
                        account=str(item.get("account") or ""), reason=str(item.get("state_reason") or ""),
                        eligible_at=eligible,
                        tres=str(item.get("tres_alloc_str") or item.get("tres_req_str") or ""),
                        started_at=_number(item.get("start_time")),
                        description=str(item.get("state_description") or ""),
                        qos=str(item.get("qos") or ""), time_limit=minutes(item.get("time_limit")),
                        exit_signal=_exit_signal(item.get("exit_code")),
                        excluded=str(item.get("excluded_nodes") or ""),
                        required=str(item.get("required_nodes") or "")))
    return jobs


def _exit_signal(code: Any) -> str:
    """{"status": ["SIGNALED"], "signal": {"id": {...}, "name": "USR1"}} -> "USR1"."""
    if not isinstance(code, dict) or "SIGNALED" not in (code.get("status") or []):
        return ""
    sig = code.get("signal") or {}
    return signal_name(sig.get("name") or _number(sig.get("id")) or "") if isinstance(sig, dict) else ""


def signal_name(value: str | float) -> str:
    """USR1, SIGUSR1, usr1, 10 -> USR1: one spelling to compare signals by."""
    text = str(value).strip().upper().removeprefix("SIG")
    try:
        number = int(float(text))
    except ValueError:
        return text
    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return text


@dataclass(frozen=True, slots=True)
class Tres:
    cpus: int = 0
    memory_mb: int = 0
    gpus: int = 0


_MEMORY_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


@functools.lru_cache(maxsize=4096)
def parse_tres(text: str) -> Tres:
    """`cpu=4,mem=16G,node=1,billing=4,gres/gpu=2` -> Tres(4, 16384, 2). Typed GPU
    entries (`gres/gpu:a10g=2`) repeat the untyped total and are not added to it."""
    fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
    mem = fields.get("mem", "0")
    unit = mem[-1:].upper() if mem[-1:].isalpha() else "M"
    number = mem[:-1] if mem[-1:].isalpha() else mem
    return Tres(cpus=_int(fields.get("cpu")),
                memory_mb=int(float(number or 0) * _MEMORY_UNITS.get(unit, 1)) if _is_number(number) else 0,
                gpus=_int(fields.get("gres/gpu")))


def _int(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def jobs_by_node(jobs: Iterable[Job]) -> dict[str, tuple[int, ...]]:
    """node -> ids of the jobs that hold it (running, configuring, completing)."""
    found: dict[str, list[int]] = {}
    for job in jobs:
        if job.state in ("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
            for node in job.node_names():
                found.setdefault(node, []).append(job.id)
    return {node: tuple(ids) for node, ids in found.items()}


# --------------------------------------------------------------------------- resume file


@dataclass(frozen=True)
class ResumeFile:
    """SLURM_RESUME_FILE: which job each resumed node is for."""

    jobs: dict[int, str]
    """job id -> hostlist expression of its nodes"""
    all_nodes: str

    def node_jobs(self) -> dict[str, int]:
        return {node: job for job, nodes in self.jobs.items() for node in expand(nodes)}


def parse_resume_file(text: str) -> ResumeFile:
    data = json.loads(text) if text.strip() else {}
    jobs = {int(j["job_id"]): str(j.get("nodes") or "") for j in data.get("jobs") or []}
    return ResumeFile(jobs=jobs, all_nodes=str(data.get("all_nodes") or ""))


# --------------------------------------------------------------------------- client


class SlurmClient:
    """Reads node and job state and changes nodes and jobs. Every command is an argument
    list; node sets travel as compressed hostlists, split when very long."""

    def __init__(self, runner: Runner = run_command, bin_dir: str = "") -> None:
        self._runner = runner
        self._bin = bin_dir.rstrip("/") + "/" if bin_dir else ""

    def run(self, *argv: str) -> str:
        cmd = [self._bin + argv[0], *argv[1:]]
        result = self._runner(cmd)
        if result.returncode != 0:
            raise SlurmCommandError(cmd, result.returncode, result.stderr or "")
        return result.stdout

    def nodes(self) -> list[NodeState]:
        return parse_nodes(self.run(*NODES_COMMAND), " ".join(NODES_COMMAND))

    def ping(self) -> dict[str, bool]:
        """Every controller -> whether its slurmctld answers (service.leader). scontrol exits
        non-zero when one is down: its JSON still says which."""
        cmd = [self._bin + "scontrol", "ping", "--json"]
        result = self._runner(cmd)
        try:
            return parse_ping(result.stdout)
        except (ValueError, KeyError, TypeError) as exc:
            raise SlurmCommandError(cmd, result.returncode, result.stderr or str(exc)) from exc

    def jobs(self) -> list[Job]:
        return parse_jobs(self.run("squeue", "--json"))

    def jobs_by_id(self, ids: Sequence[int]) -> list[Job]:
        """These jobs in any state, the finished ones included (while slurmctld still holds
        them: MinJobAge); unknown ids are left out."""
        found: list[Job] = []
        for chunk in _chunks(list(ids), MAX_JOBS_PER_CALL):
            try:
                found += parse_jobs(self.run("squeue", "--json", "--states=all",
                                             "--jobs=" + ",".join(map(str, chunk))))
            except SlurmCommandError as exc:  # one id, forgotten by slurmctld: squeue fails (several: left out)
                if "Invalid job id" not in exc.stderr:
                    raise
        return found

    def sacct(self, argv: Sequence[str], env: Mapping[str, str]) -> str:
        """Accounting records: `argv` as slurmforge.cost.sacct_argv makes it, with env
        (SLURM_TIME_FORMAT) through env(1), as the runner takes only an argument list."""
        cmd = ["env", *(f"{k}={v}" for k, v in env.items()), self._bin + argv[0], *argv[1:]]
        result = self._runner(cmd)
        if result.returncode != 0:
            raise SlurmCommandError(cmd, result.returncode, result.stderr or "")
        return result.stdout

    def update_nodes(self, nodes: Sequence[str], *fields: str) -> None:
        for hostlist in hostlist_chunks(nodes):
            self.run("scontrol", "update", f"nodename={hostlist}", *fields)

    def power_down(self, nodes: Sequence[str], reason: str) -> None:
        """POWER_DOWN_FORCE: requeue the node's jobs, release the machine, back to idle~.
        Never DOWN: a DOWN cloud node stays out of service until someone resumes it."""
        self.update_nodes(nodes, "state=power_down_force", f"reason={reason}")

    def power_up(self, nodes: Sequence[str]) -> None:
        self.update_nodes(nodes, "state=power_up")

    def resume(self, nodes: Sequence[str]) -> None:
        """Back in service: clears DOWN and DRAIN (with ReturnToService=2 a DOWN node's
        registration does the first by itself, never the second)."""
        self.update_nodes(nodes, "state=resume")

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        self.update_nodes(nodes, "state=drain", f"reason={reason}")

    def mark_down(self, nodes: Sequence[str], reason: str) -> None:
        """DOWN: slurmctld ends the nodes' jobs now - requeued, or NODE_FAIL for those
        that may not be requeued - instead of after SlurmdTimeout."""
        self.update_nodes(nodes, "state=down", f"reason={reason}")

    def set_address(self, node: str, address: str, hostname: str | None = None) -> None:
        fields = [f"nodeaddr={address}"] + ([f"nodehostname={hostname}"] if hostname else [])
        self.run("scontrol", "update", f"nodename={node}", *fields)

    def set_addresses(self, addresses: Mapping[str, str]) -> None:
        """Many nodes at once: `nodename=n-[01-03] nodeaddr=ip1,ip2,ip3` (the addresses in
        the order the hostlist expands, as scontrol pairs them)."""
        names = list(addresses)
        for start in range(0, len(names), MAX_ADDRESSES_PER_CALL):
            hostlist = compress(names[start:start + MAX_ADDRESSES_PER_CALL])
            ordered = expand(hostlist)
            self.run("scontrol", "update", f"nodename={hostlist}",
                     "nodeaddr=" + ",".join(addresses[n] for n in ordered))

    def requeue(self, jobs: Sequence[int]) -> None:
        for chunk in _chunks(list(jobs), MAX_JOBS_PER_CALL):
            self.run("scontrol", "requeue", ",".join(str(j) for j in chunk))

    def exclude_nodes(self, job: int, nodes: Sequence[str]) -> None:
        """The job's ExcNodeList becomes `nodes` (none: cleared). Slurm changes it only while
        the job is pending (ESLURM_JOB_NOT_PENDING otherwise: _update_job, job_mgr.c)."""
        self.run("scontrol", "update", f"jobid={job}", "excnodelist=" + (compress(list(nodes)) if nodes else ""))

    def begin_after(self, job: int, seconds: float) -> None:
        """The pending job starts no sooner than `seconds` from now (StartTime=now+N: its begin
        time, which a later requeue keeps while it lies ahead - batch_requeue_fini, job_mgr.c)."""
        self.run("scontrol", "update", f"jobid={job}", f"starttime=now+{max(math.ceil(seconds), 1)}")

    def release(self, jobs: Sequence[int]) -> None:
        for chunk in _chunks(list(jobs), MAX_JOBS_PER_CALL):
            self.run("scontrol", "release", ",".join(str(j) for j in chunk))

    def signal(self, jobs: Sequence[int], signal: str = "USR1") -> None:
        """Signal the whole of each job: the batch shell's process group - the script and
        what it runs without srun, such as `python train.py` - and srun, which passes the
        signal on to its step's tasks on every node (`scancel --full`; without it only the
        steps hear it). That is `#SBATCH --signal=B:USR1@N` as the service sends it: a
        script traps it (or execs the program that handles it), as checkpointing code
        (PyTorch Lightning's SLURMEnvironment, submitit) and examples/jobs do; bash ends
        on an untrapped USR1."""
        for chunk in _chunks(list(jobs), MAX_JOBS_PER_CALL):
            self.run("scancel", "--full", f"--signal={signal}", *(str(j) for j in chunk))


def hostlist_chunks(nodes: Sequence[str]) -> list[str]:
    """Compressed hostlists covering `nodes`, each short enough for one argument."""
    text = compress(nodes)
    if len(text) <= MAX_HOSTLIST_CHARS or len(nodes) <= 1:
        return [text] if nodes else []
    half = len(nodes) // 2
    ordered = sorted(nodes)
    return hostlist_chunks(ordered[:half]) + hostlist_chunks(ordered[half:])


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def parse_ping(text: str) -> dict[str, bool]:
    """`scontrol ping --json` (24.11): {"pings": [{"hostname", "responding", ...}]}."""
    data = json.loads(text)
    return {str(p["hostname"]): bool(p.get("responding", p.get("pinged") == "UP")) for p in data["pings"]}
