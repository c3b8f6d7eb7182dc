"""The cluster's secrets on the rollout machine: made once, private, never rewritten."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from slurmforge.inventory import cluster_vars
from slurmforge.secrets import CLUSTER_SECRETS, JWT_KEY, ensure_secrets
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_every_cluster_secret_is_made_once_and_private(tmp_path: Path) -> None:
    directory = ensure_secrets("t", tmp_path / "secrets")
    names = {s.name for s in CLUSTER_SECRETS}
    assert {"munge.key", "slurmdbd.password", JWT_KEY} == names
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert {stat.S_IMODE((directory / n).stat().st_mode) for n in names} == {0o600}
    # the JWT key: 32 random bytes, as Slurm's guide makes it; a second run keeps every secret
    first = {n: (directory / n).read_bytes() for n in names}
    assert len(first[JWT_KEY]) == 32 and first[JWT_KEY] != first["munge.key"][:32]
    ensure_secrets("t", directory)
    assert {n: (directory / n).read_bytes() for n in names} == first


def test_a_new_cluster_gets_its_own_jwt_key(tmp_path: Path) -> None:
    one = ensure_secrets("a", tmp_path / "a") / JWT_KEY
    two = ensure_secrets("b", tmp_path / "b") / JWT_KEY
    assert one.read_bytes() != two.read_bytes()


def test_the_roles_get_the_rest_api_port_and_account(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples/local.yaml")
    assert cluster_vars(spec, tmp_path, [])["slurmforge_rest_api"] == {"port": 6820, "user": "slurmrestd"}
    moved = spec.model_copy(update={"rest_api": spec.rest_api.model_copy(update={"port": 8443})})
    assert cluster_vars(moved, tmp_path, [])["slurmforge_rest_api"]["port"] == 8443
