"""Fan-out: 2,000 nodes of one instance type requested at once, against moto, with EC2's
RunInstances resource bucket emulated in front of CreateFleet (1,000 instances, refilling
2 per second; a call asking for more instances than the bucket holds is refused with
RequestLimitExceeded, as EC2 does).

Time is virtual for the buckets (the daemon's later loops are simulated 10 s apart), real
for issuing the calls (taken when the provider hands a call to botocore; moto, which is
not thread-safe, then answers the parallel calls one at a time). Two scenarios:

  A  the provider's bucket model matches EC2's: what it can pay for is issued at once,
     in parallel; the rest is held back without a call and issued as the bucket refills;
  B  another client emptied most of the bucket first (EC2 holds 300 tokens, the model
     thinks 1,000): the first calls are throttled, the provider backs off, then defers.

    .venv/bin/python bench/fanout_bench.py [--nodes 2000] [--quick]

Exits 1 unless, in A, the calls the bucket allowed at t=0 were all issued within 5 s and
no instance type got more than one CreateFleet call per 500 nodes (one per batch), and in
both scenarios every node was launched. `--quick` (CI: tests/unit/test_bench_quick.py)
runs both scenarios at a twentieth of the scale (100 nodes, EC2 holding 50 or 15 tokens
refilling 0.1 a second, batches of 25): the same shape in a few seconds of moto.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

os.environ.update({"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1",
                   "MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION": "true"})

# (moto reads its settings from the environment when it is imported)
import boto3
from moto import mock_aws
from moto.core.botocore_stubber import BotocoreStubber

from slurmforge.aws.provider import MAX_BATCH, AwsProvider, TokenBucket
from slurmforge.provider import THROTTLED, LaunchRequest
from slurmforge.spec import Cluster, parse_spec

ISSUE_BUDGET = 5.0
LOOP = 10.0
BUCKET, REFILL = 1000.0, 2.0
"""EC2's RunInstances resource bucket: capacity (instances) and refill (instances a second)."""
QUICK_SCALE = 20

SPEC = """
api_version: slurmforge/v1
name: fan
target: {{kind: aws, region: us-east-1, key_name: ops}}
network:
  public_subnets: [{{cidr: 10.0.0.0/24, zone: us-east-1a}}]
  private_subnets: [{{cidr: 10.0.64.0/18, zone: us-east-1a}}, {{cidr: 10.0.128.0/18, zone: us-east-1b}}]
  admin_cidrs: [203.0.113.0/24]
pools:
  - {{name: gpu, kind: gpu, instance_types: [g5.12xlarge], max_nodes: {n}, zones: [us-east-1a, us-east-1b]}}
partitions: [{{name: gpu, pools: [gpu], default: true}}]
storage: {{nas: {{kind: efs}}}}
"""


def serialise_moto() -> None:
    """moto is not thread-safe (its subnets hand out addresses from a shared generator);
    EC2 is. The provider issues calls in parallel; moto answers them one at a time. The
    issue times are taken before this lock, when the provider hands a call to botocore."""
    original = BotocoreStubber.__call__
    lock = threading.Lock()

    def locked(self: BotocoreStubber, event_name: str, request: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, event_name, request, **kwargs)

    BotocoreStubber.__call__ = locked  # type: ignore[method-assign]


class VirtualClock:
    def __init__(self) -> None:
        self.offset = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.offset

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.offset += seconds


@dataclass
class EmulatedEc2:
    """The RunInstances resource bucket in front of moto's CreateFleet."""

    clock: VirtualClock
    tokens: float = BUCKET
    capacity: float = BUCKET
    refill: float = REFILL
    at: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    issued: list[tuple[float, float, int, str]] = field(default_factory=list)
    """(real seconds since start, virtual time, instances asked, outcome)"""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def before_call(self, params: dict[str, Any], model: Any, **_: Any) -> Any:
        if model.name != "CreateFleet":
            return None
        asked = int(params["body"]["TargetCapacitySpecification.TotalTargetCapacity"])
        with self.lock:
            now = self.clock()
            self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.refill)
            self.at = now
            allowed = self.tokens >= asked
            if allowed:
                self.tokens -= asked
            self.issued.append((time.perf_counter() - self.started, now, asked, "ok" if allowed else "throttled"))
        if allowed:
            return None
        return _Throttled(), {"Error": {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."},
                              "ResponseMetadata": {"HTTPStatusCode": 503}}


class _Throttled:
    status_code, headers, content = 503, {}, b""


def setup(nodes: int, session: boto3.session.Session) -> tuple[Cluster, Any, dict[str, str], dict[str, str]]:
    spec = parse_spec(SPEC.format(n=nodes), "bench")
    ec2 = session.client("ec2", region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = {zone: ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"]
               for zone, cidr in (("us-east-1a", "10.0.64.0/18"), ("us-east-1b", "10.0.128.0/18"))}
    data = {"ImageId": "ami-12c6146b", "MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}}
    template = ec2.create_launch_template(LaunchTemplateName="fan-gpu", LaunchTemplateData=data)
    return spec, ec2, {"gpu": template["LaunchTemplate"]["LaunchTemplateId"]}, subnets


def scenario(name: str, nodes: int, ec2_tokens: float, scale: int, session: boto3.session.Session) -> dict[str, Any]:
    """`scale` divides EC2's bucket, its refill and the provider's batch size (and the
    tokens EC2 holds at the start): the same shape with fewer instances. One `session`
    for both scenarios: botocore reads EC2's service model once."""
    capacity, refill = BUCKET / scale, REFILL / scale
    with mock_aws():
        spec, ec2, templates, subnets = setup(nodes, session)
        clock = VirtualClock()
        emulated = EmulatedEc2(clock, tokens=ec2_tokens / scale, capacity=capacity, refill=refill)
        ec2.meta.events.register_first("before-call.ec2.CreateFleet", emulated.before_call)
        aws = AwsProvider(spec, ec2, templates, subnets, clock=clock, sleep=clock.sleep,
                          run_bucket=TokenBucket(capacity, refill, clock=clock), tag_bucket=TokenBucket(1e9, 1e9),
                          max_batch=MAX_BATCH // scale, max_parallel=4)
        wanted = [f"fan-gpu-{i:04d}" for i in range(1, nodes + 1)]
        rounds, loop = [], 0
        while wanted and loop < 200:
            real = time.perf_counter()
            result = aws.start(LaunchRequest(pool="gpu", nodes=tuple(wanted), token=f"sf-loop{loop}"))
            rounds.append((clock(), len(result.launched), time.perf_counter() - real))
            wanted = [n for n, code in result.failed.items() if code == THROTTLED]
            clock.sleep(LOOP)
            loop += 1
        tag_start = time.perf_counter()
        aws.flush_tags()
        return {"name": name, "issued": emulated.issued, "rounds": rounds, "left": len(wanted),
                "tagging": time.perf_counter() - tag_start, "instances": nodes - len(wanted),
                "batch": MAX_BATCH // scale}


def show(result: dict[str, Any], nodes: int) -> bool:
    """Prints the scenario; True when the calls allowed at t=0 went out within the budget
    and no more CreateFleet calls than batches were needed."""
    issued = result["issued"]
    first = [c for c in issued if c[1] == 0.0]
    throttled = sum(1 for c in issued if c[3] == "throttled")
    ok_calls = [c for c in issued if c[3] == "ok"]
    print(f"\nscenario {result['name']}")
    print(f"  CreateFleet calls: {len(issued)} ({len(ok_calls)} launched, {throttled} refused RequestLimitExceeded)")
    for real, virtual, asked, outcome in issued:
        print(f"    issued at real +{real:6.3f} s, bucket time {virtual:6.1f} s: {asked:4d} instances -> {outcome}")
    launched_rounds = [r for r in result["rounds"] if r[1]]
    print("  launched per loop: " + ", ".join(f"t={t:.0f}s: {n} ({took:.1f} s in moto)" for t, n, took in
                                              launched_rounds))
    print(f"  all {result['instances']} of {nodes} launched by bucket time {launched_rounds[-1][0]:.0f} s; "
          f"{result['left']} left; node tags written in {result['tagging']:.1f} s after the last launch")
    issue_span = max((c[0] for c in first), default=0.0) - min((c[0] for c in first), default=0.0)
    batches = math.ceil(nodes / result["batch"])
    print(f"  calls at t=0 issued within {issue_span:.3f} s of each other (first at +{first[0][0]:.3f} s); "
          f"{len(ok_calls)} successful call(s) for {batches} batch(es) of at most {result['batch']} nodes")
    return issue_span <= ISSUE_BUDGET and first[-1][0] <= ISSUE_BUDGET and len(ok_calls) <= batches


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help=f"1/{QUICK_SCALE} of the scale (CI)")
    args = parser.parse_args(argv)
    scale = QUICK_SCALE if args.quick else 1
    nodes = args.nodes // scale
    serialise_moto()
    session = boto3.session.Session()
    a = scenario("A: the model matches EC2's bucket", nodes, BUCKET, scale, session)
    ok = show(a, nodes)
    b = scenario(f"B: another client left EC2 only {0.3 * BUCKET / scale:.0f} tokens", nodes, 0.3 * BUCKET, scale,
                 session)
    show(b, nodes)
    left = {r["name"][0]: r["left"] for r in (a, b) if r["left"]}
    print(f"\nfan-out of {nodes} nodes (A): {'ok' if ok else 'FAILED'} "
          f"(launch calls the bucket allows issued <= {ISSUE_BUDGET:.0f} s after the request, "
          f"<= 1 CreateFleet per {MAX_BATCH // scale} nodes of a type)")
    if left:
        print("NOT ALL LAUNCHED: " + ", ".join(f"{n} node(s) left in {s}" for s, n in left.items()))
    return 0 if ok and not left else 1


if __name__ == "__main__":
    sys.exit(main())
