"""The instance catalog: hardware facts and prices for the AWS types ML teams use.

Node lines and validation read hardware from here (or from a pool's explicit
hardware), never from whichever host Ansible gathered facts on. Prices
(data/prices.yaml) carry their region, date and source; TRES billing weights and
`slurmforge cost` read them through `price` (slurmforge.billing).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_mib: int
    accelerators: int = 0
    accelerator_model: str | None = None
    accelerator_kind: str | None = None
    efa: bool = False
    nvswitch: bool = False
    """Its GPUs share NVSwitches: CUDA runs there only with NVIDIA's fabric manager."""

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]


@cache
def load_catalog() -> dict[str, InstanceType]:
    text = resources.files("slurmforge").joinpath("data/instance_types.yaml").read_text()
    raw: dict[str, dict[str, object]] = yaml.safe_load(text)
    return {name: InstanceType(name=name, **fields) for name, fields in raw.items()}  # type: ignore[arg-type]


def lookup(name: str) -> InstanceType | None:
    return load_catalog().get(name)


# --------------------------------------------------------------------------- prices


@dataclass(frozen=True)
class Price:
    """What one instance-hour of a type costs in one market, and where that came from."""

    instance_type: str
    market: str
    """on-demand or spot"""
    dollars_per_hour: float
    region: str
    date: str
    """When the figure was published or recorded (YYYY-MM-DD)."""
    source: str
    """Where it came from (data/prices.yaml names each source)."""
    estimate: bool = False
    """True for spot: an estimate from on-demand and a published saving, not a quote."""


@dataclass(frozen=True)
class PriceList:
    region: str
    currency: str
    on_demand: dict[str, tuple[float, str]]
    """type -> (dollars per hour, source id)"""
    sources: dict[str, dict[str, str]]
    spot_source: str
    spot_savings: dict[str, float]
    """instance family -> fraction saved over on-demand"""
    default_spot_savings: float


@cache
def load_prices() -> PriceList:
    text = resources.files("slurmforge").joinpath("data/prices.yaml").read_text()
    raw = yaml.safe_load(text)
    on_demand = {name: (float(dollars), source)
                 for source, types in raw["on_demand"].items() for name, dollars in types.items()}
    return PriceList(region=raw["region"], currency=raw["currency"], on_demand=on_demand,
                     sources={k: {f: str(v) for f, v in d.items()} for k, d in raw["sources"].items()},
                     spot_source=raw["spot"]["source"], spot_savings=dict(raw["spot"]["savings"]),
                     default_spot_savings=float(raw["spot"]["default_savings"]))


def price(name: str, market: str = "on-demand") -> Price | None:
    """The catalog's price of one instance-hour of `name` in `market`; None when the
    catalog has none."""
    prices = load_prices()
    found = prices.on_demand.get(name)
    if found is None:
        return None
    dollars, source_id = found
    source = prices.sources[source_id]
    if market != "spot":
        return Price(name, "on-demand", dollars, prices.region, source["date"], source["where"])
    spot = prices.sources[prices.spot_source]
    saving = prices.spot_savings.get(name.split(".", 1)[0], prices.default_spot_savings)
    return Price(name, "spot", round(dollars * (1 - saving), 6), prices.region, spot["date"], spot["where"],
                 estimate=True)
