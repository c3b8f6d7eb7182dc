"""A failed rollout never fools the next one: each host's mark goes before the rollout
changes it and comes back only when every play succeeded there. The real
playbooks/rollout_mark.yml, run by ansible-runner against three local hosts, one of which
fails half-way; then the next rollout's plan includes exactly what the failure left."""

from __future__ import annotations

import sys
import unittest.mock
from pathlib import Path

import pytest
import yaml

from slurmforge import rollout
from slurmforge.contract import DIGEST_FILE
from slurmforge.errors import RolloutError
from slurmforge.inventory import HOSTS_FILE
from slurmforge.package_data import playbooks
from slurmforge.rollout import (
    CEPH_PLAYBOOK,
    CLUSTER_PLAYBOOK,
    mark_text,
    read_mark_text,
    roll_out,
    run_playbook,
    stale_parts,
)

pytestmark = pytest.mark.unit

OLD, NEW = "a" * 64, "b" * 64


def playbook(tmp_path: Path, failing: str) -> Path:
    """What cluster.yml is made of: the mark removed, a play that changes every host and
    fails on one, the mark written."""
    mark = str(playbooks() / "rollout_mark.yml")
    plays = [
        {"name": "begin", "ansible.builtin.import_playbook": mark,
         "vars": {"rollout_mark_hosts": "all", "rollout_mark_step": "begin"}},
        {"name": "a change that fails on one host", "hosts": "all", "gather_facts": False, "tasks": [
            {"name": "change", "ansible.builtin.copy": {"content": "new\n", "dest": "{{ config_file }}",
                                                       "mode": "0644"}},
            {"name": "fail", "ansible.builtin.fail": {"msg": "slurmctld did not come back"},
             "when": f"inventory_hostname == '{failing}'"}]},
        {"name": "end", "ansible.builtin.import_playbook": mark,
         "vars": {"rollout_mark_hosts": "all", "rollout_mark_step": "end"}},
    ]
    path = tmp_path / "site.yml"
    path.write_text(yaml.safe_dump(plays, sort_keys=False))
    return path


def inventory(tmp_path: Path, hosts: list[str]) -> dict[str, object]:
    return {"all": {"hosts": {h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                  "slurmforge_rollout_digest_file": str(tmp_path / h / "etc" / "rollout.digest"),
                                  "config_file": str(tmp_path / h / "slurm.conf")} for h in hosts}}}


def test_a_rollout_failing_half_way_leaves_the_next_one_to_converge(tmp_path: Path) -> None:
    hosts = ["ctl", "node-1", "node-2"]
    marks = {h: tmp_path / h / "etc" / "rollout.digest" for h in hosts}
    for h in hosts:  # every host has the last good rollout
        marks[h].parent.mkdir(parents=True)
        marks[h].write_text(mark_text({"node": OLD}))

    def read(host: str) -> str:
        return marks[host].read_text() if marks[host].exists() else ""

    old, new = {h: {"node": OLD} for h in hosts}, {h: {"node": NEW} for h in hosts}
    assert stale_parts(hosts, old, read) == {}
    with pytest.raises(RolloutError, match="slurmctld did not come back"):
        run_playbook(str(playbook(tmp_path, failing="ctl")), inventory(tmp_path, hosts), tmp_path / "run.log",
                     extravars={"slurmforge_rollout_marks": {h: mark_text({"node": NEW}) for h in hosts}})
    assert (tmp_path / "ctl" / "slurm.conf").read_text() == "new\n"  # the failed rollout changed it ...
    assert read("ctl") == "" and read("node-1") == mark_text({"node": NEW}) == read("node-2")  # ... not current
    assert stale_parts(hosts, old, read) == {h: {"node"} for h in hosts}  # back to the old spec: every host
    assert stale_parts(hosts, new, read) == {"ctl": {"node"}}  # the same spec again: the one that failed
    assert stale_parts(hosts, new, read, full=True) == {h: {"node"} for h in hosts}


def test_each_host_is_marked_with_its_own_digest(tmp_path: Path) -> None:
    hosts = ["ctl", "node-1"]
    for h in hosts:
        (tmp_path / h).mkdir()
    run_playbook(str(playbook(tmp_path, failing="none")), inventory(tmp_path, hosts), tmp_path / "run.log",
                 extravars={"slurmforge_rollout_marks": {"ctl": mark_text({"node": NEW, "slurmctld": OLD}),
                                                         "node-1": mark_text({"node": NEW})}})
    assert [read_mark_text((tmp_path / h / "etc" / "rollout.digest").read_text()) for h in hosts] == [
        {"node": NEW, "slurmctld": OLD}, {"node": NEW}]


def test_a_mark_of_another_form_leaves_every_part_stale() -> None:
    """An older slurmforge's mark (one digest for the whole cluster)."""
    assert read_mark_text(OLD) == {}
    parts = {"ctl": {"node": OLD, "slurmctld": OLD}}
    assert stale_parts(["ctl"], parts, lambda _: OLD) == {"ctl": {"node", "slurmctld"}}


@pytest.mark.parametrize(("name", "hosts"), [(CLUSTER_PLAYBOOK, "slurm_cluster"), (CEPH_PLAYBOOK, "ceph")])
def test_every_playbook_marks_first_and_last(name: str, hosts: str) -> None:
    plays = yaml.safe_load((playbooks() / name).read_text())
    first, last = plays[0], plays[-1]
    assert first["ansible.builtin.import_playbook"] == last["ansible.builtin.import_playbook"] == "rollout_mark.yml"
    assert first["vars"] == {"rollout_mark_hosts": hosts, "rollout_mark_step": "begin"}
    assert last["vars"] == {"rollout_mark_hosts": hosts, "rollout_mark_step": "end"}


def test_the_inventory_names_the_mark_the_cli_reads() -> None:
    from slurmforge.inventory import cluster_vars
    from slurmforge.spec import load_spec

    spec = load_spec(Path(__file__).parents[2] / "examples" / "local.yaml")
    assert cluster_vars(spec, Path("/tmp/inv"), [])["slurmforge_rollout_digest_file"] == DIGEST_FILE


def test_the_rollout_reads_the_hosts_file_and_its_group_vars_not_the_whole_directory(tmp_path: Path) -> None:
    """An inventory directory also holds the spec and the rendered configs, which Ansible
    would try to parse as inventories one by one (a warning each, and hosts from any file
    that parsed); the rollout gives it hosts.yml, whose group_vars/ still apply."""
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "rendered").mkdir()
    (inv / HOSTS_FILE).write_text(yaml.safe_dump(inventory(tmp_path, ["ctl"])))
    (inv / "group_vars" / "all.yml").write_text("greeting: from-group-vars\n")
    (inv / "cluster.yaml").write_text("name: dev\npools: []\n")
    (inv / "rendered" / "ceph.conf").write_text("[global]\nfsid = 49ecf88d-0a6c-4125-ada1-7658be40d5cb\n")
    (inv / "rendered" / "intruder").write_text("[compute]\nintruder ansible_connection=local\n")
    play = [{"name": "say", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "write", "ansible.builtin.copy": {"content": "{{ greeting }} {{ groups['all'] | join(',') }}\n",
                                                  "dest": str(tmp_path / "said"), "mode": "0644"}}]}]
    (tmp_path / "site.yml").write_text(yaml.safe_dump(play))
    log = tmp_path / "run.log"
    real = rollout.run_playbook  # the real one, with the playbook above

    def run(playbook: str, *args: object, **kw: object) -> object:
        return real(str(tmp_path / "site.yml"), *args, **kw)  # type: ignore[arg-type]

    with unittest.mock.patch.object(rollout, "run_playbook", run):
        result = roll_out(inv, [], log)
    assert result.ok, log.read_text()
    assert (tmp_path / "said").read_text() == "from-group-vars ctl\n"
    text = log.read_text()
    assert "Failed to parse" not in text and "not a valid group definition" not in text, text
