"""Rules that relate several fields of a spec. Each check yields every Problem it
finds; `run_checks` runs them all, so the user sees every error at once.

A check is a small generator registered with @check, in a module per concern (imported
below, in the order their problems are reported). Its docstring is the rule: docs/spec.md
lists them, and the test suite has an invalid-*.yaml file for each one.
"""

from __future__ import annotations

from slurmforge.spec.checks.registry import CHECKS, Check, check, run_checks

# importing a module registers its checks, in this order (the order problems are reported)
# isort: off
from slurmforge.spec.checks import names, pools, capacity, partitions, scheduling, people, storage, addresses
from slurmforge.spec.checks import network, site
# isort: on

__all__ = ["CHECKS", "Check", "addresses", "capacity", "check", "names", "network", "partitions", "people", "pools",
           "run_checks", "scheduling", "site", "storage"]
