"""Billing judged by Slurm itself, with real jobs: the node image's MariaDB, slurmdbd,
slurmctld and slurmd in one judge container run the local example's rendered config
(its TRESBillingWeights and PriorityFlags=MAX_TRES untouched, GRES weights included),
jobs of different shapes run on its GPU node, and sacct's billing for each is what the
catalog-priced weights say: the job's share of the node's price, in hundredths of a
cent per hour. `slurmforge cost` then reads that sacct output into dollars.

Adapted for a container without systemd (settings only, never a node or partition line):
processes tracked by linuxproc instead of cgroups, the GPU node's /dev/nvidia0-1 made as
the local target's gpu role makes them. `UPDATE_SAMPLES=1` writes the sacct output to
tests/unit/slurm_json/sacct-24.11.5.txt (the unit tests read it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurmforge.billing import billing_weights, pool_price
from slurmforge.cost import SACCT_ENV, SACCT_FIELDS, Period, Pricing, aggregate
from slurmforge.render import render_all
from slurmforge.spec import Cluster, load_spec
from tests.judge import Judge, node_image
from tests.slurm.daemons import (
    AS_RENDERED,
    NODES_READY_SOURCE,
    RunDir,
    adapt_for_tmp,
    free_port,
    install_etc,
    install_join_program,
    power_stub_script,
    start_munged,
    start_slurmctld,
    wait_until_up,
)
from tests.slurm.test_slurmctld_reads_render import expected_nodes

pytestmark = [pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests/unit/slurm_json/sacct-24.11.5.txt"
NODE = "dev-gpu-01"
DB_PASSWORD = "judge-only"  # a throwaway database inside a throwaway container
TIMEOUT = 90.0

# (name, sbatch options, the billing MAX_TRES gives on ml-gpu: CPU=10000, Mem=20000/GB, GPU=10000)
JOBS = [
    ("one-gpu", ["--gres=gpu:1", "-c", "1", "--mem=256M"], 10_000),   # the GPU dominates: half the node
    ("two-cpus", ["-c", "2", "--mem=256M"], 20_000),                  # both CPUs: the whole node
    ("memory", ["-c", "1", "--mem=768M"], 15_000),                    # three quarters of the memory
    ("whole", ["--gres=gpu:2", "-c", "2", "--mem=1024M"], 20_000),    # everything
]


@dataclass(frozen=True)
class Accounted:
    spec: Cluster
    run: RunDir
    judge: Judge
    jobs: dict[str, int]
    sacct: str

    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.run.conf)}


def sh(judge: Judge, script: str, env: dict[str, str] | None = None, timeout: int = 60) -> str:
    done = judge.run(["sh", "-c", script], env=env, timeout=timeout)
    assert done.returncode == 0, f"{script}\n{done.stdout}{done.stderr}"
    return done.stdout


def wait(what: str, check: object, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def start_mariadb(judge: Judge, run: RunDir) -> None:
    """MariaDB on the container's default socket (what the rendered StorageHost=localhost
    reaches), its data in the run dir; the database and a user for slurmdbd. The database
    is made first, as the slurmdbd role does: slurmdbd 24.11 creating it itself on
    MariaDB 11.8 exits at once ('5027 Number of columns in result ... exceeds ...')."""
    data = run.root / "mysql"
    sh(judge, f"mkdir -p /run/mysqld && mariadb-install-db --user=root --datadir={data} --skip-test-db "
              "> /dev/null", timeout=120)
    judge.spawn(["mariadbd", "--user=root", f"--datadir={data}", "--socket=/run/mysqld/mysqld.sock",
                 "--skip-networking", f"--log-error={run.root / 'mariadb.err'}"], run.root / "mariadb.out")
    wait("MariaDB", lambda: judge.run(["mariadb", "-e", "select 1"]).returncode == 0)
    sh(judge, f"mariadb -e \"CREATE DATABASE slurm_acct_db; CREATE USER 'slurm'@'localhost' IDENTIFIED BY "
              f"'{DB_PASSWORD}'; "
              "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';\"")


def slurmdbd_conf(rendered: str, run: RunDir, host: str, port: int) -> str:
    override = {"DbdHost": host, "DbdPort": str(port), "SlurmUser": "root", "LogFile": str(run.root / "slurmdbd.log"),
                "PidFile": str(run.root / "slurmdbd.pid"), "AuthInfo": f"socket={run.munge_socket}",
                "StoragePass": DB_PASSWORD, "AuthAltParameters": f"jwt_key={run.jwt_key}"}
    lines = [line for line in rendered.splitlines() if not line.startswith("Include ")]
    keys = {line.split("=", 1)[0] for line in lines if "=" in line}
    out = [f"{line.split('=', 1)[0]}={override[line.split('=', 1)[0]]}"
           if "=" in line and line.split("=", 1)[0] in override else line for line in lines]
    return "\n".join(out + [f"{k}={v}" for k, v in override.items() if k not in keys]) + "\n"


@pytest.fixture(scope="module")
def accounted() -> Iterator[Accounted]:
    spec = load_spec(ROOT / "examples/local.yaml")
    rendered = render_all(spec, source="local.yaml")
    run = RunDir.create()
    judge = Judge(node_image())
    env = {"SLURM_CONF": str(run.conf)}
    try:
        dbd_port, ctld_port, slurmd_port = free_port(), free_port(), free_port()
        install_etc(judge, run, expected_nodes(spec), ((g.name, g.gid) for g in spec.groups))
        sh(judge, "sed -i 's/^ml-users:x:2000:$/ml-users:x:2000:root/' /etc/group")  # root may use ml-gpu
        start_munged(judge, run)
        start_mariadb(judge, run)
        dbd = run.root / "slurmdbd.conf"
        dbd.write_text(slurmdbd_conf(rendered["slurmdbd.conf"], run, judge.hostname, dbd_port))
        dbd.chmod(0o600)
        settings = {
            # no systemd in the judge: processes tracked by /proc, not cgroups
            "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/affinity",
            "JobAcctGatherType": "jobacct_gather/linux", "PrologFlags": "Alloc",
            "SlurmdSpoolDir": str(run.root / "slurmd"), "SlurmdLogFile": str(run.root / "slurmd.log"),
            "SlurmdPidFile": str(run.root / "slurmd.pid"),
        }
        run.conf.write_text(adapt_for_tmp(rendered["slurm.conf"], run, judge.hostname, ctld_port, slurmd_port,
                                          settings, slurmdbd_port=dbd_port))
        for name in AS_RENDERED:  # what slurmctld reads beside slurm.conf (job_submit.lua too)
            (run.root / name).write_text(rendered[name])
        run.power_stub.write_text(power_stub_script())
        run.power_stub.chmod(0o755)
        shutil.copy2(NODES_READY_SOURCE, run.nodes_ready)
        judge.spawn(["env", f"SLURM_CONF={run.conf}", "slurmdbd", "-D"], run.root / "slurmdbd.out")
        wait("slurmdbd", lambda: judge.run(["sacctmgr", "-n", "show", "cluster"], env=env).returncode == 0)
        sh(judge, "sacctmgr -i add cluster dev && sacctmgr -i add account research Cluster=dev && "
                  "sacctmgr -i add user root Account=research Cluster=dev", env)
        start_slurmctld(judge, run)
        wait_until_up(judge, run)
        # the GPU node's devices, as the gpu role makes them on the local target (mknod needs
        # CAP_MKNOD, which only a privileged exec has in the judge)
        subprocess.run(["podman", "exec", "--privileged", judge.name, "sh", "-c",
                        "mknod -m 666 /dev/nvidia0 c 195 0 && mknod -m 666 /dev/nvidia1 c 195 1"],
                       check=True, capture_output=True, timeout=60)
        sh(judge, f"mkdir -p {run.root / 'slurmd'}")
        install_join_program(judge, spec, run)  # the Prolog, as rendered
        judge.spawn(["env", f"SLURM_CONF={run.conf}", "slurmd", "-D", "-N", NODE], run.root / "slurmd.out")
        wait(f"{NODE} idle", lambda: "idle" in judge.run(["sinfo", "-h", "-n", NODE, "-o", "%t"], env=env).stdout)
        jobs: dict[str, int] = {}
        for name, options, _ in JOBS:
            out = sh(judge, " ".join(["sbatch", "--parsable", "-p", "ml-gpu", "-A", "research", "-J", name,
                                      f"-D {run.root}", *options, "--wrap", "'sleep 2'"]), env)
            jobs[name] = int(out.strip().split(";")[0])
        ids = ",".join(str(j) for j in jobs.values())

        def done() -> bool:
            states = judge.run(["sacct", "-n", "-X", "-P", "-j", ids, "--format=State"], env=env).stdout.split()
            return len(states) == len(jobs) and all(s == "COMPLETED" for s in states)

        wait("the jobs to complete", done, timeout=180)
        sacct = sh(judge, " ".join(["sacct", "-a", "-X", "-P", f"--format={','.join(SACCT_FIELDS)}", "-S", "now-1hour",
                                    "-E", "now"]), {**env, **SACCT_ENV})
        if os.environ.get("UPDATE_SAMPLES"):
            SAMPLE.write_text(sacct)
        yield Accounted(spec, run, judge, jobs, sacct)
    except Exception:
        for log in ("slurmctld.log", "slurmd.log", "slurmdbd.log", "slurmd.out", "slurmdbd.out", "mariadb.err"):
            path = run.root / log
            if path.exists():
                print(f"--- {log}\n{path.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        judge.remove()
        run.remove()


def records(accounted: Accounted) -> dict[int, dict[str, str]]:
    lines = accounted.sacct.splitlines()
    header = lines[0].split("|")
    return {int(r["JobID"]): r for r in (dict(zip(header, line.split("|"), strict=True)) for line in lines[1:])}


def test_each_jobs_billing_is_its_share_of_the_nodes_price(accounted: Accounted) -> None:
    weights = billing_weights(accounted.spec)["ml-gpu"]
    price = pool_price(accounted.spec.pool("gpu"))
    assert price is not None and price.units_per_hour == 20_000  # $2/h
    found = records(accounted)
    for name, _, want in JOBS:
        record = found[accounted.jobs[name]]
        tres = dict(item.split("=", 1) for item in record["AllocTRES"].split(","))
        memory_mb = int(tres["mem"][:-1]) * (1024 if tres["mem"].endswith("G") else 1)
        # Slurm's own figure, our model of it, and the share of the price they stand for
        assert int(tres["billing"]) == want, (name, record["AllocTRES"])
        assert weights.billing(int(tres["cpu"]), memory_mb, int(tres.get("gres/gpu", 0))) == want, name
        assert record["State"] == "COMPLETED" and record["Account"] == "research" and record["NodeList"] == NODE


def test_cost_reads_real_sacct_into_dollars(accounted: Accounted) -> None:
    now = time.time()
    report = aggregate(accounted.sacct.splitlines(), Pricing(accounted.spec), Period(now - 3600, now),
                       ("account", "pool"), source="sacct")
    want = sum(int(dict(i.split("=", 1) for i in r["AllocTRES"].split(","))["billing"]) * int(r["ElapsedRaw"])
               for r in records(accounted).values()) / 36_000_000
    (key,) = report.groups
    assert key == ("research", "gpu") and report.groups[key].jobs == len(JOBS)
    assert report.groups[key].dollars == pytest.approx(want) and want > 0
    assert report.groups[key].gpu_seconds > 0 and not report.unpriced_partitions
