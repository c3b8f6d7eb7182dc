"""The accounting database when the spec says `accounting.database.kind: external`:
RDS MariaDB in the private subnets, encrypted, reachable on its port from the
controller group only, and published under the spec's `database.host` name in a
private DNS zone, so the rendered slurmdbd.conf (StorageHost = that name) works as is.
With kind local nothing here is created: MariaDB runs on the controller.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from slurmforge.spec.models import Database as DatabaseSpec

from .common import child, tags

ENGINE_VERSION = "10.11"
PARAMETER_FAMILY = "mariadb10.11"
SLURMDBD_PARAMETERS = {"innodb_lock_wait_timeout": "900"}
"""What slurmdbd needs of MariaDB beyond RDS's defaults (Slurm's accounting guide): the lock
wait for long rollups and purges. The same as the controller's local MariaDB
(roles/slurmdbd/tasks/install.yml), which also turns innodb_snapshot_isolation off: Debian
13's MariaDB 11.8 turns it on, MariaDB 10.11 keeps it off by default."""
# The spec has no instance class or storage size for the database yet.
INSTANCE_CLASS = "db.t4g.small"
STORAGE_GB = 20
MAX_STORAGE_GB = 200
BACKUP_DAYS = 7


def dns_name(host: str) -> tuple[str, str] | None:
    """(zone, record) that make `host` resolve inside the VPC; None for an IP address or
    a bare name (those need no or cannot get a private zone)."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if "." not in host:
        return None
    return host.split(".", 1)[1], host


def db_ingress(port: int, controller_sg_id: pulumi.Input[str]) -> list[aws.ec2.SecurityGroupIngressArgs]:
    return [aws.ec2.SecurityGroupIngressArgs(description="MariaDB from the controller only", protocol="tcp",
                                             from_port=port, to_port=port, security_groups=[controller_sg_id])]


@dataclass(frozen=True)
class DatabaseArgs:
    cluster: str
    """Cluster name: tags and the final snapshot's name."""
    database: DatabaseSpec
    """The spec's accounting.database (kind external: host, port, name, user)."""
    vpc_id: pulumi.Input[str]
    """The cluster's VPC (security group, private zone)."""
    subnet_ids: Sequence[pulumi.Input[str]]
    """Private subnets in at least two zones (RDS requires it)."""
    controller_sg_id: pulumi.Input[str]
    """The only group allowed to connect."""
    password: pulumi.Input[str]
    """The generated password (secret)."""


class Database(pulumi.ComponentResource):
    endpoint: pulumi.Output[str]
    """The RDS address (the spec's host resolves to it)."""

    def __init__(self, name: str, args: DatabaseArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:Database", name, None, opts)
        db = args.database
        group = aws.ec2.SecurityGroup(f"{name}-db", vpc_id=args.vpc_id, description="MariaDB from the controller",
                                      ingress=db_ingress(db.port, args.controller_sg_id), egress=[],
                                      tags=tags(args.cluster, "database", f"{name}-db"), opts=child(self))
        subnets = aws.rds.SubnetGroup(f"{name}-db", subnet_ids=list(args.subnet_ids),
                                      tags=tags(args.cluster, "database"), opts=child(self))
        parameters = aws.rds.ParameterGroup(
            f"{name}-db", family=PARAMETER_FAMILY, description="slurmforge: what slurmdbd needs of MariaDB",
            parameters=[aws.rds.ParameterGroupParameterArgs(name=k, value=v) for k, v in SLURMDBD_PARAMETERS.items()],
            tags=tags(args.cluster, "database"), opts=child(self))
        instance = aws.rds.Instance(
            f"{name}-db", engine="mariadb", engine_version=ENGINE_VERSION, instance_class=INSTANCE_CLASS,
            allocated_storage=STORAGE_GB, max_allocated_storage=MAX_STORAGE_GB, storage_type="gp3",
            storage_encrypted=True, publicly_accessible=False, db_name=db.name, username=db.user,
            password=args.password, port=db.port, db_subnet_group_name=subnets.name,
            vpc_security_group_ids=[group.id], parameter_group_name=parameters.name,
            backup_retention_period=BACKUP_DAYS, copy_tags_to_snapshot=True,
            # `pulumi destroy` keeps the accounting history as a snapshot
            skip_final_snapshot=False, final_snapshot_identifier=f"{args.cluster}-accounting-final",
            tags=tags(args.cluster, "database"), opts=child(self))
        self.endpoint = instance.address
        names = dns_name(db.host or "")
        if names is not None:
            zone = aws.route53.Zone(f"{name}-db-zone", name=names[0], comment="slurmforge: the accounting database",
                                    vpcs=[aws.route53.ZoneVpcArgs(vpc_id=args.vpc_id)], force_destroy=True,
                                    tags=tags(args.cluster, "database"), opts=child(self))
            aws.route53.Record(f"{name}-db-name", zone_id=zone.zone_id, name=names[1], type="CNAME", ttl=60,
                               records=[instance.address], opts=child(self))
        self.register_outputs({"endpoint": self.endpoint})
