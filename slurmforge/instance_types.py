"""The instance catalog: hardware facts, prices and Service Quotas for the AWS types ML
teams use.

Node lines and validation read hardware from here (or from a pool's explicit
hardware), never from whichever host Ansible gathered facts on. Prices
(data/prices.yaml) carry their region, date and source; TRES billing weights and
`slurmforge cost` read them through `price` (slurmforge.billing). `ec2_quota` names the
EC2 Service Quota a type's launches draw on, per market (the scheduler service says it
when a launch fails for it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import yaml

from slurmforge.package_data import data

if TYPE_CHECKING:
    from slurmforge.provider import Quota

# libyaml's safe loader when PyYAML has it: the catalog is read at every validation, and the
# pure-Python loader takes ~10x as long (the same data either way).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
    nitro: bool = True
    """Built on the Nitro System: EBS volumes appear as NVMe devices, linked by their volume id
    (/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol...: docs.aws.amazon.com/ebs/latest/
    userguide/nvme-ebs-volumes.html). False for Xen types (t2, p3 but p3dn)."""

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]


def _data(name: str) -> Any:
    """A YAML file of slurmforge/data, read with libyaml when PyYAML has it (the pure
    Python parser takes a tenth of a second for the catalog: `validate` reads it)."""
    text = data(name).read_text()
    return yaml.load(text, Loader=SAFE_LOADER)


@cache
def load_instance_types() -> dict[str, InstanceType]:
    raw: dict[str, dict[str, object]] = _data("instance_types.yaml")
    return {name: InstanceType(name=name, **fields) for name, fields in raw.items()}  # type: ignore[arg-type]


def lookup(name: str) -> InstanceType | None:
    return load_instance_types().get(name)


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
    raw = _data("prices.yaml")
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


# --------------------------------------------------------------------------- quotas

ON_DEMAND_QUOTAS: dict[str, tuple[str, str]] = {
    "standard": ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "p": ("L-417A185B", "Running On-Demand P instances"),
    "trn": ("L-2C3B7624", "Running On-Demand Trn instances"),
    "inf": ("L-1945791B", "Running On-Demand Inf instances"),
    "dl": ("L-6E869C2A", "Running On-Demand DL instances"),
    "f": ("L-74FC7D96", "Running On-Demand F instances"),
    "x": ("L-7295265B", "Running On-Demand X instances"),
    "hpc": ("L-F7808C92", "Running On-Demand HPC instances"),
}
"""EC2's vCPU quotas of running on-demand instances, per quota group (Service Quotas, ec2)."""
SPOT_QUOTAS: dict[str, tuple[str, str]] = {
    "standard": ("L-34B43A08", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    "g": ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    "p": ("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests"),
    "p5": ("L-C4BD4855", "All P5 Spot Instance Requests"),
    "trn": ("L-6B0D517C", "All Trn Spot Instance Requests"),
    "inf": ("L-B5D1601B", "All Inf Spot Instance Requests"),
    "dl": ("L-85EED4F7", "All DL Spot Instance Requests"),
    "f": ("L-88CF9481", "All F Spot Instance Requests"),
    "x": ("L-E3A00192", "All X Spot Instance Requests"),
}
"""EC2's vCPU quotas of spot instance requests, per quota group."""
_GROUPS = {"a": "standard", "c": "standard", "d": "standard", "h": "standard", "i": "standard", "im": "standard",
           "is": "standard", "m": "standard", "r": "standard", "t": "standard", "z": "standard", "g": "g",
           "vt": "g", "p": "p", "trn": "trn", "inf": "inf", "dl": "dl", "f": "f", "x": "x", "hpc": "hpc"}
"""Instance type prefix (the letters before the generation) -> quota group."""


def ec2_quota(instance_type: str, market: str) -> Quota:
    """The Service Quota that launches of `instance_type` in `market` (on-demand, spot)
    draw on. A family the table does not know gets a quota without a code, named by its
    family and market, so that a person still knows what to raise."""
    from slurmforge.provider import Quota  # the service's vocabulary: `validate` never needs it

    prefix = re.match(r"[a-z]+", instance_type)
    group = _GROUPS.get(prefix[0] if prefix else "")
    spot = market == "spot"
    if group == "p" and spot and re.match(r"p5", instance_type):
        group = "p5"
    known = (SPOT_QUOTAS if spot else ON_DEMAND_QUOTAS).get(group or "")
    if known is None:
        family = instance_type.split(".", 1)[0]
        return Quota("", f"EC2 vCPU quota of {family} {'spot instance requests' if spot else 'on-demand instances'}")
    return Quota(*known)
