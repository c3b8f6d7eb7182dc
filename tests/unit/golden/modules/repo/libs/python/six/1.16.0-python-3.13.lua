-- libs/python/six/1.16.0-python-3.13: written by slurmforge from modules/libs/python/six/1.16.0-python-3.13.yaml (sha256:7dd6ebec37de1cfe188e880dd4cec0f9f56d8d137367d24d2a5818d7e18bd3fb).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
libs/python/six/1.16.0-python-3.13: six 1.16.0, Python 2 and 3 compatibility helpers
]])

whatis("Name: six")
whatis("Version: 1.16.0-python-3.13")
whatis("Category: Python libraries")
whatis("Description: six 1.16.0, Python 2 and 3 compatibility helpers")

depends_on("apps/python/3.13")

local root = "/opt/software/modules/install/libs/python/six/1.16.0-python-3.13"

prepend_path("PATH", pathJoin(root, "bin"))
prepend_path("PYTHONPATH", pathJoin(root, "lib/python3.13/site-packages"))
