-- apps/openmpi/5.0: written by slurmforge from modules/apps/openmpi/5.0.yaml (sha256:14ef021dd6538b0d1c6915b30202eb719d4fed5e95c0dbef3fbd459b839b6472).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
apps/openmpi/5.0: Open MPI 5.0 (Debian 13), for srun --mpi=pmix
]])

whatis("Name: openmpi")
whatis("Version: 5.0")
whatis("Category: Libraries")
whatis("Description: Open MPI 5.0 (Debian 13), for srun --mpi=pmix")

local root = "/opt/software/modules/install/apps/openmpi/5.0"

prepend_path("PATH", pathJoin(root, "usr/bin"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "usr/lib/x86_64-linux-gnu"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "usr/lib"))
prepend_path("PYTHONPATH", pathJoin(root, "usr/lib/python3/dist-packages"))
setenv("OPAL_PREFIX", "/opt/software/modules/install/apps/openmpi/5.0/usr")
