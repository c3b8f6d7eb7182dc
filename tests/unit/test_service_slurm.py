"""The Slurm client: JSON as Slurm 24.11.5 (tests/unit/slurm_json) and 22.05.8 really write it
(samples taken from a running slurmctld with CLOUD nodes) and in 24.11's shape (data_parser v0.0.42), answers that must
not be trusted (errors, a missing list, not JSON), and the exact argument lists it runs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from slurmforge.errors import SlurmAnswerError, SlurmCommandError
from slurmforge.slurm.client import (
    SlurmClient,
    gres_count,
    hostlist_chunks,
    jobs_by_node,
    parse_jobs,
    parse_nodes,
    parse_resume_file,
    signal_name,
)

pytestmark = pytest.mark.unit

META = {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
        "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}
# sinfo --json, 22.05.8: a node on its way up, one after ResumeTimeout, one in power save, a drained one
SINFO = {"meta": META, "errors": [], "nodes": [
    {"name": "probe-gpu-01", "state": "mixed", "state_flags": ["CLOUD", "NOT_RESPONDING", "POWERING_UP"],
     "address": "probe-gpu-01", "hostname": "probe-gpu-01", "reason": "", "reason_changed_at": 0,
     "gres": "gpu:2", "gres_used": "gpu:0", "partitions": ["p"], "alloc_cpus": 1, "cpus": 2, "boot_time": 0},
    {"name": "probe-gpu-02", "state": "down", "state_flags": ["CLOUD", "POWERED_DOWN", "NOT_RESPONDING"],
     "address": "probe-gpu-02", "hostname": "probe-gpu-02", "reason": "ResumeTimeout reached",
     "reason_changed_at": 1795322372, "gres": "gpu:2", "gres_used": "gpu:1", "partitions": ["p"]},
    {"name": "probe-gpu-03", "state": "down", "state_flags": ["CLOUD", "NOT_RESPONDING", "POWER_DOWN"],
     "address": "probe-gpu-03", "hostname": "probe-gpu-03", "reason": "slurmforge: reset after 'ResumeTimeout reached'",
     "reason_changed_at": 1795324752, "gres": "gpu:2", "gres_used": "gpu:0", "partitions": ["p"]},
    {"name": "probe-gpu-04", "state": "idle", "state_flags": ["CLOUD", "POWERED_DOWN"], "address": "probe-gpu-04",
     "hostname": "probe-gpu-04", "reason": "", "reason_changed_at": 0, "gres": "gpu:2", "gres_used": "gpu:0",
     "partitions": ["p"]},
    {"name": "probe-gpu-05", "state": "idle", "state_flags": ["CLOUD", "DRAIN"], "address": "10.1.2.3",
     "hostname": "ip-10-1-2-3", "reason": "spot interruption", "reason_changed_at": 1795322321,
     "gres": "gpu:v100:2(S:0-1)", "gres_used": "gpu:v100:0(IDX:N/A)", "partitions": ["p"]},
]}
SQUEUE = {"meta": META, "errors": [], "jobs": [
    {"job_id": 1, "job_state": "CONFIGURING", "nodes": "probe-gpu-[01-02]", "user_name": "alice", "partition": "p"},
    {"job_id": 2, "job_state": "RUNNING", "nodes": "probe-gpu-03", "user_name": "bob", "partition": "p"},
    {"job_id": 3, "job_state": "PENDING", "nodes": "", "user_name": "bob", "partition": "p"},
]}
META_24_11 = {"plugin": {"type": "", "name": "", "data_parser": "data_parser/v0.0.42", "accounting_storage": ""},
              "client": {"source": "/dev/pts/0", "user": "root", "group": "root"},
              "command": ["show", "nodes"], "slurm": {"version": {"major": "24", "micro": "5", "minor": "11"},
                                                      "release": "24.11.5", "cluster": "c"}}
# scontrol show nodes --json, 24.11: states are lists, times are {"set", "infinite", "number"}
SCONTROL_24_11 = {"meta": META_24_11, "errors": [], "warnings": [], "nodes": [
    {"name": "c-gpu-01", "state": ["MIXED", "CLOUD", "NOT_RESPONDING", "POWERING_UP"], "address": "c-gpu-01",
     "hostname": "c-gpu-01", "reason": "", "reason_changed_at": {"set": False, "infinite": False, "number": 0},
     "gres": "gpu:2", "gres_used": "gpu:0", "partitions": ["gpu"], "cpus": 8, "alloc_cpus": 2,
     "real_memory": 30000, "alloc_memory": 1000},
    {"name": "c-gpu-02", "state": ["DOWN", "CLOUD", "POWERED_DOWN", "NOT_RESPONDING"], "address": "c-gpu-02",
     "hostname": "c-gpu-02", "reason": "ResumeTimeout reached",
     "reason_changed_at": {"set": True, "infinite": False, "number": 1795322372}, "gres": "gpu:2",
     "gres_used": "gpu:0", "partitions": ["gpu"], "cpus": 8, "alloc_cpus": 0, "real_memory": 30000,
     "alloc_memory": 0},
    {"name": "c-cpu-01", "state": ["ALLOCATED"], "address": "10.89.0.21", "hostname": "c-cpu-01", "reason": "",
     "reason_changed_at": {"set": False, "infinite": False, "number": 0}, "gres": "", "gres_used": "",
     "partitions": ["cpu"], "cpus": 2, "alloc_cpus": 2, "real_memory": 1000, "alloc_memory": 500},
]}
# what 22.05's sinfo and 24.11's scontrol answer while slurmctld cannot be reached
UNREACHABLE_22_05 = {"meta": META, "errors": [{"error": "Unable to contact slurm controller (connect failure)",
                                               "errno": 1007}], "nodes": []}
UNREACHABLE_24_11 = {"meta": META_24_11, "warnings": [], "nodes": [], "errors": [
    {"description": "Unable to query nodes", "source": "slurm_load_node", "error_number": 1007,
     "error": "Unable to contact slurm controller (connect failure)"}]}
RESUME_FILE = ('{"jobs":[{"job_id":1,"nodes":"probe-gpu-[01-02]"},{"job_id":2,"nodes":"probe-gpu-03"}],'
               '"all_nodes":"probe-gpu-[01-03]"}')


def test_sinfo_json_22_05() -> None:
    nodes = {n.name: n for n in parse_nodes(json.dumps(SINFO))}
    up, timed_out, reset, off, drained = (nodes[f"probe-gpu-0{i}"] for i in (1, 2, 3, 4, 5))
    assert reset.is_powering_down() and not reset.is_powered()  # down + POWER_DOWN: told power_down_force
    assert up.is_powering_up() and up.is_powered() and not up.is_not_responding() and up.is_cloud()
    assert timed_out.is_down() and timed_out.is_powered_down() and timed_out.reason == "ResumeTimeout reached"
    assert timed_out.reason_changed_at == 1795322372
    assert off.is_powered_down() and off.is_idle() and not off.is_powered()
    assert drained.is_drained() and drained.address == "10.1.2.3" and drained.gpus() == 2
    assert timed_out.gpus_used() == 1


def test_scontrol_show_nodes_json_24_11() -> None:
    nodes = {n.name: n for n in parse_nodes(json.dumps(SCONTROL_24_11))}
    up, timed_out, static = nodes["c-gpu-01"], nodes["c-gpu-02"], nodes["c-cpu-01"]
    assert up.is_powering_up() and up.is_cloud() and up.alloc_cpus == 2 and up.memory_mb == 30000
    assert timed_out.is_down() and timed_out.is_powered_down() and timed_out.reason_changed_at == 1795322372
    assert static.has_jobs() and not static.is_cloud() and static.address == "10.89.0.21"


@pytest.mark.parametrize("answer", [UNREACHABLE_22_05, UNREACHABLE_24_11], ids=["22.05", "24.11"])
def test_an_answer_with_errors_is_an_error_not_an_empty_cluster(answer: dict[str, object]) -> None:
    with pytest.raises(SlurmAnswerError, match="Unable to contact slurm controller"):
        parse_nodes(json.dumps(answer))
    with pytest.raises(SlurmAnswerError, match="Unable to contact slurm controller"):
        parse_jobs(json.dumps({**answer, "jobs": []}))


@pytest.mark.parametrize(("text", "problem"), [
    ("", "not JSON"),
    ("slurm_load_node error: Socket timed out", "not JSON"),
    ("[]", "not a JSON object"),
    (json.dumps({"meta": META_24_11, "errors": [], "sinfo": []}), "no 'nodes' list"),  # 24.11's sinfo shape
    (json.dumps({"meta": META, "errors": []}), "no 'nodes' list"),
    (json.dumps({"errors": [], "nodes": [{"state": ["IDLE"]}]}), "a node without a name"),
])
def test_an_answer_with_a_part_missing_is_an_error(text: str, problem: str) -> None:
    with pytest.raises(SlurmAnswerError, match=problem):
        parse_nodes(text)


def test_a_warning_alone_does_not_make_an_answer_untrusted() -> None:
    answer = {**SCONTROL_24_11, "warnings": [{"description": "field deprecated", "source": "x"}]}
    assert len(parse_nodes(json.dumps(answer))) == 3


SAMPLES = Path(__file__).parent / "slurm_json"


def test_scontrol_show_nodes_json_24_11_of_the_local_cluster() -> None:
    """What a real 24.11.5 slurmctld of the local cluster wrote: two static CPU nodes, three
    powered-down CLOUD nodes, the GPU node."""
    text = (SAMPLES / "scontrol-show-nodes-24.11.5.json").read_text()
    nodes = {n.name: n for n in parse_nodes(text)}
    assert sorted(nodes) == ["dev-cpu-01", "dev-cpu-02", "dev-cpu-03", "dev-cpu-04", "dev-cpu-fallback-01",
                             "dev-gpu-01"]
    assert nodes["dev-cpu-01"].is_idle() and nodes["dev-cpu-01"].is_powered() and not nodes["dev-cpu-01"].is_cloud()
    assert nodes["dev-cpu-03"].is_powered_down() and nodes["dev-cpu-03"].is_cloud()
    assert nodes["dev-gpu-01"].gpus() == 2 and nodes["dev-cpu-01"].cpus == 2
    # when each slurmd started (a static node's replacement is known to have joined by it)
    assert nodes["dev-cpu-01"].slurmd_started_at == 1795463328 and nodes["dev-cpu-03"].slurmd_started_at == 0


def test_squeue_json_24_11() -> None:
    (job,) = parse_jobs((SAMPLES / "squeue-24.11.5.json").read_text())
    assert (job.id, job.state, job.nodes, job.user, job.account) == (1, "RUNNING", "dev-cpu-01", "alice", "research")
    assert job.eligible_at > 0 and job.tres.startswith("cpu=1,mem=1G")


def test_the_signal_that_ended_a_job() -> None:
    """squeue --states=all of a batch script ended by USR1, as 24.11.5 writes it."""
    ended = {"jobs": [{"job_id": 2, "job_state": ["FAILED"], "nodes": "n1", "exit_code": {
        "status": ["SIGNALED"], "return_code": {"set": False, "infinite": False, "number": 0},
        "signal": {"id": {"set": True, "infinite": False, "number": 10}, "name": "USR1"}}},
        {"job_id": 3, "job_state": ["FAILED"], "nodes": "n1", "exit_code": {
            "status": ["SIGNALED"], "signal": {"id": {"set": True, "infinite": False, "number": 9}, "name": ""}}},
        {"job_id": 4, "job_state": ["COMPLETED"], "nodes": "n1", "exit_code": {
            "status": ["SUCCESS"], "return_code": {"set": True, "infinite": False, "number": 0}}}]}
    assert [j.exit_signal for j in parse_jobs(json.dumps(ended))] == ["USR1", "KILL", ""]
    assert [signal_name(s) for s in ("USR1", "SIGUSR1", "usr1", "10", 10)] == ["USR1"] * 5


def test_jobs_by_id_asks_for_every_state_and_survives_a_forgotten_job() -> None:
    calls: list[list[str]] = []

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        if argv[-1] == "--jobs=9":  # one id slurmctld no longer holds: squeue fails
            return subprocess.CompletedProcess(argv, 1, "", "slurm_load_jobs error: Invalid job id specified\n")
        return subprocess.CompletedProcess(argv, 0, json.dumps({"jobs": [
            {"job_id": 2, "job_state": ["RUNNING"], "nodes": "n1"}]}), "")

    client = SlurmClient(run)
    assert [j.id for j in client.jobs_by_id([2, 9])] == [2]
    assert client.jobs_by_id([9]) == []
    assert calls[0] == ["squeue", "--json", "--states=all", "--jobs=2,9"]


def test_state_as_list_from_later_releases() -> None:
    later = {"nodes": [{"name": "n1", "state": ["IDLE", "CLOUD", "POWERED_DOWN"],
                        "reason_changed_at": {"set": True, "number": 5}}]}
    (node,) = parse_nodes(json.dumps(later))
    assert node.state == "idle" and node.is_powered_down() and node.reason_changed_at == 5


@pytest.mark.parametrize(("gres", "count"), [("gpu:4", 4), ("gpu:v100:2(S:0-1)", 2), ("gpu:0,mps:100", 0),
                                            ("gpu:a100:1(IDX:0),gpu:a100:1(IDX:1)", 2), ("N/A", 0), ("", 0)])
def test_gres_count(gres: str, count: int) -> None:
    assert gres_count(gres) == count


def test_squeue_json_and_jobs_by_node() -> None:
    jobs = parse_jobs(json.dumps(SQUEUE))
    assert [(j.id, j.state, j.user) for j in jobs] == [(1, "CONFIGURING", "alice"), (2, "RUNNING", "bob"),
                                                       (3, "PENDING", "bob")]
    assert jobs_by_node(jobs) == {"probe-gpu-01": (1,), "probe-gpu-02": (1,), "probe-gpu-03": (2,)}


def test_resume_file_22_05() -> None:
    resume = parse_resume_file(RESUME_FILE)
    assert resume.all_nodes == "probe-gpu-[01-03]"
    assert resume.node_jobs() == {"probe-gpu-01": 1, "probe-gpu-02": 1, "probe-gpu-03": 2}
    assert parse_resume_file("").node_jobs() == {}


class FakeRunner:
    def __init__(self, outputs: dict[str, str] | None = None, fail: set[str] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.outputs, self.fail = outputs or {}, fail or set()

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        rc = 1 if any(f in " ".join(argv) for f in self.fail) else 0
        name = argv[0].rsplit("/", 1)[-1]
        out = self.outputs.get(" ".join([name, *argv[1:]]), self.outputs.get(name, ""))
        return subprocess.CompletedProcess(list(argv), rc, out, "boom" if rc else "")


def test_commands_are_argument_lists() -> None:
    runner = FakeRunner({"squeue": json.dumps(SQUEUE), "scontrol show nodes --json": json.dumps(SCONTROL_24_11)})
    slurm = SlurmClient(runner, bin_dir="/usr/bin")
    assert len(slurm.nodes()) == 3 and len(slurm.nodes()) == 3 and len(slurm.jobs()) == 3
    slurm.mark_down(["c-gpu-02", "c-gpu-01"], "slurmforge: instance i-1 of c-gpu-01 is terminated")
    slurm.power_down(["c-gpu-03", "c-gpu-01", "c-gpu-02"], "slurmforge: no capacity on spot, od")
    slurm.power_up(["c-gpu-01"])
    slurm.resume(["c-gpu-02", "c-gpu-01"])
    slurm.drain(["c-gpu-01"], "slurmforge: spot interruption notice")
    slurm.set_address("c-gpu-01", "10.0.0.7", "ip-10-0-0-7")
    slurm.requeue([12, 13])
    slurm.signal([12], "USR1")
    assert runner.calls == [
        ["/usr/bin/scontrol", "show", "nodes", "--json"],
        ["/usr/bin/scontrol", "show", "nodes", "--json"],
        ["/usr/bin/squeue", "--json"],
        ["/usr/bin/scontrol", "update", "nodename=c-gpu-[01-02]", "state=down",
         "reason=slurmforge: instance i-1 of c-gpu-01 is terminated"],
        ["/usr/bin/scontrol", "update", "nodename=c-gpu-[01-03]", "state=power_down_force",
         "reason=slurmforge: no capacity on spot, od"],
        ["/usr/bin/scontrol", "update", "nodename=c-gpu-01", "state=power_up"],
        ["/usr/bin/scontrol", "update", "nodename=c-gpu-[01-02]", "state=resume"],
        ["/usr/bin/scontrol", "update", "nodename=c-gpu-01", "state=drain",
         "reason=slurmforge: spot interruption notice"],
        ["/usr/bin/scontrol", "update", "nodename=c-gpu-01", "nodeaddr=10.0.0.7", "nodehostname=ip-10-0-0-7"],
        ["/usr/bin/scontrol", "requeue", "12,13"],
        ["/usr/bin/scancel", "--full", "--signal=USR1", "12"],
    ]


def test_addresses_of_many_nodes_in_one_call_in_hostlist_order() -> None:
    runner = FakeRunner()
    SlurmClient(runner).set_addresses({"n-10": "10.0.0.10", "n-02": "10.0.0.2", "n-09": "10.0.0.9", "m-1": "10.1.0.1"})
    assert runner.calls == [["scontrol", "update", "nodename=m-1,n-[02,09-10]",
                             "nodeaddr=10.1.0.1,10.0.0.2,10.0.0.9,10.0.0.10"]]


def test_failed_command_raises_typed_error() -> None:
    slurm = SlurmClient(FakeRunner(fail={"requeue"}))
    with pytest.raises(SlurmCommandError) as err:
        slurm.requeue([5])
    assert err.value.cmd == ["scontrol", "requeue", "5"] and err.value.rc == 1 and err.value.stderr == "boom"


def test_scattered_nodes_never_make_a_huge_argument() -> None:
    nodes = [f"c-gpu-{i:05d}" for i in range(1, 40_000, 2)]  # 20,000 nodes, no two adjacent
    chunks = hostlist_chunks(nodes)
    assert len(chunks) > 1 and all(len(c) <= 8192 for c in chunks)
    from slurmforge.hostlists import expand

    assert sorted(n for c in chunks for n in expand(c)) == nodes
