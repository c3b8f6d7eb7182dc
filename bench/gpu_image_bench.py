"""What the gpu image variant costs to build, and proof that its driver is built for the
kernel it boots: the gpu role's install tasks (variant gpu) run in a throwaway container
from the node image (tests/gpu_variant.py), as the AMI build runs them on Debian's AMI.

    build      the playbook's wall time: apt sources, the cloud kernel and its headers,
               the driver packages, DKMS building nvidia.ko, the device unit
    size       what the variant adds to the node image (apt's cache and lists removed)
    rebuild    a forced DKMS build of the module alone, median of --rebuilds (the compile
               without downloads: the part a faster build machine shortens)

    .venv/bin/python bench/gpu_image_bench.py [--rebuilds 2] [--quick] [--json FILE]

Exits 1 when the build fails, or when the module DKMS installed is not for the kernel the
image boots. `--quick` builds once and skips the rebuilds, or - when the same inputs were
built before on this machine (a committed image tagged with their digest) - reads that
build's facts again in seconds (tests/slurm/test_gpu_image.py runs it and judges its --json
facts). Without a GPU nothing loads the module: that needs
a GPU machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.bringup import log_path  # noqa: E402
from tests.gpu_variant import build_gpu_variant, cache_tag, cached_facts, keep, rebuild_seconds  # noqa: E402
from tests.judge import Judge, node_image  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rebuilds", type=int, default=2, help="forced DKMS rebuilds to time")
    parser.add_argument("--quick", action="store_true", help="build once, no rebuilds")
    parser.add_argument("--json", type=Path, help="write the build's facts here")
    args = parser.parse_args()

    image = node_image()
    log = log_path("bench", "gpu-image")
    tag = cache_tag(image)
    facts = cached_facts(tag) if args.quick else None
    if facts is not None:
        print(f"the last build of these inputs ({tag}), its facts read again")
    else:
        with Judge(image, prefix="slurmforge-gpu-variant") as container:
            facts = build_gpu_variant(container, log)
            if facts.ok and facts.boot_kernel and not args.quick:
                facts.rebuild_seconds = [rebuild_seconds(container, facts.boot_kernel) for _ in range(args.rebuilds)]
            if facts.ok:
                keep(container, facts, tag)
    if args.json:
        args.json.write_text(facts.to_json())
    if not facts.ok:
        print(f"the gpu variant did not build (log: {log}):", *facts.failures, sep="\n  ")
        return 1

    print(f"gpu image variant on {image}")
    print(f"  build    {facts.seconds:7.1f} s   (log: {log})")
    print(f"  size     {facts.size_delta_bytes / 1e6:7.0f} MB  added to the node image")
    if facts.rebuild_seconds:
        print(f"  rebuild  {statistics.median(facts.rebuild_seconds):7.1f} s   DKMS alone, median of "
              f"{len(facts.rebuild_seconds)}")
    print(f"  kernel   {facts.boot_kernel} (the image boots it)")
    print(f"  dkms     {facts.dkms_status}")
    print(f"  module   {facts.module_file}")
    print("  packages " + ", ".join(f"{n} {v}" for n, v in facts.packages.items() if v))
    if not facts.vermagic.startswith(facts.boot_kernel + " ") or not facts.boot_kernel:
        print(f"the module's vermagic '{facts.vermagic}' is not the boot kernel {facts.boot_kernel}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
