"""The node image is built by playbooks/image.yml under Debian's `ansible-core` package, on
every target (slurmforge/image.py), which has no collections: every module, filter and
lookup the image playbook and the roles' install tasks use must be ansible.builtin or a
module of the playbooks' own library/. Every build would fail on one; this test says which
before a build starts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from slurmforge.image import IMAGE_PLAYBOOK

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
KEYWORDS = {"name", "when", "loop", "loop_control", "register", "vars", "args", "become", "become_user",
            "changed_when", "failed_when", "notify", "tags", "no_log", "environment", "ignore_errors",
            "delegate_to", "run_once", "until", "retries", "delay", "block", "rescue", "always", "check_mode",
            "with_items", "hosts", "gather_facts", "tasks", "handlers", "pre_tasks", "post_tasks", "listen"}
PLUGIN = re.compile(r"(?:map\(|select\(|reject\(|lookup\(|query\(|\|)\s*'?([a-z0-9_]+\.[a-z0-9_]+\.[a-z0-9_]+)")
"""A fully qualified filter, test or lookup: `| ns.coll.name`, `map('ns.coll.name'`, `lookup('ns.coll.name'`."""


def image_files() -> list[Path]:
    return [ROOT / IMAGE_PLAYBOOK, *sorted((ROOT / "roles").glob("*/tasks/install.yml"))]


def modules(tasks: object) -> list[str]:
    """Every module a list of tasks (or plays) calls, blocks included."""
    found: list[str] = []
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        for key, value in task.items():
            if key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                found += modules(value)
            elif key not in KEYWORDS:
                found.append(key)
    return found


def test_the_image_playbook_uses_only_what_ansible_core_ships() -> None:
    own = {p.stem for p in (ROOT / "playbooks" / "library").glob("*.py")}
    wrong = []
    for path in image_files():
        text = path.read_text()
        for module in modules(yaml.safe_load(text)):
            if not module.startswith("ansible.builtin.") and module not in own:
                wrong.append(f"{path.relative_to(ROOT)}: module {module}")
        wrong += [f"{path.relative_to(ROOT)}: {name}" for name in PLUGIN.findall(text)
                  if not name.startswith("ansible.builtin.")]
    assert not wrong, "not in Debian's ansible-core: " + "; ".join(wrong)


def test_the_check_sees_a_collection() -> None:
    """The check itself: a collection module and a collection filter are both caught."""
    tasks = yaml.safe_load("- name: x\n  community.general.ini_file: {path: /x}\n  loop: []\n")
    assert modules(tasks) == ["community.general.ini_file"]
    assert PLUGIN.findall("{{ xs | map('community.general.dict_kv', 'path') | list }}") == ["community.general.dict_kv"]
    assert PLUGIN.findall("{{ x | ansible.builtin.to_json }}") == ["ansible.builtin.to_json"]
