"""The stand-in for Debian's official AMI (the golden image's parent): the local
debootstrap base (slurmforge.local.image_cache) with what Debian's cloud images carry and the AWS
path uses - Debian's cloud-init, curl, the SSH server, sudo, the `admin` user made from the
launch's key pair - and cloud-init told where it is.

The base has no cloud-init (the local target's nodes join through a systemd unit); an EC2
instance runs its user data with cloud-init, so the rehearsal's machines do too: Debian's
own package, its EC2 datasource reading the metadata service at EC2's address (the
machines reach the stand-in there). What differs from an EC2 boot, because the machine is
a container:

- cloud-init identifies EC2 by its hypervisor's UUID (/sys/hypervisor/uuid) or the DMI
  tables; a container has neither (and cloud-init reads no DMI in one), and on a platform
  it does not know, cloud-init's EC2 datasource speaks IMDSv1 only. `EC2_PLATFORM` says
  what EC2's hardware would - the platform is AWS - in a module cloud-init finds before
  its own DataSourceEc2 (it looks for DataSource modules at the top level first); the rest
  is cloud-init's own datasource, IMDSv2 tokens included;
- the datasource is named (`datasource_list`), so cloud-init's generator enables it;
- cloud-init writes no network configuration (podman's is the machine's) and installs no
  network hotplug (the machine has no udev: the host's owns the devices);
- apt keeps the base's mirror (this machine's, as the local build), where Debian's AMI has
  Debian's CDN.
"""

from __future__ import annotations

import hashlib
import logging
import shlex

from slurmforge.local.image_cache import base_tag, build_base, prune_older
from slurmforge.local.podman import Podman
from tests.harness.rehearsal.imds import ADDRESS
from tests.harness.rehearsal.machines import PREFIX

log = logging.getLogger(__name__)

PACKAGES = ("cloud-init", "curl", "openssh-server", "sudo")
CLOUD_CONFIG_FILE = "/etc/cloud/cloud.cfg.d/90-slurmforge-rehearsal.cfg"
CLOUD_CONFIG = f"""\
# slurmforge's AWS rehearsal: the EC2 datasource, at EC2's address
datasource_list: [Ec2, None]
datasource:
  Ec2:
    metadata_urls: ["http://{ADDRESS}"]
    max_wait: 120
    timeout: 10
# the machine is a container: its network is podman's, and it has no udev (the host's owns
# the devices), so no network hotplug either
network: {{config: disabled}}
updates: {{network: {{when: [boot-new-instance]}}}}
# the base's Debian mirror (this machine's), as the local image build uses it
apt: {{preserve_sources_list: true}}
# Debian's AMIs log in as `admin` (their cloud.cfg.d), with the launch's key pair from IMDS
system_info:
  default_user:
    name: admin
    lock_passwd: true
    gecos: Debian
    groups: [adm, sudo]
    sudo: ["ALL=(ALL) NOPASSWD:ALL"]
    shell: /bin/bash
"""
EC2_PLATFORM_MODULE = "DataSourceEc2.py"
"""In the machine's Python's site-packages: found before cloudinit.sources.DataSourceEc2."""
EC2_PLATFORM = '''\
"""slurmforge's AWS rehearsal: cloud-init's EC2 datasource on a machine that is a container,
which has no hypervisor UUID or DMI tables to show it is on EC2. The platform is AWS, as
EC2's hardware would say; everything else is cloud-init's own DataSourceEc2."""
from cloudinit import sources
from cloudinit.sources import DataSourceEc2 as ec2


class DataSourceEc2(ec2.DataSourceEc2):
    def _get_cloud_name(self):
        return ec2.CloudNames.AWS


datasources = [(DataSourceEc2, (sources.DEP_FILESYSTEM, sources.DEP_NETWORK))]


def get_datasource_list(depends):
    return sources.list_from_depends(depends, datasources)
'''
BUILD_TIMEOUT = 1200


def parent_tag(base: str) -> str:
    h = hashlib.sha256()
    for part in (base, " ".join(PACKAGES), CLOUD_CONFIG, EC2_PLATFORM):
        h.update(hashlib.sha256(part.encode()).digest())
    return f"localhost/{PREFIX}-debian:{h.hexdigest()[:12]}"


def ensure_parent(podman: Podman) -> str:
    """The parent image's tag, built when missing (the base too: debootstrap)."""
    base = base_tag()
    tag = parent_tag(base)
    if podman.image_exists(tag):
        return tag
    if not podman.image_exists(base):
        log.info("building base image %s (debootstrap)", base)
        build_base(podman, base)
    log.info("building the Debian AMI stand-in %s", tag)
    builder = f"{PREFIX}-parent-{tag.rsplit(':', 1)[1]}"
    script = (f"set -e; apt-get update -q; DEBIAN_FRONTEND=noninteractive apt-get install -y -q {' '.join(PACKAGES)}; "
              f"printf %s {shlex.quote(CLOUD_CONFIG)} > {CLOUD_CONFIG_FILE}; "
              "site=$(python3 -c 'import site; print(site.getsitepackages()[0])'); mkdir -p \"$site\"; "
              f"printf %s {shlex.quote(EC2_PLATFORM)} > \"$site\"/{EC2_PLATFORM_MODULE}; "
              "apt-get clean; rm -rf /var/lib/apt/lists/*")
    podman.remove_container(builder)
    try:
        podman.run(["run", "--name", builder, base, "bash", "-c", script], timeout=BUILD_TIMEOUT)
        podman.run(["commit", "--change", "CMD=/sbin/init", builder, tag])
    finally:
        podman.remove_container(builder)
    prune_older(podman, tag)
    return tag
