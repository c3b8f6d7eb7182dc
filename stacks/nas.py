"""NAS storage: one encrypted EFS file system (home directories, the LMOD tree, Slurm
state), a mount target in every private subnet, reachable over NFS from cluster hosts
only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from slurmforge.spec.models import Nas

from .common import child, tags

NFS = 2049
# The spec has no field for provisioned throughput yet; used only with
# throughput_mode: provisioned.
PROVISIONED_MIBPS = 64


@dataclass(frozen=True)
class NasStorageArgs:
    cluster: str
    """Cluster name: tags."""
    nas: Nas
    """The spec's storage.nas (kind efs, throughput mode)."""
    vpc_id: pulumi.Input[str]
    """The cluster's VPC."""
    subnet_ids: Sequence[pulumi.Input[str]]
    """Private subnets: one mount target each."""
    client_sg_id: pulumi.Input[str]
    """The only group allowed to mount (the cluster group)."""


def nfs_ingress(client_sg_id: pulumi.Input[str]) -> list[aws.ec2.SecurityGroupIngressArgs]:
    return [aws.ec2.SecurityGroupIngressArgs(description="NFS from cluster hosts", protocol="tcp",
                                             from_port=NFS, to_port=NFS, security_groups=[client_sg_id])]


class NasStorage(pulumi.ComponentResource):
    file_system_id: pulumi.Output[str]
    dns_name: pulumi.Output[str]

    def __init__(self, name: str, args: NasStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:NasStorage", name, None, opts)
        group = aws.ec2.SecurityGroup(f"{name}-efs", vpc_id=args.vpc_id, description="EFS: NFS from the cluster",
                                      ingress=nfs_ingress(args.client_sg_id), egress=[],
                                      tags=tags(args.cluster, "nas", f"{name}-efs"), opts=child(self))
        mode = args.nas.throughput_mode
        fs = aws.efs.FileSystem(
            f"{name}-efs", encrypted=True, throughput_mode=mode,
            provisioned_throughput_in_mibps=PROVISIONED_MIBPS if mode == "provisioned" else None,
            # files nobody read for 30 days cost a tenth (and come back on first read)
            lifecycle_policies=[aws.efs.FileSystemLifecyclePolicyArgs(transition_to_ia="AFTER_30_DAYS")],
            tags=tags(args.cluster, "nas", f"{name}-efs"), opts=child(self))
        for i, subnet in enumerate(args.subnet_ids):
            aws.efs.MountTarget(f"{name}-efs-{i + 1}", file_system_id=fs.id, subnet_id=subnet,
                                security_groups=[group.id], opts=child(self))
        self.file_system_id, self.dns_name = fs.id, fs.dns_name
        self.register_outputs({"file_system_id": fs.id, "dns_name": fs.dns_name})
