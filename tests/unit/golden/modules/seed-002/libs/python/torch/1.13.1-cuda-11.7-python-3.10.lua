-- libs/python/torch/1.13.1-cuda-11.7-python-3.10: written by slurmforge from modules/libs/python/torch/1.13.1-cuda-11.7-python-3.10.yaml (sha256:fbb57cda95ce06bdd05146b3cedc600c52c86481f22c4af670964e68b9d03278).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
libs/python/torch/1.13.1-cuda-11.7-python-3.10: Python packages: torch==1.13.1+cu117
]])

whatis("Name: torch")
whatis("Version: 1.13.1-cuda-11.7-python-3.10")
whatis("Description: Python packages: torch==1.13.1+cu117")

depends_on("apps/python/3.10")
depends_on("apps/cuda/11.7")

local root = "/opt/software/modules/install/libs/python/torch/1.13.1-cuda-11.7-python-3.10"

prepend_path("PATH", pathJoin(root, "bin"))
prepend_path("PYTHONPATH", pathJoin(root, "lib/python3.10/site-packages"))
