"""One contract between Python and the roles (slurmforge.contract): no role spells an
on-node path or port again, every role default that names one takes it from the
inventory and gets the value Python uses, the inventory and the image playbook carry it,
the service venv's requirements are pyproject.toml's, and the provider settings the
inventory writes are the ones the loader reads."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2 import StrictUndefined
from jinja2.nativetypes import NativeEnvironment
from packaging.requirements import Requirement

from slurmforge import contract
from slurmforge.contract import (
    AwsProviderSettings,
    LocalProviderSettings,
    node_vars,
    read_settings,
    settings_json,
)
from slurmforge.distro import DEBIAN_13
from slurmforge.errors import ProvisionError
from slurmforge.inventory import cluster_vars
from slurmforge.local.provider import LocalProvider
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "roles"
CONTRACT_VARS = ("slurmforge_paths", "slurmforge_ports", "slurmforge_service_account",
                 "slurmforge_service_requirements", "slurmforge_service_provider_settings")


def contract_values() -> dict[str, str | int]:
    """Every on-node path (a string starting with /) and port or id (an int) the contract
    defines, by name."""
    return {name: value for name, value in vars(contract).items()
            if name.isupper() and (isinstance(value, int) or (isinstance(value, str) and value.startswith("/")))}


@dataclass(frozen=True)
class Spelling:
    path: Path
    line: int
    name: str
    value: str | int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.value} (contract.{self.name})"


def spellings(root: Path, values: Mapping[str, str | int]) -> Iterator[Spelling]:
    """Where a file under `root` holds one of the values literally."""
    patterns = {name: re.compile(rf"(?<![\w.]){value}(?![\w.])" if isinstance(value, int) else re.escape(value))
                for name, value in values.items()}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for name, pattern in patterns.items():
                if pattern.search(line):
                    yield Spelling(path.relative_to(root.parent), number, name, values[name])


def role_default(role: str, name: str, variables: Mapping[str, Any] | None = None) -> Any:
    """A role default as the rollout sees it: its Jinja rendered with the contract's
    inventory variables (plus `variables`)."""
    value = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())[name]
    if not isinstance(value, str) or "{{" not in value:
        return value
    env = NativeEnvironment(undefined=StrictUndefined)
    return env.from_string(value).render({**node_vars(), **(variables or {})})


def test_no_role_or_playbook_spells_a_contract_value() -> None:
    """Role defaults, tasks, handlers, files and the playbooks name the inventory's
    variables; a literal path or port here is a second definition that can drift."""
    values = contract_values()
    assert {"SERVICE_VENV", "SPOOL_DIR", "HOLD_FILE", "PROMETHEUS_PORT", "SERVICE_PORT"} <= set(values)
    found = [str(s) for root in (ROLES, ROOT / "playbooks") for s in spellings(root, values)]
    assert not found, "spelled again instead of taken from the inventory:\n" + "\n".join(found)


def test_the_scan_finds_a_spelled_path_and_port(tmp_path: Path) -> None:
    roles = tmp_path / "roles"
    (roles / "x" / "defaults").mkdir(parents=True)
    (roles / "x" / "defaults" / "main.yml").write_text(
        "x_venv: /opt/slurmforge/venv\nx_port: 9090\nx_version: 1.9090\nx_other: 19090\n")
    found = list(spellings(roles, contract_values()))
    assert [(s.line, s.name) for s in found] == [(1, "SERVICE_VENV"), (2, "PROMETHEUS_PORT")]


@pytest.mark.parametrize(("role", "name", "value"), [
    ("scheduler_service", "scheduler_service_venv", contract.SERVICE_VENV),
    ("scheduler_service", "scheduler_service_etc", contract.ETC_DIR),
    ("scheduler_service", "scheduler_service_state_dir", contract.SERVICE_STATE_DIR),
    ("scheduler_service", "scheduler_service_spool", contract.SPOOL_DIR),
    ("scheduler_service", "scheduler_service_targets_file", contract.TARGETS_FILE),
    ("scheduler_service", "scheduler_service_user", contract.SERVICE_USER),
    ("scheduler_service", "scheduler_service_uid", contract.SERVICE_UID),
    ("scheduler_service", "scheduler_service_gid", contract.SERVICE_GID),
    ("monitoring", "monitoring_prometheus_port", contract.PROMETHEUS_PORT),
    ("monitoring", "monitoring_alertmanager_port", contract.ALERTMANAGER_PORT),
    ("monitoring", "monitoring_node_exporter_port", contract.NODE_EXPORTER_PORT),
    ("monitoring", "monitoring_rules_path", contract.ALERT_RULES_FILE),
    ("monitoring", "monitoring_targets_dir", contract.TARGETS_DIR),
    ("slurm_controller", "slurm_controller_nodes_ready_program", contract.NODES_READY_PROGRAM),
    ("slurmdbd", "slurmdbd_secret_conf", contract.SLURMDBD_SECRET_CONF),
    ("slurmdbd", "slurmdbd_accounting_program", contract.ACCOUNTING_PROGRAM),
    ("slurmdbd", "slurmdbd_accounting_desired", contract.ACCOUNTING_DESIRED),
    ("slurmdbd", "slurmdbd_uids_mark", contract.SLURMDBD_UIDS_MARK),
    ("lmod", "lmod_libexec", contract.LMOD_LIBEXEC),
])
def test_role_defaults_get_the_contracts_values(role: str, name: str, value: str | int) -> None:
    assert role_default(role, name) == value


def test_the_service_listens_on_the_contracts_port() -> None:
    assert role_default("scheduler_service", "scheduler_service_listen",
                        {"slurmforge_address": "10.0.0.2"}) == f"10.0.0.2:{contract.SERVICE_PORT}"


def test_roles_declare_the_contract_variables_they_read() -> None:
    """meta/argument_specs.yml lists, as required, every contract variable a role reads:
    an inventory written before the contract fails the rollout at once, by name."""
    missing = []
    for role in sorted(p for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").exists()):
        text = "\n".join(p.read_text() for p in role.rglob("*.yml") if "meta" not in p.parts)
        options = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())[
            "argument_specs"]["main"]["options"]
        for var in CONTRACT_VARS:
            if re.search(rf"\b{var}\b", text) and not (options.get(var) or {}).get("required"):
                missing.append(f"{role.name}: {var}")
    assert not missing, missing


def test_the_inventory_and_the_image_playbook_carry_the_contract(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples" / "local.yaml")
    provider = LocalProvider(spec, "img", state_root=tmp_path, join_program=tmp_path / "inv" / "rendered" / "join.sh")
    local = provider.service_settings()
    got = cluster_vars(spec, Path("/tmp/inv"), [], settings_json(local))
    assert {k: got[k] for k in node_vars()} == node_vars()
    assert got["slurmforge_paths"]["service_venv"] == contract.SERVICE_VENV
    assert got["slurmforge_ports"]["service"] == contract.SERVICE_PORT
    assert DEBIAN_13.image_vars().items() <= got.items()  # install tasks see the same at image time
    held = got["slurmforge_service_provider_settings"]
    assert read_settings(LocalProviderSettings, held) == local
    assert held["socket"] == contract.PODMAN_API_SOCKET and held["fail_pools_file"] == contract.FAIL_POOLS_FILE
    # what the service needs to make a pool node's container, from the provider that made the others
    assert held["image"] == "img" and held["network"] == "slurmforge-dev"
    assert set(held["addresses"]) == {h.name for h in provider.hosts() if h.pool}
    assert held["join_program"] == str(tmp_path / "inv" / "rendered" / "join.sh")
    assert held["munge_key"] == str(tmp_path / "dev" / "secrets" / "munge.key")
    assert held["nas"] == {"/home": str(tmp_path / "dev" / "nas" / "home"),
                           "/opt/software": str(tmp_path / "dev" / "nas" / "software"),
                           "/var/spool/slurm-shared": str(tmp_path / "dev" / "nas" / "slurm_state")}


def test_a_local_inventory_without_the_providers_settings_is_refused_by_the_service() -> None:
    """Only `up` knows the image, the network and the host paths: an inventory written
    without them gives the service settings its loader refuses, naming what is missing."""
    spec = load_spec(ROOT / "examples" / "local.yaml")
    held = cluster_vars(spec, Path("/tmp/inv"), [])["slurmforge_service_provider_settings"]
    with pytest.raises(ProvisionError, match="missing key 'image'; missing key 'network'"):
        read_settings(LocalProviderSettings, held)


def test_the_service_venv_holds_the_wheels_requirements_and_its_service_extra() -> None:
    """The role installs exactly pyproject.toml's dependencies plus the `service` extra,
    which holds boto3 (the AWS provider imports it), as the installed package's metadata
    spells them: an installed slurmforge has no pyproject.toml to read."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["service"]]
    held = list(contract.service_requirements())
    assert sorted(map(Requirement, held), key=str) == sorted(map(Requirement, declared), key=str)
    assert len(held) == len(declared) and any(r.startswith("boto3") for r in held)
    assert "import boto3" in (ROOT / "slurmforge" / "aws" / "provider.py").read_text()
    assert role_default("scheduler_service", "scheduler_service_dependencies") == held


# ------------------------------------------------------------------ provider settings


def test_settings_survive_their_json() -> None:
    aws = AwsProviderSettings(region="us-east-1", launch_templates={"cpu": "lt-1"}, subnets={"us-east-1a": "s-1"},
                              spot_queue_url="https://sqs/q")
    assert read_settings(AwsProviderSettings, settings_json(aws)) == aws
    local = LocalProviderSettings(image="img", network="net", addresses={"n-1": "10.0.0.11"},
                                  nas={"/home": "/srv/home"}, ssh_key="/k.pub", join_program="/j.sh",
                                  munge_key="/m.key", fail_pools=("cpu",), fail_pools_file="")
    assert read_settings(LocalProviderSettings, settings_json(local)) == local


def test_keys_the_loader_does_not_know_are_refused_by_name() -> None:
    """What the inventory wrote before the contract: `subnets` was right, but the queue
    was `interruption_queue_url` and the loader looked for `private_subnets`."""
    old = {"region": "us-east-1", "launch_templates": {"cpu": "lt-1"}, "subnets": {"us-east-1a": "s-1"},
           "interruption_queue_url": "https://sqs/q", "pool_parameters": {"cpu": "/p"}}
    with pytest.raises(ProvisionError, match="unknown key 'interruption_queue_url'; unknown key 'pool_parameters'"):
        read_settings(AwsProviderSettings, old)


@pytest.mark.parametrize(("data", "message"), [
    ({}, "missing key 'region'"),
    ({"region": "r", "subnets": ["s-1"]}, "'subnets' is not dict"),
    ({"region": None}, "'region' is not str"),
    ([], "expected a JSON object, got list"),
])
def test_wrong_settings_are_refused(data: object, message: str) -> None:
    with pytest.raises(ProvisionError, match=re.escape(message)):
        read_settings(AwsProviderSettings, data)
