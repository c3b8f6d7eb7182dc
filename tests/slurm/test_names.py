"""A job's peers resolve by name the moment it starts, proven with the node image's own
slurmctld and slurmd (a judge container) on the config rendered from examples/local.yaml:
slurm.conf's Prolog is the rendered join program, which slurmd runs as the job is allocated
(PrologFlags Alloc, what the rendered Contain implies) with SLURM_SCRIPT_CONTEXT set; its
hosts step adds the node kit's pool hosts to /etc/hosts before the job's first step.

- a pool node that resolves nowhere else (not in the judge's /etc/hosts, no DNS) resolves
  in the job, to the address the pool hosts give it, and a changed address in the next job;
- without a node kit (the NAS not mounted) the job runs all the same and the node stays in
  service: the Prolog never fails a job.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmforge.contract import JOIN_PROGRAM
from slurmforge.local.provider import LocalProvider
from slurmforge.node.kit import kit_dir, kit_files, pool_hosts_file
from slurmforge.render import render_all
from slurmforge.spec import load_spec
from tests.slurm.daemons import SlurmInJudge, parse_oneliner, running_slurmctld

ROOT = Path(__file__).resolve().parents[2]
NODE = "dev-cpu-01"
PEER = "dev-cpu-04"
"""A dynamic (CLOUD) node: slurmctld does not resolve it at start, so the judge's /etc/hosts
need not name it, and it resolves only through the pool hosts."""

pytestmark = [pytest.mark.slurm]


class Node(SlurmInJudge):
    def job(self, script: str) -> tuple[dict[str, str], str]:
        """Run `script` as a batch job on NODE; its record once it ended, and its output."""
        out = self.run.root / "names-%j.out"
        job = self.slurm("sbatch", "--parsable", "-p", "ml-cpu", "-w", NODE, "-o", str(out), "--wrap",
                         script).strip()
        deadline = time.monotonic() + 60
        while (record := parse_oneliner(self.slurm("scontrol", "show", "job", "-o", job)))["JobState"] in (
                "PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            assert time.monotonic() < deadline, f"job {job} did not end: {record}\n{self.log()[-3000:]}"
            time.sleep(0.2)
        return record, Path(str(out).replace("%j", job)).read_text()

    def sh(self, script: str) -> str:
        done = self.judge.run(["sh", "-c", script], timeout=30, check=True)
        return done.stdout

    def publish(self, pool_hosts: str) -> None:
        """The node kit on the judge's own disk at the spec's path: fixed hosts, pool hosts."""
        kit, pool = kit_dir(self.spec), pool_hosts_file(self.spec)
        hosts = kit_files(self.spec, LocalProvider(self.spec, "img", state_root=self.run.root).hosts())["hosts"]
        (self.run.root / "kit-hosts").write_text(hosts)
        (self.run.root / "pool-hosts").write_text(pool_hosts)
        self.sh(f"install -D -m 0644 {self.run.root}/kit-hosts {kit}/hosts && "
                f"install -D -m 0644 {self.run.root}/pool-hosts {pool}")


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    spec = load_spec(ROOT / "examples/local.yaml")
    rendered = render_all(spec, source="local.yaml")
    assert re.search(rf"^Prolog={JOIN_PROGRAM}$", rendered["slurm.conf"], re.M)
    with running_slurmctld(spec, rendered, node=NODE) as (judge, run):
        c = Node(spec, run, judge)
        # the judge's /etc/hosts (podman's, a mount point) named every node: the peer goes
        c.sh(f"sed 's/ {PEER}\\b//' /etc/hosts > {run.root}/etc-hosts && cat {run.root}/etc-hosts > /etc/hosts")
        yield c


def test_a_job_resolves_its_peer_from_the_pool_hosts(node: Node) -> None:
    assert node.judge.run(["getent", "hosts", PEER]).returncode == 2  # resolves nowhere yet
    node.publish(f"# slurmforge pool hosts\n10.89.7.77 {PEER}\n")
    record, out = node.job(f"getent hosts {PEER}")
    assert record["JobState"] == "COMPLETED", record
    assert out.split() == ["10.89.7.77", PEER]
    node.publish(f"# slurmforge pool hosts\n10.89.7.78 {PEER}\n")  # a new machine of the node
    record, out = node.job(f"getent hosts {PEER}")
    assert out.split() == ["10.89.7.78", PEER]


def test_no_kit_fails_no_job(node: Node) -> None:
    node.sh(f"rm -rf {kit_dir(node.spec)}")
    record, out = node.job("echo ran")
    assert (record["JobState"], out.strip()) == ("COMPLETED", "ran")
    state = parse_oneliner(node.slurm("scontrol", "show", "node", NODE, "-o"))["State"]
    assert "DRAIN" not in state, state
