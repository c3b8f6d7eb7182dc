"""The AWS provider for the scheduler service: EC2 Fleet `instant` launches.

- One CreateFleet call per batch of at most 500 nodes, with launch-template overrides
  over the pool's instance types (in order of preference) x its subnets; the pool's
  launch template (ids given by the stack outputs) carries image, IMDSv2, disks, roles.
- ClientToken per batch, derived from the service's launch token: a retried launch (the
  daemon died mid-call) gets the same instances back instead of new ones.
- A client-side model of EC2's RunInstances resource bucket (1,000 instances, refilling
  2/s) holds back batches the bucket cannot pay for: they come back as THROTTLED and are
  asked for again on a later loop, instead of hammering EC2 into RequestLimitExceeded.
  A RequestLimitExceeded that happens anyway backs off exponentially with jitter.
- Partial fleets are handled per node: nodes without an instance get the fleet's error
  code (InsufficientInstanceCapacity, VcpuLimitExceeded, ...) and the service tries the
  next link for them; a quota's code says the account's EC2 Service Quota is used up
  (the service names it: slurmforge.instance_types.ec2_quota).
- The new instances' private addresses read right after the launch (DescribeInstances by
  id), so the service publishes their names before they boot (service.pool_hosts).
- Tags: cluster, pool, link, token, jobs, users and accounts on the fleet's instances at
  launch; each instance's node (and its job, user and account) by CreateTags right after,
  from a background queue so a large launch is not held up by the tagging rate. Cluster and
  pool tag together mark a pool machine: the only instances it lists, retags or terminates.
- Spot interruption warnings arrive through EventBridge on an SQS queue (stack output).
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast

from slurmforge.contract import AwsProviderSettings, read_settings
from slurmforge.errors import Problem, ProvisionError, SpecError
from slurmforge.hosts import (
    TAG_ACCOUNT,
    TAG_CLUSTER,
    TAG_JOB,
    TAG_LINK,
    TAG_NAME,
    TAG_NODE,
    TAG_POOL,
    TAG_TOKEN,
    TAG_USER,
)
from slurmforge.provider import (
    THROTTLED,
    CapacityError,
    Instance,
    InstanceState,
    Interruption,
    LaunchRequest,
    LaunchResult,
    Machines,
    QuotaError,
)
from slurmforge.spec.models import AwsTarget, Cluster, Market, Pool

log = logging.getLogger(__name__)

MAX_BATCH = 500
"""Nodes per CreateFleet call (ParallelCluster's batch size; EC2 Fleet instant takes more,
but one failure then costs more nodes)."""
RUN_BUCKET = (1000.0, 2.0)
"""EC2's RunInstances resource token bucket: capacity (instances), refill per second."""
TAG_BUCKET = (100.0, 10.0)
"""CreateTags pacing (requests): conservative; a throttled call backs off anyway."""
THROTTLE_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})
TAG_VALUE_MAX = 255
INTERRUPTION = "EC2 Spot Instance Interruption Warning"

STATES = {
    "pending": InstanceState.PENDING, "running": InstanceState.RUNNING, "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED, "shutting-down": InstanceState.TERMINATED,
    "terminated": InstanceState.TERMINATED,
}


class TokenBucket:
    """A client-side model of one EC2 token bucket (thread-safe)."""

    def __init__(self, capacity: float, refill: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity, self.refill, self.clock = capacity, refill, clock
        self._tokens, self._at = capacity, clock()
        self._lock = threading.Lock()

    def _update(self) -> None:
        now = self.clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.refill)
        self._at = now

    def available(self) -> float:
        with self._lock:
            self._update()
            return self._tokens

    def take(self, cost: float) -> bool:
        with self._lock:
            self._update()
            if self._tokens + 1e-9 < cost:
                return False
            self._tokens -= cost
            return True

    def wait_for(self, cost: float) -> float:
        """Seconds until `cost` tokens are there (inf if more than the bucket holds)."""
        if cost > self.capacity:
            return float("inf")
        with self._lock:
            self._update()
            return max(cost - self._tokens, 0.0) / self.refill

    def give_back(self, cost: float) -> None:
        with self._lock:
            self._update()
            self._tokens = min(self.capacity, self._tokens + cost)

    def empty(self) -> None:
        """EC2 said RequestLimitExceeded: whatever the model thought, the bucket is dry."""
        with self._lock:
            self._update()
            self._tokens = 0.0


@dataclass(frozen=True)
class FleetInstance:
    id: str
    instance_type: str
    zone: str | None
    market: str


class AwsProvider(Machines):
    def __init__(self, spec: Cluster, ec2: Any, launch_templates: Mapping[str, str], subnets: Mapping[str, str],
                 sqs: Any = None, queue_url: str | None = None, *, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, run_bucket: TokenBucket | None = None,
                 tag_bucket: TokenBucket | None = None, max_batch: int = MAX_BATCH, max_parallel: int = 4,
                 throttle_budget: float = 8.0, max_bucket_wait: float = 2.0, list_page_size: int = 1000) -> None:
        problems = check_options(spec, launch_templates, subnets)
        if problems:
            raise SpecError(problems, "provider settings")
        self.spec, self.ec2, self.sqs, self.queue_url = spec, ec2, sqs, queue_url
        self.templates, self.subnets = dict(launch_templates), dict(subnets)
        self.zone_of = {subnet: zone for zone, subnet in subnets.items()}
        self.clock, self.sleep = clock, sleep
        self.run_bucket = run_bucket or TokenBucket(*RUN_BUCKET)
        self.tag_bucket = tag_bucket or TokenBucket(*TAG_BUCKET)
        self.max_batch, self.max_parallel = max_batch, max_parallel
        self.throttle_budget, self.max_bucket_wait = throttle_budget, max_bucket_wait
        self.list_page_size = list_page_size
        self.calls: list[tuple[float, str, int]] = []
        """(when, operation, nodes) of every launch call issued, for the benchmarks."""
        self._tags: queue.Queue[tuple[str, list[dict[str, str]]]] = queue.Queue()
        self._tagger: threading.Thread | None = None
        self._unwritten: dict[str, dict[str, str]] = {}
        """Node tags of instances this provider launched, until a listing shows them: one in
        between still names each machine's node (an untagged pool machine would look like an
        orphan, `instance_from_ec2`). Kept after CreateTags succeeded, not dropped then: a
        listing read before the write (or answered by an EC2 replica that has not seen it:
        tags are eventually consistent) would otherwise find neither."""
        self._unwritten_lock = threading.Lock()
        self._checked: set[str] = set()

    @classmethod
    def from_settings(cls, spec: Cluster, settings: AwsProviderSettings) -> AwsProvider:
        """The service's provider, with its clients, from the settings `slurmforge inventory`
        wrote from the stack's outputs (launch templates, private subnets, spot queue)."""
        import boto3  # type: ignore[import-untyped]
        from botocore.config import Config  # type: ignore[import-untyped]

        assert isinstance(spec.target, AwsTarget)
        if settings.region != spec.target.region:
            raise ProvisionError(f"the provider settings are for region {settings.region}, the spec's target is "
                                 f"{spec.target.region}; fix: write the inventory from this cluster's stack outputs")
        session = boto3.session.Session(region_name=settings.region)
        # retries are ours (token-bucket aware), not botocore's
        ec2 = session.client("ec2", config=Config(retries={"total_max_attempts": 1, "mode": "standard"}))
        queue_url = settings.spot_queue_url
        return cls(spec, ec2, settings.launch_templates, settings.subnets,
                   sqs=session.client("sqs") if queue_url else None, queue_url=queue_url)

    # ------------------------------------------------------------------ interface

    def list_instances(self) -> list[Instance]:
        """Every pool machine of this cluster (`pool_machine_filters`): all pages, or
        ProvisionError. A page that fails (throttled, network) fails the whole list; it never
        comes back shorter."""
        found: list[Instance] = []
        pages = 0
        try:
            for page in self.ec2.get_paginator("describe_instances").paginate(
                    Filters=pool_machine_filters(self.spec.name), PaginationConfig={"PageSize": self.list_page_size}):
                pages += 1
                for reservation in page["Reservations"]:
                    found += [instance_from_ec2(item) for item in reservation["Instances"]]
        except self._aws_errors() as exc:
            raise ProvisionError(f"DescribeInstances failed after {pages} page(s); the list is unknown: {exc}") from exc
        with self._unwritten_lock:
            for i in found:  # EC2 shows the tags (or the machine is gone): the listing needs them no more
                if i.id in self._unwritten and (i.node is not None or i.state is InstanceState.TERMINATED):
                    del self._unwritten[i.id]
            unwritten = dict(self._unwritten)
        return [with_tags(i, unwritten[i.id]) if i.id in unwritten else i for i in found]

    def terminate(self, instances: Sequence[Instance]) -> None:
        ids = sorted({i.id for i in instances})
        for start in range(0, len(ids), 500):
            self._call("terminate_instances", InstanceIds=ids[start:start + 500])

    # ------------------------------------------------------------------ launching

    def start(self, request: LaunchRequest) -> LaunchResult:
        pool = self.spec.pool(request.capacity_pool)
        self.check_template(pool.name)
        batches = list(_chunks(list(request.nodes), self.max_batch))
        launched: dict[str, Instance] = {}
        failed: dict[str, str] = {}
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_parallel, len(batches)))) as workers:
            futures = [workers.submit(self._launch_batch, request, pool, batch, f"{request.token}-{i}")
                       for i, batch in enumerate(batches)]
            for future in futures:
                result = future.result()
                launched.update(result.launched)
                failed.update(result.failed)
        return LaunchResult(launched=launched, failed=failed)

    def _launch_batch(self, request: LaunchRequest, pool: Pool, nodes: list[str], client_token: str) -> LaunchResult:
        response = self._create_fleet(self.fleet_params(request, pool, nodes, client_token), len(nodes))
        if isinstance(response, str):
            return LaunchResult({}, dict.fromkeys(nodes, response))
        got = self._fleet_instances(response)
        self.run_bucket.give_back(len(nodes) - len(got))
        code = fleet_error(response)
        addresses = self._addresses([fi.id for fi in got])
        launched = {node: self._instance(request, node, fi, addresses.get(fi.id))
                    for node, fi in zip(nodes, got, strict=False)}
        self._queue_node_tags(request, launched)
        return LaunchResult(launched, dict.fromkeys(nodes[len(got):], code))

    def _create_fleet(self, params: dict[str, Any], count: int) -> dict[str, Any] | str:
        """The fleet's response, or the error code for every node of the batch.

        EC2 answers RequestLimitExceeded both when the request rate is exceeded (gone
        after a short pause) and when the RunInstances bucket is dry (gone only at 2
        instances/s): one short back-off and retry, then the model is emptied and the
        batch deferred to a later loop, so a dry bucket costs two calls, not a storm."""
        for attempt in range(2):
            if not self._pay(count):
                return THROTTLED
            try:
                return cast(dict[str, Any], self._call("create_fleet", retry=False, log_nodes=count, **params))
            except self._client_error() as exc:
                code = str(exc.response.get("Error", {}).get("Code", "Unknown"))  # type: ignore[attr-defined]
                if code not in THROTTLE_CODES:
                    self.run_bucket.give_back(count)
                    log.warning("CreateFleet %s for %d node(s): %s", params["ClientToken"], count, code)
                    return code
                if attempt == 0:
                    self.run_bucket.give_back(count)
                    self.sleep(0.5 + random.uniform(0, 0.5))
        self.run_bucket.empty()
        log.info("CreateFleet %s throttled twice: %d node(s) wait for the bucket", params["ClientToken"], count)
        return THROTTLED

    def _pay(self, count: int) -> bool:
        """Take `count` tokens from the run-instances model, waiting a little if that is
        all it takes; otherwise leave the batch for a later loop."""
        if self.run_bucket.take(count):
            return True
        wait = self.run_bucket.wait_for(count)
        if wait > self.max_bucket_wait:
            log.info("holding back %d node(s): the RunInstances bucket refills in %.0f s", count, wait)
            return False
        self.sleep(wait)
        return self.run_bucket.take(count)

    def fleet_params(self, request: LaunchRequest, pool: Pool, nodes: Sequence[str], client_token: str
                     ) -> dict[str, Any]:
        spot = pool.market is Market.SPOT
        overrides = [{"InstanceType": itype, "SubnetId": self.subnets[zone], "Priority": float(rank)}
                     for rank, itype in enumerate(pool.instance_types) for zone in self.zones(pool)]
        capacity = "spot" if spot else "on-demand"
        options: dict[str, Any] = {"AllocationStrategy": "capacity-optimized-prioritized" if spot else "prioritized"}
        if pool.placement_group:
            options["SingleAvailabilityZone"] = True
        return {
            "Type": "instant",
            "ClientToken": client_token,
            "LaunchTemplateConfigs": [{
                "LaunchTemplateSpecification": {"LaunchTemplateId": self.templates[pool.name], "Version": "$Latest"},
                "Overrides": overrides}],
            "TargetCapacitySpecification": {
                "TotalTargetCapacity": len(nodes), "DefaultTargetCapacityType": capacity,
                ("SpotTargetCapacity" if spot else "OnDemandTargetCapacity"): len(nodes)},
            ("SpotOptions" if spot else "OnDemandOptions"): options,
            "TagSpecifications": [{"ResourceType": "instance", "Tags": _tags(self.fleet_tags(request, nodes))}],
        }

    def fleet_tags(self, request: LaunchRequest, nodes: Sequence[str]) -> dict[str, str]:
        jobs = sorted({request.node_jobs[n] for n in nodes if n in request.node_jobs} or set(request.jobs))
        users = sorted({request.job_users[j] for j in jobs if j in request.job_users})
        accounts = sorted({request.job_accounts[j] for j in jobs if j in request.job_accounts})
        tags = {TAG_CLUSTER: self.spec.name, TAG_POOL: request.pool, TAG_LINK: request.capacity_pool,
                TAG_TOKEN: request.token}
        if jobs:
            tags[TAG_JOB] = _fit(",".join(str(j) for j in jobs))
        if users:
            tags[TAG_USER] = _fit(",".join(users))
        if accounts:
            tags[TAG_ACCOUNT] = _fit(",".join(accounts))
        return tags

    def zones(self, pool: Pool) -> list[str]:
        return list(pool.zones) or sorted(self.subnets)

    def _fleet_instances(self, response: Mapping[str, Any]) -> list[FleetInstance]:
        found = []
        for item in response.get("Instances") or []:
            subnet = ((item.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}).get("SubnetId")
            found += [FleetInstance(iid, str(item.get("InstanceType") or ""), self.zone_of.get(str(subnet)),
                                    str(item.get("Lifecycle") or "on-demand")) for iid in item.get("InstanceIds", [])]
        return sorted(found, key=lambda f: f.id)

    def _addresses(self, ids: list[str]) -> dict[str, str]:
        """The private addresses of instances just launched (one has its address while still
        pending): with them the service publishes the nodes' names before the machines boot
        (service.pool_hosts). EC2 may not know a fresh instance yet (eventual consistency):
        then the service's next DescribeInstances lists the addresses."""
        if not ids:
            return {}
        try:
            found = self._call("describe_instances", InstanceIds=ids)
        except self._aws_errors() as exc:
            log.info("the addresses of %d new instance(s) come with the next listing: %s", len(ids), exc)
            return {}
        return {str(item["InstanceId"]): str(item["PrivateIpAddress"]) for reservation in found["Reservations"]
                for item in reservation["Instances"] if item.get("PrivateIpAddress")}

    def _instance(self, request: LaunchRequest, node: str, fi: FleetInstance, address: str | None) -> Instance:
        tags = self.fleet_tags(request, [node]) | self.node_tags(request, node)
        return Instance(id=fi.id, node=node, pool=request.pool, state=InstanceState.PENDING, address=address,
                        launched_at=self.clock(), market=fi.market, instance_type=fi.instance_type, zone=fi.zone,
                        tags=tags)

    @staticmethod
    def node_tags(request: LaunchRequest, node: str) -> dict[str, str]:
        tags = {TAG_NAME: node, TAG_NODE: node}
        job = request.node_jobs.get(node)
        if job is not None:
            tags[TAG_JOB] = str(job)
            if job in request.job_users:
                tags[TAG_USER] = request.job_users[job]
            if job in request.job_accounts:
                tags[TAG_ACCOUNT] = request.job_accounts[job]
        return tags

    # ------------------------------------------------------------------ node tags

    def _queue_node_tags(self, request: LaunchRequest, launched: Mapping[str, Instance]) -> None:
        for node, inst in launched.items():
            tags = self.node_tags(request, node)
            with self._unwritten_lock:
                self._unwritten[inst.id] = tags
            self._tags.put((inst.id, _tags(tags)))
        if launched and (self._tagger is None or not self._tagger.is_alive()):
            self._tagger = threading.Thread(target=self._tag_worker, name="slurmforge-ec2-tags", daemon=True)
            self._tagger.start()

    def _tag_worker(self) -> None:
        while True:
            try:
                iid, tags = self._tags.get(timeout=5.0)
            except queue.Empty:
                return
            try:
                while not self.tag_bucket.take(1):
                    self.sleep(self.tag_bucket.wait_for(1))
                self._call("create_tags", bucket=self.tag_bucket, Resources=[iid], Tags=tags)
            except Exception:
                log.exception("tagging %s failed", iid)
            finally:
                self._tags.task_done()

    def flush_tags(self) -> None:
        """Wait until every queued node tag is written."""
        self._tags.join()

    # ------------------------------------------------------------------ checks

    def check_template(self, pool: str) -> None:
        """The launch template must require IMDSv2 with hop limit 1 (Control Tower's EC2
        controls); checked once per template, before its first launch."""
        template = self.templates[pool]
        if template in self._checked:
            return
        versions = self._call("describe_launch_template_versions", LaunchTemplateId=template,
                              Versions=["$Latest"])["LaunchTemplateVersions"]
        meta = (versions[0].get("LaunchTemplateData") or {}).get("MetadataOptions") or {} if versions else {}
        if meta.get("HttpTokens") != "required" or int(meta.get("HttpPutResponseHopLimit") or 1) != 1:
            raise ProvisionError(f"launch template {template} of pool {pool} must set MetadataOptions "
                                 f"HttpTokens=required and HttpPutResponseHopLimit=1 (IMDSv2); it has {meta}")
        self._checked.add(template)

    # ------------------------------------------------------------------ calls

    def _client_error(self) -> type[Exception]:
        from botocore.exceptions import ClientError  # type: ignore[import-untyped]

        return cast(type[Exception], ClientError)

    def _aws_errors(self) -> tuple[type[Exception], ...]:
        """An error EC2 answered with, or one on the way there (connection, timeout)."""
        from botocore.exceptions import BotoCoreError

        return self._client_error(), cast(type[Exception], BotoCoreError)

    def _call(self, operation: str, bucket: TokenBucket | None = None, log_nodes: int = 0, retry: bool = True,
              **params: Any) -> Any:
        """Call EC2, backing off exponentially (with jitter) on throttling, for at most
        `throttle_budget` seconds; then the error goes up."""
        delay, deadline = 0.5, self.clock() + self.throttle_budget
        while True:
            if log_nodes:
                self.calls.append((self.clock(), operation, log_nodes))
            try:
                return getattr(self.ec2, operation)(**params)
            except self._client_error() as exc:
                code = exc.response.get("Error", {}).get("Code")  # type: ignore[attr-defined]
                if not retry or code not in THROTTLE_CODES or self.clock() + delay > deadline:
                    raise
                if bucket is not None:
                    bucket.empty()
                log.info("%s throttled (%s); retrying in %.1f s", operation, code, delay)
                self.sleep(delay + random.uniform(0, delay / 2))
                delay = min(delay * 2, 8.0)

    # ------------------------------------------------------------------ interruptions

    def interruptions(self) -> list[Interruption]:
        if self.sqs is None or not self.queue_url:
            return []
        notices: list[Interruption] = []
        for _ in range(10):  # at most 100 messages a loop
            messages = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10,
                                                WaitTimeSeconds=0).get("Messages", [])
            if not messages:
                break
            for message in messages:
                notice = parse_interruption(message.get("Body", ""), message["ReceiptHandle"], self.clock())
                if notice is None:  # other EventBridge events (rebalance hints, ...): drop them
                    self._delete([message["ReceiptHandle"]])
                else:
                    notices.append(notice)
        return notices

    def acknowledge(self, interruptions: Sequence[Interruption]) -> None:
        self._delete([i.receipt for i in interruptions if i.receipt])

    def _delete(self, receipts: list[str]) -> None:
        if self.sqs is None:
            return
        for start in range(0, len(receipts), 10):
            entries = [{"Id": str(n), "ReceiptHandle": r} for n, r in enumerate(receipts[start:start + 10])]
            self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)


def parse_interruption(body: str, receipt: str, now: float) -> Interruption | None:
    """An EventBridge "EC2 Spot Instance Interruption Warning" event -> Interruption."""
    try:
        event = json.loads(body)
        if event.get("detail-type") != INTERRUPTION:
            return None
        instance = str(event["detail"]["instance-id"])
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("not an EventBridge event: %.200s", body)
        return None
    try:
        noticed = datetime.fromisoformat(str(event.get("time", "")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        noticed = now
    return Interruption(instance=instance, noticed_at=noticed, receipt=receipt)


def fleet_error(response: Mapping[str, Any]) -> str:
    """The code that stands for a fleet's error entries (one per override that failed): a
    used-up quota first (it is the account's, whatever the zone or type had), then no
    capacity, then whatever EC2 said."""
    errors = [str(e.get("ErrorCode") or "") for e in response.get("Errors") or []]
    return next((c for c in errors if QuotaError.includes(c)), next(
        (c for c in errors if CapacityError.includes(c)), errors[0] if errors else
        CapacityError.UNFULFILLED_CAPACITY.value))


def pool_machine_filters(cluster: str) -> list[dict[str, Any]]:
    """DescribeInstances filters for the cluster's pool machines: its tag, and the pool tag
    that every launch of the service carries (CreateFleet's TagSpecifications, the launch
    templates') and no instance of the stack does (head nodes, Ceph hosts: slurmforge:role).
    The service's IAM policy lets it terminate and retag only instances with both."""
    return [{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster]}, {"Name": "tag-key", "Values": [TAG_POOL]}]


def instance_from_ec2(item: Mapping[str, Any]) -> Instance:
    tags = {t["Key"]: t["Value"] for t in item.get("Tags") or []}
    launched = item.get("LaunchTime")
    return Instance(
        id=item["InstanceId"], node=tags.get(TAG_NODE), pool=tags.get(TAG_POOL),
        state=STATES.get(item.get("State", {}).get("Name", ""), InstanceState.PENDING),
        address=item.get("PrivateIpAddress") or None,
        launched_at=launched.timestamp() if isinstance(launched, datetime) else None,
        market="spot" if item.get("InstanceLifecycle") == "spot" else "on-demand",
        instance_type=item.get("InstanceType"), zone=(item.get("Placement") or {}).get("AvailabilityZone"),
        tags=tags, image=item.get("ImageId"))


def check_options(spec: Cluster, templates: Mapping[str, str], subnets: Mapping[str, str]) -> list[Problem]:
    """Every pool needs a launch template and a subnet in each of its zones."""
    problems = []
    for i, pool in enumerate(spec.pools):
        if pool.name not in templates:
            problems.append(Problem(f"launch_templates.{pool.name}", f"no launch template for pool {pool.name}",
                                    "write the inventory from the stack outputs (`slurmforge inventory`)"))
        for zone in pool.zones:
            if zone not in subnets:
                problems.append(Problem(f"pools[{i}].zones", f"no subnet for zone {zone}",
                                        "add a private subnet in that zone, or drop the zone", value=zone))
    if not subnets:
        problems.append(Problem("subnets", "no subnets",
                                "write the inventory from the stack outputs (`slurmforge inventory`)"))
    return problems


def with_tags(instance: Instance, tags: Mapping[str, str]) -> Instance:
    """A listed instance with the node tags its launch queued and EC2 has not written yet."""
    merged = {**instance.tags, **tags}
    return replace(instance, node=merged.get(TAG_NODE), tags=merged)


def _tags(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def _fit(value: str) -> str:
    return value if len(value) <= TAG_VALUE_MAX else value[:TAG_VALUE_MAX - 3] + "..."


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def service_provider(spec: Cluster, settings: Mapping[str, Any]) -> Machines:
    """The scheduler service's provider, from its settings (contract.AwsProviderSettings: the
    region, launch templates, private subnets and spot queue `slurmforge inventory` wrote)."""
    return AwsProvider.from_settings(spec, read_settings(AwsProviderSettings, dict(settings)))
