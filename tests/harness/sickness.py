"""A node broken on purpose on the running local cluster, and what its health check and the
scheduler service did about it (a sick node is drained, replaced, back in service).

Ways to break a node, each what a real machine goes through:
- `data`: CephFS gone from /data (its automount stopped, the ceph-fuse mount unmounted);
- `scratch`: local scratch full (a small file system mounted on it and filled);
- `gpu`: a GPU's device file gone (what a GPU that fell off the bus leaves).

`check` runs the node's health check by hand (`slurmforge-health --check`: the verdict, no
drain), timed. `sick_node` breaks a node under a running job that traps USR1 and measures: the
break until the node is drained with a `health:` reason (slurmd runs the check every
HealthCheckInterval), until the job is requeued (the service signals it, then requeues it
after its evacuation grace), and until the node is in service again on a new machine (the
service replaced it). Used by tests/integration/test_node_health.py and bench/ml_bench.py.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from slurmforge.contract import HEALTH_PROGRAM
from slurmforge.errors import ProvisionError
from tests.harness.faults import FAULT_JOB, clear_leftovers
from tests.harness.live import IN_SERVICE, LiveCluster, wait_until

BREAKS = {
    "data": "systemctl stop data.automount; umount -l /data 2>/dev/null; ! mountpoint -q /data",
    "scratch": "mount -t tmpfs -o size=8m slurmforge-full /scratch && "
               "dd if=/dev/zero of=/scratch/fill bs=1M count=8 2>/dev/null; df --output=pcent /scratch | tail -n 1",
    "gpu": "rm -f /dev/nvidia1",
}
"""How each kind of sickness is brought about on a node (as root in its container)."""
REPAIRS = {
    "data": "systemctl start data.automount && stat -f /data/. >/dev/null",
    "scratch": "umount /scratch",
    "gpu": "mknod -m 666 /dev/nvidia1 c 195 1",
}
"""How `check` puts a node it broke back (sick_node's node is replaced instead)."""


@dataclass(frozen=True)
class Verdict:
    healthy: bool
    seconds: float
    """The check's own run time (the program's wall clock, podman exec not counted)."""
    output: str


def check(live: LiveCluster, node: str) -> Verdict:
    """The node's health check, as slurmd runs it but without the drain (--check)."""
    done = live.podman.exec(node, ["env", f"SLURMD_NODENAME={node}", HEALTH_PROGRAM, "--check"],
                            timeout=60, check=False)
    output = (done.stdout + done.stderr).strip()
    took = output.rsplit("(", 1)[-1].split(" ms)", 1)[0]
    return Verdict(done.returncode == 0, int(took) / 1000 if took.isdigit() else float("nan"), output)


@contextlib.contextmanager
def broken(live: LiveCluster, node: str, how: str):  # type: ignore[no-untyped-def]
    """The node broken `how` for the duration, then repaired (for checks by hand)."""
    live.on(node, BREAKS[how])
    try:
        yield
    finally:
        live.on(node, REPAIRS[how])


@dataclass(frozen=True)
class Sickness:
    node: str
    how: str
    job: str
    drained: float | None
    """Seconds from the break to the node drained with a `health:` reason (None: not within the limit)."""
    reason: str
    requeued: float | None
    """Seconds from the break to the job back in the queue (PENDING), its restart count 1."""
    back: float | None
    """Seconds from the break to the node in service again on a new machine."""
    replaced: bool
    """The node's machine afterwards is not the one that was broken."""


TRAPPING_JOB = "trap 'echo USR1 at $(date +%s)' USR1; while :; do sleep 1; done"
"""Runs until cancelled; hears the service's signal (a job that ignored it would end at it)."""


def sick_node(live: LiveCluster, node: str, how: str, partition: str, limit: float = 360) -> Sickness:
    clear_leftovers(live)
    job = live.submit(f"-J {FAULT_JOB} -p {partition} -w {node} --requeue -o sick-%j.out --wrap {_quote(TRAPPING_JOB)}")
    before = live.podman.container(node)
    old_id = before.id if before else ""
    drained = requeued = back = None
    reason = ""
    try:
        wait_until(lambda: live.squeue_state(job) == "RUNNING", 90, f"job {job} running")
        live.on(node, BREAKS[how])
        broke = time.monotonic()

        def step() -> bool:
            nonlocal drained, requeued, reason
            now = time.monotonic() - broke
            line = live.root(f"sinfo -h -N -n {node} -o '%T|%E' | head -n 1").strip()
            if drained is None and "|health:" in line:
                drained, reason = now, line.split("|", 1)[1]
            if requeued is None and live.squeue_state(job) in ("PENDING", "") and _restarts(live, job) >= 1:
                requeued = now
            cur = live.podman.container(node)
            is_new = cur is not None and cur.is_running and cur.id != old_id
            return bool(drained is not None and requeued is not None and is_new
                        and live.slurm_state(node) in IN_SERVICE)

        with contextlib.suppress(ProvisionError):
            wait_until(step, limit, f"{node} drained, its job requeued, replaced", every=1)
            back = time.monotonic() - broke
    finally:
        live.root(f"scancel {job} 2>/dev/null || true")
    after = live.podman.container(node)
    return Sickness(node, how, job, drained, reason, requeued, back,
                    replaced=after is not None and after.id != old_id)


def _restarts(live: LiveCluster, job: str) -> int:
    out = live.root(f"scontrol show job {job} -o 2>/dev/null | grep -o 'Restarts=[0-9]*' || true").strip()
    return int(out.split("=", 1)[1]) if "=" in out else 0


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@dataclass(frozen=True)
class Outage:
    nodes: tuple[str, ...]
    drained: float | None
    """Seconds from the break to every node drained with a `health:` reason."""
    replaced: tuple[str, ...]
    """The nodes whose machine changed while the storage was out (the service must keep them)."""
    job_state: str
    """The state of the job that ran on the first node, once the storage came back."""
    job_restarts: int
    back: float | None
    """Seconds from the repair to every node in service again (its health check lifted its drain)."""


def storage_outage(live: LiveCluster, nodes: tuple[str, ...], partition: str, held: float = 45.0,
                   limit: float = 120.0) -> Outage:
    """CephFS lost on several nodes at once (what a Ceph restart does to its clients), a job
    running on the first: drained, not replaced, the job left alone; `held` s later the mount
    is back, and each node's own health check lifts its drain."""
    clear_leftovers(live)
    job = live.submit(f"-J {FAULT_JOB} -p {partition} -w {nodes[0]} --requeue -o outage-%j.out "
                      f"--wrap {_quote(TRAPPING_JOB)}")
    ids = {n: (c.id if (c := live.podman.container(n)) else "") for n in nodes}
    drained = back = None
    try:
        wait_until(lambda: live.squeue_state(job) == "RUNNING", 90, f"job {job} running")
        for node in nodes:
            live.on(node, BREAKS["data"])
        broke = time.monotonic()

        def all_drained() -> bool:
            lines = [live.root(f"sinfo -h -N -n {n} -o '%E' | head -n 1").strip() for n in nodes]
            return all(line.startswith("health:") for line in lines)

        with contextlib.suppress(ProvisionError):
            wait_until(all_drained, limit, f"{', '.join(nodes)} drained by their health checks", every=1)
            drained = time.monotonic() - broke
        time.sleep(max(0.0, broke + held - time.monotonic()))
        replaced = tuple(n for n in nodes if (c := live.podman.container(n)) is None or c.id != ids[n])
        state, restarts = live.squeue_state(job), _restarts(live, job)
    finally:
        for node in nodes:
            with contextlib.suppress(ProvisionError):
                live.on(node, REPAIRS["data"])
    repaired = time.monotonic()
    try:
        with contextlib.suppress(ProvisionError):
            wait_until(lambda: all(live.slurm_state(n) in IN_SERVICE for n in nodes), limit,
                       f"{', '.join(nodes)} back in service", every=1)
            back = time.monotonic() - repaired
    finally:
        live.root(f"scancel {job} 2>/dev/null || true")
    return Outage(nodes, drained, replaced, state, restarts, back)


GPU_JOB = "for i in $(seq 90); do sleep 1; done; echo gpus=$CUDA_VISIBLE_DEVICES on $(hostname)"
"""A GPU job that lasts ~90 s and says where it ended, with no signal handler: the service's
USR1 on the drained node ends it, and the service requeues a job its signal ended. (It once
trapped USR1 with `exit 0`: a job that says it is done on the signal is done - COMPLETED,
never requeued - so the bench's 3 runs found no restart; a handler that checkpoints must
requeue the job itself, docs/ml-jobs.md.)"""


@dataclass(frozen=True)
class GpuLost:
    """A GPU node losing a device under a GPU job, each step's seconds from the `rm`."""

    node: str
    job: str
    drained: float | None
    """The health check drained the node (`health: GPU device ... missing`)."""
    new_machine: float | None
    """A new container runs under the node's name."""
    running_again: float | None
    """The requeued job runs again (on the new machine)."""
    back: float | None
    """The node is in service again."""
    restarts: int
    final_state: str
    output: str
    gres: str
    """`scontrol show node`'s Gres= of the node once back."""


def gpu_lost(live: LiveCluster, node: str = "dev-gpu-01", partition: str = "ml-gpu",
             limit: float = 420) -> GpuLost:
    """A GPU job on `node`, then `rm /dev/nvidia1` in its machine (a GPU off the bus): the node
    is drained, the job requeued, the machine replaced, the job runs again on the new one and
    completes there. Times from the break (tests/integration/test_node_health.py,
    bench/ml_bench.py --gpu)."""
    clear_leftovers(live)
    job = live.submit(f"-J {FAULT_JOB} -p {partition} -w {node} --gres=gpu:1 --requeue -o gpu-lost-%j.out "
                      f"--wrap {_quote(GPU_JOB)}")
    before = live.podman.container(node)
    old_id = before.id if before else ""
    drained = new_machine = running_again = back = None
    try:
        wait_until(lambda: live.squeue_state(job) == "RUNNING", 90, f"job {job} running")
        live.on(node, BREAKS["gpu"])
        broke = time.monotonic()

        def step() -> bool:
            nonlocal drained, new_machine, running_again, back
            now = time.monotonic() - broke
            line = live.root(f"sinfo -h -N -n {node} -o '%T|%E' | head -n 1").strip()
            if drained is None and "|health:" in line:
                drained = now
            cur = live.podman.container(node)
            if new_machine is None and cur is not None and cur.is_running and cur.id != old_id:
                new_machine = now
            if running_again is None and new_machine is not None and _restarts(live, job) >= 1 \
                    and live.squeue_state(job) == "RUNNING":
                running_again = now
            if back is None and new_machine is not None and live.slurm_state(node) in IN_SERVICE:
                back = now
            return running_again is not None and back is not None

        with contextlib.suppress(ProvisionError):
            wait_until(step, limit, f"{node} replaced and job {job} running again", every=1)
        with contextlib.suppress(ProvisionError):
            wait_until(lambda: live.squeue_state(job) == "", 150, f"job {job} finished")
    finally:
        live.root(f"scancel {job} 2>/dev/null || true")
    state = live.root(f"sacct -n -X -P -j {job} -o State | tail -n 1 || true").strip()
    output = live.root(f"cat /home/{live.user}/gpu-lost-{job}.out 2>/dev/null || true").strip()
    gres = live.root(f"scontrol show node {node} -o | grep -o 'Gres=[^ ]*' || true").strip()
    return GpuLost(node, job, drained, new_machine, running_again, back, _restarts(live, job), state, output, gres)
