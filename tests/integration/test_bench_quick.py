"""The benches that need the live local cluster keep working: each one's quick mode runs here
as a subprocess against the suite's cluster (up through the `cluster` fixture) and must exit
0. None brings up or tears down a cluster, and each restores what it changes (a node powered
up is powered down again, slurmctld is started again, a killed node is started and back in
service, a stopped OSD is started). They run after the suite's other tests (conftest.py
orders them last): those expect a cluster nobody has just faulted. The benches that need no
cluster run their quick modes in tests/unit/test_bench_quick.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.integration.conftest import ROOT, SPEC, Cluster_

pytestmark = pytest.mark.integration

QUICK_TIMEOUT = 300
"""Each quick mode takes under a minute on an idle machine (never_down: a 90 s outage and a
dead static node replaced, about 3-4 minutes; failover: two failovers, about 5); the rest is
room for a loaded one."""


def quick_args(cluster: Cluster_, bench: str) -> list[str]:
    return {
        "coldstart": ["--cluster", cluster.spec.name],
        "local": ["--spec", str(SPEC)],
        "ceph": [str(SPEC)],
        "monitoring": ["--inventory", str(cluster.report.inventory)],
        "never_down": ["--cluster", cluster.spec.name],
        "plan": ["--live", "--spec", str(SPEC), "--inventory", str(cluster.report.inventory)],
        "ml": ["--cluster", cluster.spec.name],
        "rotate": ["--cluster", cluster.spec.name],
        "restd": ["--cluster", cluster.spec.name],
        "validate_inventory": ["--inventory", str(cluster.report.inventory)],
        "failover": ["--cluster", cluster.spec.name, "--partition", "ml-cpu"],
        "upgrade": ["--cluster", cluster.spec.name],
    }[bench]


LONG = pytest.mark.long
"""Quick modes that repeat what a test of `./dev.sh test` proves run in `./dev.sh test-all`
only: local's (an idle `up`: test_local_cluster's skip test), ceph's (an OSD stopped under a
job: test_ceph's), never_down's (a 90 s outage and a dead static node replaced:
test_never_down's replaced node), failover's (two failovers in a row: test_controller_failover
runs one). tests/unit/test_bench_quick.py starts every bench in the fast phase so none rots
unnoticed."""


# a quick mode that is an integration test itself runs there, once: restart's as
# test_restarts.py's first (long: `./dev.sh test-all`)
@pytest.mark.parametrize("bench", [pytest.param("local", marks=LONG), "monitoring", "coldstart",
                                   pytest.param("ceph", marks=LONG), pytest.param("never_down", marks=LONG),
                                   "plan", "ml", "rotate", "restd", "validate_inventory",
                                   pytest.param("failover", marks=LONG), pytest.param("upgrade", marks=LONG)])
def test_live_bench_quick_mode_passes(cluster: Cluster_, bench: str) -> None:
    argv = [sys.executable, str(ROOT / "bench" / f"{bench}_bench.py"), "--quick", *quick_args(cluster, bench)]
    timeout = 3 * QUICK_TIMEOUT if bench in ("never_down", "failover") else QUICK_TIMEOUT
    # this tree's package, whatever the venv installed
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env, check=False)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
