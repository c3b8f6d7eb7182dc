"""Every EC2 instance of a moto server as a machine on this box: a podman container that
boots systemd from the podman image its AMI maps to, as the local target's nodes do.

`Machines` watches the moto server (`step`, every `poll` seconds in a thread):

- a new instance (pending/running) whose AMI is in `images` -> a container named
  `sf-rehearsal-<instance id>` on the podman network of the instance's subnet (same CIDR,
  made on first use), with the instance's private address and MAC, privileged, systemd as
  init. Before its init starts (`podman init`, then `podman start`), its own network
  namespace gets one DNAT rule: TCP to 169.254.169.254:80 goes to the metadata service
  stand-in (`imds.Imds`) on this machine - the source address stays the instance's, which
  is how the service knows which instance asks. Nothing in the image knows about it: the
  instance's cloud-init finds IMDS where EC2 has it;
- the instance stopped or terminated in moto -> the container stopped or removed; started
  again -> the container starts again (with its DNAT rule again);
- the machine powers itself off (the container exits) -> the instance stopped, or
  terminated when its InstanceInitiatedShutdownBehavior says so, as EC2 does;
- CreateImage in moto -> the instance's container committed as the new AMI's podman image
  (moto's own record of the AMI's source instance: /moto-api/data.json);
- an instance with a public address (an Elastic IP associated) -> this machine reaches it
  there: one DNAT rule in this machine's nat OUTPUT chain from the public address to the
  instance's private one, EC2's one-to-one NAT for the traffic of this machine (the admin's
  side of the rehearsal); removed with the machine or the address.

Three things every machine gets from outside its image, as an EC2 instance gets them from
outside its AMI:

- AWS's endpoints: a systemd drop-in (DefaultEnvironment, read-only) gives every service
  `AWS_ENDPOINT_URL` = the moto server, which botocore and the AWS CLI honour; on EC2
  nothing is set and the regional endpoints answer;
- EFS: this kernel has no NFS client. Every EFS file system of the stand-in is a directory
  on this machine (`efs_root/<fs id>`, made when moto has it, removed with it), mounted
  into every machine at EFS_MOUNT, and a helper (EFS_HELPER) is bind-mounted over the
  image's /usr/sbin/mount.nfs4 (where the image has one: not on Debian's AMI, the build
  instance, whose dpkg could not replace a file under a mount): `mount -t nfs4
  <fs id>.efs.<region>.amazonaws.com:/path dir` - the join program's and the fstab's lines,
  unchanged - bind-mounts that file system's path, and fails as EFS does when the path is
  not there;
- its instance type's memory, as slurmd measures it (memory.py): the box's C library would
  answer the box's 24 GiB to every machine.

An instance whose AMI maps to no image stays without a machine (logged once).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmforge.errors import ProvisionError
from slurmforge.local.container import INIT
from slurmforge.local.podman import ContainerInfo, Podman
from tests.harness.rehearsal.imds import ADDRESS as IMDS_ADDRESS
from tests.harness.rehearsal.memory import build_shim, machine_mounts, memtotal_kib, type_memory_mib
from tests.harness.rehearsal.routes import cut_off_rules, lift_rules, no_way_out

log = logging.getLogger(__name__)

PREFIX = "sf-rehearsal"
"""Containers, networks and images of the rehearsal are named so."""
LABEL = "tests.harness.rehearsal"
"""On every container and network the rehearsal makes: the stand-in's id."""
INSTANCE_LABEL = "tests.harness.rehearsal.instance"
AMI_REPOSITORY = f"localhost/{PREFIX}-ami"
"""An AMI made by CreateImage: <AMI_REPOSITORY>:<ami id>."""
EFS_MOUNT = "/var/lib/slurmforge-rehearsal-efs"
"""Where a machine sees the stand-in's EFS file systems (one directory each)."""
EFS_HELPER = f"""#!/bin/sh
# slurmforge's AWS rehearsal: mount.nfs4 for a kernel without NFS. An EFS path
# (<fs id>.efs.<region>.amazonaws.com:/path) is bind-mounted from the stand-in's copy of the
# file system under {EFS_MOUNT}; a path the file system lacks fails as EFS's server does.
set -eu
spec=$1 dir=$2
host=${{spec%%:*}} path=${{spec#*:}}
fs=${{host%%.*}}
root={EFS_MOUNT}/$fs
if [ ! -d "$root" ]; then echo "mount.nfs4: Failed to resolve server $host: Name or service not known" >&2; exit 32; fi
if [ ! -d "$root$path" ]; then
    echo "mount.nfs4: mounting $spec failed, reason given by server: No such file or directory" >&2; exit 32
fi
exec mount --bind "$root$path" "$dir"
"""
SYSTEMD_DROP_IN = "/etc/systemd/system.conf.d/90-slurmforge-rehearsal.conf"
NFS_CLIENT = "/usr/sbin/mount.nfs4"
"""nfs-common's mount helper (/sbin is /usr/sbin on Debian 13)."""
GONE = ("shutting-down", "terminated")
DOWN = ("stopping", "stopped")


@dataclass
class Machine:
    instance_id: str
    container: str
    state: str
    """The instance's state the machine was last brought in line with."""


def imds_rule(imds_host: str, imds_port: int) -> list[str]:
    """The iptables rule (nat OUTPUT) that sends a machine's IMDS traffic to the stand-in."""
    return ["-t", "nat", "-A", "OUTPUT", "-d", f"{IMDS_ADDRESS}/32", "-p", "tcp", "--dport", "80",
            "-j", "DNAT", "--to-destination", f"{imds_host}:{imds_port}"]


class Machines:
    def __init__(self, session: Any, moto_url: str, imds: tuple[str, int], images: dict[str, str] | None = None,
                 podman: Podman | None = None, poll: float = 1.0, ident: str = "", workdir: Path | None = None) -> None:
        self.ec2, self.efs = session.client("ec2"), session.client("efs")
        self.moto_url, self.imds, self.poll = moto_url, imds, poll
        self.images: dict[str, str] = dict(images or {})
        """AMI id -> the podman image a machine from it boots."""
        self.podman = podman or Podman()
        self.ident = ident or moto_url.rsplit(":", 1)[-1]
        self.machines: dict[str, Machine] = {}
        self.networks: set[str] = set()
        self.committed: list[str] = []
        self.nfs_clients: dict[str, bool] = {}
        """image -> it has an NFS client (the EFS helper goes over it)"""
        self.vpcs: set[str] = set()
        """VPC CIDRs with a no-masquerade rule on this machine"""
        self.public: dict[str, tuple[str, str]] = {}
        """instance id -> (public address, private address) with a rule on this machine"""
        self.foreign: set[str] = set()
        """AMIs made from no machine of ours (registered ones: `images` maps them or not)."""
        self.imageless: set[str] = set()
        """Instances whose AMI maps to no image (logged once)."""
        self.cut_off: dict[str, str] = {}
        """instance id -> its container, while its subnet has no way out (routes.py)"""
        self.events: list[tuple[float, str, str]] = []
        """(time.monotonic(), instance id, what happened)"""
        self.errors: list[str] = []
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"{PREFIX}-"))
        """This machine's side of the machines: the EFS root, the helper, the drop-in."""
        self.efs_root = self.workdir / "efs"
        self.efs_root.mkdir(parents=True, exist_ok=True)
        (self.workdir / "mount.nfs4").write_text(EFS_HELPER)
        (self.workdir / "mount.nfs4").chmod(0o755)
        (self.workdir / "aws.conf").write_text(f"[Manager]\nDefaultEnvironment=AWS_ENDPOINT_URL={moto_url}\n")
        build_shim(self.workdir)
        self.memory: dict[str, int] = {}
        """instance type -> its machines' memory in KiB (memory.py)"""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="machines")

    # ------------------------------------------------------------------ running

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self.step()
            except Exception as e:  # the next step tries again; the rehearsal reports it
                log.exception("machines: step failed")
                self.errors.append(str(e))

    def close(self) -> None:
        """Stop watching; remove every machine, network and AMI image tag this made (an
        image another tag holds stays)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for instance_id in list(self.public):
            self._unpublish(instance_id)
        for machine in self.machines.values():
            self.podman.remove_container(machine.container)
        self.machines.clear()
        for network in sorted(self.networks):
            self.podman.run(["network", "rm", "-f", network], check=False)
        self.networks.clear()
        for vpc in self.vpcs:
            self._vpc_rule("-D", vpc)
        self.vpcs.clear()
        for tag in self.committed:
            self.podman.remove_image(tag)
        self.committed.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def event(self, instance_id: str, what: str) -> None:
        log.info("%s: %s", instance_id, what)
        self.events.append((time.monotonic(), instance_id, what))

    def wait(self, what: str, check: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if self.errors:
                raise ProvisionError(f"the rehearsal's machines: {self.errors[-1]}")
            if time.monotonic() > deadline:
                raise ProvisionError(f"the rehearsal: {what} not after {int(timeout)} s")
            time.sleep(0.2)

    # ------------------------------------------------------------------ one step

    def step(self) -> None:
        """Bring every machine in line with moto. Instances are listed before images: an AMI
        made after the listing and its instance terminated at once are seen in this order
        (committed first, removed next)."""
        instances = [i for page in self.ec2.get_paginator("describe_instances").paginate()
                     for r in page["Reservations"] for i in r["Instances"]]
        amis = [str(i["ImageId"]) for i in self.ec2.describe_images(Owners=["self"])["Images"]]
        containers = {c.name: c for c in self.podman.containers(f"{LABEL}={self.ident}")}
        new = [ami for ami in amis if ami not in self.images and ami not in self.foreign]
        if new:
            self._commit(new)
        self._file_systems()
        for instance in instances:
            self._sync(instance, containers)
        self._routes_out()

    def _sync(self, instance: dict[str, Any], containers: dict[str, ContainerInfo]) -> None:
        instance_id, state = str(instance["InstanceId"]), str(instance["State"]["Name"])
        public = instance.get("PublicIpAddress") if state in ("pending", "running") else None
        published = self.public.get(instance_id)
        if published and (public is None or published[0] != public):
            self._unpublish(instance_id)
        if public and instance_id not in self.public:
            self._publish(instance_id, str(public), str(instance["PrivateIpAddress"]))
        machine = self.machines.get(instance_id)
        if machine is None:
            if state in ("pending", "running"):
                self._boot(instance)
            return
        container = containers.get(machine.container)
        running = container is not None and container.state == "running"
        if state in GONE:
            self.podman.remove_container(machine.container)
            del self.machines[instance_id]
            self.event(instance_id, "machine removed")
            return
        if state in DOWN and running:
            self.podman.run(["stop", "-t", "30", machine.container])
            self.event(instance_id, "machine stopped")
        elif state in ("pending", "running") and machine.state in DOWN:
            self._power_on(instance_id, machine.container)
        elif state in ("pending", "running") and not running:
            behaviour = self.ec2.describe_instance_attribute(
                InstanceId=instance_id, Attribute="instanceInitiatedShutdownBehavior",
            )["InstanceInitiatedShutdownBehavior"]["Value"]
            if behaviour == "terminate":
                self.ec2.terminate_instances(InstanceIds=[instance_id])
            else:
                self.ec2.stop_instances(InstanceIds=[instance_id])
            self.event(instance_id, f"powered off: instance {'terminated' if behaviour == 'terminate' else 'stopped'}")
            state = "stopped"
        machine.state = state

    def _boot(self, instance: dict[str, Any]) -> None:
        instance_id, ami = str(instance["InstanceId"]), str(instance["ImageId"])
        image = self.images.get(ami)
        if image is None:
            if instance_id not in self.imageless:
                self.imageless.add(instance_id)
                log.warning("%s: AMI %s maps to no image here: no machine", instance_id, ami)
            return
        address = str(instance["PrivateIpAddress"])
        hostname = str(instance.get("PrivateDnsName") or f"ip-{address.replace('.', '-')}").split(".")[0]
        mac = str(instance["NetworkInterfaces"][0]["MacAddress"])
        name = f"{PREFIX}-{instance_id}"
        network = self._network(str(instance["SubnetId"]))
        self.podman.remove_container(name)
        self.podman.run(["create", "--name", name, "--hostname", hostname, "--network", network, "--ip", address,
                         "--mac-address", mac, "--systemd=always", "--cgroupns=host", "--privileged",
                         "-v", f"{self.efs_root}:{EFS_MOUNT}", *self._nfs_client(image),
                         "-v", f"{self.workdir / 'aws.conf'}:{SYSTEMD_DROP_IN}:ro",
                         *machine_mounts(self.workdir, instance_id, self._memory(str(instance["InstanceType"]))),
                         "--label", f"{LABEL}={self.ident}", "--label", f"{INSTANCE_LABEL}={instance_id}",
                         image, "sh", "-c", INIT])
        self._power_on(instance_id, name)
        self.machines[instance_id] = Machine(instance_id, name, "running")  # once its init runs

    def _memory(self, instance_type: str) -> int:
        if instance_type not in self.memory:
            self.memory[instance_type] = memtotal_kib(type_memory_mib(self.ec2, instance_type))
        return self.memory[instance_type]

    def _power_on(self, instance_id: str, container: str) -> None:
        """Network namespace first (`podman init`), the IMDS rule in it, then init."""
        self.podman.run(["init", container])
        pid = self.podman.run(["inspect", "--format", "{{.State.Pid}}", container]).strip()
        rule = subprocess.run(["nsenter", "-t", pid, "-n", "iptables", *imds_rule(*self.imds)],
                              capture_output=True, text=True)
        if rule.returncode != 0:
            raise ProvisionError(f"{instance_id}: the IMDS rule: {rule.stderr.strip()}")
        self._cut_off_unless_routed(instance_id, container, pid)
        self.podman.run(["start", container])
        self.event(instance_id, "machine booting")

    def _netns_iptables(self, pid: str, rules: list[list[str]]) -> None:
        for argv in rules:
            done = subprocess.run(["nsenter", "-t", pid, "-n", "iptables", "-w", *argv], capture_output=True, text=True)
            if done.returncode != 0:
                raise ProvisionError(f"iptables {' '.join(argv)} in a machine: {done.stderr.strip()}")

    def _cut_off_unless_routed(self, instance_id: str, container: str, pid: str) -> None:
        """A machine whose subnet has no way out yet reaches only its VPC and IMDS (routes.py)."""
        (reservation,) = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        subnet = str(reservation["Instances"][0]["SubnetId"])
        why = no_way_out(self.ec2, subnet)
        if why is None:
            return
        vpc = self.ec2.describe_subnets(SubnetIds=[subnet])["Subnets"][0]["VpcId"]
        cidr = str(self.ec2.describe_vpcs(VpcIds=[vpc])["Vpcs"][0]["CidrBlock"])
        self._netns_iptables(pid, cut_off_rules(cidr))
        self.cut_off[instance_id] = container
        self.event(instance_id, f"no way out: {why}")

    def _routes_out(self) -> None:
        """Lift the cut-off of every machine whose subnet got its route out."""
        for instance_id, container in list(self.cut_off.items()):
            found = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
            instance = found[0]["Instances"][0] if found else None
            if instance is None or instance["State"]["Name"] not in ("pending", "running"):
                del self.cut_off[instance_id]  # a new power-on judges again
                continue
            if no_way_out(self.ec2, str(instance["SubnetId"])) is None:
                pid = self.podman.run(["inspect", "--format", "{{.State.Pid}}", container]).strip()
                self._netns_iptables(pid, lift_rules())
                del self.cut_off[instance_id]
                self.event(instance_id, "route out: the subnet's route exists now")

    def _file_systems(self) -> None:
        """A directory for each EFS file system moto has; none for one it no longer has."""
        have = {str(f["FileSystemId"]) for f in self.efs.describe_file_systems()["FileSystems"]}
        for fs in have - {p.name for p in self.efs_root.iterdir()}:
            (self.efs_root / fs).mkdir()
        for gone in {p.name for p in self.efs_root.iterdir()} - have:
            shutil.rmtree(self.efs_root / gone, ignore_errors=True)

    def _nfs_client(self, image: str) -> list[str]:
        """The helper over the image's NFS client (nfs-common's mount.nfs4), where it has
        one: a machine whose image has none - Debian's AMI, the build instance, which
        installs it - gets nothing there (dpkg cannot replace a file under a mount)."""
        if image not in self.nfs_clients:
            found = self.podman.run(["run", "--rm", "--network=none", image, "sh", "-c",
                                     f"test -e {NFS_CLIENT} && echo yes"], check=False)
            self.nfs_clients[image] = found.strip() == "yes"
        return ["-v", f"{self.workdir / 'mount.nfs4'}:{NFS_CLIENT}:ro"] if self.nfs_clients[image] else []

    def _publish(self, instance_id: str, public: str, private: str) -> None:
        self._nat("-A", public, private)
        self.public[instance_id] = (public, private)
        self.event(instance_id, f"public address {public}")

    def _unpublish(self, instance_id: str) -> None:
        public, private = self.public.pop(instance_id)
        self._nat("-D", public, private)
        self.event(instance_id, f"public address {public} gone")

    @staticmethod
    def _vpc_rule(action: str, vpc: str) -> None:
        argv = ["iptables", "-w", "-t", "nat", action, "POSTROUTING", *(["1"] if action == "-I" else []),
                "-s", vpc, "-d", vpc, "-j", "RETURN"]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0 and action == "-I":
            raise ProvisionError(f"the VPC {vpc}'s routing: {done.stderr.strip()}")

    @staticmethod
    def _nat(action: str, public: str, private: str) -> None:
        done = subprocess.run(["iptables", "-w", "-t", "nat", action, "OUTPUT", "-d", f"{public}/32", "-j", "DNAT",
                               "--to-destination", private], capture_output=True, text=True)
        if done.returncode != 0 and action == "-A":
            raise ProvisionError(f"the public address {public}: {done.stderr.strip()}")

    def _network(self, subnet_id: str) -> str:
        """The podman network of a subnet: its CIDR, the gateway at its first address (the
        VPC router's on AWS; moto hands out addresses from the fourth). Traffic between
        two subnets of a VPC goes through this machine; podman would masquerade it as the
        gateway's (a reply to the sender's own address - slurmstepd to srun - refused), where
        the VPC's router leaves the source alone: one rule per VPC in this machine's nat
        POSTROUTING keeps it."""
        name = f"{PREFIX}-{subnet_id}"
        if name not in self.networks:
            subnet = self.ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]
            cidr = subnet["CidrBlock"]
            vpc = self.ec2.describe_vpcs(VpcIds=[subnet["VpcId"]])["Vpcs"][0]["CidrBlock"]
            if vpc not in self.vpcs:
                self._vpc_rule("-I", vpc)
                self.vpcs.add(vpc)
            gateway = str(next(ipaddress.ip_network(cidr).hosts()))
            if not self.podman.network_exists(name):
                self.podman.run(["network", "create", "--subnet", cidr, "--gateway", gateway,
                                 "--label", f"{LABEL}={self.ident}", name])
            self.networks.add(name)
        return name

    def _commit(self, amis: list[str]) -> None:
        """The containers of the instances these AMIs were made from, committed as their
        images."""
        with urllib.request.urlopen(f"{self.moto_url}/moto-api/data.json", timeout=60) as response:
            sources = {str(a["id"]): a.get("instance_id") for a in json.load(response)["ec2"].get("Ami", [])}
        for ami in amis:
            machine = self.machines.get(str(sources.get(ami)))
            if machine is None:
                self.foreign.add(ami)
                continue
            tag = f"{AMI_REPOSITORY}:{ami}"
            self.podman.run(["commit", "--change", "CMD=/sbin/init", machine.container, tag], timeout=1800)
            self.committed.append(tag)
            self.images[ami] = tag
            self.event(machine.instance_id, f"committed as {ami} ({tag})")
