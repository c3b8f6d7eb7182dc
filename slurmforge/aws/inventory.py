"""`pulumi stack output --json` -> the generated inventory (the same format the local
provider writes), so rollout and validation run unchanged against AWS.

The stack (stacks/) exports the keys named here; this module is the other end of that
contract. Hosts on AWS are the head nodes: pool nodes boot from the golden image and
join by themselves, so they are not in the inventory. Ansible reaches the login node on
its public address and every private host through it (ProxyJump).

Besides `write_inventory`'s files this writes, in the same directory:
  group_vars/all/aws.yml   what the roles need from the stack (no secret values: the
                           munge key and database password stay in Secrets Manager;
                           their ARNs are here)
  ceph.yml                 the Ceph hosts' OSD volume ids (group `ceph`; Ansible reads every
                           file of an inventory directory and merges it with hosts.yml,
                           where the Ceph hosts are listed with their daemon groups)

`fetch_stack_secrets` copies the munge key and database password the stack generated
from Secrets Manager into the rollout machine's secrets directory (where the munge and
slurmdbd roles read them); the caller builds the boto3 client.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from pathlib import Path
from typing import Any, Protocol

from slurmforge.contract import AWS_VARS_FILE, AwsProviderSettings, settings_json
from slurmforge.errors import ProvisionError
from slurmforge.hosts import Host, HostRole
from slurmforge.inventory import write_inventory, write_yaml
from slurmforge.secrets import CLUSTER_SECRETS
from slurmforge.spec import load_spec
from slurmforge.state_dirs import secrets_dir

# The stack outputs (exported by stacks/cluster.py).
OUT_CLUSTER = "cluster"
OUT_REGION = "region"
OUT_CONTROLLER = "controller"
OUT_SSH_USER = "ssh_user"
OUT_HOSTS = "hosts"
"""[{name, role (controller|login), private_ip, public_ip (login only)}]"""
OUT_CEPH_HOSTS = "ceph_hosts"
"""[{name, private_ip, zone, osd_volumes}]"""
OUT_LAUNCH_TEMPLATES = "launch_templates"
"""{pool: launch template id}"""
OUT_SPOT_QUEUE_URL = "spot_queue_url"
OUT_SUBNETS = "private_subnets"
"""{zone: private subnet id}"""
OUT_SECRET_ARNS = "secret_arns"
"""{munge_key: arn, db_password: arn, jwt_key: arn}: slurmforge.secrets.CLUSTER_SECRETS' stack keys"""
OUT_EFS = "efs"
"""{id, dns_name, paths: {home, software, slurm_state}}; null when the NAS is not EFS"""
OUT_DATABASE = "database"
"""{kind, host, endpoint}"""
OUT_AMI = "ami_id"
"""The node image every node boots (the spec's images.ami, or the one the stack baked)."""
OUT_SPEC = "spec"
"""The spec file as stack config `slurmforge:spec` names it: relative to the project root
(where Pulumi.yaml is), or absolute. `slurmforge inventory` reads the spec from there
unless given one."""
OUT_MUNGE_KEY = "munge_key"
"""Secret output."""
OUT_DB_PASSWORD = "db_password"
"""Secret output."""

REQUIRED = (OUT_CLUSTER, OUT_REGION, OUT_CONTROLLER, OUT_SSH_USER, OUT_HOSTS, OUT_LAUNCH_TEMPLATES,
            OUT_SPOT_QUEUE_URL, OUT_SUBNETS, OUT_SECRET_ARNS)
SECRET_OUTPUTS = (OUT_MUNGE_KEY, OUT_DB_PASSWORD)

CEPH_FILE = "ceph.yml"
CEPH_GROUP = "ceph"


def read_stack_outputs(path: Path) -> dict[str, Any]:
    """The JSON `pulumi stack output --json` wrote to `path`."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ProvisionError(f"{path}: no such file (run `pulumi stack output --json > {path}`)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProvisionError(f"{path}: not the JSON of `pulumi stack output --json` ({exc})") from None
    if not isinstance(data, dict):
        raise ProvisionError(f"{path}: expected a JSON object of stack outputs")
    return data


def spec_of_outputs(outputs: dict[str, Any], root: Path) -> Path:
    """The spec the stack was built from (OUT_SPEC): a path relative to the Pulumi project
    (where `pulumi up` ran) taken from `root` (the CLI: the current directory)."""
    named = outputs.get(OUT_SPEC)
    if not isinstance(named, str) or not named:
        raise ProvisionError("the stack outputs do not name the spec (a stack last updated before slurmforge "
                             "exported it); fix: `pulumi up`, or pass the spec: "
                             "slurmforge inventory SPEC --from-stack-outputs FILE")
    path = Path(named).expanduser()
    path = path if path.is_absolute() else root / path
    if not path.is_file():
        raise ProvisionError(f"the stack was built from the spec {named}, which is not in {root}; fix: run this in "
                             "the Pulumi project's directory, or pass the spec: "
                             "slurmforge inventory SPEC --from-stack-outputs FILE")
    return path


def _check(outputs: dict[str, Any], cluster: str) -> None:
    missing = [k for k in REQUIRED if k not in outputs]
    if missing:
        raise ProvisionError(f"stack outputs lack {', '.join(missing)}: is this a slurmforge stack?")
    if outputs[OUT_CLUSTER] != cluster:
        raise ProvisionError(f"stack outputs are for cluster '{outputs[OUT_CLUSTER]}', the spec is '{cluster}'")


def _jump(outputs: dict[str, Any]) -> str | None:
    """user@address of the first login node with a public address."""
    for h in outputs[OUT_HOSTS]:
        if h.get("role") == HostRole.LOGIN.value and h.get("public_ip"):
            return f"{outputs[OUT_SSH_USER]}@{h['public_ip']}"
    return None


def ssh_connection(user: str, jump: str | None, public_ip: str | None) -> dict[str, str]:
    """How Ansible (and everything that reaches hosts the way it does: slurmforge.connection)
    gets to a host: on its public address when it has one, else through the jump host
    (`user@address`, the login node); as `user` (Debian's cloud user) with sudo, since the
    roles and the checks work as root."""
    conn = {"ansible_user": user, "ansible_become": "true"}
    if public_ip:
        conn["ansible_host"] = str(public_ip)
    elif jump is not None:
        conn["ansible_ssh_common_args"] = f"-o ProxyJump={jump}"
    return conn


def _connection(outputs: dict[str, Any], public_ip: str | None) -> dict[str, str]:
    return ssh_connection(str(outputs[OUT_SSH_USER]), _jump(outputs), public_ip)


def hosts_from_outputs(outputs: dict[str, Any]) -> list[Host]:
    """The inventory's hosts. A host's address is its private one (what the cluster uses);
    the login node's public address is only Ansible's way in."""
    hosts = []
    for h in outputs[OUT_HOSTS]:
        role = HostRole(h["role"])
        public = h.get("public_ip") if role is HostRole.LOGIN else None
        hosts.append(Host(h["name"], str(h["private_ip"]), role, connection=_connection(outputs, public)))
    for h in outputs.get(OUT_CEPH_HOSTS) or []:
        hosts.append(Host(h["name"], str(h["private_ip"]), HostRole.CEPH, connection=_connection(outputs, None)))
    return hosts


def service_settings(outputs: dict[str, Any]) -> AwsProviderSettings:
    """The scheduler service's provider settings: the inventory hands them to the
    scheduler_service role, which writes them where the daemon's loader reads them."""
    return AwsProviderSettings(region=str(outputs[OUT_REGION]),
                               launch_templates={k: str(v) for k, v in outputs[OUT_LAUNCH_TEMPLATES].items()},
                               subnets={k: str(v) for k, v in outputs[OUT_SUBNETS].items()},
                               spot_queue_url=outputs[OUT_SPOT_QUEUE_URL])


def aws_vars(outputs: dict[str, Any]) -> dict[str, Any]:
    """What the roles need from the stack; never a secret value."""
    efs = outputs.get(OUT_EFS) or {}
    ceph = outputs.get(OUT_CEPH_HOSTS) or []
    addresses = {h["name"]: h["private_ip"] for h in [*outputs[OUT_HOSTS], *ceph]}
    return {
        "slurmforge_aws_region": outputs[OUT_REGION],
        "slurmforge_aws_ami_id": outputs.get(OUT_AMI),
        "slurmforge_aws_efs_id": efs.get("id"),
        "slurmforge_aws_efs_dns": efs.get("dns_name"),
        "slurmforge_aws_efs_paths": efs.get("paths", {}),
        # what the storage_client role mounts (<dns>:/<mount name>)
        "slurmforge_nas_efs_dns": efs.get("dns_name"),
        "slurmforge_aws_secret_arns": dict(outputs[OUT_SECRET_ARNS]),
        "slurmforge_aws_spot_queue_url": outputs[OUT_SPOT_QUEUE_URL],
        "slurmforge_aws_launch_templates": dict(outputs[OUT_LAUNCH_TEMPLATES]),
        "slurmforge_aws_private_addresses": addresses,
        "slurmforge_aws_database": outputs.get(OUT_DATABASE),
    }


def ceph_document(outputs: dict[str, Any]) -> dict[str, Any]:
    hosts = {}
    for h in outputs.get(OUT_CEPH_HOSTS) or []:
        hosts[h["name"]] = {"ansible_host": h["private_ip"], **_connection(outputs, None),
                            "slurmforge_ceph_osd_volumes": list(h.get("osd_volumes", []))}
    return {"all": {"children": {CEPH_GROUP: {"hosts": hosts}}}}


FROM_STACK = "# generated by slurmforge from the stack outputs; do not edit"


def inventory_from_stack_outputs(outputs: dict[str, Any], spec_path: str | Path, out_dir: str | Path,
                                 secrets: Path | None = None) -> Path:
    """Write (or converge) the inventory for the stack whose outputs are given (`secrets`:
    where the Ceph fsid and keys are made once, default the cluster's secrets directory)."""
    spec_path, out_dir = Path(spec_path), Path(out_dir)
    spec = load_spec(spec_path)
    _check(outputs, spec.name)
    write_inventory(spec, spec_path, hosts_from_outputs(outputs), out_dir, secrets,
                    provider_settings=settings_json(service_settings(outputs)),
                    efs_dns=(outputs.get(OUT_EFS) or {}).get("dns_name"))
    write_yaml(out_dir / AWS_VARS_FILE, aws_vars(outputs), FROM_STACK)
    if outputs.get(OUT_CEPH_HOSTS):
        write_yaml(out_dir / CEPH_FILE, ceph_document(outputs), FROM_STACK)
    return out_dir


def inventory_ami(inventory_dir: Path) -> str | None:
    """The golden image's AMI the inventory was written with (AWS_VARS_FILE, from the stack's
    outputs); None when it names none."""
    import yaml

    path = inventory_dir / AWS_VARS_FILE
    data = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    ami = data.get("slurmforge_aws_ami_id") if isinstance(data, dict) else None
    return str(ami) if ami else None


class SecretsManager(Protocol):
    """The part of boto3's secretsmanager client used here."""

    def get_secret_value(self, *, SecretId: str) -> dict[str, Any]: ...


def fetch_stack_secrets(outputs: dict[str, Any], client: SecretsManager, root: Path | None = None) -> Path:
    """Copy the stack's secrets (every one of CLUSTER_SECRETS: the munge key, the database
    password, the JWT key) from Secrets Manager to the rollout machine's secrets directory
    (0700, files 0600), where the roles read them. `client` is a boto3 secretsmanager
    client for the stack's region."""
    arns = outputs[OUT_SECRET_ARNS]
    directory = root or secrets_dir(str(outputs[OUT_CLUSTER]))
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    for secret in CLUSTER_SECRETS:
        arn = arns[secret.stack_key]
        text = _secret(client, arn)
        try:
            value = base64.b64decode(text, validate=True) if secret.binary else text.encode()
        except binascii.Error:
            raise ProvisionError(f"{arn}: the {secret.stack_key} secret is not base64") from None
        _write_private(directory / secret.name, value)
    return directory


def _secret(client: SecretsManager, arn: str) -> str:
    try:
        value = client.get_secret_value(SecretId=arn).get("SecretString")
    except Exception as exc:  # botocore's errors: no permission, no such secret, no network
        raise ProvisionError(f"cannot read {arn} from Secrets Manager: {exc}") from None
    if not isinstance(value, str):
        raise ProvisionError(f"{arn} holds no string")
    return value


def _write_private(path: Path, data: bytes) -> None:
    """Replace the file with mode 0600 from its first byte on."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
