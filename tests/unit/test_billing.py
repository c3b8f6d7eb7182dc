"""Prices in the catalog and the TRES billing weights made from them: a whole node is
billed its price, a share of a node its share, under PriorityFlags=MAX_TRES (the real
slurmctld's billing of the rendered configs is judged in tests/slurm)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from slurmforge.billing import (
    BILLING_UNITS_PER_DOLLAR,
    BillingWeights,
    billing_weights,
    dollars,
    partition_weights,
    pool_price,
)
from slurmforge.instance_types import load_instance_types, load_prices, price
from slurmforge.render import render
from slurmforge.spec import Cluster, load_spec, validate_data
from slurmforge.spec.nodes import pool_hardware

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def aws_spec(pools: list[dict[str, object]], partitions: list[dict[str, object]] | None = None,
             **extra: object) -> Cluster:
    data = {
        "api_version": "slurmforge/v1", "name": "t",
        "target": {"kind": "aws", "region": "us-east-1", "key_name": "ops"},
        "network": {"public_subnets": [{"cidr": "10.0.0.0/24", "zone": "us-east-1a"}],
                    "private_subnets": [{"cidr": "10.0.16.0/20", "zone": "us-east-1a"},
                                        {"cidr": "10.0.32.0/20", "zone": "us-east-1b"}],
                    "admin_cidrs": ["203.0.113.0/24"]},
        "pools": pools,
        "partitions": partitions or [{"name": "p", "pools": [p["name"] for p in pools], "default": True}],
        "storage": {"nas": {"kind": "efs"}},
        **extra,
    }
    return validate_data(data, "test")


def test_every_catalog_type_has_a_dated_sourced_price() -> None:
    prices = load_prices()
    assert prices.region == "us-east-1" and prices.currency == "USD"
    for name in load_instance_types():
        on_demand, spot = price(name), price(name, "spot")
        assert on_demand is not None and spot is not None, name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", on_demand.date) and on_demand.source, name
        assert not on_demand.estimate and spot.estimate, name
        assert 0 < spot.dollars_per_hour < on_demand.dollars_per_hour, name
    assert price("x9.huge") is None
    # a type's price scales with its size inside a family with linear pricing
    assert price("m6i.32xlarge").dollars_per_hour == pytest.approx(64 * price("m6i.large").dollars_per_hour)  # type: ignore[union-attr]
    # spot: on-demand less the published saving (g5: 62 %), other families 55 %
    assert price("g5.xlarge", "spot").dollars_per_hour == pytest.approx(1.006 * 0.38)  # type: ignore[union-attr]
    assert price("m6i.large", "spot").dollars_per_hour == pytest.approx(0.096 * 0.45)  # type: ignore[union-attr]


def test_pool_price_spec_first_then_catalog_in_its_market() -> None:
    spec = aws_spec([
        {"name": "od", "kind": "gpu", "instance_types": ["g5.12xlarge"], "max_nodes": 2, "weight": 5},
        {"name": "spot", "kind": "gpu", "instance_types": ["g5.12xlarge"], "market": "spot", "max_nodes": 2,
         "weight": 1},
        {"name": "mine", "kind": "gpu", "instance_types": ["g5.12xlarge"], "max_nodes": 2, "price_per_hour": 3.5,
         "weight": 10},
    ])
    od, spot, mine = (pool_price(p) for p in spec.pools)
    assert od is not None and od.dollars_per_hour == 5.672 and od.instance_type == "g5.12xlarge"
    assert spot is not None and spot.estimate and spot.dollars_per_hour == pytest.approx(5.672 * 0.38)
    assert mine is not None and mine.source == "spec" and mine.units_per_hour == 35_000
    local = load_spec(ROOT / "examples/lab.yaml")
    assert all(pool_price(p) is None for p in local.pools)  # owned machines without a price


@pytest.mark.parametrize("name", sorted(load_instance_types()))
@pytest.mark.parametrize("market", ["on-demand", "spot"])
def test_a_whole_node_is_billed_its_price_and_a_share_its_share(name: str, market: str) -> None:
    kind = "gpu" if load_instance_types()[name].accelerators else "cpu"
    # a spot partition may not be the default: an on-demand one is
    spec = aws_spec([{"name": "p", "kind": kind, "instance_types": [name], "max_nodes": 1, "market": market},
                     {"name": "od", "kind": "cpu", "instance_types": ["m6i.large"], "max_nodes": 1}],
                    [{"name": "p", "pools": ["p"]}, {"name": "other", "pools": ["od"], "default": True}],
                    # p4d and p5 run only on an image with NVIDIA's fabric manager
                    images={"ami": "ami-0123456789abcdef0"})
    weights = partition_weights(spec, spec.partitions[0])
    hw, cost = pool_hardware(spec.pools[0]), pool_price(spec.pools[0])
    assert weights is not None and hw is not None and cost is not None
    units = cost.units_per_hour
    assert weights.billing(hw.cpus, hw.memory_mb, hw.gpus) == int(units)
    # all the memory with one CPU: still the whole node (nobody else fits)
    assert weights.billing(1, hw.memory_mb) == int(units)
    if hw.gpus >= 2:
        # one GPU with its share of CPUs and memory: that share of the price (within a unit)
        share = weights.billing(hw.cpus // hw.gpus, hw.memory_mb // hw.gpus, 1)
        assert abs(share - units / hw.gpus) <= 1.0
    # the weights as Slurm reads them: K/M/G suffixes divide (man slurm.conf)
    text = weights.text()
    assert re.fullmatch(r"CPU=[\d.]+,Mem=[\d.]+G(,GRES/(gpu|neuron)=[\d.]+)?", text), text
    assert ("GRES/" in text) == bool(hw.gpus)


def test_a_partition_over_pools_of_different_prices_bills_the_dearest_rates() -> None:
    spec = aws_spec([
        {"name": "small", "kind": "gpu", "instance_types": ["g5.xlarge"], "max_nodes": 1},
        {"name": "big", "kind": "gpu", "instance_types": ["g5.12xlarge"], "max_nodes": 1},
    ])
    both = partition_weights(spec, spec.partitions[0])
    assert both is not None
    # per GPU: g5.xlarge $1.006 for 1, g5.12xlarge $5.672 for 4 ($1.418): the dearer rate
    assert dict(both.gres)["gpu"] == pytest.approx(14_180)
    # per CPU: 4 CPUs for $1.006 (2515 units) against 48 for $5.672 (1181.67)
    assert both.cpu == pytest.approx(2515)
    # the small node is billed above its $1.006: an upper bound, never below
    small, big = pool_hardware(spec.pools[0]), pool_hardware(spec.pools[1])
    assert small is not None and both.billing(small.cpus, small.memory_mb, small.gpus) == 14_180
    # the big one too: the small one's CPU and memory rates are dearer
    assert big is not None and both.billing(big.cpus, big.memory_mb, big.gpus) > 56_720


def test_rendered_slurm_conf_carries_weights_and_max_tres() -> None:
    text = render(load_spec(ROOT / "examples/pools-aws.yaml"), "slurm.conf")
    assert "\nPriorityFlags=MAX_TRES\n" in text
    lines = {m[1]: m[2] for m in re.finditer(r"^PartitionName=(\S+) .*TRESBillingWeights=(\S+)", text, re.M)}
    # p3.8xlarge: $12.24 = 122,400 units/h over 32 CPUs and 4 GPUs; spot 55 % less
    assert lines["ml-gpu"].startswith("CPU=3825,") and lines["ml-gpu"].endswith(",GRES/gpu=30600")
    assert lines["ml-gpu-spot"].endswith(",GRES/gpu=13770")
    # t2.medium (the preferred type of a flexible t2/t3 pool): $0.0464 over 2 CPUs
    assert lines["ml-cpu"].startswith("CPU=232,")


def test_no_weights_without_prices_or_without_accounting() -> None:
    lab = load_spec(ROOT / "examples/lab.yaml")
    text = render(lab, "slurm.conf")
    assert "TRESBillingWeights" not in text and "MAX_TRES" not in text
    spec = validate_data({
        "api_version": "slurmforge/v1", "name": "t", "target": {"kind": "local"},
        "pools": [{"name": "cpu", "kind": "cpu", "hardware": {"cores_per_socket": 2, "memory_mb": 2048},
                   "min_nodes": 1, "max_nodes": 1, "price_per_hour": 0.1}],
        "partitions": [{"name": "p", "pools": ["cpu"], "default": True}],
        "storage": {"nas": {"kind": "bind"}}, "accounting": {"enabled": False},
        "scheduling": {"priority": {"weight_fairshare": 0}}}, "no-accounting")
    assert pool_price(spec.pools[0]) is not None
    assert billing_weights(spec) == {}
    assert "TRESBillingWeights" not in render(spec, "slurm.conf")


def test_one_unpriced_pool_leaves_its_partition_to_slurms_default() -> None:
    data = yaml.safe_load((ROOT / "examples/local.yaml").read_text())
    del data["pools"][2]["price_per_hour"]  # cpu-fallback, in ml-cpu with cpu
    spec = validate_data(data, "local")
    # ml-cpu (cpu + cpu-fallback) goes without; ml-gpu, ml-spot and scavenger (one pool each) keep theirs
    assert set(billing_weights(spec)) == {"ml-gpu", "ml-spot", "scavenger"}


def test_units() -> None:
    assert BILLING_UNITS_PER_DOLLAR == 10_000
    # a job billed 10,000 ($1/h) for half an hour
    assert dollars(10_000 * 1800) == pytest.approx(0.5)
    assert BillingWeights(480, 960).text() == "CPU=480,Mem=960G"
    # rounded up at the 4th decimal: Slurm's integer cut never lands a unit short
    assert BillingWeights(1 / 3, 1.0).text() == "CPU=0.3334,Mem=1G"


def test_docs_quote_the_catalogs_prices() -> None:
    """docs/aws.md and docs/cost.md name instance prices: each is the catalog's."""
    for doc in ("docs/aws.md", "docs/cost.md"):
        text = (ROOT / doc).read_text()
        quoted = re.findall(r"`([a-z0-9]+\.[a-z0-9]+)` \$([\d.]+)(?:/h)? on[- ]demand", text)
        assert quoted, f"{doc} quotes no price"
        for name, dollars_ in quoted:
            found = price(name)
            assert found is not None and found.dollars_per_hour == float(dollars_), (doc, name, dollars_)


def test_the_preferred_type_is_the_head_of_the_list_and_names_the_price_and_the_layout() -> None:
    """A flexible pool's price and the CPU layout Slurm is told are its preferred type's."""
    spec = aws_spec([
        {"name": "a", "kind": "cpu", "instance_types": ["t3.xlarge", "t2.xlarge"], "max_nodes": 2, "weight": 1},
        {"name": "b", "kind": "cpu", "instance_types": ["t2.xlarge", "t3.xlarge"], "max_nodes": 2, "weight": 2},
    ])
    a, b = spec.pools
    assert (a.preferred_type, b.preferred_type) == ("t3.xlarge", "t2.xlarge")
    for pool in (a, b):
        found, hw = pool_price(pool), pool_hardware(pool)
        assert found is not None and found.instance_type == pool.preferred_type
        assert found.dollars_per_hour == price(pool.preferred_type).dollars_per_hour  # type: ignore[arg-type, union-attr]
        assert hw is not None and not hw.uniform_layout
    assert (pool_hardware(a).cores_per_socket, pool_hardware(b).cores_per_socket) == (2, 4)  # type: ignore[union-attr]
    assert load_spec(ROOT / "examples/lab.yaml").pools[0].preferred_type is None  # explicit hardware
