"""The accounting objects are made before slurmctld loads a config naming them (cluster.yml
runs roles/slurmdbd's accounts.yml before the controller play), so sacctmgr cannot rely
on /etc/slurm/slurm.conf, which a new controller gets only in that later play: every
sacctmgr task reads the rollout's new slurm.conf through SLURM_CONF. (Caught by a fresh
cluster: `sacctmgr: fatal: Could not establish a configuration source`.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def sacctmgr_tasks(tasks: list[dict[str, Any]], env: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
    found = []
    for task in tasks:
        here = {**env, **(task.get("environment") or {})}
        if "block" in task:
            found += sacctmgr_tasks(task["block"], here)
            continue
        command = task.get("ansible.builtin.command")
        argv = command.get("argv", [""]) if isinstance(command, dict) else str(command or "").split()
        if argv and argv[0] == "sacctmgr":
            found.append((task["name"], here))
    return found


def test_every_sacctmgr_task_reads_the_new_config() -> None:
    tasks = yaml.safe_load((ROOT / "roles/slurmdbd/tasks/accounts.yml").read_text())
    found = sacctmgr_tasks(tasks, {})
    assert len(found) >= 5
    assert all(env.get("SLURM_CONF") == "{{ slurmdbd_sacctmgr_conf }}" for _, env in found), found
    written = next(t for t in tasks if "ansible.builtin.copy" in t)["ansible.builtin.copy"]
    assert written["dest"] == "{{ slurmdbd_sacctmgr_conf }}" and "/slurm.conf'" in written["content"]


def test_accounts_before_the_controller() -> None:
    names = [p["name"] for p in yaml.safe_load((ROOT / "playbooks/cluster.yml").read_text())]
    assert names.index("Accounting - cluster, QoS, accounts and users from the spec") < names.index(
        "Controller - slurmctld")
