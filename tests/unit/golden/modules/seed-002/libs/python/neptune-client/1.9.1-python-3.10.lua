-- libs/python/neptune-client/1.9.1-python-3.10: written by slurmforge from modules/libs/python/neptune-client/1.9.1-python-3.10.yaml (sha256:02cf6482180292f03fe34c30291696cc3fb054e9ec5f0cb4dd39e1651488ed57).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
libs/python/neptune-client/1.9.1-python-3.10: Python packages: neptune-client==1.9.1
]])

whatis("Name: neptune-client")
whatis("Version: 1.9.1-python-3.10")
whatis("Description: Python packages: neptune-client==1.9.1")

depends_on("apps/python/3.10")

local root = "/opt/software/modules/install/libs/python/neptune-client/1.9.1-python-3.10"

prepend_path("PATH", pathJoin(root, "bin"))
prepend_path("PYTHONPATH", pathJoin(root, "lib/python3.10/site-packages"))
