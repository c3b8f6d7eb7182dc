"""How long `slurmforge validate` takes, from a small spec to the largest and most hostile
ones, and how much memory.

Cases:

- start-up: `python -m slurmforge.cli validate examples/local.yaml` as a user runs it,
  wall time and peak RSS (the goal, 0.3 s, is the CLI's start-up: reported, not enforced);
- a small spec (examples/local.yaml) in a process that has imported the loader (and, as
  every spec case, in a process of its own: its time includes building the models'
  validator on first use, as `slurmforge validate`'s does);
- 2,000 pools, valid: at most 0.5 s;
- 2,000 pools that all tie, overlap and share a prefix: problems grow linearly (at most
  a few lines per pool), at most 1 s;
- 100,000 users, valid: at most 3 s;
- inputs of 10 MB meant to hurt, each in a process of its own: a huge list, one huge
  value, many unknown keys, many invalid users, aliases naming aliases, deep nesting,
  a long line of brackets, a chain of accounts each the parent of the next, a chain of
  QoS each preempting the last, pools each falling back to the next (the most checks per
  byte), pools falling back to unknown pools (a problem each), subnets that all overlap;
  each at most 5 s and 400 MB (peak RSS of the process: VmHWM, which counts only its own
  pages, where getrusage would count the parent's from before exec).

    .venv/bin/python bench/validate_bench.py [--quick] [--runs N]

`--runs N` runs every case N times (each hostile input and the start-up in a new process
each time, so each run includes its cold import) and reports the median run: seconds and
CPU seconds are each the median of the N.

`--quick` (CI: tests/unit/test_bench_quick.py) runs the spec cases at a tenth of their
size and the hostile inputs at 100 kB, a few seconds in all, and checks only what does
not depend on the machine: the valid specs load, the invalid ones fail with one-line
problems, their number grows linearly. Exits 1 when a case misses its budget (or, with
--quick, its outcome). Seconds are wall time; CPU seconds beside them show what a busy
machine added.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slurmforge.errors import SpecError  # noqa: E402
from slurmforge.spec.loader import parse_spec  # noqa: E402

MB = 10**6


def _aws(pools: list[dict[str, Any]], partitions: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "api_version": "slurmforge/v1", "name": "bench",
        "target": {"kind": "aws", "region": "us-east-1", "key_name": "ops"},
        "network": {"vpc_cidr": "10.20.0.0/16", "public_subnets": [{"cidr": "10.20.0.0/24", "zone": "us-east-1a"}],
                    "private_subnets": [{"cidr": "10.20.128.0/18", "zone": "us-east-1a"},
                                        {"cidr": "10.20.192.0/18", "zone": "us-east-1b"}],
                    "admin_cidrs": ["203.0.113.0/24"]},
        "pools": pools, "partitions": partitions, "storage": {"nas": {"kind": "efs"}}, **extra,
    }


def pools_spec(count: int) -> str:
    """A valid spec with `count` cpu pools of 4 nodes, 100 pools per partition."""
    pools = [{"name": f"p{i:05d}", "kind": "cpu", "instance_types": ["c6i.xlarge"], "max_nodes": 4,
              "weight": 1 + i % 100} for i in range(count)]
    names = [p["name"] for p in pools]
    partitions = [{"name": f"part{j}", "pools": names[j:j + 100], "default": j == 0} for j in range(0, count, 100)]
    return yaml.safe_dump(_aws(pools, partitions), sort_keys=False)


def tied_pools_spec(count: int) -> str:
    """Half spot, half on-demand pools of the same type and weight in one partition, one
    node prefix for all, every subnet the same: once a problem per pair of pools."""
    pools = [{"name": f"p{i:05d}", "kind": "cpu", "instance_types": ["c6i.xlarge"], "max_nodes": 1,
              "market": "spot" if i % 2 else "on-demand", "node_prefix": "node"} for i in range(count)]
    data = _aws(pools, [{"name": "all", "pools": [p["name"] for p in pools], "default": True}])
    data["network"]["private_subnets"] = [{"cidr": "10.20.128.0/18", "zone": f"us-east-1{z}"} for z in "abcdef"]
    return yaml.safe_dump(data, sort_keys=False)


def users_spec(count: int) -> str:
    """A valid spec with `count` users, as admins write them (flow style, one per line)."""
    head = yaml.safe_dump(_aws([{"name": "cpu", "kind": "cpu", "instance_types": ["c6i.xlarge"], "max_nodes": 4}],
                               [{"name": "cpu", "pools": ["cpu"], "default": True}],
                               accounting={"accounts": [{"name": "research"}]},
                               groups=[{"name": "ml-users", "gid": 2000}]), sort_keys=False)
    users = "".join(f"  - {{name: user{i:06d}, uid: {100_000 + i}, groups: [ml-users], accounts: [research], "
                    f"default_account: research}}\n" for i in range(count))
    return f"{head}users:\n{users}"


def _fill(size: int, prefix: str, item: str, suffix: str = "") -> str:
    return prefix + item * ((size - len(prefix) - len(suffix)) // len(item)) + suffix


def _lines(size: int, prefix: str, line: Callable[[int], str]) -> str:
    """prefix, then line(0), line(1), ... up to `size` characters."""
    parts, length, i = [prefix], len(prefix), 0
    while length < size:
        parts.append(line(i))
        length += len(parts[-1])
        i += 1
    return "".join(parts)


HEAD = "api_version: slurmforge/v1\nname: bench\n"
# a valid local cluster of one pool and partition, storage included
LOCAL = (HEAD + "target: {kind: local}\nstorage: {nas: {kind: bind}}\n"
         "pools: [{name: cpu, kind: cpu, hardware: {cores_per_socket: 2, memory_mb: 4096}, max_nodes: 2}]\n")
CPU_PARTITION = "partitions: [{name: cpu, pools: [cpu], default: true}]\n"
POOL = "{{name: p{i}, kind: cpu, hardware: {{cores_per_socket: 2, memory_mb: 4096}}, max_nodes: 1, fallback: [{f}]}}"
HOSTILE: dict[str, Callable[[int], str]] = {
    "huge list": lambda n: _fill(n, HEAD + "pools: [", "1,", "1]\n"),
    "huge value": lambda n: _fill(n, HEAD + "target: {kind: local, shared_dir: /", "a", "}\n"),
    "unknown keys": lambda n: HEAD + "".join(f"k{i}: 1\n" for i in range(n // 10)),
    "invalid users": lambda n: HEAD + "users:\n" + "".join(f"  - {{name: U{i}, uid: {i}}}\n" for i in range(n // 30)),
    "aliases": lambda n: HEAD + "x-a: &a [" + ",".join(["x"] * 1000) + "]\n" + _fill(n, "x-b: [", "*a,", "*a]\n"),
    "deep nesting": lambda n: HEAD + "target: " + "[" * (n // 2) + "]" * (n // 2) + "\n",
    "block nesting": lambda n: HEAD + "".join(" " * i + f"k{i}:\n" for i in range(int((2 * n) ** 0.5) - 4)),
    "account chain": lambda n: _lines(n, LOCAL + CPU_PARTITION + "accounting:\n  accounts:\n    - {name: a0}\n",
                                      lambda i: f"    - {{name: a{i + 1}, parent: a{i}}}\n"),
    "qos chain": lambda n: _lines(n, LOCAL + CPU_PARTITION + "scheduling:\n  preemption: {type: qos}\n  qos:\n"
                                  "    - {name: q0}\n", lambda i: f"    - {{name: q{i + 1}, preempt: [q{i}]}}\n"),
    "fallback chain": lambda n: _lines(n, HEAD + "target: {kind: local}\nstorage: {nas: {kind: bind}}\n"
                                       "partitions: [{name: all, pools: [p0], default: true}]\npools:\n",
                                       lambda i: f"  - {POOL.format(i=i, f=f'p{i + 1}')}\n"),
    "unknown fallbacks": lambda n: _lines(n, HEAD + "target: {kind: local}\nstorage: {nas: {kind: bind}}\n"
                                          "partitions: [{name: all, pools: [p0], default: true}]\npools:\n",
                                          lambda i: f"  - {POOL.format(i=i, f=f'x{i}')}\n"),
    "overlapping subnets": lambda n: _lines(n, LOCAL.replace("{kind: local}", "{kind: aws, region: us-east-1, "
                                                             "key_name: k}") + CPU_PARTITION +
                                            "network:\n  private_subnets:\n",
                                            lambda i: f"    - {{cidr: 10.0.{i % 256}.0/28, zone: us-east-1a}}\n"),
}


@dataclass(frozen=True)
class Result:
    name: str
    seconds: float
    problems: int
    longest: int
    rss_mb: float | None = None
    cpu: float | None = None


def run(name: str, text: str) -> Result:
    started, cpu = time.perf_counter(), time.process_time()
    try:
        parse_spec(text, name)
        problems, longest = 0, 0
    except SpecError as exc:
        lines = [p.line() for p in exc.problems]
        assert all(line.splitlines() == [line] for line in lines), name
        problems, longest = len(lines), max(len(line) for line in lines)
    return Result(name, time.perf_counter() - started, problems, longest, cpu=time.process_time() - cpu)


def run_alone(name: str, size: int) -> Result:
    """A hostile case in a process of its own, for its peak memory."""
    out = subprocess.run([sys.executable, __file__, "--one", name, "--size", str(size)], capture_output=True,
                         text=True, check=True, timeout=300).stdout
    return Result(**json.loads(out.splitlines()[-1]))


# The spec cases by key: (name, the spec's text) for a count (of pools, users; ignored by small).
SPEC_CASES: dict[str, Callable[[int], tuple[str, str]]] = {
    "small": lambda n: ("small spec", (ROOT / "examples/local.yaml").read_text()),
    "pools": lambda n: (f"{n:,} pools", pools_spec(n)),
    "tied": lambda n: (f"{n:,} tied pools", tied_pools_spec(n)),
    "users": lambda n: (f"{n:,} users", users_spec(n)),
}


def run_spec_alone(key: str, count: int) -> Result:
    """A spec case in a process of its own: its validation pays for building the models'
    validator, as `slurmforge validate` does (cold import included)."""
    out = subprocess.run([sys.executable, __file__, "--spec", key, "--size", str(count)], capture_output=True,
                         text=True, check=True, timeout=300).stdout
    return Result(**json.loads(out.splitlines()[-1]))


def one_spec(key: str, count: int) -> None:
    print(json.dumps(run(*SPEC_CASES[key](count)).__dict__))


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: its own pages only; getrusage's maxrss
    keeps the parent's from before exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def one(name: str, size: int) -> None:
    result = run(name, HOSTILE[name](size))
    print(json.dumps({**result.__dict__, "rss_mb": round(peak_rss_mb(), 1)}))


# The CLI as a user runs it, reporting its peak memory as it exits.
STARTUP = ("import atexit, json, sys, time; from pathlib import Path; started = time.perf_counter(); "
           "atexit.register(lambda: print(json.dumps({'rss_mb': int(next(l for l in Path('/proc/self/status')"
           ".read_text().splitlines() if l.startswith('VmHWM:')).split()[1]) / 1024}), file=sys.stderr)); "
           "import runpy; sys.argv = ['slurmforge', 'validate', sys.argv[1]]; "
           "runpy.run_module('slurmforge.cli', run_name='__main__')")


def startup() -> Result:
    """`python -m slurmforge.cli validate examples/local.yaml`: wall time and peak RSS."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", STARTUP, str(ROOT / "examples/local.yaml")], capture_output=True,
                          text=True, timeout=60, check=False, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"validate examples/local.yaml failed:\n{done.stdout}{done.stderr}")
    rss = json.loads(done.stderr.strip().splitlines()[-1])["rss_mb"]
    return Result("start-up (CLI)", seconds, 0, 0, round(rss, 1), cpu=None)


# Hostile inputs that are valid specs (only large): they must load.
VALID_HOSTILE = frozenset({"account chain", "qos chain"})
MAX_RSS_MB = 400


def median(results: list[Result]) -> Result:
    """One result of several runs of a case: the median of their seconds and of their CPU
    seconds (and of their memory); the problems are the same in every run."""
    def mid(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    first = results[0]
    return Result(first.name, statistics.median(r.seconds for r in results), first.problems, first.longest,
                  mid([r.rss_mb for r in results]), mid([r.cpu for r in results]))


def cases(quick: bool, runs: int = 1) -> list[tuple[Result, float | None, str]]:
    """(result, budget in seconds or None, what must hold) for every case, each the median
    of `runs` runs."""
    out: list[tuple[Result, float | None, str]] = []
    scale = 10 if quick else 1

    def each(make: Callable[[], Result]) -> Result:
        return median([make() for _ in range(runs)])

    r = each(startup)
    out.append((r, None, "valid"))
    r = each(partial(run_spec_alone, "small", 0))
    out.append((r, 0.05, "valid" if r.problems == 0 else "REFUSED"))
    n_pools, n_users, size = 2000 // scale, 100_000 // scale, 10 * MB // (scale * scale)
    r = each(partial(run_spec_alone, "pools", n_pools))
    out.append((r, 0.5, "valid" if r.problems == 0 else "REFUSED"))
    r = each(partial(run_spec_alone, "tied", n_pools))
    out.append((r, 1.0, "linear" if 0 < r.problems <= 3 * n_pools else f"NOT LINEAR ({r.problems} lines)"))
    r = each(partial(run_spec_alone, "users", n_users))
    out.append((r, 3.0, "valid" if r.problems == 0 else "REFUSED"))
    for name in HOSTILE:
        r = each(partial(run_alone, name, size))
        valid = name in VALID_HOSTILE
        out.append((r, 5.0, ("valid" if valid else "refused") if bool(r.problems) != valid
                    else ("REFUSED" if valid else "LOADED")))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, outcomes only (a few seconds)")
    parser.add_argument("--runs", type=int, default=1, help="run every case this many times; report the median")
    parser.add_argument("--one", choices=sorted(HOSTILE), help=argparse.SUPPRESS)
    parser.add_argument("--spec", choices=sorted(SPEC_CASES), help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=10 * MB, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        one(args.one, args.size)
        return 0
    if args.spec:
        one_spec(args.spec, args.size)
        return 0
    failed = 0
    print(f"{'case':<22} {'seconds':>8} {'cpu':>6} {'budget':>7} {'MB RSS':>7} {'problems':>9} {'longest':>8}  "
          "outcome")
    if args.runs < 1:
        parser.error("--runs: at least 1")
    for r, budget, outcome in cases(args.quick, args.runs):
        slow = not args.quick and budget is not None and r.seconds > budget
        heavy = not args.quick and r.rss_mb is not None and r.rss_mb > MAX_RSS_MB
        bad = outcome.isupper() or slow or heavy
        failed += bad
        rss = f"{r.rss_mb:7.0f}" if r.rss_mb is not None else f"{'':>7}"
        cpu = f"{r.cpu:6.2f}" if r.cpu is not None else f"{'':>6}"
        shown = f"{budget:7.2f}" if budget is not None else f"{'-':>7}"
        print(f"{r.name:<22} {r.seconds:8.2f} {cpu} {shown} {rss} {r.problems:9,} {r.longest:8}  {outcome}"
              f"{'  SLOW' if slow else ''}{'  HEAVY' if heavy else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
