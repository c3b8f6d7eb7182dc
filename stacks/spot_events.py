"""Spot notices: EventBridge rules for the two-minute Spot Instance Interruption Warning
and the Instance Rebalance Recommendation, delivered to an SQS queue the scheduler
service reads (so a job can checkpoint and requeue before its node goes away).

EventBridge cannot filter these events by instance tag: every spot notice of the
account and region arrives, and the service ignores instance ids it does not own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from .common import child, policy_json, tags

NOTICES = {
    "interruption": "EC2 Spot Instance Interruption Warning",
    "rebalance": "EC2 Instance Rebalance Recommendation",
}
# a notice older than the two-minute warning is useless
RETENTION_SECONDS = 600


def event_pattern(detail_type: str) -> str:
    return json.dumps({"source": ["aws.ec2"], "detail-type": [detail_type]})


def queue_policy(queue_arn: str, rule_arns: list[str]) -> dict[str, Any]:
    """Only these rules may send to the queue."""
    return {"Version": "2012-10-17", "Statement": [{
        "Sid": "SpotNoticesFromTheseRules", "Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
        "Action": "sqs:SendMessage", "Resource": queue_arn,
        "Condition": {"ArnEquals": {"aws:SourceArn": rule_arns}},
    }]}


@dataclass(frozen=True)
class SpotEventsArgs:
    cluster: str
    """Cluster name: tags."""


class SpotEvents(pulumi.ComponentResource):
    queue_url: pulumi.Output[str]
    queue_arn: pulumi.Output[str]

    def __init__(self, name: str, args: SpotEventsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:SpotEvents", name, None, opts)
        queue = aws.sqs.Queue(f"{name}-spot-notices", sqs_managed_sse_enabled=True,
                              message_retention_seconds=RETENTION_SECONDS,
                              tags=tags(args.cluster, "spot-events"), opts=child(self))
        rule_arns = []
        for key, detail_type in NOTICES.items():
            rule = aws.cloudwatch.EventRule(f"{name}-spot-{key}", description=f"slurmforge: {detail_type}",
                                            event_pattern=event_pattern(detail_type),
                                            tags=tags(args.cluster, "spot-events"), opts=child(self))
            aws.cloudwatch.EventTarget(f"{name}-spot-{key}", rule=rule.name, arn=queue.arn, opts=child(self))
            rule_arns.append(rule.arn)
        aws.sqs.QueuePolicy(f"{name}-spot-notices", queue_url=queue.url,
                            policy=pulumi.Output.all(queue.arn, pulumi.Output.all(*rule_arns)).apply(
                                lambda v: policy_json(queue_policy(v[0], list(v[1])))),
                            opts=child(self))
        self.queue_url, self.queue_arn = queue.url, queue.arn
        self.register_outputs({"queue_url": queue.url})
