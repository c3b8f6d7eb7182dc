-- apps/openmpi/5.0-r2: written by slurmforge from modules/apps/openmpi/5.0-r2.yaml (sha256:4830ca594aeae317c728031c75f4a46e444ce11289f2d82b0ea95dcbc7852ddb).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
Open MPI 5.0.7 from Debian 13, with its C compiler wrapper: `mpicc -o prog prog.c`
compiles with the module's gcc 14 (C only: no mpicxx, mpifort).
Start ranks the Slurm way, in a batch script or an allocation:
  srun --mpi=pmix ./prog          Slurm's PMIx plugin starts every rank (preferred)
  mpirun ./prog                   Open MPI's launcher, inside an allocation (salloc/sbatch);
                                  it starts its daemons through Slurm
Python: libs/python/mpi4py loads this module. mpirun passes the loaded modules' library
paths to the ranks (OMPI_MCA_mca_base_env_list=LD_LIBRARY_PATH, what `mpirun -x
LD_LIBRARY_PATH` does): a value of your own replaces it, keep LD_LIBRARY_PATH in it.
]])

whatis("Name: openmpi")
whatis("Version: 5.0-r2")
whatis("Category: Libraries")
whatis("Description: Open MPI 5.0 (Debian 13) with mpicc (gcc 14); start ranks with srun --mpi=pmix, or mpirun inside an allocation")

local root = "/opt/software/modules/install/apps/openmpi/5.0-r2"

prepend_path("PATH", pathJoin(root, "usr/bin"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "usr/lib/x86_64-linux-gnu"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "usr/lib"))
prepend_path("PYTHONPATH", pathJoin(root, "usr/lib/python3/dist-packages"))
prepend_path("C_INCLUDE_PATH", pathJoin(root, "usr/include/x86_64-linux-gnu"))
prepend_path("C_INCLUDE_PATH", pathJoin(root, "usr/include"))
prepend_path("LIBRARY_PATH", pathJoin(root, "usr/lib/x86_64-linux-gnu"))
setenv("OPAL_PREFIX", "/opt/software/modules/install/apps/openmpi/5.0-r2/usr")
setenv("OMPI_MCA_mca_base_env_list", "LD_LIBRARY_PATH")
