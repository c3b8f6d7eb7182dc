"""The AWS rehearsal (docs/rehearsal.md), phase by phase, timed. What exists so far: the
stack's golden image.

    .venv/bin/python bench/rehearsal_bench.py [--quick]

Full (`make aws-rehearsal`): a moto server on this machine's address, the metadata service
stand-in and the machines (slurmforge.rehearsal); `bake` from stacks/image.py with a real
build instance (a container from the Debian AMI stand-in running its own user data under
cloud-init: the inputs through the presigned URL, build.sh, the result back, power off),
the AMI committed as a podman image; then an instance from that AMI boots and must hold
the build's record and read its instance id through IMDSv2. About 4-5 minutes on 2 cores
(the build itself most of it).

`--quick` (tests/rehearsal): the same, except that an image baked before from the same
inputs is reused (an AMI registered for it) instead of baking again - under a minute.
Needs root and podman; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.errors import ProvisionError  # noqa: E402
from slurmforge.rehearsal import image_phase  # noqa: E402
from slurmforge.rehearsal.stand_in import stand_in  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reuse an image baked from the same inputs")
    parser.add_argument("-v", "--verbose", action="store_true", help="every machine event as it happens")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    logging.getLogger("slurmforge").setLevel(logging.INFO if args.verbose else logging.WARNING)
    try:
        with stand_in() as aws:
            phase = image_phase.run(aws, reuse=args.quick)
            errors = list(aws.machines.errors)
    except ProvisionError as e:
        print(f"error: {e}")
        return 1
    how = (f"baked: build instance {phase.build_instance}, build.sh {phase.bake['build_seconds']} s, "
           f"Slurm {phase.bake['slurm']}, {phase.bake['packages']} packages" if phase.baked
           else "reused the image baked from the same inputs")
    print(f"stack, golden image: {phase.bake_seconds:.0f} s ({how}) -> {phase.ami} = {phase.image}")
    status = next((line for line in phase.cloud_init.splitlines() if line.startswith("extended_status:")), "?")
    print(f"instance from the AMI: cloud-init done {phase.boot_seconds:.1f} s after RunInstances ({status})")
    checks = {
        "the machine from the AMI holds the build's record": phase.record.get("inputs") == phase.digest,
        "its user data read its instance id through IMDSv2": phase.probe == phase.instance_id,
        "cloud-init finished without an error or a warning": status == "extended_status: done",
        f"its boot enabled nothing the image leaves disabled {phase.enabled_at_boot[:6]}": not phase.enabled_at_boot,
        "the machines kept up without error": not errors,
    }
    for what, ok in checks.items():
        print(f"  {'ok' if ok else 'FAILED'}: {what}")
    for error in errors[:5]:
        print(f"  machines: {error}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
