"""Money in Slurm's own terms: what a pool's node costs per hour, and the TRES billing
weights that make a job's `billing` TRES its cost.

The unit: one billing unit is one hundredth of a US cent per hour
(BILLING_UNITS_PER_DOLLAR = 10,000), so a job whose `billing` is 10000 costs $1 per hour
while it runs, and Slurm's billing-seconds (fair share usage) or billing-minutes
(`GrpTRESMins=billing=N` budgets) convert to dollars by dividing by 10,000 x 3,600 or
10,000 x 60. Slurm stores a job's billing as a whole number (the weighted sum is cut
to an integer): at this unit that costs at most $0.0001 per hour.

The weights (`TRESBillingWeights` on each partition, with `PriorityFlags=MAX_TRES`):
for a pool whose node costs U units per hour and has C CPUs, M MB of RealMemory and G
GPUs, CPU = U/C, Mem = U/M and GRES/gpu = U/G. Under MAX_TRES Slurm bills a job the
largest of cpus x CPU, mem x Mem and gpus x GRES/gpu (src/common/assoc_mgr.c,
assoc_mgr_tres_weighted), so a job pays for the share of a node it keeps from others:
a whole node is billed U, one GPU of four with its share of CPUs and memory U/4, a job
that takes all of a node's memory the whole node. A partition over several pools takes
each weight's highest value among them: a job is never billed less than its node costs
(an upper bound when the pools' prices differ; one price per partition is exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slurmforge.instance_types import price
from slurmforge.spec.models import Cluster, Partition, Pool
from slurmforge.spec.nodes import pool_hardware

BILLING_UNITS_PER_DOLLAR = 10_000
"""Billing units per US dollar-hour: one unit is $0.0001 per hour."""
WEIGHT_DECIMALS = 4
"""Weights are written rounded up at this many decimals, so Slurm's integer cut of a
whole node's billing lands on its price, not one unit below."""


@dataclass(frozen=True)
class PoolPrice:
    """What one node of a pool costs per hour."""

    dollars_per_hour: float
    source: str
    """'spec' (price_per_hour) or the catalog source's description."""
    date: str = ""
    region: str = ""
    estimate: bool = False
    instance_type: str = ""

    @property
    def units_per_hour(self) -> float:
        # rounded: 0.0464 x 10,000 is 463.99999999999994 in binary floating point
        return round(self.dollars_per_hour * BILLING_UNITS_PER_DOLLAR, 6)


def pool_price(pool: Pool) -> PoolPrice | None:
    """The spec's price_per_hour, else the catalog's price of the pool's preferred instance
    type in its market; None for a pool without either (explicit hardware)."""
    if pool.price_per_hour is not None:
        return PoolPrice(pool.price_per_hour, "spec")
    if pool.preferred_type is None:
        return None
    found = price(pool.preferred_type, pool.market.value)
    if found is None:
        return None
    return PoolPrice(found.dollars_per_hour, found.source, found.date, found.region, found.estimate,
                     found.instance_type)


@dataclass(frozen=True)
class BillingWeights:
    cpu: float
    mem_per_gb: float
    gres: tuple[tuple[str, float], ...] = ()
    """(gres name, weight per device), e.g. ('gpu', 1418.0)"""

    def text(self) -> str:
        """TRESBillingWeights' value: `CPU=480,Mem=126.3138G,GRES/gpu=1418`."""
        parts = [f"CPU={_number(self.cpu)}", f"Mem={_number(self.mem_per_gb)}G"]
        parts += [f"GRES/{name}={_number(weight)}" for name, weight in self.gres]
        return ",".join(parts)

    def billing(self, cpus: int, memory_mb: int, gres: int = 0) -> int:
        """The billing Slurm computes for this allocation under MAX_TRES (cut to an integer)."""
        values = [cpus * _rounded(self.cpu), memory_mb * _rounded(self.mem_per_gb) / 1024]
        values += [gres * _rounded(weight) for _, weight in self.gres]
        return int(max(values))


def partition_weights(spec: Cluster, part: Partition) -> BillingWeights | None:
    """Weights for one partition; None when one of its pools has no price or no known
    hardware (Slurm then bills allocated CPUs, its default)."""
    cpu = mem = 0.0
    gres: dict[str, float] = {}
    for name in part.pools:
        pool = spec.pool(name)
        hw, cost = pool_hardware(pool), pool_price(pool)
        if hw is None or cost is None:
            return None
        units = cost.units_per_hour
        cpu = max(cpu, units / hw.cpus)
        mem = max(mem, units * 1024 / hw.memory_mb)
        if hw.gpus and hw.gres_name:
            gres[hw.gres_name] = max(gres.get(hw.gres_name, 0.0), units / hw.gpus)
    return BillingWeights(cpu, mem, tuple(sorted(gres.items())))


def billing_weights(spec: Cluster) -> dict[str, BillingWeights]:
    """partition -> its weights, for the partitions that have them. Empty without
    accounting: billing only means something where slurmdbd records it (and GRES TRES
    exist only through AccountingStorageTRES)."""
    if not spec.accounting.enabled:
        return {}
    found = {p.name: partition_weights(spec, p) for p in spec.partitions}
    return {name: weights for name, weights in found.items() if weights is not None}


def dollars(billing_unit_seconds: float) -> float:
    """Billing units x seconds (what a job's billing accrues) in dollars."""
    return billing_unit_seconds / BILLING_UNITS_PER_DOLLAR / 3600


def _rounded(value: float) -> float:
    scale = 10**WEIGHT_DECIMALS
    return float(math.ceil(value * scale - 1e-9) / scale)


def _number(value: float) -> str:
    text = f"{_rounded(value):.{WEIGHT_DECIMALS}f}".rstrip("0").rstrip(".")
    return text or "0"
