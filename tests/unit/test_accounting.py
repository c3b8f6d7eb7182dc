"""Accounting convergence (slurmforge/accounting.py), planned from what Slurm 24.11.5 really
prints: tests/unit/sacctmgr_24.11/ is the sacctmgr and squeue output of the judge's
slurmdbd after spec A (tests/accounting_specs.py), checked against the real thing by
tests/slurm/test_accounting_converges.py, which also applies the plans there."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml

from slurmforge.accounting import (
    ASSOC_FORMAT,
    QOS_FORMAT,
    AccountingError,
    ActiveJobs,
    State,
    converge,
    desired_state,
    make_plan,
    parse_active_jobs,
    parse_minutes,
    parse_qos,
    parse_tres_counts,
    read_state,
)
from slurmforge.render import render_all
from slurmforge.spec import load_spec, validate_data
from tests.accounting_specs import B_FROM_A, ROOT, base, data_a, spec_a, spec_b

pytestmark = pytest.mark.unit

SAMPLES = Path(__file__).parent / "sacctmgr_24.11"
NO_JOBS = ActiveJobs(frozenset(), frozenset(), frozenset())
SHOW = {  # sacctmgr show arguments -> sample file
    ("cluster", "format=cluster"): "cluster.txt",
    ("tres", "format=type,name"): "tres.txt",
    ("qos", f"format={QOS_FORMAT}"): "qos.txt",
    ("account", "format=account,description"): "account-description.txt",
    ("account", "format=account,organization"): "account-organization.txt",
    ("assoc", f"format={ASSOC_FORMAT}"): "assoc.txt",
    ("user", "format=user,defaultaccount"): "user.txt",
}


class Slurm:
    """sacctmgr and squeue answering from the samples; records what sacctmgr -i is asked."""

    def __init__(self, squeue: str | None = None, fail: dict[str, str] | None = None) -> None:
        self.squeue = (SAMPLES / "squeue.txt").read_text() if squeue is None else squeue
        self.fail = fail or {}
        self.applied: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        args = tuple(argv)
        if args[:4] == ("sacctmgr", "-n", "-P", "show"):
            return subprocess.CompletedProcess(argv, 0, (SAMPLES / SHOW[args[4:]]).read_text(), "")
        if args[0] == "squeue":
            return subprocess.CompletedProcess(argv, 1 if self.squeue == "down" else 0,
                                               "" if self.squeue == "down" else self.squeue, "")
        assert args[:2] == ("sacctmgr", "-i"), args
        self.applied.append(args[2:])
        for needle, message in self.fail.items():
            if needle in " ".join(args):
                return subprocess.CompletedProcess(argv, 1, message, "")
        return subprocess.CompletedProcess(argv, 0, "", "")


def sample_state() -> State:
    return read_state(Slurm(), wait=0)


# --------------------------------------------------------------------------- reading 24.11's output


def test_qos_as_24_11_prints_it() -> None:
    qos = parse_qos((SAMPLES / "qos.txt").read_text())
    assert sorted(qos) == ["high", "low", "normal", "scratch"]
    low, high = qos["low"], qos["high"]
    assert (low.priority, low.max_wall_minutes, low.max_tres_per_user, low.flags) == (
        1, 120, {"gres/gpu": 2}, {"denyonlimit"})
    assert (high.preempt, high.description, high.max_wall_minutes) == ({"low"}, "urgent work", None)


def test_associations_users_and_tres_as_24_11_prints_them() -> None:
    state = sample_state()
    assert state.clusters == {"acct"}
    assert {"cpu", "billing", "gres/gpu"} <= state.tres
    by_key = {(a.account, a.user): a for a in state.assocs}
    assert by_key[("ml", "")].parent == "research" and by_key[("ml", "")].grp_tres_mins == {"gres/gpu": 60}
    assert by_key[("vision", "")].grp_tres_mins == {"billing": 6000}
    assert by_key[("research", "")].share == "10"
    assert by_key[("root", "")].qos == {"high", "low", "normal", "scratch"}
    assert state.default_accounts == {"alice": "ml", "bob": "research", "eve": "gone", "root": "root"}
    assert state.account_descriptions["research"] == "research lab"


@pytest.mark.parametrize(("text", "minutes"), [("02:00:00", 120), ("1-00:00:00", 1440), ("00:30:00", 30),
                                               ("05:00", 5), ("00:00:30", 1), ("", None), ("UNLIMITED", None)])
def test_maxwall_in_minutes(text: str, minutes: int | None) -> None:
    assert parse_minutes(text) == minutes


def test_tres_counts_and_free_text_with_bars() -> None:
    assert parse_tres_counts("cpu=100,gres/gpu=0") == {"cpu": 100, "gres/gpu": 0}
    qos = parse_qos("q|1|||||a | b | c\n")
    assert qos["q"].description == "a | b | c"


def test_active_jobs_leave_out_finished_ones() -> None:
    jobs = parse_active_jobs("gone|eve|normal|PENDING\nml|alice|low|CANCELLED\nml|bob|high|SUSPENDED\n")
    assert jobs.accounts == {"gone", "ml"} and jobs.qos == {"normal", "high"}
    assert jobs.associations == {("eve", "gone"), ("bob", "ml")}


# --------------------------------------------------------------------------- the plan


def test_a_converged_state_plans_nothing() -> None:
    plan = make_plan(desired_state(spec_a()), sample_state(), NO_JOBS)
    assert plan.report() == {"changed": False, "changes": [], "kept": [], "deferred": []}


def test_spec_b_from_spec_a_with_a_job_in_the_leaving_account() -> None:
    """The plan the judge applies: updates, moves and additions in dependency order, then
    removals; what eve's pending job uses is kept and said so."""
    plan = converge(desired_state(spec_b()), "after", Slurm(), wait=0)
    assert plan.report()["changes"] == B_FROM_A
    assert plan.kept == ["kept user eve in account gone: active jobs there (removed by a rollout after they end)",
                         "kept account gone: active jobs (removed by a rollout after they end)"]


def test_without_jobs_everything_the_spec_dropped_goes_children_before_parents() -> None:
    data = base()
    data["accounting"]["accounts"] = [{"name": "research"}]
    data["users"] = [{"name": "alice", "uid": 3001, "accounts": ["research"]}]
    slurm = Slurm(squeue="")
    plan = converge(desired_state(validate_data(data, "x")), "after", slurm, wait=0)
    removals = [line for line in plan.report()["changes"] if line.startswith("remove")]
    assert removals == ["remove user alice from account ml", "remove user bob (accounts gone, research, vision)",
                        "remove user eve (accounts gone)", "remove account ml", "remove account gone",
                        "remove account vision", "remove qos high", "remove qos low", "remove qos scratch"]
    # alice's default account (ml) leaves: research becomes it first
    assert plan.report()["changes"].index("modify user alice: DefaultAccount=research") < plan.report()[
        "changes"].index("remove user alice from account ml")
    assert ("remove", "account", "where", "name=ml") in slurm.applied  # only on this cluster: the account too


def test_a_job_keeps_its_account_and_the_leaving_accounts_above_it() -> None:
    data = base()
    data["accounting"]["accounts"] = [{"name": "vision"}]
    data["users"] = []
    jobs = parse_active_jobs("ml|alice|normal|RUNNING\n")
    plan = make_plan(desired_state(validate_data(data, "x")), sample_state(), jobs)
    assert "kept account research: an account below it has active jobs (removed by a rollout after they end)" in \
        plan.kept
    assert "kept account ml: active jobs (removed by a rollout after they end)" in plan.kept
    assert not any(line.startswith(("remove account ml", "remove account research")) for line in
                   plan.report()["changes"])
    assert "remove account gone" in plan.report()["changes"]


def test_before_the_controller_what_cannot_happen_yet_waits() -> None:
    """A TRES slurmdbd does not know (gres/gpu before slurmctld ever ran), QoS removals, and
    removals when slurmctld does not answer squeue."""
    state = sample_state()
    state.tres.discard("gres/gpu")
    state.qos = {k: v for k, v in state.qos.items() if k != "low"}
    plan = make_plan(desired_state(spec_b()), state, None, phase="before")
    assert "add qos low: Description=low Priority=1 Flags=DenyOnLimit MaxWall=30" in plan.report()["changes"]
    assert [line.split(":")[0] for line in plan.deferred] == [
        "qos low", "account ml", "account vision", "remove user bob from gone, vision; user eve from gone; account "
        "gone; qos scratch (slurmctld does not answer"]
    assert not any(line.startswith("remove") for line in plan.report()["changes"])
    # slurmctld answers: only the QoS removal waits (the running slurmctld may name it)
    plan = make_plan(desired_state(spec_b()), sample_state(), NO_JOBS, phase="before")
    assert plan.deferred == ["remove qos scratch (after slurmctld loads the new slurm.conf: the running one's "
                             "partitions may name it)"]


def test_after_the_controller_nothing_may_wait() -> None:
    state = sample_state()
    state.tres.discard("gres/gpu")
    with pytest.raises(AccountingError, match="gres/gpu"):
        make_plan(desired_state(spec_b()), state, NO_JOBS, phase="after")
    with pytest.raises(AccountingError, match="slurmctld does not answer"):
        converge(desired_state(spec_b()), "after", Slurm(squeue="down"), wait=0)


def test_a_new_cluster_lets_every_account_use_every_qos() -> None:
    state = State(tres={"cpu", "billing", "gres/gpu"})
    plan = make_plan(desired_state(spec_a()), state, None, phase="before")
    lines = plan.report()["changes"]
    assert lines[:5] == ["add cluster acct",
                         "add qos low: Description=low Priority=1 Flags=DenyOnLimit MaxWall=120 "
                         "MaxTRESPerUser=gres/gpu=2",
                         "add qos high: Description=urgent work Priority=100 Flags=DenyOnLimit Preempt=low",
                         "add qos scratch: Description=scratch Priority=5 Flags=DenyOnLimit",
                         "modify account root on acct: QOS=high,low,normal,scratch (every account may use every "
                         "QoS)"]
    assert "add user alice: Account=ml,research Cluster=acct DefaultAccount=ml" in lines
    assert plan.deferred == []


def test_a_removal_slurmdbd_refuses_for_a_new_job_is_kept_not_failed() -> None:
    data = data_a()
    data["accounting"]["accounts"] = [a for a in data["accounting"]["accounts"] if a["name"] != "gone"]
    data["users"] = [u for u in data["users"] if u["name"] == "alice"]
    refused = " Error with request: Job(s) active, cancel job(s) before remove\n"
    slurm = Slurm(squeue="", fail={"name=gone": refused})
    plan = converge(desired_state(validate_data(data, "x")), "after", slurm, wait=0)
    assert "kept: account gone: active jobs (slurmdbd refused)" in plan.kept
    assert "remove account gone" not in plan.report()["changes"]


def test_a_failure_says_which_change_and_what_was_done_before() -> None:
    slurm = Slurm(fail={"Fairshare=20": " Error with request: Unknown account"})
    with pytest.raises(AccountingError) as info:
        converge(desired_state(spec_b()), "after", slurm, wait=0)
    message = str(info.value)
    assert message.startswith("modify account research on acct: Fairshare=20: sacctmgr failed: Error with request")
    assert "after 3 change(s): modify qos low" in message


def test_the_program_prints_its_report_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The rollout reads the program's stdout (changed_when, the listed changes)."""
    from slurmforge import accounting

    desired = tmp_path / "accounting.json"
    desired.write_text(json.dumps(desired_state(spec_a())))
    original = accounting.run_command
    accounting.run_command = Slurm()
    try:
        assert accounting.main(["--desired", str(desired), "--dry-run"]) == 0
    finally:
        accounting.run_command = original
    report = json.loads(capsys.readouterr().out)
    assert report == {"changed": False, "changes": [], "kept": [], "deferred": [], "dry_run": True}


def test_budgets_reset_with_their_period_and_limits_are_enforced() -> None:
    """Budgets count usage since the period began: PriorityUsageResetPeriod when an account
    has one (or when usage never decays); AccountingStorageTRES counts GPUs where a pool has them and the
    default enforcement holds limits (tests/slurm/test_accounting_converges.py: slurmctld
    enforces them)."""
    def settings(data: dict[str, object]) -> dict[str, str]:
        conf = render_all(validate_data(data, "x"))["slurm.conf"]
        return dict(line.split("=", 1) for line in conf.splitlines() if "=" in line and " " not in line)

    data = data_a()
    assert settings(data)["PriorityUsageResetPeriod"] == "MONTHLY"
    assert settings(data)["PriorityDecayHalfLife"] == "0"
    assert settings(data)["AccountingStorageTRES"] == "gres/gpu"
    data["accounting"]["budget_period"] = "week"
    assert settings(data)["PriorityUsageResetPeriod"] == "WEEKLY"
    for account in data["accounting"]["accounts"]:
        account.pop("budget", None)
    # no budget left, decay still 0: Slurm wants a reset period anyway (tests/unit/test_render.py)
    assert settings(data)["PriorityUsageResetPeriod"] == "WEEKLY"
    data["scheduling"]["priority"]["decay_half_life"] = "7-00:00:00"
    assert "PriorityUsageResetPeriod" not in settings(data)
    local = settings(yaml.safe_load((ROOT / "examples/local.yaml").read_text()))
    assert set(local["AccountingStorageEnforce"].split(",")) >= {"limits", "qos"}


# --------------------------------------------------------------------------- the desired state


def test_desired_state_in_slurms_spelling() -> None:
    data = base()
    data["pools"].append({"name": "trn", "kind": "gpu", "max_nodes": 1, "hardware": {
        "cores_per_socket": 2, "memory_mb": 1024, "gpus": {"count": 1, "model": "trn1", "kind": "neuron"}}})
    data["partitions"].append({"name": "trn", "pools": ["trn"]})
    data["scheduling"]["qos"] = [{"name": "Short", "max_wall": "00:00:30", "max_gpus_per_user": 3},
                                 {"name": "long", "max_wall": "UNLIMITED"}, {"name": "mid", "max_wall": "90"}]
    data["accounting"]["accounts"] = [{"name": "Kids", "parent": "Team"},
                                      {"name": "Team", "organization": "Big Org", "parent": "Root",
                                       "budget": {"gpu_hours": 1.5, "cpu_hours": 10}}]
    data["users"] = [{"name": "alice", "uid": 3001, "accounts": ["Kids"]}]
    desired = desired_state(validate_data(data, "x"))
    assert [(q["name"], q["max_wall_minutes"], q["max_tres_per_user"]) for q in desired["qos"]] == [
        ("short", 1, {"gres/gpu": 3, "gres/neuron": 3}), ("long", None, {}), ("mid", 90, {})]
    assert desired["qos_access"] == ["long", "mid", "normal", "short"]
    assert [(a["name"], a["parent"], a["organization"], a["grp_tres_mins"]) for a in desired["accounts"]] == [
        ("team", "root", "big org", {"cpu": 600, "gres/gpu": 90, "gres/neuron": 90}),
        ("kids", "team", "none", {})]
    assert desired["users"] == [{"name": "alice", "accounts": ["kids"], "default_account": None}]


def test_the_inventory_ships_the_desired_state(tmp_path: Path) -> None:
    from slurmforge.hosts import Host, HostRole
    from slurmforge.inventory import ACCOUNTING_JSON, RENDERED, write_inventory

    spec_path = tmp_path / "a.yaml"
    spec_path.write_text(yaml.safe_dump(base() | {"accounting": {"accounts": [{"name": "ml"}]}}))
    spec = validate_data(yaml.safe_load(spec_path.read_text()), "a")
    inventory = write_inventory(spec, spec_path, [Host("acct-controller", "10.0.0.2", HostRole.CONTROLLER)],
                                tmp_path / "inv")
    assert json.loads((inventory / RENDERED / ACCOUNTING_JSON).read_text()) == desired_state(spec)


def test_examples_render_their_accounting() -> None:
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        spec = validate_data(yaml.safe_load(path.read_text()), path.name)
        desired = desired_state(spec)
        assert {a["name"] for a in desired["accounts"]} == {a.name.lower() for a in spec.accounting.accounts}


def test_a_budget_without_a_limit_is_refused() -> None:
    from slurmforge.errors import SpecError

    data = base()
    data["accounting"]["accounts"] = [{"name": "ml", "budget": {}}]
    with pytest.raises(SpecError) as info:
        validate_data(data, "x")
    assert [p.line() for p in info.value.problems] == [
        "accounting.accounts[0].budget: a budget without a limit; fix: set gpu_hours, cpu_hours or billing_hours "
        "(or remove budget)"]


def test_a_qos_jobs_use_stays_usable_and_is_kept() -> None:
    """Its jobs would otherwise lose the QoS they asked for: the root association keeps
    listing it, and it is not removed."""
    jobs = parse_active_jobs("research|alice|scratch|PENDING\n")
    plan = make_plan(desired_state(spec_b()), sample_state(), jobs)
    assert not any("QOS=" in line for line in plan.report()["changes"])
    assert "remove qos scratch" not in plan.report()["changes"]
    assert "kept qos scratch: active jobs use it (removed by a rollout after they end)" in plan.kept
    # slurmctld does not answer: nobody can tell, the list stays as it is
    assert not any("QOS=" in line for line in make_plan(desired_state(spec_b()), sample_state(), None,
                                                          phase="before").report()["changes"])


def test_names_in_any_case_are_slurms_lowercase_accounts_parents_first() -> None:
    """The spec names accounts and QoS in any case, as Slurm does (it keeps them lowercase):
    the child named before its parent, and the parent named in another case, still gives
    the parent first, so sacctmgr never adds an account under one it has not made yet."""
    spec = load_spec(Path(__file__).parent / "specs" / "valid-names-any-case.yaml")
    state = desired_state(spec)
    assert [(a["name"], a["parent"]) for a in state["accounts"]] == [("research", "root"), ("ml", "research")]
    assert state["users"] == [{"name": "alice", "accounts": ["ml", "research"], "default_account": "ml"}]
    assert [(q["name"], q["preempt"]) for q in state["qos"]] == [("high", ["low"]), ("low", [])]
