-- libs/python/six/1.16.0-python-3.11: written by slurmforge from modules/libs/python/six/1.16.0-python-3.11.yaml (sha256:89622e48687dbd8f978addb3023b982816bcd1d7b3b8f8b41e2f5d688d42da86).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
libs/python/six/1.16.0-python-3.11: six 1.16.0, Python 2 and 3 compatibility helpers
]])

whatis("Name: six")
whatis("Version: 1.16.0-python-3.11")
whatis("Category: Python libraries")
whatis("Description: six 1.16.0, Python 2 and 3 compatibility helpers")

depends_on("apps/python/3.11")

local root = "/opt/software/modules/install/libs/python/six/1.16.0-python-3.11"

prepend_path("PATH", pathJoin(root, "bin"))
prepend_path("PYTHONPATH", pathJoin(root, "lib/python3.11/site-packages"))
