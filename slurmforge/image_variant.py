"""Image variants: which image a node boots, and what the image playbook needs to build it.

- `base`: every node (controller, login, Ceph host, CPU pools); what the local target
  builds and runs, GPU pools included (their GPUs are fake device files there).
- `gpu`: the base plus the NVIDIA driver from Debian's non-free packages, its kernel module
  built by DKMS for the cloud kernel the image boots, and the unit that makes the device
  files gres.conf names (roles/gpu/tasks/install.yml). What AWS pools with NVIDIA GPUs boot.

The image playbook (playbooks/image.yml) builds a variant when run with `variant_vars`
on top of `Distro.image_vars()`. The AWS stack bakes one AMI per variant in
`image_variants(spec)` and gives each pool's launch template the AMI of
`pool_image_variant(pool)` (stacks/pool.py); a pinned `images.ami` is every variant.
"""

from __future__ import annotations

from enum import StrEnum

from slurmforge.spec.models import Cluster, Pool
from slurmforge.spec.nodes import pool_hardware

IMAGE_VARIANT_VAR = "slurmforge_image_variant"
"""The image playbook's variable naming the variant (roles/gpu/defaults: base)."""


class ImageVariant(StrEnum):
    BASE = "base"
    GPU = "gpu"


def variant_vars(variant: ImageVariant) -> dict[str, str]:
    """What the image playbook needs, besides `Distro.image_vars()`, to build `variant`."""
    return {IMAGE_VARIANT_VAR: variant.value}


def pool_image_variant(pool: Pool) -> ImageVariant:
    """The variant a pool's machines boot: gpu for NVIDIA GPUs (catalog or explicit
    hardware), base otherwise (Neuron devices get no driver from Debian)."""
    hw = pool_hardware(pool)
    nvidia = hw is not None and hw.gpus > 0 and hw.gpu_kind == "nvidia"
    return ImageVariant.GPU if nvidia else ImageVariant.BASE


def image_variants(spec: Cluster) -> list[ImageVariant]:
    """The variants a cluster's machines boot: base always (the head nodes), gpu when a
    pool has NVIDIA GPUs."""
    used = {pool_image_variant(p) for p in spec.pools}
    return [v for v in ImageVariant if v is ImageVariant.BASE or v in used]
