"""The gpu image variant's driver is built for the kernel that image boots, without a GPU:
bench/gpu_image_bench.py's quick mode runs the gpu role's install tasks with
`slurmforge_image_variant: gpu` in a throwaway container from the node image (as the AMI
build runs them on Debian's AMI: non-free sources, the cloud kernel and its headers, the
driver; tests/gpu_variant.py) and hands back what DKMS made. One build (~6 min on 2
cores) for every test here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gpu_variant import MODULE, VariantFacts

pytestmark = [pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 1800
"""The build takes ~6 min on an idle 2-core machine (DKMS compiles the driver's module);
the rest is room for a loaded one, and for the node image when it must be built first."""


@pytest.fixture(scope="module")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VariantFacts]:
    out = tmp_path_factory.mktemp("gpu-variant") / "facts.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this tree's package, whatever the venv installed
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_image_bench.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT, env=env, cwd=ROOT, check=False)
    print(proc.stdout)
    assert out.exists(), proc.stdout + proc.stderr
    facts = VariantFacts.from_json(out.read_text())
    assert facts.ok and proc.returncode == 0, proc.stdout + proc.stderr
    yield facts


def test_dkms_built_the_module_for_the_kernel_the_image_boots(variant: VariantFacts) -> None:
    kernel = variant.boot_kernel
    assert kernel.endswith("-cloud-amd64"), kernel  # Debian's cloud kernel, what its AMIs boot
    assert variant.vermagic.startswith(f"{kernel} "), variant.vermagic
    assert variant.module_file.startswith(f"/lib/modules/{kernel}/updates/dkms/{MODULE}.ko"), variant.module_file
    status = [line for line in variant.dkms_status.splitlines() if line.strip()]
    assert any(line.startswith(f"{MODULE}/") and f", {kernel}, x86_64: installed" in line for line in status), status


def test_the_image_holds_one_kernel_with_its_headers(variant: VariantFacts) -> None:
    """The kernel image and headers are one version (the metapackages at their newest):
    DKMS built for the kernel that boots, and no other kernel is left without the module."""
    assert variant.kernels == [variant.boot_kernel]
    version = variant.packages["linux-image-cloud-amd64"]
    assert version and variant.packages["linux-headers-cloud-amd64"] == version


def test_headless_driver_from_debian(variant: VariantFacts) -> None:
    """The proprietary module (V100 included), its GSP firmware, NVML and nvidia-smi, CUDA's
    driver library, all of one driver version; no X server."""
    driver = variant.packages["nvidia-kernel-dkms"]
    assert driver
    for name in ("firmware-nvidia-gsp", "nvidia-smi", "libnvidia-ml1", "libcuda1"):
        assert variant.packages[name] == driver, (name, variant.packages)
    assert variant.packages["nvidia-persistenced"]
    assert not variant.packages["xserver-xorg-core"] and not variant.packages["xserver-xorg-video-nvidia"]


def test_device_files_are_made_before_slurmd(variant: VariantFacts) -> None:
    assert variant.device_unit_wanted_by_slurmd


def test_the_variant_is_measured(variant: VariantFacts) -> None:
    assert variant.seconds > 0 and variant.size_delta_bytes > 100e6
