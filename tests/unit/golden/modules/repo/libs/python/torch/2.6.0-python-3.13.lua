-- libs/python/torch/2.6.0-python-3.13: written by slurmforge from modules/libs/python/torch/2.6.0-python-3.13.yaml (sha256:c2a34b32630f349a7c41d37f1c1be7948c25836fc4170304469e1540a84ace43).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
libs/python/torch/2.6.0-python-3.13: PyTorch 2.6.0 (Debian 13, CPU), torch.distributed with gloo and MPI
]])

whatis("Name: torch")
whatis("Version: 2.6.0-python-3.13")
whatis("Category: Python libraries")
whatis("Description: PyTorch 2.6.0 (Debian 13, CPU), torch.distributed with gloo and MPI")

depends_on("apps/python/3.13")
depends_on("apps/openmpi/5.0")

local root = "/opt/software/modules/install/libs/python/torch/2.6.0-python-3.13"

prepend_path("PATH", pathJoin(root, "usr/bin"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "usr/lib/x86_64-linux-gnu"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "usr/lib"))
prepend_path("PYTHONPATH", pathJoin(root, "usr/lib/python3/dist-packages"))
