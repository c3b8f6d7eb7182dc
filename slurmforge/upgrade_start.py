"""What `slurmforge upgrade` starts from, per target: the new image (step 1), the fleet that
runs the steps, the plan as the cluster is now.

- local: the node image from the current packages (slurmforge.local.image_cache.ensure_images,
  the one pipeline), the inventory written again with it (the scheduler service's provider
  settings carry the image: the controllers' rollout hands it on, so a dynamic node's next
  power-up boots it);
- AWS: the AMI `pulumi up` baked (the inventory names it); its inputs digest is this
  slurmforge's (slurmforge.image.prepare_inputs: the stack made the AMI from the same inputs),
  its Slurm the release's current package as the primary controller's apt sees it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmforge.bringup import Phases, log_path
from slurmforge.drain import JobPolicy, controller_client
from slurmforge.errors import ProvisionError
from slurmforge.fleet import controller
from slurmforge.image_record import SHORT, record_field
from slurmforge.inventory import read_hosts, read_inventory
from slurmforge.local.podman import Podman
from slurmforge.provider import Machines
from slurmforge.remote.executor import Completed
from slurmforge.remote.node import executor_for
from slurmforge.spec import Cluster
from slurmforge.upgrade.archive import archive_line
from slurmforge.upgrade.fleet import ClusterFleet, TargetImage, aws_machine_image, aws_remake, local_remake
from slurmforge.upgrade.plan import UpgradePlan, make_plan


@dataclass
class Start:
    spec: Cluster
    fleet: ClusterFleet
    plan: UpgradePlan
    archive: str
    """The one line on the new image and Debian's archive (slurmforge.upgrade.archive)."""


def adopt_spec(inventory: Path, spec_path: Path | None, local: bool) -> tuple[Cluster, Path]:
    """The spec the upgrade builds its image from, and its file: the inventory's own, or the
    user's `spec_path`, which may change `images` (a new images.refresh: patch day) and
    nothing else - anything more is `up`'s or `rollout`'s to apply. On AWS the stack bakes the
    AMI from the spec it was given: a spec that differs from the inventory's is for `pulumi up`
    first."""
    from slurmforge.inventory import SPEC_COPY
    from slurmforge.spec import load_spec

    current = load_spec(inventory / SPEC_COPY)
    if spec_path is None:
        return current, inventory / SPEC_COPY
    wanted = load_spec(spec_path)
    if wanted.name != current.name:
        raise ProvisionError(f"{spec_path} is cluster {wanted.name}'s spec, and the inventory {inventory} holds "
                             f"cluster {current.name}: name the inventory of {wanted.name}")
    old, new = current.model_dump(mode="json"), wanted.model_dump(mode="json")
    others = sorted(key for key in old.keys() | new.keys() if key != "images" and old.get(key) != new.get(key))
    if others:
        apply = "sudo slurmforge up --local " + str(spec_path) if local else "slurmforge rollout --inventory DIR"
        raise ProvisionError(f"{spec_path} changes more than images ({', '.join(others)}): `slurmforge upgrade` rolls "
                             f"a new node image and nothing else; apply the rest with `{apply}` first")
    if not local and old != new:
        raise ProvisionError(f"{spec_path} changes images, and on AWS the stack bakes the AMI from its own spec: run "
                             "`pulumi up` with it, then `slurmforge inventory --from-stack-outputs FILE --out "
                             f"{inventory}`, then `slurmforge upgrade --inventory {inventory}`")
    return wanted, spec_path


def local_start(inventory: Path, ui: Phases, policy: JobPolicy, plan_only: bool = False,
                spec_path: Path | None = None) -> Start:
    """`plan_only`: the image is made (the plan names it), the inventory left as it is;
    `spec_path`: a spec with new `images` (adopt_spec), written into the inventory with the
    image unless `plan_only`."""
    from slurmforge.contract import settings_json
    from slurmforge.inventory import JOIN, RENDERED, write_inventory
    from slurmforge.local.image_cache import ensure_images, image_record
    from slurmforge.local.provider import LocalProvider

    spec, source = adopt_spec(inventory, spec_path, local=True)
    hosts = read_hosts(inventory)  # the spec: adopt_spec read it
    log = log_path(spec.name, "upgrade")
    podman = Podman()
    _require_running(podman, spec.name, controller(spec, hosts).name)
    with ui.phase("step 1: the new node image (the one pipeline, current packages)"):
        image = ensure_images(podman, log, os=spec.images.distro(), on_wait=ui.note, on_step=ui.event)
        provider = LocalProvider(spec, image, podman, join_program=inventory / RENDERED / JOIN)
        text = image_record(podman, image)
        if not plan_only:
            write_inventory(spec, source, provider.hosts(), inventory,
                            provider_settings=settings_json(provider.service_settings()))
    target = _target(text, image)
    with ui.phase("the new image and Debian's archive (apt's simulation in a throwaway container)"):
        archive = archive_line(target.digest[:SHORT], lambda script: podman.run(
            ["run", "--rm", "--entrypoint", "sh", image, "-c", script], timeout=ARCHIVE_TIMEOUT))
    client = controller_client(controller(spec, hosts))
    fleet = ClusterFleet(spec, hosts, inventory, client, target, log, ui, policy, local_remake(provider))
    plan = make_plan(spec, hosts, client.nodes(), target.digest, target.slurm, policy, local=True)
    return Start(spec, fleet, plan, archive)


def _require_running(podman: Podman, cluster: str, name: str) -> None:
    """An upgrade rolls a running cluster: a controller whose processes died with the host (a
    restart, a restored machine) is `up`'s to start again, before anything is built."""
    info = podman.container(name)
    if info is None or not info.is_running or info.is_dead:
        state = "does not exist" if info is None else "is not running" + (" (its processes died with the host)"
                                                                          if info.is_dead else "")
        raise ProvisionError(f"cluster {cluster}'s controller {name} {state}: start the cluster with "
                             f"`sudo slurmforge up --local` first, then upgrade it")


def aws_start(inventory: Path, ui: Phases, policy: JobPolicy, plan_only: bool = False,
              spec_path: Path | None = None) -> Start:
    import json

    spec, _ = adopt_spec(inventory, spec_path, local=False)
    hosts = read_hosts(inventory)  # the spec: adopt_spec read it
    log = log_path(spec.name, "upgrade")
    head = controller(spec, hosts)
    node = executor_for(head)
    with ui.phase("step 1: the AMI `pulumi up` baked (its inputs, the release's Slurm)"):
        digest = inputs_digest(spec)
        answer = node.run(["sh", "-c", "apt-get update -q >/dev/null; "
                                       "apt-cache policy slurm-client | sed -n 's/ *Candidate: //p'"], timeout=600)
        slurm = answer.stdout.strip()
        machines, ami = aws_machines(spec, inventory, digest)
    target = _target(json.dumps({"inputs": digest, "slurm": slurm, "base": spec.images.base}), digest)
    client = controller_client(head)
    fleet = ClusterFleet(spec, hosts, inventory, client, target, log, ui, policy, aws_remake(client),
                         aws_machine_image(machines, ami, digest))
    if fleet.host_image(head.name) == digest:  # the primary runs the AMI's packages: ask it
        with ui.phase("the AMI and Debian's archive (apt's simulation on the primary controller)"):
            archive = archive_line(digest[:SHORT], lambda script: _answer(node.run(["sh", "-c", script],
                                                                                   timeout=ARCHIVE_TIMEOUT)))
    else:
        archive = (f"node image {digest[:SHORT]}: Debian's archive is asked once the primary controller runs it "
                   "(apt's simulation there), after this upgrade")
    plan = make_plan(spec, hosts, client.nodes(), target.digest, target.slurm, policy, local=False)
    return Start(spec, fleet, plan, archive)


ARCHIVE_TIMEOUT = 300


def _answer(done: Completed) -> str:
    if not done.ok:
        raise ProvisionError(done.reason())
    return str(done.stdout)


def aws_machines(spec: Cluster, inventory: Path, digest: str) -> tuple[Machines, str]:
    """The pool machines (the scheduler service's provider, with the admin's credentials) and
    the AMI the inventory names - refused in one line unless `pulumi up` baked it from this
    slurmforge's inputs (stacks/image.py names each AMI `<cluster>-node-<inputs digest>-...`):
    an upgrade to it would leave every pool node on another image than its head hosts."""
    from slurmforge.aws.inventory import inventory_ami
    from slurmforge.aws.provider import AwsProvider
    from slurmforge.aws.teardown import provider_settings
    from slurmforge.contract import AwsProviderSettings, read_settings

    ami = inventory_ami(inventory) or ""
    machines = AwsProvider.from_settings(spec, read_settings(AwsProviderSettings, provider_settings(inventory)))
    named = image_name(machines.ec2, ami) if ami else ""
    if digest not in named:
        raise ProvisionError(f"the inventory's AMI {ami or '(none)'} ({named or 'no such image'}) was not baked from "
                             f"this spec's image inputs ({digest}); fix: `pulumi up` (images.refresh set), then "
                             "`slurmforge inventory --from-stack-outputs`, then upgrade")
    return machines, ami


def image_name(ec2: Any, ami: str) -> str:
    """The AMI's name, '' when EC2 knows no such image (InvalidAMIID.NotFound, .Malformed: a
    deregistered or mistyped id)."""
    from botocore.exceptions import ClientError  # type: ignore[import-untyped]

    try:
        found = ec2.describe_images(ImageIds=[ami]).get("Images", [])
    except ClientError as exc:
        if str(exc.response.get("Error", {}).get("Code", "")).startswith("InvalidAMIID."):
            return ""
        raise
    return str(found[0].get("Name", "")) if found else ""


def inputs_digest(spec: Cluster) -> str:
    """The inputs digest of the node image this slurmforge builds for the spec (an AMI's: the
    stack bakes it from these inputs; slurmforge.image.prepare_inputs)."""
    from slurmforge.image import prepare_inputs

    with tempfile.TemporaryDirectory(prefix="slurmforge-inputs-") as tmp:
        return prepare_inputs(Path(tmp) / "inputs", spec.images.distro())


def current_image(inventory: Path) -> str | None:
    """The inputs digest of the image the cluster's hosts should run (what `validate` holds
    each host's RECORD to): local, the node image the inventory's provider settings name
    (`up` and `slurmforge upgrade` write it), as its RECORD says; AWS, the AMI's (inputs_digest,
    as aws_start takes it). None for machines you own (target static: not made from an image)
    and for a local inventory that names no image (its hosts and spec alone)."""

    from slurmforge.contract import LocalProviderSettings, read_settings
    from slurmforge.inventory import read_provider_settings
    from slurmforge.local.image_cache import image_record
    from slurmforge.local.podman import Podman

    spec, _ = read_inventory(inventory)
    if spec.target.kind == "aws":
        return inputs_digest(spec)
    if spec.target.kind != "local":
        return None
    settings = read_provider_settings(inventory)
    if settings is None:
        return None  # an inventory of hosts and spec alone (written by hand, a jump host's): no image named
    image = read_settings(LocalProviderSettings, settings).image
    return _target(image_record(Podman(), image), image).digest


def _target(record_text: str, image: str) -> TargetImage:
    import json

    digest, slurm = record_field(record_text, "inputs"), record_field(record_text, "slurm")
    if digest is None or slurm is None:
        raise ProvisionError(f"the node image {image} has no record of what it holds ({'/usr/share/slurmforge'}"
                             "/image.json): build it again with this slurmforge")
    return TargetImage(digest, slurm, json.loads(record_text))
