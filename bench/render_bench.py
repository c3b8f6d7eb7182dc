"""How long validating and rendering a large cluster takes, and how big slurm.conf gets.

Builds AWS specs in memory with 8 pools (4 CPU, 4 GPU) and 6 partitions, at 200, 2,000
and 20,000 nodes, and times `parse_spec` (YAML + model + cross-field checks) followed by
`render_all` (every config file), best and median of 5 runs after one warm-up; the
first (cold) call of the process is reported on its own line. Since
pools become hostlist ranges, slurm.conf should not grow with the node count.

    .venv/bin/python bench/render_bench.py [--runs 5] [--profile] [--quick]

Exits 1 when validate + render of 20,000 nodes takes more than 1 s (median). `--quick`
(CI, a unit test) validates and renders 200 nodes once: the spec it builds must stay
valid as checks are added.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import yaml

from slurmforge.render import render_all
from slurmforge.spec.loader import parse_spec

SIZES = (200, 2_000, 20_000)
BUDGET_SECONDS = 1.0
BUDGET_NODES = 20_000

# (pool name, kind, instance types, extra pool keys)
POOLS: list[tuple[str, str, list[str], dict[str, Any]]] = [
    ("c6i", "cpu", ["c6i.8xlarge"], {"static_share": 0.1}),
    ("m6i", "cpu", ["m6i.8xlarge"], {}),
    ("r6i", "cpu", ["r6i.8xlarge"], {"features": ["highmem"]}),
    ("cpu-mix", "cpu", ["c6i.4xlarge", "m6i.4xlarge"], {}),
    ("g5", "gpu", ["g5.12xlarge"], {}),
    ("p4d", "gpu", ["p4d.24xlarge"], {"features": ["nvlink"]}),
    ("p5", "gpu", ["p5.48xlarge"], {}),
    # a fallback has the pool's hardware; the spot pool weighs less, so it fills first
    ("p5-spot", "gpu", ["p5.48xlarge"], {"market": "spot", "fallback": ["p5"], "idle_seconds": 300, "weight": 90}),
]

PARTITIONS: list[dict[str, Any]] = [
    {"name": "cpu", "pools": ["c6i", "m6i", "cpu-mix"], "default": True, "max_time": "2-00:00:00"},
    {"name": "highmem", "pools": ["r6i"], "max_time": "2-00:00:00"},
    {"name": "gpu", "pools": ["g5"], "max_time": "5-00:00:00", "default_time": "04:00:00"},
    {"name": "gpu-large", "pools": ["p4d", "p5", "p5-spot"], "max_time": "5-00:00:00"},
    {"name": "spot", "pools": ["p5-spot"], "max_time": "1-00:00:00", "priority_tier": 1},
    {"name": "all", "pools": [p[0] for p in POOLS], "max_time": "1-00:00:00"},
]


def spec_data(total_nodes: int) -> dict[str, Any]:
    """A valid AWS spec with `total_nodes` nodes split evenly over the pools."""
    per_pool = total_nodes // len(POOLS)
    pools = []
    for name, kind, types, extra in POOLS:
        pool: dict[str, Any] = {"name": name, "kind": kind, "instance_types": types, "max_nodes": per_pool,
                                "zones": ["us-east-1a", "us-east-1b"],
                                # CPU jobs in the mixed partition take CPU nodes first
                                "weight": 10 if kind == "cpu" else 100}
        share = extra.get("static_share")
        pool |= {k: v for k, v in extra.items() if k != "static_share"}
        if share:
            pool["min_nodes"] = int(per_pool * share)
        pools.append(pool)
    groups = [{"name": "ml-users", "gid": 2000}]
    return {
        "api_version": "slurmforge/v1",
        "name": "bench",
        "target": {"kind": "aws", "region": "us-east-1", "key_name": "ops"},
        # p4d and p5 need NVIDIA's fabric manager, which only a pinned image can bring
        "images": {"ami": "ami-0123456789abcdef0"},
        "network": {
            "vpc_cidr": "10.20.0.0/16",
            "public_subnets": [{"cidr": "10.20.0.0/24", "zone": "us-east-1a"}],
            "private_subnets": [{"cidr": "10.20.128.0/18", "zone": "us-east-1a"},
                                {"cidr": "10.20.192.0/18", "zone": "us-east-1b"}],
            "admin_cidrs": ["203.0.113.0/24"],
        },
        "pools": pools,
        "partitions": [p | {"allow_groups": ["ml-users"]} for p in PARTITIONS],
        "scheduling": {"default_cpu_pool": "c6i", "default_gpu_pool": "g5"},
        "storage": {"nas": {"kind": "efs"}},
        "accounting": {"accounts": [{"name": "research"}]},
        "groups": groups,
        "users": [{"name": "alice", "uid": 3001, "groups": ["ml-users"], "accounts": ["research"],
                   "default_account": "research"}],
    }


@dataclass(frozen=True)
class Result:
    nodes: int
    validate: list[float]
    render: list[float]
    total: list[float]
    conf_bytes: int
    conf_lines: int


def measure(total_nodes: int, runs: int) -> Result:
    text = yaml.safe_dump(spec_data(total_nodes), sort_keys=False)
    render_all(parse_spec(text))  # warm-up: template compilation, catalog load
    validate, render, total = [], [], []
    conf = ""
    for _ in range(runs):
        t0 = time.perf_counter()
        spec = parse_spec(text, "bench.yaml")
        t1 = time.perf_counter()
        conf = render_all(spec, "bench.yaml")["slurm.conf"]
        t2 = time.perf_counter()
        validate.append(t1 - t0)
        render.append(t2 - t1)
        total.append(t2 - t0)
    nodes = sum(p.max_nodes for p in spec.pools)
    assert nodes == total_nodes, (nodes, total_nodes)
    return Result(total_nodes, validate, render, total, len(conf.encode()), len(conf.splitlines()))


def _ms(values: list[float]) -> str:
    return f"{min(values) * 1000:7.1f} {statistics.median(values) * 1000:7.1f}"


def print_table(results: list[Result], runs: int) -> None:
    print(f"validate = parse_spec (YAML + models + checks), render = render_all; ms, best / median of {runs}")
    print(f"{'nodes':>7} | {'validate':^15} | {'render':^15} | {'total':^15} | {'slurm.conf':>10} {'lines':>6}")
    print(f"{'':>7} | {'best':>7} {'median':>7} | {'best':>7} {'median':>7} | {'best':>7} {'median':>7} |"
          f" {'bytes':>10} {'':>6}")
    for r in results:
        print(f"{r.nodes:>7,} | {_ms(r.validate)} | {_ms(r.render)} | {_ms(r.total)} | {r.conf_bytes:>10,} "
              f"{r.conf_lines:>6}")


def cold_start(total_nodes: int) -> float:
    """The first validate + render in a process (what one CLI call pays): it also loads
    the instance catalog and compiles the templates."""
    text = yaml.safe_dump(spec_data(total_nodes), sort_keys=False)
    t0 = time.perf_counter()
    render_all(parse_spec(text))
    return time.perf_counter() - t0


def profile(total_nodes: int, runs: int) -> None:
    """cProfile of the cold run, then of `runs` warm runs."""
    text = yaml.safe_dump(spec_data(total_nodes), sort_keys=False)
    for label, count in (("cold (first run in the process)", 1), (f"warm ({runs} runs)", runs)):
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(count):
            render_all(parse_spec(text))
        profiler.disable()
        print(f"=== {label}")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help=f"cProfile one {BUDGET_NODES:,}-node run")
    parser.add_argument("--quick", action="store_true", help="validate and render 200 nodes once (seconds)")
    args = parser.parse_args(argv)
    if args.quick:
        result = measure(SIZES[0], 1)
        print_table([result], 1)
        return 0
    if args.profile:
        profile(BUDGET_NODES, args.runs)
        return 0
    cold = cold_start(BUDGET_NODES)
    results = [measure(n, args.runs) for n in SIZES]
    print_table(results, args.runs)
    print(f"cold start (first call in a process, {BUDGET_NODES:,} nodes): {cold * 1000:.0f} ms")
    budget = next(r for r in results if r.nodes == BUDGET_NODES)
    median = statistics.median(budget.total)
    if median > BUDGET_SECONDS:
        print(f"FAIL: {BUDGET_NODES:,} nodes took {median:.2f} s (median), budget {BUDGET_SECONDS:.1f} s",
              file=sys.stderr)
        return 1
    print(f"ok: {BUDGET_NODES:,} nodes in {median * 1000:.0f} ms (median), budget {BUDGET_SECONDS * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
