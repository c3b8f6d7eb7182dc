-- apps/ml-base/2024.06: written by slurmforge from modules/apps/ml-base/2024.06.yaml (sha256:ae55ca07d8d6828c0a31278e31ed3ad20e0874fe3566ff5b3c6a786314b4728d).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
apps/ml-base/2024.06: loads apps/python/3.10, libs/python/torch/1.13.1-cuda-11.7-python-3.10
]])

whatis("Name: ml-base")
whatis("Version: 2024.06")
whatis("Description: loads apps/python/3.10, libs/python/torch/1.13.1-cuda-11.7-python-3.10")

depends_on("apps/python/3.10")
depends_on("libs/python/torch/1.13.1-cuda-11.7-python-3.10")

setenv("MPLBACKEND", "Agg")
