-- apps/python/3.10: written by slurmforge from modules/apps/python/3.10.yaml (sha256:c674953f0c9df1cd70118064b82bb5d1551275848ae06c52b01b619831f8f843).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
apps/python/3.10: Python 3.10 (/usr/bin/python3.10)
]])

whatis("Name: python")
whatis("Version: 3.10")
whatis("Category: Languages")
whatis("Description: Python 3.10 (/usr/bin/python3.10)")

-- one Python at a time: loading another one swaps it
family("python")

local root = "/opt/software/modules/install/apps/python/3.10"

prepend_path("PATH", pathJoin(root, "bin"))
