"""Rotation's secret store (slurmforge.secrets.SecretStore): the new secret in the store the
cluster uses, the old one gone - the secrets directory on every target, Secrets Manager
(moto) on AWS - and `slurmforge rotate`'s bad input. On a live cluster:
tests/integration/test_day_two_live.py."""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from slurmforge.aws.inventory import fetch_stack_secrets
from slurmforge.cli import app
from slurmforge.secrets import DB_PASSWORD, JWT_KEY, MUNGE_KEY, SecretStore, ensure_secrets, new_munge_key

pytestmark = pytest.mark.unit


@pytest.fixture
def secretsmanager() -> Iterator[Any]:
    from moto import mock_aws

    with mock_aws():
        import boto3

        yield boto3.client("secretsmanager", region_name="us-east-1")


def test_a_rotated_key_replaces_the_old_in_the_same_file(tmp_path: Path) -> None:
    directory = ensure_secrets("c", tmp_path / "secrets")
    old = (directory / MUNGE_KEY).read_bytes()
    inode = os.stat(directory / MUNGE_KEY).st_ino
    new = new_munge_key()
    SecretStore(directory).put(MUNGE_KEY, new)
    assert (directory / MUNGE_KEY).read_bytes() == new != old
    # a local pool container's bind mount of the key keeps its inode: the same file
    assert os.stat(directory / MUNGE_KEY).st_ino == inode
    assert stat.S_IMODE((directory / MUNGE_KEY).stat().st_mode) == 0o600
    assert len(new) == 1024


def test_aws_rotation_leaves_only_the_new_secret(secretsmanager: Any, tmp_path: Path) -> None:
    old_key, new_key = new_munge_key(), new_munge_key()
    munge = secretsmanager.create_secret(Name="munge", SecretString=base64.b64encode(old_key).decode())["ARN"]
    db = secretsmanager.create_secret(Name="db", SecretString="old-password")["ARN"]
    jwt = secretsmanager.create_secret(Name="jwt", SecretString=base64.b64encode(b"o" * 32).decode())["ARN"]
    outputs = {"cluster": "c", "secret_arns": {"munge_key": munge, "db_password": db, "jwt_key": jwt}}
    directory = fetch_stack_secrets(outputs, secretsmanager, tmp_path / "secrets")
    store = SecretStore(directory, secretsmanager, {MUNGE_KEY: munge, DB_PASSWORD: db, JWT_KEY: jwt})
    store.put(MUNGE_KEY, new_key)
    store.put(DB_PASSWORD, b"new-password")
    store.put(JWT_KEY, b"n" * 32)
    assert base64.b64decode(secretsmanager.get_secret_value(SecretId=jwt)["SecretString"]) == b"n" * 32
    assert (directory / JWT_KEY).read_bytes() == b"n" * 32
    # what a new pool machine's join program fetches, and the rollout machine's copy
    assert base64.b64decode(secretsmanager.get_secret_value(SecretId=munge)["SecretString"]) == new_key
    assert secretsmanager.get_secret_value(SecretId=db)["SecretString"] == "new-password"
    assert (directory / MUNGE_KEY).read_bytes() == new_key
    assert (directory / DB_PASSWORD).read_bytes() == b"new-password"
    for arn in (munge, db, jwt):
        stages = secretsmanager.describe_secret(SecretId=arn)["VersionIdsToStages"]
        labelled = [v for v, s in stages.items() if s]
        assert len(labelled) == 1 and stages[labelled[0]] == ["AWSCURRENT"], stages
        with pytest.raises(secretsmanager.exceptions.ResourceNotFoundException):
            secretsmanager.get_secret_value(SecretId=arn, VersionStage="AWSPREVIOUS")
    # the directory's refresh from the store gives the same
    again = fetch_stack_secrets(outputs, secretsmanager, tmp_path / "again")
    assert (again / MUNGE_KEY).read_bytes() == new_key


@pytest.mark.parametrize(("args", "code", "message"), [
    (["rotate", "munge-key"], 14, "no cluster named; fix: --local [NAME] (this machine's), --inventory DIR"),
    (["rotate", "db-password"], 14, "no cluster named"),
    (["rotate", "jwt-key"], 14, "no cluster named"),
    (["rotate", "munge-key", "--local", "--inventory", "x"], 2, "pass --local [NAME] or --inventory DIR, not both")])
def test_rotate_names_its_cluster(args: list[str], code: int, message: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == code
    assert message in result.output and result.output.count("\n") == 1
    assert "Traceback" not in result.output and "pulumi" not in result.output


def test_rotate_refuses_a_directory_that_is_no_inventory(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["rotate", "db-password", "--inventory", str(tmp_path)])
    assert result.exit_code == 14
    assert f"{tmp_path} is not a slurmforge inventory" in result.output
