"""Slurm's REST API on the live local cluster (docs/rest-api.md): a user on the login node
gets a token with `scontrol token` and submits, lists and cancels a job over HTTP - the
docs' own curl example, run as written - and sacct has the job, cancelled by that user.
With the primary controller's container stopped and the backup in control, the same
requests at the same address still work; the primary is started again whatever happens.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time

import pytest

from slurmforge.hosts import controller_names
from tests.harness.faults import ping
from tests.harness.live import wait_until
from tests.integration.conftest import ROOT, Cluster_

pytestmark = pytest.mark.integration

DOC = ROOT / "docs" / "rest-api.md"
DOC_PORT = 6820
TAKEOVER_BOUND = 60
"""Seconds from the primary's stop to the backup taking a submission over HTTP (the backup
takes control within ~20 s, docs/controller-ha.md; a stopped container's address then costs
each Slurm client a few seconds of trying the primary first)."""


def doc_example(port: int) -> str:
    """The bash block under "From the login node" in docs/rest-api.md, for the spec's port."""
    section = DOC.read_text().split("## From the login node", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "docs/rest-api.md has no bash block under 'From the login node'"
    return block[1].replace(f"localhost:{DOC_PORT}", f"localhost:{port}")


def run_example(cluster: Cluster_, user: str = "alice") -> tuple[str, str]:
    """The docs' example as `user` on the login node; (job id, its output)."""
    proc = cluster.login("set -eo pipefail\n" + doc_example(cluster.spec.rest_api.port), user=user, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = re.search(r"^submitted job (\d+)$", proc.stdout, re.M)
    assert job, proc.stdout
    return job[1], proc.stdout


def sacct(cluster: Cluster_, job: str) -> str:
    return cluster.login(f"sacct -n -X -P -j {job} -o JobName,User,State").stdout.strip()


def test_a_user_submits_lists_and_cancels_over_http(cluster: Cluster_) -> None:
    job, out = run_example(cluster)
    assert re.search(rf"^job {job} hello-rest alice \S+$", out, re.M), out
    assert f"cancelled job {job}" in out, out
    uid = next(u.uid for u in cluster.spec.users if u.name == "alice")
    wait_until(lambda: sacct(cluster, job) == f"hello-rest|alice|CANCELLED by {uid}", 60,
               f"job {job} cancelled by alice in sacct", every=1)


def test_slurmrestd_runs_as_its_own_account_and_wants_a_token(cluster: Cluster_) -> None:
    port = cluster.spec.rest_api.port
    owner = cluster.run(cluster.report.login, "ps -o user= -C slurmrestd").stdout.split()
    assert owner and set(owner) == {"slurmrestd"}, owner
    # no token: slurmrestd refuses (401); a forged one: slurmctld refuses it (the key is on
    # the controllers only), slurmrestd says so (511) and lists nothing
    none = cluster.login(f"curl -s -o /dev/null -w '%{{http_code}}' http://localhost:{port}/slurm/v0.0.42/jobs")
    assert none.stdout == "401", none.stdout
    forged = cluster.login("curl -s -w '\\n%{http_code}' -H 'X-SLURM-USER-NAME: alice' "
                           "-H 'X-SLURM-USER-TOKEN: eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJhbGljZSJ9.AAAA' "
                           f"http://localhost:{port}/slurm/v0.0.42/jobs")
    body, status = forged.stdout.rsplit("\n", 1)
    answer = json.loads(body)
    assert status == "511" and answer["jobs"] == [], forged.stdout
    assert [e["error"] for e in answer["errors"]] == ["Protocol authentication error"], answer["errors"]
    assert cluster.run(cluster.report.login, "test -e /etc/slurm/jwt_hs256.key").returncode == 1
    for controller in controller_names(cluster.spec):
        mode = cluster.run(controller, "stat -c '%a %U' /etc/slurm/jwt_hs256.key").stdout.strip()
        assert mode == "600 slurm", (controller, mode)


def test_a_user_cannot_cancel_anothers_job_over_http(cluster: Cluster_) -> None:
    port = cluster.spec.rest_api.port
    job = cluster.login("sbatch --hold --parsable -J not-bobs --wrap true").stdout.strip().split(";")[0]
    try:
        out = cluster.login('export $(scontrol token lifespan=60); curl -sSf -H "X-SLURM-USER-NAME: bob" '
                            '-H "X-SLURM-USER-TOKEN: $SLURM_JWT" -X DELETE '
                            f"http://localhost:{port}/slurm/v0.0.42/job/{job}", user="bob")
        assert out.returncode == 0, out.stderr
        errors = [s["error"]["string"] for s in json.loads(out.stdout)["status"]]
        assert errors == ["Access/permission denied"], out.stdout
        assert cluster.login(f"squeue -h -j {job} -o %T").stdout.strip() == "PENDING"
    finally:
        cluster.login(f"scancel {job}")


def test_a_rotated_key_refuses_the_old_tokens_and_loses_no_job(cluster: Cluster_) -> None:
    """`slurmforge rotate jwt-key --local`: the store and both controllers hold the new key;
    a token made before is refused, one made after works; a job running across finishes."""
    from slurmforge.secrets import JWT_KEY
    from slurmforge.state_dirs import secrets_dir

    port = cluster.spec.rest_api.port
    store = secrets_dir(cluster.spec.name) / JWT_KEY
    before = store.read_bytes()
    running = cluster.login("sbatch --parsable -o /dev/null -t 2 --mem=100 --wrap 'sleep 20'").stdout.strip()
    jobs = f"http://localhost:{port}/slurm/v0.0.42/jobs"
    ask = 'curl -s -o /dev/null -w "%{http_code}" -H "X-SLURM-USER-NAME: alice" -H "X-SLURM-USER-TOKEN: $SLURM_JWT" '
    old = cluster.login("scontrol token lifespan=300").stdout.strip().removeprefix("SLURM_JWT=")
    done = subprocess.run([sys.executable, "-m", "slurmforge.cli", "rotate", "jwt-key", "--local", "--cluster",
                           cluster.spec.name], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rotated the JWT key" in done.stdout and "run `scontrol token` again" in done.stdout
    new = store.read_bytes()
    assert new != before and len(new) == 32
    for controller in controller_names(cluster.spec):
        digest = cluster.run(controller, "md5sum < /etc/slurm/jwt_hs256.key").stdout.split()[0]
        assert digest == hashlib.md5(new).hexdigest(), f"{controller} kept the old JWT key"
    assert cluster.login(f"SLURM_JWT={old}; {ask}{jobs}").stdout == "511"  # slurmctld refuses the old key's token
    assert cluster.login(f"export $(scontrol token lifespan=60); {ask}{jobs}").stdout == "200"
    wait_until(lambda: sacct(cluster, running).split("|")[-1] == "COMPLETED", 120, f"job {running} completed",
               every=2)


@pytest.mark.long
def test_the_api_answers_with_the_backup_in_control(cluster: Cluster_) -> None:
    primary, backup = controller_names(cluster.spec)[:2]
    live = cluster.live()
    subprocess.run(["podman", "stop", "-t", "5", primary], check=True, capture_output=True)
    stopped = time.monotonic()
    try:
        job, out = wait_until(lambda: _try_example(cluster), TAKEOVER_BOUND, "a job submitted over HTTP", every=2)
        print(f"submitted over HTTP {time.monotonic() - stopped:.1f} s after the primary stopped")
        assert f"cancelled job {job}" in out, out
        assert re.search(rf"^job {job} hello-rest alice \S+$", out, re.M), out
    finally:
        subprocess.run(["podman", "start", primary], check=False, capture_output=True)
        wait_until(lambda: ping(live, backup).get(primary) and "is UP" in live.root("scontrol ping || true"),
                   120, "the primary back in control", every=1)
    # slurmdbd lives on the primary: the backup's record of the job reaches sacct now
    wait_until(lambda: sacct(cluster, job).startswith("hello-rest|alice|CANCELLED"), 120,
               f"job {job} cancelled in sacct", every=2)


def _try_example(cluster: Cluster_) -> tuple[str, str] | None:
    proc = cluster.login("set -eo pipefail\n" + doc_example(cluster.spec.rest_api.port), timeout=90)
    job = re.search(r"^submitted job (\d+)$", proc.stdout, re.M)
    if proc.returncode != 0 or not job:
        print(proc.stdout + proc.stderr)
        return None
    return job[1], proc.stdout

