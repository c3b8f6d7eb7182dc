"""Wire the components for one spec and name the stack outputs.

`build_cluster` is what `__main__` runs and what the tests run under Pulumi's mocks:
it takes the validated spec (never config or environment) and returns the outputs to
export, keyed as slurmforge.aws.inventory expects them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from slurmforge.aws import inventory as out
from slurmforge.errors import Problem, SpecError
from slurmforge.hosts import controller_name, controller_names, login_subnets
from slurmforge.image_variant import ImageVariant, image_variants
from slurmforge.node.program import JoinSettings, nas_source, render_join
from slurmforge.spec.models import AwsTarget, Cluster

from .ceph import CephStorage, CephStorageArgs
from .cluster_secrets import Secrets, SecretsArgs
from .common import CLUSTER_TAG, SSH_USER
from .database import Database, DatabaseArgs
from .head import HeadNodes, HeadNodesArgs
from .iam import Iam, IamArgs, NodeKind, SchedulerAccess, SchedulerAccessArgs
from .image import Image, ImageArgs
from .nas import NasStorage, NasStorageArgs
from .network import Network, NetworkArgs
from .pool import NodePool, PoolArgs
from .spot_events import SpotEvents, SpotEventsArgs


def aws_target(spec: Cluster) -> AwsTarget:
    if not isinstance(spec.target, AwsTarget):
        raise SpecError([Problem("target.kind", "the Pulumi program builds AWS clusters only",
                                 "use target kind: aws (local and static targets need no stack)",
                                 spec.target.kind)])
    return spec.target


def nas_paths(spec: Cluster) -> dict[str, str]:
    """Directory on the NAS for each shared mount: its name (/home, /software,
    /slurm_state), as the storage_client role mounts them."""
    return {key: f"/{key}" for key in spec.storage.nas.mounts.model_dump()}


def join_settings(spec: Cluster, target: AwsTarget, controller_ips: Sequence[str], munge_key_arn: str,
                  efs_dns: str | None) -> JoinSettings:
    """What the pools' join program needs beyond the spec: the node name from the instance's
    tag, the munge key from Secrets Manager, the NAS from EFS or the spec's NFS server."""
    return JoinSettings(target="aws", controllers=tuple(zip(controller_names(spec), controller_ips, strict=True)),
                        identity="aws-tag", secrets="aws", region=target.region, munge_key_arn=munge_key_arn,
                        nas_source=nas_source(spec, efs_dns))


@dataclass(frozen=True)
class Foundation:
    """What every other component builds on."""

    net: Network
    secrets: Secrets
    iam: Iam
    images: dict[ImageVariant, Image]
    """One golden image per variant the cluster's machines boot (slurmforge.image_variant)."""

    @property
    def image(self) -> Image:
        """The base variant: head nodes, Ceph hosts, CPU pools."""
        return self.images[ImageVariant.BASE]


@dataclass(frozen=True)
class Parts:
    """Every component of one cluster (what the outputs are read from)."""

    base: Foundation
    head: HeadNodes
    spot: SpotEvents
    pools: dict[str, NodePool]
    nas: NasStorage | None
    database: Database | None
    ceph: CephStorage | None


def build_cluster(spec: Cluster, source: str) -> dict[str, Any]:
    """Every resource of the cluster; returns the stack outputs. `source` names the spec
    file in what is rendered from it (the pools' join program)."""
    target = aws_target(spec)
    provider = aws.Provider(f"{spec.name}-aws", region=target.region, default_tags=aws.ProviderDefaultTagsArgs(
        tags={**target.tags, CLUSTER_TAG: spec.name}))
    opts = pulumi.ResourceOptions(providers=[provider])
    base = _foundation(spec, target, opts)
    nas = _nas(spec, base, opts)
    head = _head_nodes(spec, target, base, opts)
    database = _database(spec, base, opts)
    ceph = _ceph(spec, target, base, opts)
    spot = SpotEvents(spec.name, SpotEventsArgs(spec.name), opts)
    pools = _pools(spec, base, _join_program(spec, target, base, head, nas, source), opts)
    SchedulerAccess(spec.name, SchedulerAccessArgs(
        cluster=spec.name, region=target.region, controller_role_name=base.iam.role_names[NodeKind.CONTROLLER],
        compute_role_arn=base.iam.role_arns[NodeKind.COMPUTE],
        launch_template_arns=[p.launch_template_arn for p in pools.values()], queue_arn=spot.queue_arn), opts)
    return stack_outputs(spec, target, Parts(base, head, spot, pools, nas, database, ceph))


def _foundation(spec: Cluster, target: AwsTarget, opts: pulumi.ResourceOptions) -> Foundation:
    name = spec.name
    net = Network(name, NetworkArgs(name, spec.network, spec.rest_api.port), opts)
    secrets = Secrets(name, SecretsArgs(name), opts)
    iam = Iam(name, IamArgs(name, target.region, secrets.munge_key_arn, secrets.db_password_arn), opts)
    first_private = next(iter(net.private_subnet_ids.values()))
    images = {variant: Image(name if variant is ImageVariant.BASE else f"{name}-image-{variant}",
                             ImageArgs(name, target.region, spec.images.ami, net.vpc_id, first_private,
                                       spec.images.distro(), variant),
                             opts)
              for variant in image_variants(spec)}
    return Foundation(net, secrets, iam, images)


def _nas(spec: Cluster, base: Foundation, opts: pulumi.ResourceOptions) -> NasStorage | None:
    if spec.storage.nas.kind != "efs":
        return None
    net = base.net
    return NasStorage(spec.name, NasStorageArgs(spec.name, spec.storage.nas, net.vpc_id,
                                                list(net.private_subnet_ids.values()), net.cluster_sg_id), opts)


def _head_nodes(spec: Cluster, target: AwsTarget, base: Foundation, opts: pulumi.ResourceOptions) -> HeadNodes:
    net, iam = base.net, base.iam
    return HeadNodes(spec.name, HeadNodesArgs(
        cluster=spec.name, controller=spec.head.controller, login=spec.head.login,
        controller_names=controller_names(spec), ami_id=base.image.ami_id,
        login_subnet_ids={name: net.public_subnet_ids[i] for name, i in login_subnets(spec).items()},
        private_subnet_ids=list(net.private_subnet_ids.values()),
        controller_sg_ids=[net.cluster_sg_id, net.controller_sg_id], login_sg_ids=[net.cluster_sg_id, net.login_sg_id],
        controller_profile=iam.profile_names[NodeKind.CONTROLLER], login_profile=iam.profile_names[NodeKind.LOGIN],
        key_name=target.key_name), opts)


def _database(spec: Cluster, base: Foundation, opts: pulumi.ResourceOptions) -> Database | None:
    """RDS only for an external database; a local one is MariaDB on the controller."""
    db = spec.accounting.database
    if not spec.accounting.enabled or db.kind != "external":
        return None
    net = base.net
    return Database(spec.name, DatabaseArgs(spec.name, db, net.vpc_id, list(net.private_subnet_ids.values()),
                                            net.controller_sg_id, base.secrets.db_password), opts)


def _ceph(spec: Cluster, target: AwsTarget, base: Foundation, opts: pulumi.ResourceOptions) -> CephStorage | None:
    if spec.storage.ceph is None:
        return None
    net = base.net
    return CephStorage(f"{spec.name}-ceph", CephStorageArgs(
        spec.name, spec.storage.ceph, base.image.ami_id, net.private_subnet_ids, [net.cluster_sg_id],
        base.iam.profile_names[NodeKind.CEPH], target.key_name), opts)


def _join_program(spec: Cluster, target: AwsTarget, base: Foundation, head: HeadNodes, nas: NasStorage | None,
                  source: str) -> pulumi.Output[str]:
    return pulumi.Output.all(pulumi.Output.all(*head.controller_ips), base.secrets.munge_key_arn,
                             nas.dns_name if nas else None).apply(
        lambda v: render_join(spec, join_settings(spec, target, v[0], v[1], v[2]), source))


def _pools(spec: Cluster, base: Foundation, join_program: pulumi.Output[str],
           opts: pulumi.ResourceOptions) -> dict[str, NodePool]:
    return {pool.name: NodePool(f"{spec.name}-{pool.name}", PoolArgs(
        cluster=spec.name, pool=pool, amis={variant: image.ami_id for variant, image in base.images.items()},
        security_group_ids=[base.net.cluster_sg_id], instance_profile_arn=base.iam.profile_arns[NodeKind.COMPUTE],
        join_program=join_program), opts) for pool in spec.pools}


def stack_outputs(spec: Cluster, target: AwsTarget, parts: Parts) -> dict[str, Any]:
    """The outputs slurmforge.aws.inventory reads; secret values only as secret outputs."""
    nas, db, pools, secrets = parts.nas, spec.accounting.database, parts.pools, parts.base.secrets
    return {
        out.OUT_CLUSTER: spec.name,
        out.OUT_REGION: target.region,
        out.OUT_CONTROLLER: controller_name(spec),
        out.OUT_SSH_USER: SSH_USER,
        out.OUT_HOSTS: parts.head.hosts,
        out.OUT_CEPH_HOSTS: parts.ceph.hosts if parts.ceph else [],
        out.OUT_LAUNCH_TEMPLATES: {n: p.launch_template_id for n, p in pools.items()},
        out.OUT_SPOT_QUEUE_URL: parts.spot.queue_url,
        out.OUT_SUBNETS: dict(parts.base.net.private_subnet_ids),
        out.OUT_SECRET_ARNS: {"munge_key": secrets.munge_key_arn, "db_password": secrets.db_password_arn,
                              "jwt_key": secrets.jwt_key_arn},
        out.OUT_EFS: {"id": nas.file_system_id, "dns_name": nas.dns_name, "paths": nas_paths(spec)} if nas else None,
        out.OUT_DATABASE: {"kind": db.kind, "host": db.host,
                           "endpoint": parts.database.endpoint if parts.database else None},
        out.OUT_AMI: parts.base.image.ami_id,
        out.OUT_MUNGE_KEY: secrets.munge_key,
        out.OUT_DB_PASSWORD: secrets.db_password,
    }
