-- apps/python/3.11: written by slurmforge from modules/apps/python/3.11.yaml (sha256:31e3376ba80d123ff8a0d6417316b956f7833824dfa384b4b154d282b30ef289).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
Python 3.11, the interpreter Debian 12 ships on every node.
Loads `python`, `python3` and `python3.11` onto PATH. Libraries built for it are
named libs/python/<package>/<version>-python-3.11.
]])

whatis("Name: python")
whatis("Version: 3.11")
whatis("Category: Languages")
whatis("Description: Python 3.11 (Debian 12 system interpreter)")

-- one Python at a time: loading another one swaps it
family("python")

local root = "/opt/software/modules/install/apps/python/3.11"

prepend_path("PATH", pathJoin(root, "bin"))
