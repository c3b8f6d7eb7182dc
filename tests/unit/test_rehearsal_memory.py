"""The rehearsal's machines have the memory of their instance type, as slurmd measures it
(tests.harness.rehearsal.memory): slurmd's own measurement, compiled from its 24.11 source,
run under the machine's shim, and slurmctld's rule on what it registers."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from slurmforge.spec.models import Pool
from slurmforge.spec.nodes import pool_hardware
from tests.harness.rehearsal.memory import (
    MEMTOTAL_FILE,
    PRELOAD,
    SHIM_PATH,
    build_shim,
    machine_mounts,
    memtotal_kib,
    type_memory_mib,
)

pytestmark = pytest.mark.unit

# get_memory of src/slurmd/slurmd/get_mach_stat.c (slurm-24.11), the Linux branch, verbatim
# but for error(): the figure slurmd registers (slurmd.c: msg->real_memory =
# conf->physical_memory_size).
SLURMD_GET_MEMORY = r"""
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
int main(void)
{
	uint64_t real_memory;
	long pages;
	pages = sysconf(_SC_PHYS_PAGES);
	if (pages < 1)
		return 1;
	real_memory = (uint64_t)((float)pages * (sysconf(_SC_PAGE_SIZE) /
			1048576.0)); /* Megabytes of memory */
	printf("%lu\n", (unsigned long)real_memory);
	return 0;
}
"""


def registers_low(reported: int, real_memory: int, cloud: bool) -> bool:
    """slurmctld's judgement of a registration (validate_node_specs, src/slurmctld/node_mgr.c,
    24.11): "Low RealMemory" - the node drained - when it reports less than
    node_reg_mem_percent of its RealMemory, by default DEFAULT_NODE_REG_MEM_PERCENT (100) or,
    for a CLOUD node, DEFAULT_CLOUD_REG_MEM_PERCENT (90); slurmforge sets no
    node_reg_mem_percent."""
    return reported / real_memory * 100 < (90.0 if cloud else 100.0)


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """The shim answering from a figure file of its own, and slurmd's measurement compiled."""
    workdir = tmp_path_factory.mktemp("memory")
    figure = workdir / "figure"
    build_shim(workdir, str(figure))
    subprocess.run(["cc", "-x", "c", "-o", str(workdir / "get_memory"), "-"], input=SLURMD_GET_MEMORY, text=True,
                   check=True)
    yield workdir, figure


def slurmd_measures(workdir: Path, preload: bool = True) -> int:
    env = dict(os.environ, LD_PRELOAD=str(workdir / "memtotal.so")) if preload else dict(os.environ)
    return int(subprocess.run([str(workdir / "get_memory")], env=env, capture_output=True, text=True,
                              check=True).stdout)


@pytest.fixture(scope="module")
def ec2() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


def test_slurmd_registers_the_memory_the_machines_type_has(machine: tuple[Path, Path], ec2: Any) -> None:
    workdir, figure = machine
    kib = memtotal_kib(type_memory_mib(ec2, "t3.medium"))
    assert kib == 3_879_731  # 4,096 MiB less the 7.5 % the kernel keeps
    figure.write_text(f"{kib}\n")
    assert slurmd_measures(workdir) == 3788
    box = slurmd_measures(workdir, preload=False)
    assert box == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20 != 3788  # the box's, unshimmed


def test_every_other_sysconf_answer_stays_glibcs(machine: tuple[Path, Path]) -> None:
    workdir, figure = machine
    figure.write_text("3879731\n")
    probe = "import os; print(os.sysconf('SC_PAGE_SIZE'), os.sysconf('SC_NPROCESSORS_ONLN'), os.sysconf('SC_OPEN_MAX'))"
    env = dict(os.environ, LD_PRELOAD=str(workdir / "memtotal.so"))
    shimmed = subprocess.run(["python3", "-c", probe], env=env, capture_output=True, text=True, check=True)
    plain = subprocess.run(["python3", "-c", probe], capture_output=True, text=True, check=True)
    assert shimmed.stdout == plain.stdout and shimmed.stderr == ""


def test_a_real_memory_above_the_types_is_drained_as_on_aws(machine: tuple[Path, Path], ec2: Any) -> None:
    """slurmforge's default RealMemory for a pool of t3.medium registers; one MiB more drains a
    static node, and a CLOUD node once it is above what 90 % allows - on the machine here as on
    EC2, where the box's 24 GiB would have let both through."""
    workdir, figure = machine
    figure.write_text(f"{memtotal_kib(type_memory_mib(ec2, 't3.medium'))}\n")
    reported = slurmd_measures(workdir)
    hw = pool_hardware(Pool(name="cpu", kind="cpu", instance_types=["t3.medium", "t2.medium"], max_nodes=2))
    assert hw is not None and hw.memory_mb == 3788
    assert not registers_low(reported, hw.memory_mb, cloud=False)
    assert registers_low(reported, hw.memory_mb + 1, cloud=False)
    assert not registers_low(reported, 4208, cloud=True) and registers_low(reported, 4209, cloud=True)
    assert not registers_low(slurmd_measures(workdir, preload=False), 4209, cloud=False)  # what the box hid


def test_without_its_figure_a_process_sees_the_box(machine: tuple[Path, Path]) -> None:
    workdir, figure = machine
    figure.unlink(missing_ok=True)
    assert slurmd_measures(workdir) == slurmd_measures(workdir, preload=False)


def test_a_machine_gets_the_shim_preloaded_and_its_own_figure(tmp_path: Path) -> None:
    build_shim(tmp_path)
    argv = machine_mounts(tmp_path, "i-0123", 3_879_731)
    mounts = dict(tuple(v.rsplit(":", 2)[:2]) for v in argv[1::2])  # type: ignore[misc]
    assert argv[::2] == ["-v"] * 3 and all(v.endswith(":ro") for v in argv[1::2])
    by_target = {target: Path(source) for source, target in mounts.items()}
    assert by_target[SHIM_PATH].read_bytes()[:4] == b"\x7fELF"
    assert by_target[PRELOAD].read_text() == f"{SHIM_PATH}\n"
    assert by_target[MEMTOTAL_FILE].read_text() == "3879731\n"
    assert MEMTOTAL_FILE.encode() in by_target[SHIM_PATH].read_bytes()
