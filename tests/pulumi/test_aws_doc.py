"""docs/aws.md's commands, every line of its shell blocks, run as written and in order,
from a copy of the repository, as a user who is not root (as root, each line runs in a
user namespace of its own, where the euid is not 0).

What cannot run here stands in: `pulumi` is tests/pulumi/pulumi_shim.py (the Pulumi
program under the mocks, its AWS resources made in a moto server), the AWS SDK of every
command goes to that server, and `.venv/bin/slurmforge` runs the copy's code with this
interpreter (what `make venv` makes). `ssh` refuses every host (none of the stack's is
real). The lines that cannot run at all are SKIPPED, each with its reason; the lines of
`pulumi` and `.venv/bin/slurmforge` run; any other line fails the test. So a new or
edited command that does not work, or that nobody handled, fails it.

The commands of the prose (inline code, shell comments included) are checked against their
program's own definition (tests/pulumi/doc_prose.py): slurmforge's click commands, Pulumi's
CLI reference, botocore's model for `aws`, pipx's reference; one of any other program fails
unless named as a mere mention."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from slurmforge.inventory import VARS_FILE, read_inventory
from tests.harness.rehearsal.quotas import ec2_quotas
from tests.harness.rehearsal.stand_in import instance_roles_enforced
from tests.pulumi.conftest import ROOT, moto_server
from tests.pulumi.doc_prose import MENTIONS, problems, prose_commands
from tests.pulumi.pulumi_shim import STATE

pytestmark = [pytest.mark.pulumi, pytest.mark.filterwarnings("ignore::DeprecationWarning:pulumi_aws")]

DOC = ROOT / "docs" / "aws.md"
REGION = "us-east-1"
SKIPPED = {
    "curl -fsSL https://get.pulumi.com | sh          # installs ~/.pulumi/bin/pulumi":
        "downloads and installs the Pulumi CLI: no network here, the shim is the test's pulumi",
    "make venv                                        # .venv with slurmforge, pulumi, pulumi-aws, ansible, ...":
        "installs the venv from PyPI: the copy's .venv/bin/slurmforge runs this test's venv",
    "ssh admin@$(pulumi stack output hosts --json | jq -r '.[] | select(.role==\"login\") | .public_ip' | head -1) "
    "true": "ssh to the stack's login node: no real host here",
    ".venv/bin/slurmforge rollout --inventory ~/.local/state/slurmforge/inventories/mlpools    # playbooks/site.yml, "
    "with progress":
        "Ansible on the stack's hosts over ssh: no real host here",
    ".venv/bin/slurmforge validate --inventory ~/.local/state/slurmforge/inventories/mlpools   # the live-cluster "
    "checks":
        "the checks on the stack's hosts over ssh: no real host here (tests/integration/"
        "test_validate_through_a_jump_host.py validates the local cluster through a jump host)",
    ".venv/bin/slurmforge down --inventory ~/.local/state/slurmforge/inventories/mlpools   # stop the scheduler "
    "service, terminate its pool machines":
        "stops the scheduler service on the stack's controllers over ssh: no real host here",
}
EXPECTED_PROBLEMS = {
    ".venv/bin/slurmforge preflight ": re.compile(
        r"^pools\[1\]\.instance_types: p3\.8xlarge is not offered in us-east-1[ab]; fix: .*$"),
}
"""Lines (by their start) that exit 5 here, and the only problems they may print: moto's instance type
offerings (AWS's data as moto ships it) have no p3 type in us-east-1, which the example's GPU
pools ask for; everything else the account is asked (key pair, Debian's AMI, quotas, the
scheduler service's DryRuns as DEPLOY_ROLE_ARN narrowed to its policy) is there."""
RUN = ("pulumi", ".venv/bin/slurmforge")
"""The programs whose lines run; a line of any other program must be in SKIPPED."""
COPIED = ("docs", "examples", "playbooks", "roles", "slurmforge", "stacks", "templates", "tests", "modules",
          "Pulumi.yaml", "pyproject.toml", "Makefile")


def doc_commands(text: str) -> list[str]:
    """Every command of the ```sh blocks, in order: one per line (a trailing backslash
    continues it), comment-only and empty lines left out."""
    commands: list[str] = []
    for block in re.findall(r"^```(?:sh|bash|console)\n(.*?)^```", text, re.M | re.S):
        pending = ""
        for line in block.splitlines():
            line = pending + line.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def test_every_shell_block_line_of_the_doc_is_found() -> None:
    commands = doc_commands(DOC.read_text())
    assert commands[0].startswith("curl ") and commands[-1].startswith("pulumi destroy")
    assert len(commands) == 18
    assert set(SKIPPED) <= set(commands), f"skipped lines the doc no longer has: {set(SKIPPED) - set(commands)}"


def test_every_command_of_the_prose_is_one_its_program_accepts() -> None:
    commands = prose_commands(DOC.read_text())
    assert len(commands) == 29 and commands[-1] == "pulumi login s3://bucket"  # the last: a shell block's comment
    assert "aws ec2 create-key-pair --key-name <name> --query KeyMaterial --output text > ~/.ssh/<name>.pem" in commands
    assert set(MENTIONS) <= set(commands), f"mentions the doc no longer has: {set(MENTIONS) - set(commands)}"
    found = {command: problems(command, ROOT) for command in commands}
    assert not {command: found for command, found in found.items() if found}


def test_a_prose_command_that_is_wrong_or_unchecked_fails() -> None:
    text = ("Run `slurmforge rollout\n--inventori DIR`, `validate --inventory`, `pulumi up --yess`,\n"
            "`pulumi stack outputs`, `aws ec2 create-key-pair --query KeyMaterial`,\n"
            "`aws ec2 create-keypair --key-name k`, `pipx install 'slurmforge[gpu]'`, `scontrol show node`.\n\n"
            "```sh\npulumi up   # or `pulumi up --diffs`\n```\n")
    commands = prose_commands(text)
    assert commands[0] == "slurmforge rollout --inventori DIR" and commands[-1] == "pulumi up --diffs"
    found = {command: problems(command, ROOT) for command in commands}
    assert [command for command, wrong in found.items() if not wrong] == ["validate --inventory"]
    assert found["scontrol show node"] == ["`scontrol show node`: neither checked (a program of CHECKS) nor named in "
                                           "MENTIONS"]
    assert found["aws ec2 create-key-pair --query KeyMaterial"] == ["`aws ec2 create-key-pair` needs --key-name"]


def stand_ins(bin_dir: Path, copy: Path) -> None:
    """`pulumi` (the shim) and a refusing `ssh` on PATH; the copy's .venv/bin/slurmforge."""
    scripts = {bin_dir / "pulumi": f'exec {sys.executable} -m tests.pulumi.pulumi_shim "$@"\n',
               bin_dir / "ssh": 'echo "ssh: the test reaches no host ($*)" >&2\nexit 255\n',
               copy / ".venv" / "bin" / "slurmforge": f'exec {sys.executable} -m slurmforge.cli "$@"\n'}
    for path, body in scripts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)


@pytest.fixture(scope="module")
def workplace() -> Iterator[tuple[Path, dict[str, str]]]:
    """The copy of the repository the commands run in, and their environment."""
    with tempfile.TemporaryDirectory(prefix="sf-aws-doc-") as tmp, moto_server(REGION) as moto, \
            instance_roles_enforced(), ec2_quotas(QUOTAS):
        copy, home, state, bin_dir = (Path(tmp) / name for name in ("repo", "home", "pulumi", "bin"))
        for name in COPIED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(source, copy / name)
        for directory in (home, state):
            directory.mkdir()
        stand_ins(bin_dir, copy)
        env = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
               "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1", STATE: str(state),
               "AWS_ENDPOINT_URL": moto, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_CONFIG_FILE": str(home / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
               "MOTO_IAM_LOAD_MANAGED_POLICIES": "true", "DEPLOY_ROLE_ARN": the_account()}
        yield copy, env


QUOTAS = {"L-1216C47A": 64, "L-34B43A08": 64, "L-417A185B": 128, "L-7212CCBC": 128}
"""The account's EC2 vCPU quotas: enough for examples/pools-aws.yaml at its max nodes."""


def the_account() -> str:
    """What the doc asks of the account before its commands: the key pair in the region,
    Debian's AMI published there; and the role the admin deploys with (DEPLOY_ROLE_ARN)."""
    import boto3
    from moto.ec2.models import ec2_backends

    from slurmforge.aws.preflight import DEBIAN_OWNER
    from slurmforge.distro import DEBIAN_13

    ec2, iam = boto3.client("ec2", region_name=REGION), boto3.client("iam", region_name=REGION)
    ec2.create_key_pair(KeyName="mlpools-admin")
    ami = ec2.register_image(Name=DEBIAN_13.parent_ami, Architecture="x86_64")["ImageId"]
    image = ec2_backends["123456789012"][REGION].amis[ami]
    image.owner_id, image.architecture = DEBIAN_OWNER, "x86_64"  # moto keeps neither
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                     "Principal": {"AWS": "arn:aws:iam::123456789012:root"}}]}
    arn = str(iam.create_role(RoleName="deployer", AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"])
    iam.put_role_policy(RoleName="deployer", PolicyName="ec2", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}]}))
    return arn


def not_root() -> list[str]:
    return ["unshare", "--user"] if os.geteuid() == 0 else []


def test_the_docs_commands_work_as_written(workplace: tuple[Path, dict[str, str]]) -> None:
    copy, env = workplace
    root_secrets = Path("/var/lib/slurmforge/mlpools")
    had_root_secrets = root_secrets.exists()
    ran, skipped = [], []
    for command in doc_commands(DOC.read_text()):
        if command in SKIPPED:
            skipped.append(command)
            continue
        assert command.split()[0] in RUN, f"docs/aws.md: `{command}` is neither run nor skipped by this test"
        res = subprocess.run([*not_root(), "bash", "-o", "pipefail", "-ec", command], cwd=copy, env=env,
                             capture_output=True, text=True, timeout=300)
        expected = next((p for start, p in EXPECTED_PROBLEMS.items() if command.startswith(start)), None)
        if expected is not None:
            assert res.returncode == 5 and all(expected.match(line) for line in res.stdout.splitlines()), (
                f"docs/aws.md: `{command}` exits {res.returncode}:\n{res.stdout}{res.stderr}")
        else:
            assert res.returncode == 0, f"docs/aws.md: `{command}` exits {res.returncode}:\n{res.stdout}{res.stderr}"
        ran.append(command)
        if "slurmforge inventory" in command:
            assert_inventory_and_secrets(copy, Path(env["HOME"]))
    assert set(skipped) == set(SKIPPED) and len(ran) == 12
    assert ran[-1] == "pulumi destroy                                              # everything the stack made"
    assert root_secrets.exists() == had_root_secrets, "the doc's commands wrote root's secrets directory"


def assert_inventory_and_secrets(copy: Path, home: Path) -> None:
    """What the doc says `inventory` does: the user's own state directory holds
    inventories/mlpools/, from the spec the stack names (the outputs the doc saved), and the
    stack's secrets (0700, files 0600); nothing is written into the project."""
    import boto3

    outputs = json.loads((copy / "mlpools-outputs.json").read_text())
    assert outputs["spec"] == "examples/pools-aws.yaml" and outputs["munge_key"] == "[secret]"
    inventory = home / ".local" / "state" / "slurmforge" / "inventories" / "mlpools"
    assert not (copy / "inventories").exists()
    spec, hosts = read_inventory(inventory)
    assert spec.name == "mlpools"
    assert {h.name for h in hosts} == {h["name"] for h in [*outputs["hosts"], *outputs["ceph_hosts"]]}
    secrets = home / ".local" / "state" / "slurmforge" / "mlpools" / "secrets"
    cluster_vars = yaml.safe_load((inventory / VARS_FILE).read_text())
    assert cluster_vars["slurmforge_secrets_dir"] == str(secrets)
    arns = outputs["secret_arns"]
    stored = boto3.client("secretsmanager", region_name=REGION).get_secret_value(SecretId=arns["munge_key"])
    assert (secrets / "munge.key").read_bytes() == base64.b64decode(stored["SecretString"])
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in secrets.iterdir()} == {0o600}
