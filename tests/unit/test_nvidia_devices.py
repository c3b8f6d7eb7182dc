"""The program the gpu image variant runs before slurmd (roles/gpu/files/
slurmforge-nvidia-devices), run by /bin/sh against a driver /proc directory laid out as
NVIDIA's driver lays it out and an `nvidia-modprobe` that records its arguments (there is
no GPU here; tests/slurm/test_gpu_image.py proves the image's driver is built)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PROGRAM = Path(__file__).resolve().parents[2] / "roles" / "gpu" / "files" / "slurmforge-nvidia-devices"

INFORMATION = """Model: \t\t Tesla V100-SXM2-16GB
IRQ:   \t\t 63
GPU UUID: \t GPU-5e0b4a38-0000-0000-0000-000000000000
Video BIOS: \t 88.00.4f.00.09
Bus Type: \t PCIe
DMA Size: \t 47 bits
DMA Mask: \t 0x7fffffffffff
Bus Location: \t {bus}
Device Minor: \t {minor}
GPU Excluded:\t No
"""


def run(tmp_path: Path, minors: list[int]) -> tuple[int, list[str], str]:
    proc = tmp_path / "proc"
    (proc / "gpus").mkdir(parents=True)
    for i, minor in enumerate(minors):
        bus = f"0000:00:{0x1b + i:02x}.0"
        (proc / "gpus" / bus).mkdir()
        (proc / "gpus" / bus / "information").write_text(INFORMATION.format(bus=bus, minor=minor))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-modprobe").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/calls\n')
    (bin_dir / "nvidia-modprobe").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NVIDIA_PROC": str(proc)}
    done = subprocess.run(["/bin/sh", str(PROGRAM)], env=env, capture_output=True, text=True, timeout=10, check=False)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return done.returncode, calls, done.stdout + done.stderr


def test_one_device_file_per_gpu_the_driver_found(tmp_path: Path) -> None:
    """The module first (its /proc directory lists the GPUs), then /dev/nvidiactl and
    /dev/nvidia<minor> of each GPU, then unified memory: the files gres.conf names."""
    rc, calls, out = run(tmp_path, [0, 1, 2, 3])
    assert rc == 0, out
    assert calls == ["", "-c 255 -c 0 -c 1 -c 2 -c 3", "-u -c 0"]
    assert "4 GPU device file(s)" in out


def test_no_gpu_is_a_failure_not_an_empty_node(tmp_path: Path) -> None:
    """A GPU node whose driver found nothing fails its unit (slurmd then registers fewer
    GPUs than the spec says and Slurm drains the node), and says why."""
    rc, calls, out = run(tmp_path, [])
    assert rc == 1 and calls == [""]
    assert "the NVIDIA driver found no GPU" in out


def test_shellcheck_passes() -> None:
    lint = subprocess.run(["shellcheck", "-S", "style", str(PROGRAM)], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout
