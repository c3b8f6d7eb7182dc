"""Issue 3's proof: an ordinary user in ml-users on the login node of the real local
cluster (real Slurm, munge, MariaDB, cgroups) runs the jobs an ML team runs."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

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



def test_the_live_cluster_passes_the_testinfra_suite(cluster: Cluster_) -> None:
    """`slurmforge validate --inventory`, as an admin runs it after a rollout: the whole
    live-cluster validation (slurmforge/validation) against this cluster (daemons, mounts, munge, Prometheus targets,
    listen addresses, the mailer, ...), with every failed check named."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "slurmforge.cli", "validate", "--inventory",
                          str(cluster.report.inventory)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "passed every check" in res.stdout

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
    """Refused at submission, at once, with Slurm's reason - never queued for ever (Slurm's
    default EnforcePartLimits=NO accepts the job and leaves it pending)."""
    for command in ("srun -p ml-cpu hostname", "sbatch -p ml-cpu --wrap hostname"):
        res = cluster.login(command, user="eve", timeout=30)
        assert res.returncode not in (0, 124), f"{command}: rc {res.returncode}: {res.stdout}{res.stderr}"
        assert "user's group not permitted to use this partition" in res.stderr.lower(), res.stderr
    assert cluster.login("squeue -h -u eve -o %i", user="eve").stdout.strip() == ""  # nothing left waiting


def test_two_node_ddp_style_launch(cluster: Cluster_) -> None:
    cluster.login(f"cat > ddp.py <<'EOF'\n{DDP}\nEOF")
    res = cluster.login("srun -N2 --ntasks-per-node=1 bash -c "
                        "'MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -1) python3 ddp.py'")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "gathered ranks [1] of 2" in res.stdout, res.stdout


def test_job_mail_reaches_the_user(cluster: Cluster_) -> None:
    """`--mail-type`: slurmctld's mail for BEGIN, END and FAIL reaches the user; without a
    relay in the spec (examples/local.yaml) it is delivered on the controller."""
    import time

    from slurmforge.hosts import controller_name

    ok = cluster.login("sbatch --parsable --mail-type=BEGIN,END --wrap true")
    bad = cluster.login("sbatch --parsable --mail-type=FAIL --wrap false")
    assert ok.returncode == 0 and bad.returncode == 0, ok.stderr + bad.stderr
    wanted = [rf"Subject: Slurm Job_id={ok.stdout.strip()} Name=wrap Began",
              rf"Subject: Slurm Job_id={ok.stdout.strip()} Name=wrap Ended, .* COMPLETED",
              rf"Subject: Slurm Job_id={bad.stdout.strip()} Name=wrap Failed, .* FAILED"]
    deadline, box = time.monotonic() + 90, ""
    while time.monotonic() < deadline:
        box = cluster.run(controller_name(cluster.spec), "cat /var/mail/alice 2>/dev/null").stdout
        if all(re.search(w, box) for w in wanted):
            break
        time.sleep(2)
    missing = [w for w in wanted if not re.search(w, box)]
    assert not missing, f"not in alice's mailbox after 90 s: {missing}\n{box[-2000:]}"


def test_job_mail_leaves_through_the_relay(cluster: Cluster_, tmp_path: Path) -> None:
    """With mail.relay, the controller's mailer hands job mail for <user>@<domain> to the
    relay: the rendered dma.conf, in a node-image container, with an SMTP sink as relay (the
    relay's name resolved to the container's own loopback by --add-host)."""
    import subprocess

    from slurmforge.render import MAIL_PROGRAM, render
    from slurmforge.spec import parse_spec
    from tests.integration.conftest import SPEC

    text = SPEC.read_text() + "\nmail: {domain: example.org, relay: relay.example.org, port: 2525}\n"
    conf = render(parse_spec(text), "dma.conf")
    (tmp_path / "dma.conf").write_text(conf)
    image = cluster.image()
    script = (
        "python3 -u /smtp_sink.py 2525 > /tmp/sink 2>&1 & "
        f"sleep 1; echo 'the job ended' | runuser -u slurm -- {MAIL_PROGRAM} "
        "-s 'Slurm Job_id=7 Name=x Ended' alice@example.org; "
        "for i in $(seq 100); do grep -q 'the job ended' /tmp/sink && break; sleep 0.2; done; cat /tmp/sink")
    sink = Path(__file__).parent / "smtp_sink.py"
    res = subprocess.run(["podman", "run", "--rm", "--add-host", "relay.example.org:127.0.0.1",
                          "-v", f"{tmp_path / 'dma.conf'}:/etc/dma/dma.conf:ro",
                          "-v", f"{sink}:/smtp_sink.py:ro", image, "sh", "-c", script],
                         capture_output=True, text=True, timeout=120)
    got = res.stdout  # the sink prints each header line as a bytes literal
    assert "the job ended" in got, got + res.stderr
    for line in ("To: alice@example.org", "Subject: Slurm Job_id=7 Name=x Ended", "From: <slurm@example.org>",
                 "(envelope-from slurm@example.org)"):
        assert f"{line}'" in got, f"{line!r} not in what the relay got:\n{got}"


@pytest.mark.long
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
    assert again.rollout.skipped_hosts == len(cluster.rolled_out_hosts()), again.rollout
    assert again.rollout.total_changed == 0


def test_a_container_whose_processes_died_is_removed(cluster: Cluster_) -> None:
    """Right after its processes die under podman, `podman rm -f` of a container fails
    ("container state improper") and leaves it in place; remove_container goes on until
    it is gone (CI met such a container after a machine restore)."""
    from slurmforge.local.podman import Podman
    from tests.harness.faults import kill_machines

    image = cluster.image()
    name = f"{cluster.spec.name}-test-dead"
    podman = Podman()
    podman.remove_container(name)
    podman.run(["run", "-d", "--name", name, image, "sleep", "600"])
    kill_machines(podman, [name])  # conmon first (seen once in CI: otherwise podman may know)
    info = podman.container(name)
    assert info is not None and info.state == "running", info  # what podman believes
    podman.remove_container(name)
    assert not podman.container_exists(name)


def test_older_images_go_unless_a_container_uses_them(cluster: Cluster_) -> None:
    """What `up` does after building a new node image, on real podman: the repository's
    other tags are removed, except one a container still uses."""

    from slurmforge.local.image_cache import prune_older
    from slurmforge.local.podman import Podman

    image = cluster.image()
    podman, repo = Podman(), f"localhost/{cluster.spec.name}-test-prune"
    source, user = f"{cluster.spec.name}-test-prune-src", f"{cluster.spec.name}-test-prune-user"
    try:
        podman.run(["create", "--name", source, image, "true"])
        for tag in ("old", "used", "new"):  # three images (a commit each), one tag each
            podman.run(["commit", "-q", source, f"{repo}:{tag}"])
        podman.run(["create", "--name", user, f"{repo}:used", "true"])
        prune_older(podman, f"{repo}:new")
        left = podman.run(["images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", f"reference={repo}"])
        assert sorted(left.split()) == [f"{repo}:new", f"{repo}:used"]
    finally:
        podman.remove_container(source)
        podman.remove_container(user)
        podman.run(["rmi", "-f", f"{repo}:old", f"{repo}:used", f"{repo}:new"], check=False)


def test_a_name_held_by_an_unlisted_container_is_freed_only_if_ours(cluster: Cluster_) -> None:
    """Before creating a node, a container of that name `ps` did not list is removed when
    it is this cluster's, and refused with a clear error when it is someone else's."""

    from slurmforge.errors import ProvisionError
    from slurmforge.local.podman import Podman
    from slurmforge.local.provider import LABEL, LocalProvider

    image = cluster.image()
    podman = Podman()
    provider = LocalProvider(cluster.spec, image, podman)
    ours, theirs = f"{cluster.spec.name}-test-ours", f"{cluster.spec.name}-test-theirs"
    podman.run(["run", "-d", "--name", ours, "--label", f"{LABEL}={cluster.spec.name}", image, "sleep", "600"])
    podman.run(["run", "-d", "--name", theirs, image, "sleep", "600"])
    try:
        provider._free_name(ours)
        assert not podman.container_exists(ours)
        with pytest.raises(ProvisionError, match=f"{theirs} exists that is not part of cluster"):
            provider._free_name(theirs)
        assert podman.container_exists(theirs)
    finally:
        podman.remove_container(ours)
        podman.remove_container(theirs)


def test_up_starts_a_node_whose_processes_died_again_with_its_disk(cluster: Cluster_) -> None:
    """A host restart or a machine restore leaves podman listing containers as running whose
    processes are gone, and podman will neither start nor exec them. `up` starts the node again
    as a machine that reboots - the same container, its disk as it was - which the rollout
    finds current (nothing to change anywhere), and it runs jobs again."""
    import subprocess

    from slurmforge.local.podman import Podman
    from slurmforge.local.up import up
    from tests.harness.faults import kill_machines
    from tests.integration.conftest import SPEC, QuietPhases

    node = f"{cluster.spec.name}-cpu-01"
    cluster.run(node, "echo kept > /var/tmp/slurmforge-disk")
    kill_machines(Podman(), [node])  # as when a machine loses every process
    state = subprocess.run(["podman", "inspect", node, "--format", "{{.State.Status}}"],
                           capture_output=True, text=True).stdout.strip()
    assert state == "running", f"podman no longer believes {node} runs ({state}): the test proves nothing"

    old_id = subprocess.run(["podman", "inspect", node, "--format", "{{.Id}}"], capture_output=True, text=True,
                            check=True).stdout.strip()
    again = up(SPEC, QuietPhases(), run_sample_job=False)
    assert again.rollout is not None
    new_id = subprocess.run(["podman", "inspect", node, "--format", "{{.Id}}"], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert new_id == old_id, f"{node} was made again, its disk lost"
    assert cluster.run(node, "cat /var/tmp/slurmforge-disk").stdout.strip() == "kept"
    # its rollout's mark is on its disk: nothing to do on any host
    assert again.rollout.skipped_hosts == len(cluster.rolled_out_hosts()), again.rollout
    assert again.rollout.total_changed == 0, again.rollout.changed
    res = cluster.login(f"srun -w {node} -t 1 hostname", timeout=180)
    assert res.returncode == 0 and res.stdout.strip() == node, res.stdout + res.stderr


def test_no_secret_reaches_the_rollout_logs(cluster: Cluster_) -> None:
    """Munge key, DB password, Ceph keys, the SSH key: in neither log of the rollout
    (the key travels base64-encoded to the nodes, so that form is looked for too)."""
    import base64

    from slurmforge.state_dirs import secrets_dir

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
