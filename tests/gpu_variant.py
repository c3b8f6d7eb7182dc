"""The gpu image variant built here, without a GPU: the one image pipeline (slurmforge.image:
the inputs of variant gpu, build.sh) runs in a throwaway container from the node image
(tests/judge.py) - every install task again, the node image's a no-op, plus what the gpu
variant adds - as the AMI build runs it on Debian's AMI. Then what DKMS made is read back:
the kernel the image boots, `dkms status`, the module's vermagic for that kernel, the
packages, the device unit's wiring, and the size the variant adds (the container's own
layer, apt's cache and lists removed as build.sh removes them).
bench/gpu_image_bench.py and tests/slurm/test_gpu_image.py use it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from slurmforge.distro import DEFAULT_BASE, distro
from slurmforge.errors import ProvisionError
from slurmforge.image import prepare_inputs
from slurmforge.image_variant import ImageVariant
from slurmforge.local.image_cache import run_build
from slurmforge.local.podman import Podman
from tests.judge import Judge

MODULE = "nvidia-current"
"""Debian's file name of nvidia.ko (roles/gpu/defaults: gpu_kernel_module)."""
WATCHED_PACKAGES = ("linux-image-cloud-amd64", "linux-headers-cloud-amd64", "nvidia-kernel-dkms",
                    "firmware-nvidia-gsp", "nvidia-smi", "libnvidia-ml1", "libcuda1", "nvidia-persistenced",
                    "xserver-xorg-core", "xserver-xorg-video-nvidia")
DEVICE_UNIT_LINK = "/etc/systemd/system/slurmd.service.wants/slurmforge-nvidia-devices.service"


@dataclass
class VariantFacts:
    ok: bool
    seconds: float
    """The build's wall time (build.sh: package downloads, kernel, DKMS build)."""
    failures: list[str] = field(default_factory=list)
    boot_kernel: str = ""
    """The newest installed kernel: what the image's boot loader starts."""
    kernels: list[str] = field(default_factory=list)
    """/lib/modules entries that hold a kernel image's modules."""
    dkms_status: str = ""
    vermagic: str = ""
    """The module's vermagic for boot_kernel."""
    module_file: str = ""
    packages: dict[str, str] = field(default_factory=dict)
    """Installed version of each of WATCHED_PACKAGES ('' when absent)."""
    device_unit_wanted_by_slurmd: bool = False
    size_delta_bytes: int = 0
    rebuild_seconds: list[float] = field(default_factory=list)
    """Forced DKMS rebuilds of the module for boot_kernel (the bench's full mode)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> VariantFacts:
        return cls(**json.loads(text))


def build_gpu_variant(container: Judge, log: Path) -> VariantFacts:
    """Run the image pipeline's build of variant gpu in `container`; its facts."""
    os_ = distro(DEFAULT_BASE)
    started = time.monotonic()
    failures: list[str] = []
    record: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-variant-") as tmp:
        prepare_inputs(Path(tmp) / "inputs", os_, ImageVariant.GPU)
        try:
            record = run_build(Podman(), container.name, Path(tmp) / "inputs", log, os_)
        except ProvisionError as e:
            failures = [str(e)]
    facts = VariantFacts(ok=not failures and record.get("variant") == ImageVariant.GPU.value,
                         seconds=round(time.monotonic() - started, 1), failures=failures)
    if facts.ok:
        read_facts(container, facts)
    return facts


def read_facts(container: Judge, facts: VariantFacts) -> None:
    def sh(script: str, timeout: int = 120) -> str:
        return container.run(["sh", "-c", script], timeout=timeout).stdout.strip()

    facts.boot_kernel = sh("linux-version list | linux-version sort | tail -n 1")
    facts.kernels = sh("ls /lib/modules/*/modules.order 2>/dev/null | cut -d/ -f4").split()
    facts.dkms_status = sh("dkms status")
    if facts.boot_kernel:
        facts.vermagic = sh(f"modinfo -k {facts.boot_kernel} -F vermagic {MODULE}")
        facts.module_file = sh(f"modinfo -k {facts.boot_kernel} -n {MODULE}")
    versions = sh("dpkg-query -W -f '${Package} ${db:Status-Status} ${Version}\\n' "
                  + " ".join(WATCHED_PACKAGES) + " 2>/dev/null")
    found = {name: version for name, status, version in
             (line.split(" ", 2) for line in versions.splitlines() if line.count(" ") == 2)
             if status == "installed"}
    facts.packages = {name: found.get(name, "") for name in WATCHED_PACKAGES}
    facts.device_unit_wanted_by_slurmd = sh(f"test -L {DEVICE_UNIT_LINK} && echo yes") == "yes"
    # what the node image build removes before it commits (slurmforge/local/image_cache.py)
    sh("apt-get clean && rm -rf /var/lib/apt/lists/*")
    facts.size_delta_bytes = container_size(container.name)


def container_size(name: str) -> int:
    """Bytes in the container's own layer: what it added to its image."""
    return int(subprocess.run(["podman", "container", "inspect", "--size", "-f", "{{.SizeRw}}", name],
                              capture_output=True, text=True, check=True, timeout=300).stdout.strip())


def rebuild_seconds(container: Judge, kernel: str) -> float:
    """One forced DKMS build of the driver's module for `kernel` (the compile, without
    downloads or packages), installed again after it."""
    module = container.run(["sh", "-c", "dkms status | cut -d, -f1 | head -n 1"]).stdout.strip()
    started = time.monotonic()
    container.run(["dkms", "build", "--force", module, "-k", kernel], timeout=1800, check=True)
    took = round(time.monotonic() - started, 1)
    container.run(["dkms", "install", "--force", module, "-k", kernel], timeout=600, check=True)
    return took


CACHE_REPOSITORY = "localhost/slurmforge-gpu-variant"
"""A built variant, committed under the digest of what built it (the node image it started
from and the build's inputs): the quick mode reads the facts of the last build of the same
inputs instead of compiling the driver again (~6 min), as the node image is reused."""
SECONDS_LABEL, SIZE_LABEL = "slurmforge.gpu-variant-seconds", "slurmforge.gpu-variant-size"


def cache_tag(node_image: str) -> str:
    with tempfile.TemporaryDirectory(prefix="gpu-variant-") as tmp:
        digest = prepare_inputs(Path(tmp) / "inputs", distro(DEFAULT_BASE), ImageVariant.GPU)
    return f"{CACHE_REPOSITORY}:{hashlib.sha256(f'{node_image} {digest}'.encode()).hexdigest()[:12]}"


def cached_facts(tag: str) -> VariantFacts | None:
    """The facts of a cached build: read again from a container of it; None when there is none."""
    if subprocess.run(["podman", "image", "exists", tag], capture_output=True).returncode != 0:
        return None
    labels = json.loads(subprocess.run(["podman", "image", "inspect", "-f", "{{json .Config.Labels}}", tag],
                                       capture_output=True, text=True, check=True, timeout=60).stdout)
    facts = VariantFacts(ok=True, seconds=float(labels[SECONDS_LABEL]))
    with Judge(tag, prefix="slurmforge-gpu-variant") as container:
        read_facts(container, facts)
    facts.size_delta_bytes = int(labels[SIZE_LABEL])
    return facts


def keep(container: Judge, facts: VariantFacts, tag: str) -> None:
    """Commit a successful build as the cache of its inputs; older builds go."""
    subprocess.run(["podman", "commit", "--change", f"LABEL {SECONDS_LABEL}={facts.seconds}",
                    "--change", f"LABEL {SIZE_LABEL}={facts.size_delta_bytes}", container.name, tag],
                   check=True, capture_output=True, timeout=600)
    listed = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", CACHE_REPOSITORY],
                            capture_output=True, text=True, timeout=60).stdout.split()
    for old in set(listed) - {tag}:
        subprocess.run(["podman", "rmi", old], capture_output=True, timeout=120)
