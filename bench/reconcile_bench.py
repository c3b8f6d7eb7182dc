"""One reconcile loop of the scheduler service over 20,000 nodes, from fixtures.

Builds a spec with four pools of 5,000 nodes (spot GPU falling back to on-demand GPU, two
CPU pools), then a `sinfo --json` document in Slurm 22.05's shape with a realistic mix
(45% powered down, 30% allocated, 10% idle, 8% powering up of which half not launched
yet, 3% powering down, 2% not responding, 1% down after ResumeTimeout, 1% drained by the
health hook), the cloud's instance list and the service state (bindings, marks, a
cooling link, spot notices, orphans). Times, median of 5 runs after one warm-up:

    parse    sinfo JSON text -> NodeState list (the answer's errors and lists checked)
    classify the pure classifier -> actions
    guard    the view's doubts (spec nodes all in Slurm's answer, machines vanished) and
             which actions run (verdict streaks, the budget)
    snapshot pool summary for the page and /metrics

    .venv/bin/python bench/reconcile_bench.py [--nodes 20000] [--runs 5] [--quick]

Exits 1 when parse + classify + guard + snapshot takes more than 2 s (median), or when the
loop's outcome is wrong: an orphan machine the classifier does not terminate, or a guard
that holds actions back (the fixtures are a view it must trust). `--quick` (CI:
tests/unit/test_bench_quick.py) runs 400 nodes once and checks only the outcome.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import Counter
from typing import Any

from slurmforge.hosts import TAG_CLUSTER, TAG_NODE, TAG_POOL
from slurmforge.provider import Instance, InstanceState
from slurmforge.service.actions import Terminate
from slurmforge.service.classify import classify
from slurmforge.service.guard import Guard
from slurmforge.service.snapshot import build_snapshot
from slurmforge.service.state import Binding, Cooldown, InterruptionRecord, ServiceState
from slurmforge.service.topology import Topology, topology
from slurmforge.service.world import Tunables, World
from slurmforge.slurm.client import parse_nodes
from slurmforge.spec import parse_spec

BUDGET_SECONDS = 2.0
QUICK_NODES = 400  # the smallest size the spec takes: the gpu pool keeps 100 nodes up
NOW = 1_800_000_000.0

SPEC = """
api_version: slurmforge/v1
name: big
target: {{kind: aws, region: us-east-1, key_name: ops}}
network:
  public_subnets: [{{cidr: 10.0.0.0/24, zone: us-east-1a}}]
  private_subnets: [{{cidr: 10.0.64.0/18, zone: us-east-1a}}, {{cidr: 10.0.128.0/18, zone: us-east-1b}}]
  admin_cidrs: [203.0.113.0/24]
pools:
  - {{name: gpu-spot, kind: gpu, instance_types: [g5.12xlarge], market: spot, max_nodes: {n}, fallback: [gpu],
     zones: [us-east-1a, us-east-1b], weight: 1}}
  - {{name: gpu, kind: gpu, instance_types: [g5.12xlarge], min_nodes: 100, max_nodes: {n}, zones: [us-east-1a],
     weight: 10}}
  - {{name: cpu, kind: cpu, instance_types: [c6i.8xlarge], max_nodes: {n}, zones: [us-east-1a]}}
  - {{name: mem, kind: cpu, instance_types: [r6i.8xlarge], max_nodes: {n}, zones: [us-east-1b]}}
partitions:
  - {{name: gpu, pools: [gpu-spot, gpu]}}
  - {{name: cpu, pools: [cpu], default: true}}
  - {{name: mem, pools: [mem]}}
storage: {{nas: {{kind: efs}}}}
"""

# the rest of a 22.05.8 `sinfo --json` node record, as a real slurmctld wrote it
OTHER_FIELDS: dict[str, Any] = {
    "architecture": "x86_64", "burstbuffer_network_address": "", "boards": 1, "boot_time": 1795300000,
    "comment": "", "cores": 24, "cpu_binding": 0, "cpu_load": 4294967294, "extra": "", "free_memory": -2,
    "cpus": 48, "last_busy": 1795300000, "features": "a10g", "active_features": "a10g", "gres_drained": "N/A",
    "mcs_label": "", "next_state_after_reboot": "invalid", "next_state_after_reboot_flags": [],
    "operating_system": "Linux 6.1.0-18-cloud-amd64", "owner": None, "port": 6818, "real_memory": 186777,
    "reason_set_by_user": "slurm", "slurmd_start_time": 1795300000, "sockets": 1, "threads": 2,
    "temporary_disk": 0, "weight": 1, "tres": "cpu=48,mem=186777M,billing=48,gres/gpu=4",
    "slurmd_version": "22.05.8", "alloc_memory": 0, "alloc_cpus": 0, "idle_cpus": 48, "tres_used": None,
    "tres_weighted": 48.0,
}

# share, sinfo base state, flags, has an instance, reason
MIX: list[tuple[float, str, list[str], bool, str]] = [
    (0.45, "idle", ["CLOUD", "POWERED_DOWN"], False, ""),
    (0.30, "allocated", ["CLOUD"], True, ""),
    (0.10, "idle", ["CLOUD"], True, ""),
    (0.04, "mixed", ["CLOUD", "NOT_RESPONDING", "POWERING_UP"], False, ""),
    (0.04, "mixed", ["CLOUD", "NOT_RESPONDING", "POWERING_UP"], True, ""),
    (0.03, "idle", ["CLOUD", "POWERING_DOWN"], True, ""),
    (0.02, "idle", ["CLOUD", "NOT_RESPONDING"], True, ""),
    (0.01, "down", ["CLOUD", "POWERED_DOWN", "NOT_RESPONDING"], False, "ResumeTimeout reached"),
    (0.01, "idle", ["CLOUD", "DRAIN"], True, "health: gpu 3 xid 79"),
]


def fixtures(nodes: int, seed: int = 5) -> tuple[Topology, str, list[Instance], ServiceState]:
    rng = random.Random(seed)
    topo = topology(parse_spec(SPEC.format(n=nodes // 4), "bench"))
    weights = [m[0] for m in MIX]
    sinfo: list[dict[str, Any]] = []
    instances: list[Instance] = []
    bindings: dict[str, Binding] = {}
    marks: dict[str, dict[str, float]] = {}
    for i, (name, info) in enumerate(topo.nodes.items()):
        _, state, flags, has_instance, reason = rng.choices(MIX, weights)[0]
        gpus = topo.pools[info.pool].gpus_per_node
        sinfo.append({"name": name, "state": state, "state_flags": flags, "address": name, "hostname": name,
                      "reason": reason, "reason_changed_at": 0, "gres": f"gpu:{gpus}" if gpus else "",
                      "gres_used": f"gpu:{gpus if state == 'allocated' else 0}" if gpus else "",
                      "partitions": [info.pool], **OTHER_FIELDS})
        if has_instance:
            iid = f"i-{i:017x}"
            address = None if rng.random() < 0.01 else f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"
            launched = NOW - (60 if "POWERING_UP" in flags else 3000)
            instances.append(Instance(iid, name, info.pool, InstanceState.RUNNING, address, launched, "spot",
                                      "g5.12xlarge", "us-east-1a", {TAG_CLUSTER: "big", TAG_NODE: name,
                                                                    TAG_POOL: info.pool}))
            bindings[name] = Binding(name, iid, info.pool, launched, "sf-x")
        if "NOT_RESPONDING" in flags and "POWERING_UP" not in flags and state != "down":
            marks[name] = {"unresponsive": NOW - rng.choice((30, 400))}
    for k in range(50):  # orphans
        instances.append(Instance(f"i-orphan{k:09d}", None, "cpu", InstanceState.RUNNING, "10.9.9.9", NOW - 900,
                                  tags={TAG_CLUSTER: "big", TAG_POOL: "cpu"}))
    notices = tuple(InterruptionRecord(b.instance, b.node, None, NOW - 30, "new")
                    for b in list(bindings.values())[:20] if b.node.startswith("big-gpu-spot"))
    state = ServiceState(bindings=bindings, marks=marks, interruptions=notices,
                         cooldowns={"gpu-spot": Cooldown("gpu-spot", NOW + 60, 1, "InsufficientInstanceCapacity", NOW)})
    return topo, json.dumps({"meta": {}, "errors": [], "nodes": sinfo}), instances, state


def one_loop(topo: Topology, text: str, instances: list[Instance], state: ServiceState,
             guard: Guard) -> dict[str, Any]:
    t0 = time.perf_counter()
    nodes = parse_nodes(text)
    t1 = time.perf_counter()
    world = World(nodes, instances, state, topo, NOW, {}, Tunables())
    actions = classify(world)
    t2 = time.perf_counter()
    decision = guard.decide(world, actions, guard.doubts(world, True, True))
    t3 = time.perf_counter()
    build_snapshot(topo, nodes, state.cooldowns, [], NOW, holds=decision.holds, unconfirmed=decision.unconfirmed)
    t4 = time.perf_counter()
    return {"parse": t1 - t0, "classify": t2 - t1, "guard": t3 - t2, "snapshot": t4 - t3, "total": t4 - t0,
            "actions": actions, "decision": decision}


def outcome_problems(instances: list[Instance], loop: dict[str, Any]) -> list[str]:
    """What is wrong with one loop's outcome, whatever the machine's speed."""
    problems = []
    orphans = {i.id for i in instances if i.node is None}
    terminated = {a.instance for a in loop["actions"] if isinstance(a, Terminate)}
    if orphans - terminated:
        problems.append(f"{len(orphans - terminated)} of {len(orphans)} orphan machine(s) not terminated")
    if loop["decision"].holds:
        problems.append("the guard held actions back: " + ", ".join(h.reason.value for h in loop["decision"].holds))
    if not loop["decision"].run:
        problems.append("the guard let no action run")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_NODES} nodes, one run, outcome only (CI)")
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.runs = QUICK_NODES, 1
    t = time.perf_counter()
    topo, text, instances, state = fixtures(args.nodes)
    print(f"fixtures: {len(topo.nodes)} nodes, {len(instances)} instances, sinfo JSON {len(text) / 1e6:.1f} MB "
          f"(spec -> topology {time.perf_counter() - t:.2f} s, done once per spec change)")
    guard = Guard()
    one_loop(topo, text, instances, state, guard)  # warm-up
    runs = [one_loop(topo, text, instances, state, guard) for _ in range(args.runs)]
    for key in ("parse", "classify", "guard", "snapshot", "total"):
        values = [r[key] for r in runs]
        print(f"{key:>9}: median {statistics.median(values) * 1000:7.1f} ms   best {min(values) * 1000:7.1f} ms")
    kinds = Counter(type(a).__name__ for a in runs[0]["actions"])
    print("actions: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    last = runs[-1]["decision"]
    print(f"guard: {len(last.run)} run, {last.unconfirmed} repair(s) unconfirmed, "
          + (", ".join(f"{h.reason.value} holds {h.held}" for h in last.holds) or "nothing held"))
    problems = outcome_problems(instances, runs[-1])
    for problem in problems:
        print(f"WRONG OUTCOME: {problem}")
    median = statistics.median(r["total"] for r in runs)
    fast = args.quick or median <= BUDGET_SECONDS  # --quick: the machine's speed is not judged
    verdict = "ok" if fast else "TOO SLOW"
    print(f"one loop over {len(topo.nodes)} nodes: {median:.3f} s (budget {BUDGET_SECONDS:.0f} s): {verdict}")
    return 0 if fast and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
