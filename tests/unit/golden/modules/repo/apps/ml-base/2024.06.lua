-- apps/ml-base/2024.06: written by slurmforge from modules/apps/ml-base/2024.06.yaml (sha256:d5c2c5a0b0f6a0dc24fd5f358d1a665a255ba9f40c31f61e8cb02967845042df).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
apps/ml-base/2024.06: the team's base environment (Python 3.11 and its common libraries)
]])

whatis("Name: ml-base")
whatis("Version: 2024.06")
whatis("Category: Bundles")
whatis("Description: the team's base environment (Python 3.11 and its common libraries)")

depends_on("apps/python/3.11")
depends_on("libs/python/six/1.16.0-python-3.11")
