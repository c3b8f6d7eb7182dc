"""Accounting converges, against the real thing: the node image's MariaDB, slurmdbd, slurmctld
and sacctmgr in a judge container, and slurmforge/accounting.py run by the image's own
python3 exactly as the rollout runs it (roles/slurmdbd/tasks/accounts.yml).

One cluster, in the order a rollout meets it: a new database before slurmctld ever ran (its
GPU limits wait: slurmdbd learns gres/gpu when slurmctld registers), slurmctld up (they are
applied), a spec change (updates, moves, removals; an account with a held job is kept),
the job gone (removed). Then Slurm enforces what was applied: jobs over a QoS's MaxWall or
max GPUs are refused with Slurm's reason, a user's second GPU job over the QoS limit and a
job over its account's budget pend with theirs. slurm.conf and slurmdbd.conf are the
renderer's, adapted only to run in a temp dir (tests/slurm/daemons.py); nodes are CLOUD
nodes whose power-up is a no-op, so jobs are allocated (CONFIGURING) without slurmd.

The sacctmgr and squeue output of the first converged state is compared with the samples
the unit tests plan from (tests/unit/sacctmgr_24.11/): they are what 24.11.5 prints.
`SLURMFORGE_WRITE_SAMPLES=1` rewrites them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from slurmforge.accounting import ASSOC_FORMAT, QOS_FORMAT, desired_state
from slurmforge.contract import node_vars
from slurmforge.package_data import playbooks
from slurmforge.render import render_all
from slurmforge.rollout import run_playbook
from slurmforge.spec import Cluster, validate_data
from tests.accounting_specs import B_FROM_A, USERS, data_b, spec_a, spec_b
from tests.judge import Judge, node_image
from tests.slurm.daemons import (
    AS_RENDERED,
    RunDir,
    power_stub_script,
    start_accounting,
    start_slurmctld,
    wait_until_up,
)

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "slurmforge" / "accounting.py"
SAMPLES = ROOT / "tests" / "unit" / "sacctmgr_24.11"

pytestmark = [pytest.mark.slurm]

# what `sacctmgr -n -P show <args>` the samples hold (file name: arguments)
SAMPLE_QUERIES = {
    "cluster.txt": ["cluster", "format=cluster"],
    "tres.txt": ["tres", "format=type,name"],
    "qos.txt": ["qos", f"format={QOS_FORMAT}"],
    "account-description.txt": ["account", "format=account,description"],
    "account-organization.txt": ["account", "format=account,organization"],
    "assoc.txt": ["assoc", f"format={ASSOC_FORMAT}"],
    "user.txt": ["user", "format=user,defaultaccount"],
}


@dataclass
class Accounting:
    judge: Judge
    run: RunDir

    def converge(self, spec: Cluster, phase: str) -> dict[str, Any]:
        desired = self.run.root / "accounting.json"
        desired.write_text(json.dumps(desired_state(spec)))
        done = self.judge.run(["python3", str(self.run.root / "accounting.py"), "--desired", str(desired),
                               "--phase", phase], env={"SLURM_CONF": str(self.run.conf)}, timeout=120)
        assert done.returncode == 0, f"{done.stdout}{done.stderr}"
        report: dict[str, Any] = json.loads(done.stdout)
        return report

    def show(self, *args: str) -> str:
        done = self.judge.run(["sacctmgr", "-n", "-P", "show", *args], env={"SLURM_CONF": str(self.run.conf)},
                              check=True)
        return done.stdout

    def lines(self, *args: str) -> set[str]:
        return {line for line in self.show(*args).splitlines() if line}

    def slurm(self, user: str, *argv: str) -> tuple[int, str]:
        done = self.judge.run(list(argv), env={"SLURM_CONF": str(self.run.conf)}, user=user, cwd="/tmp")
        return done.returncode, (done.stdout + done.stderr).strip()

    def submit(self, user: str, *args: str) -> tuple[int, str]:
        return self.slurm(user, "sbatch", "--parsable", *args, "--wrap", "sleep 300")

    def reason(self, job: str, want: str, timeout: float = 30.0) -> str:
        """The job's pending reason once it is `want` (or whatever it is at the timeout)."""
        deadline, got = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            got = self.slurm("root", "squeue", "-h", "-j", job, "-o", "%T %r")[1]
            if got == f"PENDING {want}":
                break
            time.sleep(0.5)
        return got


@pytest.fixture(scope="module")
def accounting() -> Iterator[Accounting]:
    spec = spec_a()
    rendered = render_all(spec, source="a.yaml")
    run = RunDir.create()
    judge = Judge(node_image())
    try:
        for name in AS_RENDERED:  # what slurmctld reads beside slurm.conf (job_submit.lua too)
            (run.root / name).write_text(rendered[name])
        for program in (run.power_stub, run.nodes_ready):  # nodes "power up" and are never ready
            program.write_text(power_stub_script())
            program.chmod(0o755)
        shutil.copy2(MODULE, run.root / "accounting.py")
        for user, uid in USERS.items():
            judge.run(["useradd", "-u", str(uid), user], check=True)
        start_accounting(judge, run, spec, rendered)
        yield Accounting(judge, run)
    finally:
        judge.remove()
        run.remove()


def _deferred_tres(report: dict[str, Any]) -> list[str]:
    return sorted(line.split(":", 1)[0] for line in report["deferred"])


def test_a_new_database_before_slurmctld(accounting: Accounting) -> None:
    """Before slurmctld ever ran: everything is made, parents first, preempted QoS before
    the QoS preempting them; the GPU limits wait (slurmdbd has no gres/gpu TRES yet)."""
    report = accounting.converge(spec_a(), "before")
    assert report["changes"][0] == "add cluster acct"
    adds = [line.split(":", 1)[0] for line in report["changes"]]
    assert adds.index("add qos low") < adds.index("add qos high")
    assert adds.index("add account research") < adds.index("add account ml")
    assert adds.index("add account ml") < adds.index("add user alice")
    assert _deferred_tres(report) == ["account ml", "qos low"]
    assert "gres/gpu" not in accounting.show("tres", "format=type,name")


def test_the_pass_after_slurmctld_applies_what_waited(accounting: Accounting) -> None:
    start_slurmctld(accounting.judge, accounting.run)
    wait_until_up(accounting.judge, accounting.run)
    report = accounting.converge(spec_a(), "after")
    assert report["changes"] == ["modify qos low: MaxTRESPerUser=gres/gpu=2",
                                 "modify account ml on acct: GrpTRESMins=gres/gpu=60"], report
    assert report["deferred"] == [] and report["kept"] == []
    started = time.monotonic()
    again = accounting.converge(spec_a(), "after")
    print(f"converged already: {time.monotonic() - started:.2f} s (python3 start, 7 sacctmgr reads)")
    assert again == {"changed": False, "changes": [], "kept": [], "deferred": [], "dry_run": False}


def test_slurmdbd_has_spec_a(accounting: Accounting) -> None:
    """What sacctmgr shows is the spec (Slurm's lowercase; limits in minutes), and the
    unit tests' samples are exactly this output."""
    assert accounting.lines("qos", "format=name,priority,preempt,flags,maxwall,maxtrespu,description") == {
        "normal|0|||||Normal QOS default",
        "high|100|low|DenyOnLimit|||urgent work",
        "low|1||DenyOnLimit|02:00:00|gres/gpu=2|low",
        "scratch|5||DenyOnLimit|||scratch"}
    assoc = "format=account,user,parentname,share,grptresmins,qos"
    assert accounting.lines("assoc", "where", "cluster=acct", assoc) == {
        "root|||1||high,low,normal,scratch", "root|root||1||high,low,normal,scratch",
        "research||root|10||high,low,normal,scratch", "research|alice||1||high,low,normal,scratch",
        "research|bob||1||high,low,normal,scratch",
        "ml||research|1|gres/gpu=60|high,low,normal,scratch", "ml|alice||1||high,low,normal,scratch",
        "vision||root|1|billing=6000|high,low,normal,scratch", "vision|bob||1||high,low,normal,scratch",
        "gone||root|1||high,low,normal,scratch", "gone|bob||1||high,low,normal,scratch",
        "gone|eve||1||high,low,normal,scratch"}
    assert accounting.lines("account", "format=account,description,organization") >= {
        "research|research lab|science", "ml|ml|none", "vision|vision|none", "gone|gone|none"}
    assert accounting.lines("user", "format=user,defaultaccount") == {
        "root|root", "alice|ml", "bob|research", "eve|gone"}
    write = os.environ.get("SLURMFORGE_WRITE_SAMPLES") == "1"
    for name, args in SAMPLE_QUERIES.items():
        text = accounting.show(*args)
        if write:
            SAMPLES.mkdir(exist_ok=True)
            (SAMPLES / name).write_text(text)
        assert (SAMPLES / name).read_text() == text, f"{name}: 24.11 prints otherwise (SLURMFORGE_WRITE_SAMPLES=1)"


def test_spec_b_updates_moves_removes_and_keeps_what_jobs_use(accounting: Accounting) -> None:
    rc, eve_job = accounting.submit("eve", "--hold", "-A", "gone", "-p", "ml-cpu", "--time=10")
    assert rc == 0, eve_job
    squeue = accounting.slurm("root", "squeue", "-h", "-a", "-t", "all", "-o", "%a|%u|%q|%T")[1]
    if os.environ.get("SLURMFORGE_WRITE_SAMPLES") == "1":
        (SAMPLES / "squeue.txt").write_text(squeue + "\n")
    assert (SAMPLES / "squeue.txt").read_text() == squeue + "\n"
    report = accounting.converge(spec_b(), "after")
    assert report["changes"] == B_FROM_A, report
    assert report["kept"] == [
        "kept user eve in account gone: active jobs there (removed by a rollout after they end)",
        "kept account gone: active jobs (removed by a rollout after they end)"]
    assert accounting.lines("assoc", "where", "cluster=acct", "format=account,user,parentname,share,grptresmins") == {
        "root|||1|", "root|root||1|", "research||root|20|", "research|alice||1|", "research|bob||1|",
        "ml||research|1|gres/gpu=60", "ml|alice||1|", "vision||ml|1|gres/gpu=120", "physics||root|1|",
        "physics|dave||1|", "gone||root|1|", "gone|eve||1|"}
    assert accounting.lines("user", "format=user,defaultaccount") == {
        "root|root", "alice|research", "bob|research", "eve|gone", "dave|physics"}
    assert accounting.lines("qos", "format=name,priority,maxwall,maxtrespu") == {
        "normal|0||", "high|200||", "low|1|00:30:00|gres/gpu=1"}
    # the job ends: the next rollout removes what it held (once slurmdbd has heard it ended)
    accounting.slurm("root", "scancel", eve_job)
    deadline = time.monotonic() + 30
    while not accounting.slurm("root", "sacct", "-n", "-X", "-j", eve_job, "-o", "state")[1].startswith("CANCELLED"):
        assert time.monotonic() < deadline, accounting.slurm("root", "sacct", "-X", "-j", eve_job)[1]
        time.sleep(0.5)
    report = accounting.converge(spec_b(), "after")
    assert report["changes"] == ["remove user eve (accounts gone)", "remove account gone"], report
    assert accounting.converge(spec_b(), "after")["changed"] is False


def test_slurm_enforces_what_was_applied(accounting: Accounting) -> None:
    """Over a QoS's MaxWall or max GPUs per user in one job: refused at submission, with
    Slurm's reason (DenyOnLimit). A second GPU job over the user's QoS limit, and a job
    that would overspend its account's budget: pending, with Slurm's reason."""
    config = accounting.slurm("root", "scontrol", "show", "config")[1]
    assert re.search(r"^PriorityUsageResetPeriod\s*=\s*MONTHLY$", config, re.M), config
    assert re.search(r"^AccountingStorageEnforce\s*=\s*associations,limits,qos,safe$", config, re.M), config
    rc, out = accounting.submit("alice", "--qos=low", "-p", "ml-cpu", "--time=60")
    assert rc != 0 and "QOSMaxWallDurationPerJobLimit" in out, out
    rc, out = accounting.submit("alice", "--qos=low", "-p", "ml-gpu", "--gres=gpu:2", "--time=10")
    assert rc != 0 and "QOSMaxGRESPerUser" in out, out
    rc, first = accounting.submit("alice", "--qos=low", "-A", "research", "-p", "ml-gpu", "--gres=gpu:1", "--time=10")
    assert rc == 0, first
    rc, second = accounting.submit("alice", "--qos=low", "-A", "research", "-p", "ml-gpu", "--gres=gpu:1",
                                   "--time=10")
    assert rc == 0, second
    assert accounting.reason(second, "QOSMaxGRESPerUser") == "PENDING QOSMaxGRESPerUser"
    # ml's budget: 1 GPU-hour; 2 hours on one GPU would overspend it
    rc, budget_job = accounting.submit("alice", "-A", "ml", "-p", "ml-gpu", "--gres=gpu:1", "--time=02:00:00")
    assert rc == 0, budget_job
    assert accounting.reason(budget_job, "AssocGrpGRESMinutes") == "PENDING AssocGrpGRESMinutes"
    # within it, a job runs (is allocated)
    rc, small = accounting.submit("alice", "-A", "ml", "-p", "ml-gpu", "--gres=gpu:1", "--time=30")
    assert rc == 0, small
    deadline = time.monotonic() + 30
    while accounting.slurm("root", "squeue", "-h", "-j", small, "-o", "%T")[1] == "PENDING":
        assert time.monotonic() < deadline, accounting.slurm("root", "squeue", "-h", "-j", small, "-o", "%r")[1]
        time.sleep(0.5)
    # it holds 30 of ml's 60 GPU-minutes until it ends: 40 more would overspend the budget
    rc, spent = accounting.submit("alice", "-A", "ml", "-p", "ml-gpu", "--gres=gpu:1", "--time=40")
    assert rc == 0, spent
    assert accounting.reason(spent, "AssocGrpGRESMinutes") == "PENDING AssocGrpGRESMinutes"


def test_the_rollouts_plays_run_it_and_report_each_change(accounting: Accounting, tmp_path: Path) -> None:
    """playbooks/cluster.yml's two accounting plays, as they are, through the rollout's own
    runner, on the judge (podman connection): a QoS the spec drops waits for the pass after
    the controller (the running slurmctld's partitions may name it) and goes there; every
    change is a line of the rollout's result (what `up` and `rollout` print)."""
    data = data_b()
    data["scheduling"]["qos"] = [q for q in data["scheduling"]["qos"] if q["name"] != "high"]
    data["scheduling"]["preemption"] = {"type": "none"}
    spec = validate_data(data, "c")
    rendered = accounting.run.root / "rendered"
    rendered.mkdir()
    (rendered / "slurm.conf").write_text(accounting.run.conf.read_text())
    (rendered / "accounting.json").write_text(json.dumps(desired_state(spec)))
    plays = [p for p in yaml.safe_load((playbooks() / "cluster.yml").read_text()) if p["name"] in (
        "Accounting - cluster, QoS, accounts and users from the spec", "Accounting - what waited for slurmctld")]
    assert len(plays) == 2
    playbook = tmp_path / "accounting.yml"  # run_playbook: playbooks() / an absolute path is that path
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    inventory = {"all": {"children": {"slurm_dbd": {"hosts": {accounting.judge.name: {
        "ansible_connection": "containers.podman.podman", "ansible_python_interpreter": "/usr/bin/python3",
        "slurmforge_rendered_dir": str(rendered), **node_vars(),  # the contract's paths, as the inventory has them
        "slurmdbd_sacctmgr_conf": str(accounting.run.root / "sacctmgr.conf")}}}}}}
    result = run_playbook(str(playbook), inventory, tmp_path / "rollout.log")
    assert result.accounting == [
        "modify account root on acct: QOS=low,normal (every account may use every QoS)",
        "waits: remove qos high (after slurmctld loads the new slurm.conf: the running one's partitions may "
        "name it)",
        "remove qos high"], result.accounting
    assert "remove qos high" in (tmp_path / "rollout.log").read_text()
    assert accounting.lines("qos", "format=name") == {"normal", "low"}
