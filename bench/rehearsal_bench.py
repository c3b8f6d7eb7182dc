"""The AWS rehearsal (docs/rehearsal.md), phase by phase, timed. What exists so far: the
stack (with its golden image), the head nodes booted from it, the admin's inventory, SSH and
rollout, a first job on pool nodes the service launches, `slurmforge down` and `pulumi
destroy`.

    .venv/bin/python bench/rehearsal_bench.py [--quick] [-v]

Full (`make aws-rehearsal`): a moto server on this machine's address, the metadata service
stand-in and the machines (tests.harness.rehearsal). The stack phase runs stacks/ under the
stand-in's engine: every resource made in moto, the golden image baked by the program's
own dynamic provider with a real build instance (a container from the Debian AMI stand-in
running its own user data under cloud-init), the head nodes and Ceph hosts booted from it
with their user data; then `slurmforge inventory --from-stack-outputs`, SSH to the login
node's Elastic IP with the key pair, every host through it with sudo, `slurmforge rollout
--inventory`, a user's first job on the pool's powered-down nodes (launched by the
scheduler service through EC2 Fleet, joined by their user data), `slurmforge down
--inventory`; then destroy. The
image phase then boots the kept image once more and checks its record, IMDSv2 and units.
About 4 minutes on 2 cores (the build most of it).

After validate, a spot interruption (`--no-spot` leaves it out): a job on the spot pool,
EC2's warning sent as an EventBridge event, the instance taken 120 s later; the service
must drain, signal, requeue and run the job again on the fallback link's on-demand machine.

`--quick` (what CI runs): the same, except that an image baked before from the same
inputs is reused (as Pulumi leaves an unchanged resource alone) - about five minutes.
Needs root and podman; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.errors import ProvisionError  # noqa: E402
from slurmforge.hosts import TAG_LINK  # noqa: E402
from tests.harness.rehearsal import image_phase, stack_phase  # noqa: E402
from tests.harness.rehearsal.stack import DYNAMIC  # noqa: E402
from tests.harness.rehearsal.stand_in import stand_in  # noqa: E402


def image() -> dict[str, bool]:
    with stand_in() as aws:
        phase = image_phase.run(aws, reuse=True)
        errors = list(aws.machines.errors)
    how = (f"baked: build instance {phase.build_instance}, build.sh {phase.bake['build_seconds']} s, "
           f"Slurm {phase.bake['slurm']}, {phase.bake['packages']} packages" if phase.baked
           else "reused the image baked from the same inputs")
    print(f"golden image alone: {phase.bake_seconds:.0f} s ({how}) -> {phase.ami} = {phase.image}")
    status = next((line for line in phase.cloud_init.splitlines() if line.startswith("extended_status:")), "?")
    print(f"instance from the AMI: cloud-init done {phase.boot_seconds:.1f} s after RunInstances ({status})")
    for error in errors[:5]:
        print(f"  machines: {error}")
    return {
        "the machine from the AMI holds the build's record": phase.record.get("inputs") == phase.digest,
        "its user data read its instance id through IMDSv2": phase.probe == phase.instance_id,
        "cloud-init finished without an error or a warning": status == "extended_status: done",
        f"its boot enabled nothing the image leaves disabled {phase.enabled_at_boot[:6]}": not phase.enabled_at_boot,
        "the image phase's machines kept up without error": not errors,
    }


def stack(args: argparse.Namespace) -> dict[str, bool]:
    with tempfile.TemporaryDirectory(prefix="slurmforge-rehearsal-", dir="/var/tmp") as tmp, stand_in() as aws:
        phase = stack_phase.run(aws, Path(tmp), reuse=args.quick)
        stack_phase.roll_out(phase)
        jobs = stack_phase.first_jobs(phase, "alice")
        stack_phase.validate(phase)
        spot = None if args.no_spot else stack_phase.spot_interruption(phase, aws, "alice")
        stack_phase.down(phase)
        started = time.monotonic()
        problems = stack_phase.destroy(phase)
        aws.machines.wait("the machines gone", lambda: not aws.machines.machines, 300)
        phase.seconds["destroy"] = time.monotonic() - started
        errors = list(aws.machines.errors)
    bake = sum(v for k, v in phase.engine.seconds.items() if k.startswith(DYNAMIC))
    nodes = [f"{stack_phase.CLUSTER}-cpu-01", f"{stack_phase.CLUSTER}-cpu-02"]
    baked = ", ".join(f"{variant} {'baked' if now else 'reused'}" for variant, now in phase.engine.baked.items())
    print(f"stack: `pulumi up` {phase.seconds['stack']:.1f} s ({len(phase.engine.seconds)} resources; "
          f"golden image {bake:.0f} s: {baked})")
    for what in ("head nodes booted", "inventory", "ssh", "rollout", "pool nodes launched -> job done",
                 "job on nodes up", "validate", "spot notice -> job running again", "down", "destroy"):
        if what not in phase.seconds:
            continue
        print(f"  {what}: {phase.seconds[what]:.1f} s")
    for error in [*problems, *errors][:5]:
        print(f"  problem: {error}")
    return {
        "every head node ran its user data under cloud-init": all(
            "extended_status: done" in h.cloud_init for h in phase.hosts),
        "every head node reached through the inventory with sudo": all(
            h.reached == f"{h.name} root" for h in phase.hosts),
        "a first job's two ranks ran on the pool's nodes, launched through EC2 Fleet, each resolving both":
            sorted(jobs["cold"].splitlines()[:2]) == [f"{r} {nodes[r]} {' '.join(nodes)}" for r in (0, 1)],
        **({} if spot is None else {
            "a spot notice through EventBridge and the queue: node drained, job requeued once": (
                "interruption" in spot["reason"] and spot["states"].count("REQUEUED") == 1),
            "the requeued job ran again on the fallback link's on-demand machine": (
                spot["second"].get("InstanceLifecycle") != "spot"
                and {"Key": TAG_LINK, "Value": "cpu"} in spot["second"].get("Tags", []))}),
        "destroy removed everything": not problems,
        "the stack phase's machines kept up without error": not errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reuse an image baked from the same inputs")
    parser.add_argument("--no-spot", action="store_true", help="leave out the spot interruption phase")
    parser.add_argument("-v", "--verbose", action="store_true", help="every machine event as it happens")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    logging.getLogger("slurmforge").setLevel(logging.INFO if args.verbose else logging.WARNING)
    checks: dict[str, bool] = {}
    try:
        # the stack bakes through the program's own provider (not in quick mode); the image
        # phase then boots the image it kept and checks it
        checks |= stack(args)
        checks |= image()
    except ProvisionError as e:
        print(f"error: {e}")
        return 1
    for what, ok in checks.items():
        print(f"  {'ok' if ok else 'FAILED'}: {what}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
