"""The join program's steps have one source, slurmforge/node/steps.py: each row is one part of
templates/node/steps/ holding its function, the program runs them in the table's order, and no
role or playbook names a step (the inventory hands every host its steps). The node kit's files
are one list too (slurmforge/node/kit.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_join import hosts_of

from slurmforge.contract import KIT_POOL_HOSTS, KIT_SLURMD_FAILURES
from slurmforge.hosts import HostRole
from slurmforge.node.kit import KIT_FILES, kit_files
from slurmforge.node.program import local_settings, render_join
from slurmforge.node.steps import HEADS, PARTS, STEPS, join_vars, names
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_every_step_is_one_part_with_its_function_and_every_part_a_step() -> None:
    parts = ROOT / "templates" / PARTS
    assert sorted(p.name for p in parts.iterdir()) == sorted(f"{name}.sh.j2" for name in names())
    for step in STEPS:
        text = (ROOT / "templates" / step.part).read_text()
        assert re.findall(r"^(step_\w+)\(\)", text, re.M) == [f"step_{step.name}"], step.part


def test_the_program_runs_the_tables_steps_in_its_order_and_lists_them() -> None:
    spec = load_spec(ROOT / "examples" / "lab.yaml")
    program = render_join(spec, local_settings(spec, hosts_of(spec)))
    assert f"\nSTEPS=({' '.join(names())})\n" in program
    defined = re.findall(r"^step_(\w+)\(\) \{", program, re.M)
    assert defined == list(names())  # each part once, in the table's order
    header = program[:program.index("set -euo pipefail")]
    assert [line.split()[1] for line in header.splitlines() if re.match(r"#   \w+ +\S", line)][:len(STEPS)] == \
        list(names())


def test_the_first_step_runs_on_every_host_and_every_head_node_has_a_first_pass() -> None:
    assert STEPS[0].name == "identity" and STEPS[0].roles == frozenset(HostRole)
    for role in HEADS:
        assert join_vars(role)["before_kit"]  # the playbook's first pass runs on head nodes: never empty
    assert join_vars(HostRole.COMPUTE)["at_boot"] is None  # no steps file: every step, as a new machine


def spelled_steps(text: str) -> list[str]:
    """A list of steps written out (`munge,nas`) or a test of one (`'munge' in ...`)."""
    one = "|".join(names())
    return re.findall(rf"(?<![\w.-])(?:{one})(?:,(?:{one}))+(?![\w-])|'(?:{one})' in ", text)


def test_no_role_or_playbook_names_a_step() -> None:
    found = {str(path.relative_to(ROOT)): spelled for path in [*(ROOT / "roles").rglob("*.yml"),
                                                               *(ROOT / "playbooks").rglob("*.yml")]
             if (spelled := spelled_steps(path.read_text()))}
    assert found == {}


def test_the_check_finds_what_the_role_and_the_playbook_spelled_before() -> None:
    assert spelled_steps('slurm_node_head_steps: munge,nas,kit,hosts,cephfs,lmod,exporter') == [
        "munge,nas,kit,hosts,cephfs,lmod,exporter"]
    assert spelled_steps('''vars: {slurm_node_first_steps: "munge,nas"}''') == ["munge,nas"]
    assert spelled_steps("{{ 'munge' in slurm_node_join_steps.split(',') }}") == ["'munge' in "]
    assert spelled_steps("hosts: slurm_cluster:!slurm_compute\nroles: [munge, nas]") == []


def kit_path(written: str) -> str:
    """A kit path as a template or a role writes it, with a name in it made <client> or <node>."""
    written = re.sub(r"\$\(basename \"\$keyring\"\)", "ceph.client.<client>.keyring", written)
    return re.sub(r"\{\{ slurmforge_ceph\.client \}\}", "<client>", written)


def test_every_kit_file_the_program_reads_or_the_rollout_publishes_is_in_the_one_list() -> None:
    listed = {f.path for f in KIT_FILES}
    read = {kit_path(m) for part in (ROOT / "templates" / "node").rglob("*.j2")
            for m in re.findall(r'\$KIT/([\w./-]+(?:\$\(basename "\$keyring"\))?)', part.read_text())}
    kit_yml = (ROOT / "roles" / "storage_client" / "tasks" / "kit.yml").read_text()
    published = {kit_path(m) for m in re.findall(r'slurmforge_kit_dir \}\}/([^"]+)"', kit_yml)} - {"private"}
    assert read == {"accounts", "hosts", "ceph.conf", "private/ceph.client.<client>.keyring"}  # the check reads them
    assert read <= listed and published <= listed
    assert {KIT_POOL_HOSTS, f"{KIT_SLURMD_FAILURES}/<node>"} <= listed
    assert set(kit_files(load_spec(ROOT / "examples" / "lab.yaml"), [])) <= listed
