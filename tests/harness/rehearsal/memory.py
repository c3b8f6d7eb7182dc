"""Every machine of the stand-in has the memory its instance type has, as slurmd measures it.

slurmd 24.11 measures a node's memory once, with `sysconf(_SC_PHYS_PAGES)` times the page
size (`get_memory`, src/slurmd/slurmd/get_mach_stat.c), and registers that figure
(`msg->real_memory = conf->physical_memory_size`, slurmd.c). glibc answers
`_SC_PHYS_PAGES` from sysinfo(2)'s `totalram` (`__get_phys_pages`,
sysdeps/unix/sysv/linux/getsysstats.c) - the kernel's, not the container's: neither a cgroup
memory limit (podman `--memory`) nor a file bound over /proc/meminfo (what lxcfs does)
changes it (measured on this box: 24,684,092 kB under a 1 GiB memory cgroup and under a
bound /proc/meminfo saying 3,900,000 kB). So a machine here would register the box's 24 GiB
whatever its type, and a RealMemory above the type's memory - which slurmctld drains as
"Low RealMemory" on EC2 - would pass.

Each machine therefore gets, from outside its image as its drop-in for AWS's endpoints:

- `memtotal.so` (built here from SHIM_SOURCE with the box's C compiler) in
  /etc/ld.so.preload, so every process of the machine - systemd, slurmd, `slurmd -C` - gets
  `_SC_PHYS_PAGES` from the machine's figure; every other sysconf name is glibc's;
- the figure, in KiB, in MEMTOTAL_FILE: the type's memory (EC2's DescribeInstanceTypes,
  `MemoryInfo.SizeInMiB`, as the stand-in's moto answers it) less what the kernel keeps, the
  reserve slurmforge promises a pool node by (`slurmforge.spec.nodes.SCHEDULABLE_MEMORY`,
  Karpenter's documented VM_MEMORY_OVERHEAD_PERCENT): a type's machine has exactly the default
  RealMemory slurmforge writes for it, and a node promised more is judged by slurmctld's own
  rule (`validate_node_specs`, src/slurmctld/node_mgr.c: drained when it registers less than
  node_reg_mem_percent of RealMemory - 100 % by default, 90 % for a CLOUD node).

/proc/meminfo still shows the box's memory (nothing of Slurm reads it for the node's size).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from slurmforge.errors import ProvisionError
from slurmforge.spec.nodes import SCHEDULABLE_MEMORY

SHIM_PATH = "/usr/lib/slurmforge-rehearsal/memtotal.so"
"""Where a machine sees the shim (outside ldconfig's directories)."""
MEMTOTAL_FILE = "/etc/slurmforge-rehearsal-memtotal"
"""The machine's memory in KiB, one number: what the shim answers from."""
PRELOAD = "/etc/ld.so.preload"
SHIM_SOURCE = """\
/* slurmforge's AWS rehearsal: sysconf(_SC_PHYS_PAGES) answers the memory of the machine's
   instance type ({memtotal_file}, KiB), not the box's (sysinfo(2) in a container). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

static long memtotal_kib(void)
{{
    static long kib = -1;
    char text[32] = {{0}};
    int fd;
    if (kib >= 0)
        return kib;
    fd = open("{memtotal_file}", O_RDONLY | O_CLOEXEC);
    kib = 0;
    if (fd >= 0) {{
        if (read(fd, text, sizeof text - 1) > 0)
            kib = strtol(text, NULL, 10);
        close(fd);
    }}
    return kib;
}}

long sysconf(int name)
{{
    static long (*next)(int);
    if (!next)
        next = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
    if (name == _SC_PHYS_PAGES && memtotal_kib() > 0)
        return memtotal_kib() * 1024 / next(_SC_PAGESIZE);
    return next(name);
}}
"""


def memtotal_kib(memory_mib: int) -> int:
    """What a machine of a type with `memory_mib` has, in KiB: the catalog memory less the
    kernel's reserve slurmforge's RealMemory leaves for it."""
    return int(memory_mib * 1024 * SCHEDULABLE_MEMORY)


def type_memory_mib(ec2: Any, instance_type: str) -> int:
    """The type's memory as EC2 describes it (DescribeInstanceTypes)."""
    found = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
    if not found:
        raise ProvisionError(f"instance type {instance_type}: EC2 does not describe it, so its machine has no memory")
    return int(found[0]["MemoryInfo"]["SizeInMiB"])


def build_shim(workdir: Path, memtotal_file: str = MEMTOTAL_FILE) -> Path:
    """memtotal.so in workdir, answering from `memtotal_file`, built with the box's C
    compiler (gcc, libc6-dev: `make setup`)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise ProvisionError("the rehearsal's machines need a C compiler: apt-get install gcc libc6-dev")
    source, shim = workdir / "memtotal.c", workdir / "memtotal.so"
    source.write_text(SHIM_SOURCE.format(memtotal_file=memtotal_file))
    done = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(shim), str(source)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ProvisionError(f"the rehearsal's memory shim does not build: {done.stderr.strip().splitlines()[-1:]}")
    (workdir / "ld.so.preload").write_text(SHIM_PATH + "\n")
    return shim


def machine_mounts(workdir: Path, instance_id: str, kib: int) -> list[str]:
    """podman's arguments that give a machine `kib` of memory (build_shim first)."""
    figure = workdir / "memtotal" / instance_id
    figure.parent.mkdir(exist_ok=True)
    figure.write_text(f"{kib}\n")
    return ["-v", f"{workdir / 'memtotal.so'}:{SHIM_PATH}:ro", "-v", f"{workdir / 'ld.so.preload'}:{PRELOAD}:ro",
            "-v", f"{figure}:{MEMTOTAL_FILE}:ro"]
