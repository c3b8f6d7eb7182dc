"""`slurmforge plan` from recorded states: what applying a spec edit does to a running cluster.

The deployed side is what slurmforge.plan.deployed reads from a controller. Its Slurm and
slurmdbd parts come from tests/unit/plan_states/dev-live.json, recorded from the local
cluster "dev" with `slurmforge plan --save-state` (Slurm 24.11.5: scontrol's JSON and
sacctmgr's answers), and from tests/unit/slurm_json; its files are what this slurmforge
renders from the deployed spec (examples/local.yaml), edited where a test needs drift."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmforge import accounting
from slurmforge.drain import REBUILD, REMOVE, Drain, JobPolicy
from slurmforge.plan import deployed as dep
from slurmforge.plan.configs import parse_slurm_conf
from slurmforge.plan.deployed import Deployed, LivePartition
from slurmforge.plan.engine import CHANGES_EXIT, ClusterPlan, PlanError, Row, make_plan, node_places
from slurmforge.plan.show import plan_table
from slurmforge.render import render_all
from slurmforge.slurm.client import Job, NodeState
from slurmforge.spec import Cluster, validate_data
from slurmforge.tables import Format, render

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
STATES = Path(__file__).parent / "plan_states"
SLURM_JSON = Path(__file__).parent / "slurm_json"
RECORDED = Deployed.from_json(json.loads((STATES / "dev-live.json").read_text()))
SOURCE = "local.yaml"
"""The deployed files say they were rendered from it; the plan renders from another name."""


def example() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())


def spec(data: dict[str, Any]) -> Cluster:
    return validate_data(copy.deepcopy(data), "cluster.yaml")


def live_nodes(cluster: Cluster, up: Iterable[str] = ()) -> list[NodeState]:
    """Static nodes up and idle, dynamic ones powered down unless in `up`."""
    up = set(up)
    return [NodeState(name, "idle", frozenset() if not dynamic else frozenset({"CLOUD"}) if name in up
                      else frozenset({"CLOUD", "POWERED_DOWN"}))
            for name, (_, dynamic) in node_places(cluster).items()]


def deployed(data: dict[str, Any], jobs: Iterable[Job] = (), up: Iterable[str] = (),
             edit: Callable[[dict[str, str]], None] | None = None) -> Deployed:
    """The cluster as a rollout of `data` by this slurmforge left it, with `jobs` in flight."""
    cluster = spec(data)
    configs = render_all(cluster, source=SOURCE)
    if edit is not None:
        edit(configs)
    state = Deployed("dev-controller", yaml.safe_dump(data, sort_keys=False), configs, "f00d")
    state.nodes, state.jobs = live_nodes(cluster, up), list(jobs)
    state.partitions = [LivePartition(name, fields.get("State", "UP"), 1440.0, 30.0)
                        for name, fields in parse_slurm_conf(configs["slurm.conf"]).partitions.items()]
    state.accounting_answers = RECORDED.accounting_answers
    return state


def plan(new: dict[str, Any], state: Deployed) -> ClusterPlan:
    return make_plan(spec(new), state)


def running(job_id: int, nodes: str, partition: str = "ml-cpu", limit: float = 1440.0) -> Job:
    return Job(job_id, "RUNNING", nodes, "alice", partition=partition, account="research", qos="normal",
               time_limit=limit)


def pending(job_id: int, partition: str, limit: float = 1440.0) -> Job:
    return Job(job_id, "PENDING", "", "alice", partition=partition, account="research", qos="normal",
               time_limit=limit)


def rows(result: ClusterPlan, kind: str | None = None) -> list[tuple[str, str, str]]:
    return [(r.kind, r.name, r.change) for r in result.rows if kind is None or r.kind == kind]


def row(result: ClusterPlan, kind: str, name: str, change: str | None = None) -> Row:
    found = [r for r in result.rows if r.kind == kind and r.name == name and change in (None, r.change)]
    assert len(found) == 1, (kind, name, change, rows(result))
    return found[0]


RECONFIGURE = [("daemon", "slurmctld", "reconfigure"), ("daemon", "slurmctld", "restart"),
               ("daemon", "slurmd", "reconfigure")]
"""Any slurm.conf change: the primary reconfigures, the standby backup restarts, slurmd follows."""


# --------------------------------------------------------------------------- no change


def test_the_deployed_spec_plans_nothing_exit_0() -> None:
    data = example()
    result = plan(data, deployed(data, jobs=[running(7, "dev-cpu-01")]))
    assert result.rows == [] and result.warnings == [] and result.exit_code == 0
    assert plan_table(result).title == "plan for cluster dev: no changes"


def test_comments_and_the_spec_file_name_are_no_change() -> None:
    data = example()
    state = deployed(data)
    state.configs = {name: text.replace("from local.yaml", "from cluster.yaml")
                     + ("\n-- by hand\n" if name.endswith(".lua") else "\n# by hand\n")
                     for name, text in state.configs.items()}
    assert plan(data, state).rows == []


# --------------------------------------------------------------------------- pools and nodes


def test_a_new_pool_in_a_new_partition() -> None:
    data = example()
    new = example()
    new["pools"].append({"name": "big", "kind": "cpu", "hardware": {"cores_per_socket": 8, "memory_mb": 4096},
                         "min_nodes": 1, "max_nodes": 3, "idle_seconds": 60, "price_per_hour": 0.4})
    new["partitions"].append({"name": "large", "pools": ["big"], "max_time": "04:00:00"})
    result = plan(new, deployed(data))
    assert rows(result) == [
        ("pool", "big", "add"), ("node", "dev-big-01", "add"), ("node", "dev-big-[02-03]", "add"),
        ("partition", "large", "add"), ("power", "SuspendExcNodes", "change"), *RECONFIGURE]
    assert "1 static, 2 on demand" in row(result, "pool", "big").detail
    assert "static: its machine is made by the rollout" in row(result, "node", "dev-big-01").detail
    assert "powered down until a job needs it" in row(result, "node", "dev-big-[02-03]").detail
    assert "MaxTime=04:00:00" in row(result, "partition", "large").detail
    assert result.exit_code == CHANGES_EXIT


def test_a_grown_pool_adds_on_demand_nodes_to_its_partitions() -> None:
    data = example()
    new = example()
    new["pools"][0]["max_nodes"] = 6
    result = plan(new, deployed(data))
    assert rows(result) == [("pool", "cpu", "grow"), ("node", "dev-cpu-[05-06]", "add"),
                            ("partition", "ml-cpu", "change"), ("partition", "scavenger", "change"), *RECONFIGURE]
    assert row(result, "pool", "cpu").detail == "max_nodes 4 -> 6"
    assert row(result, "partition", "scavenger").detail == "Nodes +dev-cpu-[05-06]"


def test_a_shrunk_pool_drains_the_nodes_that_leave_and_counts_their_jobs() -> None:
    """dev-cpu-04 is up with a job, dev-cpu-03 powered down: only the first needs draining."""
    data = example()
    new = example()
    new["pools"][0]["max_nodes"] = 2
    result = plan(new, deployed(data, jobs=[running(41, "dev-cpu-04"), running(42, "dev-cpu-01"),
                                            pending(43, "ml-cpu")], up=["dev-cpu-04"]))
    assert ("pool", "cpu", "shrink") in rows(result)
    assert row(result, "node", "dev-cpu-03", "remove").detail == "pool cpu: powered down; leaves Slurm"
    assert row(result, "node", "dev-cpu-04", "remove").detail == \
        "pool cpu: up; leaves Slurm; drained first, removed once its jobs end"
    drain = row(result, "jobs", "dev-cpu-04", "drain")
    assert drain.jobs == (41,) and drain.detail == (
        "1 running job (41) on nodes that leave Slurm: the rollout drains them first and waits for their jobs to "
        "end (as long as they run; --drain-timeout bounds it, --requeue requeues them); then they are removed")
    # what the apply drains: the node that is up, not the powered-down one
    assert result.drains == [Drain(("dev-cpu-04",), "leaves Slurm (pool cpu shrinks or goes)", REMOVE, True)]
    # SuspendExcNodes is unchanged: the static nodes stay
    assert [r for r in result.rows if r.kind == "power"] == []


def test_a_removed_pool_and_its_partition() -> None:
    data = example()
    new = example()
    new["pools"] = [p for p in new["pools"] if p["name"] != "gpu"]
    new["partitions"] = [p for p in new["partitions"] if p["name"] != "ml-gpu"]
    new["scheduling"].pop("default_gpu_pool")
    result = plan(new, deployed(data, jobs=[running(51, "dev-gpu-01", "ml-gpu"), pending(52, "ml-gpu,ml-cpu")]))
    assert ("pool", "gpu", "remove") in rows(result)
    assert row(result, "node", "dev-gpu-01").change == "remove"
    assert row(result, "partition", "ml-gpu").detail == "1 running job (51) and 1 pending job (52) end at the " \
                                                         "reconfigure"
    ended = row(result, "jobs", "partition ml-gpu", "end")
    assert ended.jobs == (51, 52)
    assert row(result, "jobs", "dev-gpu-01", "drain").jobs == (51,)
    assert ("config", "job_submit.lua", "change") in rows(result)
    assert ("config", "gres.conf", "change") not in rows(result)  # the node's row says it goes


def test_static_nodes_that_become_on_demand() -> None:
    data = example()
    new = example()
    new["pools"][0]["min_nodes"] = 1
    result = plan(new, deployed(data))
    assert row(result, "pool", "cpu").change == "shrink"
    assert row(result, "node", "dev-cpu-02").change == "on-demand"
    assert row(result, "node", "dev-cpu-02").detail == "pool cpu: State (none) -> CLOUD"
    assert row(result, "power", "SuspendExcNodes").detail == "dev-cpu-[01-02],dev-gpu-01 -> dev-cpu-01,dev-gpu-01"


def test_new_hardware_rebuilds_the_machines_and_waits_for_their_jobs() -> None:
    """Static dev-cpu-0[12] and powered-up dev-cpu-03 have machines to make again; powered-down
    dev-cpu-04 starts on the new hardware the next time."""
    data = example()
    new = example()
    for pool in new["pools"]:  # a fallback link keeps the hardware of the pools that fall back to it
        if pool["name"] in ("cpu", "cpu-fallback", "cpu-spot"):
            pool["hardware"]["cores_per_socket"] = 4
    result = plan(new, deployed(data, jobs=[running(61, "dev-cpu-[01,03]")], up=["dev-cpu-03"]))
    assert row(result, "pool", "cpu").change == "rebuild"
    rebuilt = row(result, "node", "dev-cpu-[01-02]", "rebuild")
    assert rebuilt.detail == "2 nodes of pool cpu: CoresPerSocket 2 -> 4: drain, make its machine again, resume"
    assert row(result, "node", "dev-cpu-03", "rebuild").detail == \
        "pool cpu: CoresPerSocket 2 -> 4: drain, power down (it starts on the new hardware)"
    assert "starts on the new hardware" in row(result, "node", "dev-cpu-04", "change").detail
    assert row(result, "jobs", "dev-cpu-[01,03]", "drain").jobs == (61,)
    assert result.drains == [Drain(("dev-cpu-01", "dev-cpu-02"), "rebuilt (CoresPerSocket 2 -> 4)", REBUILD, False),
                             Drain(("dev-cpu-03",), "rebuilt (CoresPerSocket 2 -> 4)", REBUILD, True)]
    # with --requeue the plan says the jobs are requeued, not waited for
    requeued = make_plan(spec(new), deployed(data, jobs=[running(61, "dev-cpu-[01,03]")], up=["dev-cpu-03"]),
                         JobPolicy(requeue=True))
    assert "requeues their jobs (--requeue" in row(requeued, "jobs", "dev-cpu-[01,03]", "requeue").detail


def test_a_feature_changes_nodes_without_a_rebuild() -> None:
    data = example()
    new = example()
    new["pools"][1]["features"] = ["a100"]
    result = plan(new, deployed(data, jobs=[running(62, "dev-gpu-01", "ml-gpu")]))
    assert row(result, "node", "dev-gpu-01").change == "change"
    assert row(result, "node", "dev-gpu-01").detail == 'pool gpu: Feature "fakegpu" -> "fakegpu,a100"'
    assert [r for r in result.rows if r.kind == "jobs"] == []


# --------------------------------------------------------------------------- partitions


def test_a_new_partition() -> None:
    data = example()
    new = example()
    new["partitions"].append({"name": "debug", "pools": ["cpu"], "max_time": "00:30:00"})
    result = plan(new, deployed(data))
    assert rows(result) == [("partition", "debug", "add"), *RECONFIGURE]


def test_a_removed_partition_ends_its_jobs_pending_ones_that_name_it_among_others_too() -> None:
    data = example()
    new = example()
    new["partitions"] = [p for p in new["partitions"] if p["name"] != "scavenger"]
    new["scheduling"]["preemption"] = {"type": "none"}  # it needs two priority tiers
    result = plan(new, deployed(data, jobs=[running(71, "dev-cpu-01", "scavenger"), pending(72, "ml-cpu,scavenger"),
                                            pending(73, "ml-cpu"), running(74, "dev-cpu-02", "ml-cpu")]))
    assert row(result, "partition", "scavenger").change == "remove"
    assert row(result, "jobs", "partition scavenger").jobs == (71, 72)


def test_a_shorter_max_time_under_running_and_pending_jobs() -> None:
    data = example()
    new = example()
    new["partitions"][0]["max_time"] = "04:00:00"
    jobs = [running(81, "dev-cpu-01", limit=1440), running(82, "dev-cpu-02", limit=60), pending(83, "ml-cpu,scavenger"),
            pending(84, "scavenger"), pending(85, "ml-cpu", limit=math.inf)]
    result = plan(new, deployed(data, jobs=jobs))
    assert row(result, "partition", "ml-cpu").detail == "MaxTime 1-00:00:00 -> 04:00:00"
    past = row(result, "jobs", "partition ml-cpu", "run-past")
    assert past.jobs == (81,)
    assert past.detail.startswith("1 running job (81) over the new MaxTime 04:00:00: each keeps its own")
    waits = row(result, "jobs", "partition ml-cpu", "wait")
    assert waits.jobs == (83, 85) and "PartitionTimeLimit" in waits.detail


def test_a_longer_max_time_affects_no_job() -> None:
    data = example()
    new = example()
    new["partitions"][0]["max_time"] = "2-00:00:00"
    result = plan(new, deployed(data, jobs=[running(86, "dev-cpu-01")]))
    assert [r for r in result.rows if r.kind == "jobs"] == []


def test_what_scontrol_update_set_is_undone_by_the_reconfigure() -> None:
    data = example()
    state = deployed(data)
    state.partitions = [LivePartition("ml-gpu", "DOWN", 60.0, 30.0), *state.partitions[1:]]
    new = example()
    new["partitions"].append({"name": "debug", "pools": ["cpu"]})
    reset = row(plan(new, state), "partition", "ml-gpu", "reset")
    assert reset.cause == "cluster" and reset.detail.startswith("State DOWN -> UP; MaxTime 01:00:00 -> 1-00:00:00")
    # without a reconfigure nothing undoes it
    assert plan(data, state).rows == []


# --------------------------------------------------------------------------- policy, daemons, drift


def test_a_scheduling_weight() -> None:
    data = example()
    new = example()
    new["scheduling"]["priority"]["weight_age"] = 5000
    result = plan(new, deployed(data))
    assert rows(result) == [("scheduling", "PriorityWeightAge", "change"), *RECONFIGURE]


def test_moving_slurms_state_cannot_be_done_live() -> None:
    data = example()
    new = example()
    new["storage"]["nas"]["mounts"] = {"slurm_state": "/srv/slurm-shared"}
    result = plan(new, deployed(data))
    assert "not live: stop slurmctld, move its state" in row(result, "slurm.conf", "StateSaveLocation").detail
    assert ("daemon", "slurmctld", "restart") in rows(result)
    assert "Slurm cannot apply it with a reconfigure" in next(r for r in result.rows if r.kind == "daemon").detail
    assert row(result, "storage", "nas.mounts.slurm_state").detail == "/var/spool/slurm-shared -> /srv/slurm-shared"


def test_a_deployed_file_edited_by_hand_is_drift() -> None:
    data = example()

    def edit(configs: dict[str, str]) -> None:
        configs["slurm.conf"] += "MaxStepCount=50000\n"

    result = plan(data, deployed(data, edit=edit))
    drift = row(result, "slurm.conf", "MaxStepCount")
    assert (drift.change, drift.cause, drift.detail) == ("remove", "drift", "50000 -> (none)")
    assert {r.cause for r in result.rows} == {"drift"} and result.exit_code == CHANGES_EXIT
    assert "* not from the spec" in plan_table(result).notes[0]


def test_a_changed_database_restarts_slurmdbd() -> None:
    data = example()
    new = example()
    new["accounting"]["database"] = {"name": "slurm_acct"}
    result = plan(new, deployed(data))
    assert row(result, "config", "slurmdbd.conf StorageLoc").detail == "slurm_acct_db -> slurm_acct"
    assert row(result, "daemon", "slurmdbd").change == "restart"
    assert ("daemon", "slurmctld", "reconfigure") not in rows(result)


# --------------------------------------------------------------------------- accounts, QoS, users


def test_a_user_added_gets_an_account_a_login_and_an_association() -> None:
    data = example()
    new = example()
    new["users"].append({"name": "carol", "uid": 3004, "groups": ["ml-users"], "accounts": ["research"]})
    result = plan(new, deployed(data))
    assert rows(result) == [("accounting", "user carol", "add"), ("user", "carol", "add")]
    assert row(result, "accounting", "user carol").detail == \
        "Account=research Cluster=dev DefaultAccount=research"
    assert "uid 3004" in row(result, "user", "carol").detail
    assert "at its next start" in row(result, "user", "carol").detail


def test_a_qos_added_then_changed() -> None:
    data = example()
    new = example()
    new["scheduling"]["qos"] = [{"name": "high", "priority": 100}]
    result = plan(new, deployed(data))
    assert ("accounting", "qos high", "add") in rows(result)
    assert row(result, "accounting", "account root").change == "modify"
    # deployed with QoS high already in slurmdbd (answers as sacctmgr prints them), then its priority changes
    state = deployed(data)
    qos = ("sacctmgr", "-n", "-P", "show", "qos", f"format={accounting.QOS_FORMAT}")
    rc, out, err = state.accounting_answers[qos]
    state.accounting_answers = {**state.accounting_answers, qos: (rc, out + "high|100||DenyOnLimit|||high\n", err)}
    new["scheduling"]["qos"][0]["priority"] = 200
    changed = row(plan(new, state), "accounting", "qos high")
    assert (changed.change, changed.detail, changed.cause) == ("modify", "Priority=200", "spec")


def test_a_qos_jobs_use_is_kept() -> None:
    data = example()
    data["scheduling"]["qos"] = [{"name": "high"}]
    state = deployed(data, jobs=[Job(91, "PENDING", "", "alice", partition="ml-cpu", account="research",
                                     qos="high")])
    qos = ("sacctmgr", "-n", "-P", "show", "qos", f"format={accounting.QOS_FORMAT}")
    rc, out, err = state.accounting_answers[qos]
    state.accounting_answers = {**state.accounting_answers, qos: (rc, out + "high|0||DenyOnLimit|||high\n", err)}
    new = example()
    kept = row(plan(new, state), "accounting", "qos high", "kept")
    assert "active jobs use it" in kept.detail


def test_accounts_that_slurmdbd_lacks_are_the_clusters_not_the_specs() -> None:
    """slurmdbd lost user eve (sacctmgr by hand): applying the deployed spec adds her back."""
    data = example()
    state = deployed(data)
    assoc = ("sacctmgr", "-n", "-P", "show", "assoc", f"format={accounting.ASSOC_FORMAT}")
    rc, out, err = state.accounting_answers[assoc]
    state.accounting_answers = {**state.accounting_answers, assoc: (
        rc, "".join(line + "\n" for line in out.splitlines() if "|eve|" not in line), err)}
    again = row(plan(data, state), "accounting", "user eve")
    assert (again.change, again.cause) == ("add", "cluster")


# --------------------------------------------------------------------------- what cannot be known


def test_nothing_rolled_out_yet() -> None:
    state = Deployed("dev-controller", None)
    result = plan(example(), state)
    assert rows(result) == [("cluster", "dev", "create")] and result.exit_code == CHANGES_EXIT


def test_another_clusters_controller_is_refused() -> None:
    data = example()
    other = example()
    other["name"] = "lab"
    with pytest.raises(PlanError, match="dev-controller runs cluster 'dev', the spec is cluster 'lab'"):
        plan(other, deployed(data))


def test_without_slurmctld_the_jobs_are_not_counted_and_it_says_so() -> None:
    data = example()
    state = deployed(data)
    state.nodes = state.jobs = state.partitions = None
    state.slurm_error = "scontrol show nodes: Unable to contact slurm controller"
    new = example()
    new["pools"][0]["max_nodes"] = 2
    result = plan(new, state)
    assert [r for r in result.rows if r.kind == "jobs"] == []
    assert "slurmctld did not answer" in result.warnings[0]
    # removals wait for slurmctld to say who has jobs
    assert not [r for r in result.rows if r.kind == "accounting"]


def test_read_from_the_backup_controller_slurmdbd_conf_is_not_compared() -> None:
    """The primary is down: the backup has every file but slurmdbd.conf."""
    data = example()
    state = deployed(data)
    state.controller = "dev-controller-backup"
    del state.configs["slurmdbd.conf"]
    result = plan(data, state)
    assert result.rows == [] and "slurmdbd.conf (on the primary only) is not compared" in result.warnings[0]
    state.controller = "dev-controller"
    assert ("daemon", "slurmdbd", "restart") in rows(plan(data, state))


def test_a_last_rollout_that_did_not_finish_is_said() -> None:
    data = example()
    state = deployed(data)
    state.mark = ""
    assert "did not finish on dev-controller" in plan(data, state).warnings[0]


# --------------------------------------------------------------------------- the recorded state


def test_the_recorded_live_state_reads_back() -> None:
    """dev-live.json: two jobs in flight, a finished one, the spot partition of the cluster that
    ran then; sacctmgr's answers."""
    assert RECORDED.controller == "dev-controller" and RECORDED.mark
    assert [(j.id, j.state) for j in RECORDED.jobs or []][-2:] == [(915, "RUNNING"), (916, "PENDING")]
    state, error = RECORDED.accounting_state()
    assert state is not None and error == "" and "dev" in state.clusters
    assert RECORDED.to_json() == json.loads((STATES / "dev-live.json").read_text())


def test_a_plan_against_the_recorded_cluster_lists_its_jobs() -> None:
    """Shortening ml-cpu's MaxTime under job 916 (2 h) pending there, on the cluster as it was
    recorded (with the example's spot pool)."""
    new = example()
    new["partitions"][0]["max_time"] = "01:00:00"
    result = make_plan(spec(new), RECORDED)
    assert ("pool", "cpu-spot", "remove") not in rows(result)
    assert row(result, "jobs", "partition ml-cpu", "wait").jobs == (916,)
    # recorded from a cluster this code rolled out: its files are what this code renders
    assert {r.cause for r in result.rows if r.kind == "slurm.conf"} == set()


def test_scontrols_json_as_24_11_writes_it() -> None:
    request = {"files": [dep.SPEC_FILE], "commands": [list(dep.NODES), list(dep.PARTITIONS), list(dep.JOBS)]}
    answer = {"files": {dep.SPEC_FILE: "name: dev\n"}, "commands": [
        [0, (SLURM_JSON / f"scontrol-show-{what}-24.11.5.json").read_text(), ""]
        for what in ("nodes", "partitions", "jobs")]}
    state = dep.from_answer("dev-controller", request, answer)
    assert state.spec_text == "name: dev\n" and state.configs == {} and state.mark == ""
    assert {(p.name, p.max_time, p.default_time, p.state) for p in state.partitions or []} >= {
        ("ml-cpu", 1440.0, 30.0, "UP")}
    jobs = {j.id: j for j in state.jobs or []}
    assert (jobs[913].state, jobs[913].time_limit, jobs[913].nodes, jobs[913].qos) == ("RUNNING", 5.0, "dev-cpu-01",
                                                                                        "normal")
    assert (jobs[914].state, jobs[914].partition, jobs[914].time_limit) == ("PENDING", "ml-cpu,scavenger", 120.0)
    # slurmdbd was not asked: the accounting reads say so
    assert dep.Deployed.accounting_state(state)[0] is None


def test_slurmctld_down_is_an_error_the_plan_carries() -> None:
    request = {"files": [], "commands": [list(dep.NODES), list(dep.PARTITIONS), list(dep.JOBS)]}
    down = [1, "", "slurm_load_node error: Unable to contact slurm controller (connect failure)\n"]
    state = dep.from_answer("c", request, {"files": {}, "commands": [down, down, down]})
    assert state.nodes is None and "Unable to contact slurm controller" in state.slurm_error


def test_gather_reads_files_and_runs_commands_in_one_answer(tmp_path: Path) -> None:
    there = tmp_path / "there.conf"
    there.write_text("A=1\n")
    request = {"files": [str(there), str(tmp_path / "missing")],
               "commands": [["sh", "-c", "echo out; echo err >&2; exit 3"], ["no-such-program-here"]]}
    done = subprocess.run([sys.executable, "-c", dep.GATHER.read_text(), json.dumps(request)], capture_output=True,
                          text=True, check=True)
    answer = json.loads(done.stdout)
    assert answer["files"] == {str(there): "A=1\n", str(tmp_path / "missing"): None}
    assert answer["commands"][0] == [3, "out\n", "err\n"]
    assert answer["commands"][1][0] == 127


def test_the_accounting_reads_are_the_programs_own() -> None:
    assert accounting.state_commands() == [tuple(argv) for argv in RECORDED.accounting_answers]


def test_the_deployed_paths_are_where_the_roles_install_the_files() -> None:
    roles = ROOT / "roles"
    defaults = yaml.safe_load((roles / "slurm_controller/defaults/main.yml").read_text())
    configure = (roles / "slurm_controller/tasks/configure.yml").read_text()
    assert 'dest: "/etc/slurm/{{ item }}"' in configure and "dest: /etc/dma/dma.conf" in configure
    for name in defaults["slurm_controller_config_files"]:
        assert dep.CONFIG_PATHS[name] == f"/etc/slurm/{name}"
    assert "dest: /etc/slurm/slurmdbd.conf" in (roles / "slurmdbd/tasks/configure.yml").read_text()
    settings = (roles / "scheduler_service/tasks/settings.yml").read_text()
    assert 'dest: "{{ scheduler_service_etc }}/cluster.yaml"' in settings and dep.SPEC_FILE.endswith("/cluster.yaml")


# --------------------------------------------------------------------------- output


def test_the_table_fits_80_columns_and_json_has_every_row() -> None:
    data = example()
    new = example()
    new["pools"][0]["max_nodes"] = 2
    new["partitions"][0]["max_time"] = "04:00:00"
    result = plan(new, deployed(data, jobs=[running(41, "dev-cpu-04"), pending(43, "ml-cpu")], up=["dev-cpu-04"]))
    text = render(plan_table(result), Format.TABLE, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert text.splitlines()[0] == "plan for cluster dev: 5 change(s), 2 job(s) affected"
    assert "Nodes -dev-cpu-[03-04]; MaxTime\n" in text  # a name is not cut at its hyphens
    shown = json.loads(render(plan_table(result), Format.JSON))
    assert {k: shown[k] for k in ("cluster", "changed", "changes", "jobs_affected")} == {
        "cluster": "dev", "changed": True, "changes": 5, "jobs_affected": 2}
    items = shown["rows"]
    assert len(items) == len(result.rows)
    assert {"kind": "jobs", "name": "dev-cpu-04", "change": "drain", "cause": "spec", "jobs": "41"}.items() \
        <= items[[i["kind"] for i in items].index("jobs")].items()
    plain = render(plan_table(result), Format.PLAIN).splitlines()
    assert plain[0].split() == ["kind", "name", "change", "cause", "jobs", "detail"]
    assert len(plain) == len(result.rows) + 1


# --------------------------------------------------------------------------- the command


def cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "slurmforge.cli", "plan", *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **(env or {})})


def test_the_command_exits_0_12_or_the_specs_code(tmp_path: Path) -> None:
    data = example()
    state = tmp_path / "state.json"
    dep.save(deployed(data, jobs=[running(41, "dev-cpu-01")]), state)
    same, edited, invalid = tmp_path / "same.yaml", tmp_path / "edited.yaml", tmp_path / "invalid.yaml"
    same.write_text(yaml.safe_dump(data))
    data["partitions"][0]["max_time"] = "04:00:00"
    edited.write_text(yaml.safe_dump(data))
    data["partitions"][0]["max_time"] = "forever"
    invalid.write_text(yaml.safe_dump(data))
    done = cli(str(same), "--state", str(state), "--format", "table")
    assert (done.returncode, done.stdout.splitlines()[0]) == (0, "plan for cluster dev: no changes"), done.stderr
    done = cli(str(edited), "--state", str(state), "--format", "json")
    assert done.returncode == 0, done.stderr  # it could plan: `plan && up` applies
    done = cli(str(edited), "--state", str(state), "--format", "json", "--detailed-exitcode")
    assert done.returncode == CHANGES_EXIT, done.stderr
    same_detailed = cli(str(same), "--state", str(state), "--detailed-exitcode")
    assert same_detailed.returncode == 0
    assert [(r["kind"], r["name"], r["change"], r["jobs"]) for r in json.loads(done.stdout)["rows"]] == [
        ("partition", "ml-cpu", "change", None), ("daemon", "slurmctld", "reconfigure", None),
        ("daemon", "slurmctld", "restart", None), ("daemon", "slurmd", "reconfigure", None),
        ("jobs", "partition ml-cpu", "run-past", "41")]
    assert done.stderr.startswith("plan for cluster dev: 1 change(s), 1 job(s) affected\n")
    done = cli(str(invalid), "--state", str(state))
    assert done.returncode == 2 and "partitions[0].max_time" in done.stderr and "Traceback" not in done.stderr


def test_an_unreachable_cluster_is_one_line_and_exit_11(tmp_path: Path) -> None:
    inventory = tmp_path / "inv"
    (inventory).mkdir()
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"slurm_cluster": {"children": {
        "slurm_controller": {"hosts": {"dev-controller": {
            "slurmforge_address": "127.0.0.1", "ansible_host": "127.0.0.1", "ansible_port": 1,
            "ansible_user": "root", "ansible_ssh_common_args": "-o ConnectTimeout=5"}}},
        "slurm_login": {}, "slurm_compute": {}}}}}}))
    spec_file = tmp_path / "cluster.yaml"
    spec_file.write_text((ROOT / "examples" / "local.yaml").read_text())
    done = cli(str(spec_file), "--inventory", str(inventory))
    assert done.returncode == 11, done.stderr
    assert done.stderr.count("\n") == 1 and "cannot read the deployed cluster" in done.stderr
    assert "Traceback" not in done.stderr
    done = cli(str(spec_file), "--state", str(tmp_path / "nowhere.json"))
    assert done.returncode == 11 and "cannot read the saved state" in done.stderr


def test_the_command_wants_one_cluster(tmp_path: Path) -> None:
    done = cli(str(ROOT / "examples" / "local.yaml"), env={"SLURMFORGE_CONTEXT": str(tmp_path / "none.json")})
    assert done.returncode == 14 and "no cluster named; fix: --local [NAME] (this machine's)" in done.stderr
    assert done.stderr.count("\n") == 1 and "pulumi" not in done.stderr
