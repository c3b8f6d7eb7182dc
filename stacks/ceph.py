"""Ceph storage: the hosts (EC2) and their OSD volumes (encrypted EBS), spread over the
private subnets' zones so one zone failure keeps a replica. Ceph itself (mons, OSDs,
CephFS) is set up by the Ansible roles; the stack only provides machines and disks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from slurmforge.spec.models import Ceph
from slurmforge.spec.nodes import ceph_host_name

from .common import VOLUME_TYPE, child, cloud_config_hostname, instance_metadata, root_volume, tags

CEPH_ROOT_GB = 50


@dataclass(frozen=True)
class CephPlacement:
    name: str
    zone: str
    devices: list[str]


def osd_device(index: int) -> str:
    """EBS device names for OSDs: /dev/xvdba, /dev/xvdbb, ... (up to 26 per host)."""
    return f"/dev/xvdb{chr(ord('a') + index)}"


def ceph_placements(cluster: str, ceph: Ceph, zones: list[str]) -> list[CephPlacement]:
    """Host i goes to zone i mod len(zones), with osds_per_host devices each."""
    return [CephPlacement(ceph_host_name(cluster, i + 1, local=False), zones[i % len(zones)],
                          [osd_device(j) for j in range(ceph.osds_per_host)]) for i in range(ceph.hosts)]


@dataclass(frozen=True)
class CephStorageArgs:
    cluster: str
    """Cluster name: host names and tags."""
    ceph: Ceph
    """The spec's storage.ceph (hosts, OSDs per host and size, instance type)."""
    ami_id: pulumi.Input[str]
    """The golden image."""
    subnet_ids: Mapping[str, pulumi.Input[str]]
    """Private subnet id by zone; hosts are spread over them in this order."""
    security_group_ids: Sequence[pulumi.Input[str]]
    """The cluster group."""
    instance_profile: pulumi.Input[str]
    """The Ceph hosts' instance profile name."""
    key_name: str
    """EC2 key pair for the Ansible rollout (through the login node)."""


class CephStorage(pulumi.ComponentResource):
    hosts: list[dict[str, Any]]
    """name, private_ip, zone and osd_volumes (volume ids) of every host."""

    def __init__(self, name: str, args: CephStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("slurmforge:stacks:CephStorage", name, None, opts)
        placements = ceph_placements(args.cluster, args.ceph, list(args.subnet_ids))
        self.hosts = [self._host(p, args) for p in placements]
        self.register_outputs({"hosts": self.hosts})

    def _host(self, place: CephPlacement, args: CephStorageArgs) -> dict[str, Any]:
        host = aws.ec2.Instance(
            place.name, ami=args.ami_id, instance_type=args.ceph.instance_type,
            subnet_id=args.subnet_ids[place.zone], vpc_security_group_ids=args.security_group_ids,
            iam_instance_profile=args.instance_profile, key_name=args.key_name,
            associate_public_ip_address=False, metadata_options=instance_metadata(),
            root_block_device=root_volume(CEPH_ROOT_GB), user_data=cloud_config_hostname(place.name),
            tags=tags(args.cluster, "ceph", place.name),
            # a new golden image must not replace a storage host: OS updates roll through Ansible
            opts=child(self, ignore_changes=["ami", "userData"]))
        volumes = []
        for j, device in enumerate(place.devices):
            volume = aws.ebs.Volume(
                f"{place.name}-osd-{j + 1}", availability_zone=place.zone, size=args.ceph.osd_size_gb,
                type=VOLUME_TYPE, encrypted=True, tags=tags(args.cluster, "ceph-osd", f"{place.name}-osd-{j + 1}"),
                # losing a volume loses an OSD: keep it when the host is replaced
                opts=child(self))
            aws.ec2.VolumeAttachment(f"{place.name}-osd-{j + 1}", device_name=device, volume_id=volume.id,
                                     instance_id=host.id, opts=child(self))
            volumes.append(volume.id)
        return {"name": place.name, "private_ip": host.private_ip, "zone": place.zone, "osd_volumes": volumes}
