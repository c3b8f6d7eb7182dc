"""The one image pipeline from a clean copy: how long a node image takes to build from only
what the AMI's build instance receives, and whether it is the local node image, package for
package.

    .venv/bin/python bench/image_bench.py [--quick]

Full: prepares the inputs (slurmforge.image.prepare_inputs), packs them as the tarball the
AWS build instance downloads, unpacks that into an empty directory (nothing else of this
checkout), copies it into a fresh container from the debootstrap base (the local stand-in
for Debian's AMI) and runs build.sh there, as the instance's user data does. Reports the
build's time, the image's package count and size, and the differences between its package
list and the local node image's (`up`'s; built by the same pipeline): 0 expected. Exits 1
on a difference or a failed build. About 4 minutes on 2 cores.

`--quick` (CI: tests/unit/test_bench_quick.py): the inputs and the tarball only - prepared
twice, the tarball byte-identical, its unpacked copy digest-equal to the prepared inputs -
in a few seconds, no container.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.bringup import log_path  # noqa: E402
from slurmforge.distro import DEBIAN_13  # noqa: E402
from slurmforge.errors import ProvisionError  # noqa: E402
from slurmforge.image import (  # noqa: E402
    BUILD_SCRIPT,
    DIGEST_FILE,
    PACKAGES,
    package_differences,
    prepare_inputs,
    tarball,
)


def clean_copy(tmp: Path) -> tuple[Path, bytes, float]:
    """The inputs as the build instance gets them: prepared, packed, unpacked elsewhere."""
    started = time.monotonic()
    prepare_inputs(tmp / "prepared", DEBIAN_13)
    packed = tarball(tmp / "prepared")
    seconds = time.monotonic() - started
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        tar.extractall(tmp / "received", filter="data")
    return tmp / "received", packed, seconds


def quick() -> int:
    with tempfile.TemporaryDirectory(prefix="image-bench-") as tmp_name:
        tmp = Path(tmp_name)
        received, packed, seconds = clean_copy(tmp)
        again = prepare_inputs(tmp / "again", DEBIAN_13)
        same_tarball = tarball(tmp / "again") == packed
        same_tree = tarball(received) == packed  # every path, mode and byte
        digest = (received / DIGEST_FILE).read_text().strip()
        print(f"inputs: {len(packed) / 1e6:.1f} MB packed, prepared in {seconds:.1f} s, digest {digest}")
        print(f"prepared twice, same digest: {digest == again}; same tarball: {same_tarball}; "
              f"unpacked copy equal: {same_tree}; build.sh present: {(received / BUILD_SCRIPT).exists()}")
        return 0 if digest == again and same_tarball and same_tree and (received / BUILD_SCRIPT).exists() else 1


def podman(*args: str, timeout: float = 600) -> str:
    return subprocess.run(["podman", *args], check=True, capture_output=True, text=True, timeout=timeout).stdout


def full() -> int:
    from slurmforge.local.image_cache import base_tag, node_tag, run_build
    from slurmforge.local.podman import Podman

    base = base_tag()
    node = node_tag(base)
    for tag in (base, node):
        if subprocess.run(["podman", "image", "exists", tag]).returncode != 0:
            print(f"{tag} is missing: run `./dev.sh up` first (the bench compares with the local node image)")
            return 1
    log = log_path("bench", "image")
    name = f"image-bench-{int(time.time())}"
    with tempfile.TemporaryDirectory(prefix="image-bench-") as tmp_name:
        received, packed, prepare_seconds = clean_copy(Path(tmp_name))
        podman("run", "-d", "--name", name, base, "sleep", "infinity")
        try:
            started = time.monotonic()
            record = run_build(Podman(), name, received, log, DEBIAN_13)
            build_seconds = time.monotonic() - started
            theirs = podman("run", "--rm", node, "cat", PACKAGES).splitlines()
            size = podman("exec", name, "du", "-sxm", "/").split()[0]
        finally:
            subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True)
    ours = str(record["packages_text"]).splitlines()
    differences = package_differences(theirs, ours)
    print(f"inputs: {len(packed) / 1e6:.1f} MB, prepared in {prepare_seconds:.1f} s")
    print(f"build from the clean copy (copied in and built): {build_seconds:.0f} s "
          f"(build.sh's own count: {record['seconds']} s), "
          f"Slurm {record['slurm']}, {len(ours)} packages, {size} MB on disk")
    print(f"package differences with the local node image {node}: {len(differences)}")
    for line in differences[:20]:
        print(f"  {line}")
    return 0 if not differences else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    try:
        return quick() if args.quick else full()
    except ProvisionError as e:
        print(f"error: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
