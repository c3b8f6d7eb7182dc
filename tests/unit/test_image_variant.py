"""Which image each pool boots: the gpu variant (the NVIDIA driver) for NVIDIA GPUs, from the
catalog or explicit hardware; the base image otherwise (stacks/pool.py picks by it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slurmforge.image_variant import IMAGE_VARIANT_VAR, ImageVariant, image_variants, pool_image_variant, variant_vars
from slurmforge.spec import load_spec, validate_data

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
ROLE_DEFAULTS = ROOT / "roles" / "gpu" / "defaults" / "main.yml"


def test_gpu_pools_boot_the_gpu_variant() -> None:
    spec = load_spec(ROOT / "examples" / "pools-aws.yaml")
    assert {p.name: pool_image_variant(p) for p in spec.pools} == {
        "cpu": ImageVariant.BASE, "gpu": ImageVariant.GPU, "gpu-spot": ImageVariant.GPU}
    assert image_variants(spec) == [ImageVariant.BASE, ImageVariant.GPU]


def test_explicit_hardware_and_neuron() -> None:
    lab = load_spec(ROOT / "examples" / "lab.yaml")  # gpus: {count: 4, model: rtx4080}
    assert {p.name: pool_image_variant(p) for p in lab.pools} == {"cpu": ImageVariant.BASE, "gpu": ImageVariant.GPU}
    data = yaml.safe_load((ROOT / "examples" / "pools-aws.yaml").read_text())
    for pool in data["pools"]:
        if pool["kind"] == "gpu":
            pool["instance_types"] = ["trn1.2xlarge"]  # Neuron: no driver from Debian, nothing to add
    spec = validate_data(data, "trn1")
    assert image_variants(spec) == [ImageVariant.BASE]


def test_the_playbook_variable_is_the_roles() -> None:
    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())
    assert defaults[IMAGE_VARIANT_VAR] == ImageVariant.BASE.value
    assert variant_vars(ImageVariant.GPU) == {IMAGE_VARIANT_VAR: "gpu"}
