-- apps/ml-base/2024.06: written by slurmforge from modules/apps/ml-base/2024.06.yaml (sha256:a52344c80bc87cae8ad1089b45ed4c00f754447f51a86058d8e18d1ec0657928).
-- Do not edit: a published version never changes; publish a new version instead.

help([[
apps/ml-base/2024.06: the team's base environment (Python 3.13 and its common libraries)
]])

whatis("Name: ml-base")
whatis("Version: 2024.06")
whatis("Category: Bundles")
whatis("Description: the team's base environment (Python 3.13 and its common libraries)")

depends_on("apps/python/3.13")
depends_on("libs/python/six/1.16.0-python-3.13")
