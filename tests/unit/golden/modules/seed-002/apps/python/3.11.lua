-- apps/python/3.11: written by slurmforge from modules/apps/python/3.11.yaml (sha256:63afc9d6ee47cf9a891571da80de679d844abb58c796667eb1bfd4f5e95146ab).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
apps/python/3.11: Python 3.11 (/usr/bin/python3.11)
]])

whatis("Name: python")
whatis("Version: 3.11")
whatis("Description: Python 3.11 (/usr/bin/python3.11)")

-- one Python at a time: loading another one swaps it
family("python")

local root = "/opt/software/modules/install/apps/python/3.11"

prepend_path("PATH", pathJoin(root, "bin"))
