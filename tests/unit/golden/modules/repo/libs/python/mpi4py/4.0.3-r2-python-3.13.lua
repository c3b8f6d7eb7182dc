-- libs/python/mpi4py/4.0.3-r2-python-3.13: written by slurmforge from modules/libs/python/mpi4py/4.0.3-r2-python-3.13.yaml (sha256:abc6f778a40d6097edf3934f4bf2d8fbf3372cd0a2a325021d660616a5d5a723).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
libs/python/mpi4py/4.0.3-r2-python-3.13: mpi4py 4.0.3 (Debian 13), MPI for Python on Open MPI 5
]])

whatis("Name: mpi4py")
whatis("Version: 4.0.3-r2-python-3.13")
whatis("Category: Python libraries")
whatis("Description: mpi4py 4.0.3 (Debian 13), MPI for Python on Open MPI 5")

depends_on("apps/python/3.13")
depends_on("apps/openmpi/5.0-r2")

local root = "/opt/software/modules/install/libs/python/mpi4py/4.0.3-r2-python-3.13"

prepend_path("PATH", pathJoin(root, "usr/bin"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "usr/lib/x86_64-linux-gnu"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "usr/lib"))
prepend_path("PYTHONPATH", pathJoin(root, "usr/lib/python3/dist-packages"))
