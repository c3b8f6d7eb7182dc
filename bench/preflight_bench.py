"""`slurmforge preflight` against the rehearsal's stand-in (a moto server in this process with
the strict EC2 IAM and an account's quotas): its wall time and its lines for a ready account,
one with no P instance quota and a deploy role without ec2:CreateFleet.

    PYTHONPATH=. .venv/bin/python bench/preflight_bench.py
"""

from __future__ import annotations

import statistics
import time

from slurmforge.aws.preflight import lines, preflight
from tests.harness.rehearsal.quotas import ec2_quotas
from tests.harness.rehearsal.stand_in import instance_roles_enforced
from tests.pulumi.conftest import moto_server
from tests.unit.test_preflight import ENOUGH, OFFERED, REGION, make_account

CASES = {"ready": (ENOUGH, "deployer"),
         "zero P-instance quota": ({**ENOUGH, "L-417A185B": 0, "L-7212CCBC": 0}, "deployer"),
         "role without ec2:CreateFleet": (ENOUGH, "no-fleet")}


def main(runs: int = 5) -> None:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the moto server's line per request
    with moto_server(REGION), instance_roles_enforced():
        account = make_account()
        for name, (quotas, role) in CASES.items():
            times, found = [], []
            for _ in range(runs):
                with ec2_quotas(quotas):
                    started = time.monotonic()
                    found = list(lines(preflight(OFFERED, account.session, account.outputs, account.roles[role])))
                    times.append(time.monotonic() - started)
            print(f"{name}: median {statistics.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f}, "
                  f"{runs} runs), {len(found)} problem(s)")
            for line in found:
                print(f"  {line}")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="slurmforge preflight against the rehearsal's strict stand-in")
    parser.add_argument("--runs", type=int, default=5, help="runs of each account (5)")
    parser.add_argument("--quick", action="store_true", help="one run of each account (CI)")
    args = parser.parse_args()
    main(1 if args.quick else args.runs)
