"""How the rollout runs accounting convergence (slurmforge/accounting.py; what it does is
tested in tests/unit/test_accounting.py and, against a real slurmdbd, tests/slurm).

The accounting objects are made before slurmctld loads a config naming them (cluster.yml
runs roles/slurmdbd's accounts.yml before the controller play), so sacctmgr cannot rely
on /etc/slurm/slurm.conf, which a new controller gets only in that later play: the program
reads the rollout's new slurm.conf through SLURM_CONF. (Caught by a fresh cluster:
`sacctmgr: fatal: Could not establish a configuration source`.) What had to wait for
slurmctld runs in a second pass after the controller play."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "roles/slurmdbd/tasks/accounts.yml"
DEFAULTS = yaml.safe_load((ROOT / "roles/slurmdbd/defaults/main.yml").read_text())


def tasks() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = yaml.safe_load(TASKS.read_text())
    return loaded


def test_the_program_is_the_package_module_run_by_the_controllers_python() -> None:
    """The program is slurmforge/accounting.py itself (standard library only: the scheduler
    service's venv gets the package only in the rollout's last play), run as a script."""
    by_module = {next(k for k in t if k.startswith("ansible.builtin.")): t for t in tasks()}
    copied = [t["ansible.builtin.copy"] for t in tasks() if "ansible.builtin.copy" in t]
    program = next(c for c in copied if c["dest"] == "{{ slurmdbd_accounting_program }}")
    assert (ROOT / "roles/slurmdbd" / program["src"].replace("{{ role_path }}/", "")).resolve() == (
        ROOT / "slurmforge/accounting.py")
    assert program["mode"] == "0755"
    assert (ROOT / "slurmforge/accounting.py").read_text().startswith("#!/usr/bin/python3\n")
    desired = next(c for c in copied if c["dest"] == "{{ slurmdbd_accounting_desired }}")
    assert desired["src"] == "{{ slurmforge_rendered_dir }}/accounting.json"
    run = by_module["ansible.builtin.command"]
    assert run["ansible.builtin.command"]["argv"][0] == "{{ slurmdbd_accounting_program }}"
    assert "--phase" in run["ansible.builtin.command"]["argv"]
    assert "from_json" in run["changed_when"] and ".changed" in run["changed_when"]
    # each change, each kept removal and each waiting item is a line of the rollout's log
    report = by_module["ansible.builtin.debug"]
    assert all(key in report["loop"] for key in (".changes", ".kept", ".deferred"))


def test_the_program_reads_the_new_config() -> None:
    run = next(t for t in tasks() if "ansible.builtin.command" in t)
    assert run["environment"] == {"SLURM_CONF": "{{ slurmdbd_sacctmgr_conf }}"}
    written = next(t for t in tasks() if "ansible.builtin.copy" in t)["ansible.builtin.copy"]
    assert written["dest"] == "{{ slurmdbd_sacctmgr_conf }}" and "/slurm.conf'" in written["content"]


def test_no_sacctmgr_call_bypasses_the_program() -> None:
    commands = [t for t in tasks() if {"ansible.builtin.command", "ansible.builtin.shell"} & set(t)]
    assert [t["ansible.builtin.command"]["argv"][0] for t in commands] == ["{{ slurmdbd_accounting_program }}"]


def test_accounts_before_the_controller_and_what_waited_after_it() -> None:
    plays = yaml.safe_load((ROOT / "playbooks/cluster.yml").read_text())
    names = [p["name"] for p in plays]
    before = names.index("Accounting - cluster, QoS, accounts and users from the spec")
    controller = names.index("Controller - slurmctld")
    after = names.index("Accounting - what waited for slurmctld")
    assert before < controller < after
    assert DEFAULTS["slurmdbd_accounting_phase"] == "before"
    second = plays[after]["tasks"][0]
    assert second["ansible.builtin.include_role"] == {"name": "slurmdbd", "tasks_from": "accounts"}
    assert second["vars"] == {"slurmdbd_accounting_phase": "after"}
    assert second["when"] == "slurmdbd_accounting_waits | default(false)"
    assert any("slurmdbd_accounting_waits" in str(t.get("ansible.builtin.set_fact")) for t in tasks())


def test_the_cli_repeats_each_accounting_line_of_the_rollout() -> None:
    """The rollout's events carry the report task's loop items: RolloutResult.accounting
    collects them for `up` and `rollout` to print."""
    from slurmforge.rollout import ACCOUNTING_REPORT_TASK, Progress, RolloutResult, _apply

    assert any(t["name"] == ACCOUNTING_REPORT_TASK and "ansible.builtin.debug" in t for t in tasks())
    result = RolloutResult(ok=True)
    for kind, task, msg in (("runner_item_on_ok", ACCOUNTING_REPORT_TASK, "add account ml: Cluster=dev"),
                            ("runner_item_on_ok", "Another loop", "not accounting"),
                            ("runner_item_on_ok", ACCOUNTING_REPORT_TASK, "waits: remove qos old")):
        _apply({"event": kind, "event_data": {"task": task, "res": {"msg": msg}}}, Progress(), result)
    assert result.accounting == ["add account ml: Cluster=dev", "waits: remove qos old"]
