-- apps/cuda/11.7: written by slurmforge from modules/apps/cuda/11.7.yaml (sha256:ae79d261912c59d282e159c7afe02a999e9930136c92a808029d249c1c90fd89).
-- Do not edit: a published version never changes; publish a new version instead.

help([==[
CUDA 11.7.1. Lua strings like ]] and [[ and ]=] stay inside help.
]==])

whatis("Name: cuda")
whatis("Version: 11.7")
whatis("Category: Compilers")
whatis("Description: CUDA 11.7 toolkit (nvcc, runtime \"libcudart\")")

local root = "/opt/software/modules/install/apps/cuda/11.7"

prepend_path("PATH", pathJoin(root, "bin"))
prepend_path("LD_LIBRARY_PATH", pathJoin(root, "lib64"))
setenv("CUDA_HOME", "/opt/software/modules/install/apps/cuda/11.7")
