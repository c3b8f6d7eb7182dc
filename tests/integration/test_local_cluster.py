"""Issue 3's proof: an ordinary user in ml-users on the login node of the real local
cluster (real Slurm, munge, MariaDB, cgroups) runs the jobs an ML team runs."""

from __future__ import annotations

import re
import textwrap

import pytest

from tests.integration.conftest import Cluster_

pytestmark = pytest.mark.integration

DDP = textwrap.dedent('''
    import os, socket, time
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    master = os.environ["MASTER_ADDR"]
    port = 29500
    if rank == 0:
        srv = socket.create_server(("0.0.0.0", port))
        got = []
        for _ in range(world - 1):
            conn, _ = srv.accept()
            got.append(int(conn.recv(16).decode()))
            conn.sendall(b"ok")
        print(f"rank0 on {socket.gethostname()} gathered ranks {sorted(got)} of {world}")
    else:
        for _ in range(50):
            try:
                c = socket.create_connection((master, port), timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        c.sendall(str(rank).encode())
        assert c.recv(16) == b"ok"
        print(f"rank{rank} on {socket.gethostname()} joined")
''')


def test_sbatch_job_completes_and_is_accounted(cluster: Cluster_) -> None:
    res = cluster.login("sbatch --wait --parsable -A research -o job-%j.out --wrap 'hostname; id -un'")
    assert res.returncode == 0, res.stderr
    job = res.stdout.strip().split(";")[0]
    out = cluster.login(f"cat job-{job}.out").stdout
    assert "alice" in out
    acct = cluster.login(f"sacct -j {job} -X -n -P -o JobID,Account,State,User")
    assert acct.stdout.strip().splitlines()[0] == f"{job}|research|COMPLETED|alice", acct.stdout


def test_srun_across_two_nodes(cluster: Cluster_) -> None:
    res = cluster.login("srun -N2 -l hostname | sort")
    assert res.returncode == 0, res.stderr
    hosts = {line.split(": ")[1] for line in res.stdout.splitlines()}
    assert len(hosts) == 2 and all(h.startswith("dev-cpu-") for h in hosts), res.stdout


def test_interactive_srun_pty(cluster: Cluster_) -> None:
    res = cluster.login("srun --pty bash -c 'tty >/dev/null && echo interactive-on-$(hostname)'", tty=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"interactive-on-dev-cpu-[\w-]+", res.stdout), res.stdout


GPU_PROBE = (
    "import os, errno\n"
    "print('CUDA=' + os.environ.get('CUDA_VISIBLE_DEVICES', ''))\n"
    "for d in ('/dev/nvidia0', '/dev/nvidia1'):\n"
    "    try:\n"
    "        os.close(os.open(d, os.O_RDONLY)); print('open:' + d)\n"
    "    except OSError as e:\n"
    "        # no driver behind the fake device: ENXIO means the cgroup let us through\n"
    "        print(('denied:' if e.errno == errno.EPERM else 'allowed:') + d)\n"
)


def test_gpu_job_sees_exactly_one_device(cluster: Cluster_) -> None:
    cluster.login(f"cat > gpuprobe.py <<'EOF'\n{GPU_PROBE}EOF")
    res = cluster.login("srun -p ml-gpu --gres=gpu:1 python3 gpuprobe.py")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.split()
    assert "CUDA=0" in lines, res.stdout
    assert sum(line.startswith(("open:", "allowed:")) for line in lines) == 1, res.stdout
    assert sum(line.startswith("denied:") for line in lines) == 1, res.stdout
    # without a GPU request the job gets neither device
    none = cluster.login("srun -p ml-gpu python3 gpuprobe.py").stdout.split()
    assert sum(line.startswith("denied:") for line in none) == 2, none


def test_constraint_routes_to_the_gpu_pool(cluster: Cluster_) -> None:
    res = cluster.login("srun -p ml-cpu,ml-gpu --constraint=fakegpu hostname")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "dev-gpu-01"


def test_memory_limit_is_enforced_by_cgroups(cluster: Cluster_) -> None:
    hog = "python3 -c 'a = bytearray(300 * 1024 * 1024); print(len(a))'"
    res = cluster.login(f"sbatch --wait --parsable --mem=50M -o oom-%j.out --wrap \"{hog}\"")
    job = res.stdout.strip().split(";")[0]
    state = cluster.login(f"sacct -j {job} -X -n -P -o State,ExitCode").stdout.strip()
    assert state.startswith(("OUT_OF_MEMORY", "FAILED")), state
    ok = cluster.login("sbatch --wait --parsable --mem=50M --wrap \"python3 -c 'a = bytearray(10 << 20)'\"")
    assert ok.returncode == 0, ok.stderr


def test_user_outside_allowed_group_is_refused(cluster: Cluster_) -> None:
    res = cluster.login("srun -p ml-cpu hostname", user="eve")
    assert res.returncode != 0
    assert "partition" in res.stderr.lower() or "user's group not permitted" in res.stderr.lower(), res.stderr


def test_two_node_ddp_style_launch(cluster: Cluster_) -> None:
    cluster.login(f"cat > ddp.py <<'EOF'\n{DDP}\nEOF")
    res = cluster.login("srun -N2 --ntasks-per-node=1 bash -c "
                        "'MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -1) python3 ddp.py'")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "gathered ranks [1] of 2" in res.stdout, res.stdout


def test_second_up_changes_nothing(cluster: Cluster_) -> None:
    """A full Ansible run over the converged cluster: the roles are idempotent."""
    from slurmforge.local.up import up
    from tests.integration.conftest import SPEC, QuietPhases

    again = up(SPEC, QuietPhases(), run_sample_job=False, full_rollout=True)
    assert again.rollout is not None
    assert again.rollout.seconds > 0  # Ansible really ran, on every node that is up
    assert again.rollout.total_changed == 0, again.rollout.changed


def test_up_without_changes_skips_every_node(cluster: Cluster_) -> None:
    """Nothing changed since the last rollout: no node needs Ansible at all."""
    from slurmforge.local.up import up
    from tests.integration.conftest import SPEC, QuietPhases

    again = up(SPEC, QuietPhases(), run_sample_job=False)
    assert again.rollout is not None
    assert again.rollout.skipped_hosts == len(cluster.report_hosts()), again.rollout
    assert again.rollout.total_changed == 0


def test_no_secret_reaches_the_rollout_logs(cluster: Cluster_) -> None:
    """Munge key, DB password, Ceph keys, the SSH key: in neither log of the rollout
    (the key travels base64-encoded to the nodes, so that form is looked for too)."""
    import base64

    from slurmforge.inventory import secrets_dir

    # every `up` of this cluster on this machine (the session's own may have skipped Ansible)
    logs = sorted(cluster.report.log.parent.glob(f"{cluster.spec.name}-up-*.log"))
    assert any("PLAY RECAP" in p.read_text(errors="replace") for p in logs), "no rollout log to look at"
    text = "\n".join(p.read_text(errors="replace") for p in logs)
    found = []
    for secret in sorted(secrets_dir(cluster.spec.name).iterdir()):
        if secret.suffix == ".pub" or secret.name == "ceph.fsid":
            continue
        raw = secret.read_bytes()
        forms = {base64.b64encode(raw).decode()[:40]}
        lines = [ln.strip() for ln in raw.decode(errors="ignore").splitlines() if len(ln.strip()) >= 16]
        forms.update(ln for ln in lines if not ln.startswith("-----"))
        found += [secret.name for form in forms if form and form in text]
    assert not found, f"secrets in {[str(p) for p in logs]}: {sorted(set(found))}"
