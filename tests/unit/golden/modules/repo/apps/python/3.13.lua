-- apps/python/3.13: written by slurmforge from modules/apps/python/3.13.yaml (sha256:152a7c15633ec478ad6d681daa759abe5c62c1e54d19bf17a86b8f799820b4d5).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
Python 3.13, the interpreter Debian 13 ships on every node.
Loads `python`, `python3` and `python3.13` onto PATH. Libraries built for it are
named libs/python/<package>/<version>-python-3.13.
]])

whatis("Name: python")
whatis("Version: 3.13")
whatis("Category: Languages")
whatis("Description: Python 3.13 (Debian 13 system interpreter)")

-- one Python at a time: loading another one swaps it
family("python")

local root = "/opt/software/modules/install/apps/python/3.13"

prepend_path("PATH", pathJoin(root, "bin"))
