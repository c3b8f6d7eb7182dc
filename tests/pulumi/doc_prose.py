"""The commands docs/aws.md writes in its prose (inline code, not its shell blocks), and
whether each is one its program accepts.

A span is a command when it starts with a program (PROGRAMS; `$(...)` unwrapped), or with a
slurmforge command followed by an option (`rollout --inventory`). Each is checked against
its program's own definition, not run (the shell blocks run: test_aws_doc.py):

- slurmforge: click parses it with slurmforge's own commands (an option the prose leaves
  without its value gets one);
- pulumi: the command and its flags per Pulumi's CLI reference (PULUMI);
- aws: the service, operation and parameters of botocore's model, the one the AWS CLI is
  generated from, the required ones given, and the CLI's global options (AWS_GLOBAL);
  `aws configure` from the CLI's reference;
- pipx: the command and options per pipx's reference, an install's extras those
  pyproject.toml defines.

A command of any other program fails (`problems`) unless MENTIONS names it with why it is
only named there."""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer.main
from botocore import xform_name
from botocore.session import get_session

from slurmforge.cli import app
from slurmforge.target import split_local

PROGRAMS = ("slurmforge", ".venv/bin/slurmforge", "pulumi", "aws", "pipx", "pip", "ssh", "ssh-add", "scp", "podman",
            "chmod", "make", "curl", "sudo", "jq", "git", "ansible-playbook", "srun", "sbatch", "scontrol", "sinfo",
            "squeue", "sacct", "systemctl", "journalctl", "python3")
MENTIONS = {
    "chmod 600": "the admin's own key file made private before ssh-add, named with its mode: plain chmod(1)",
    "pip install": "the alternative to pipx named without arguments ('into a venv of your own')",
    "podman exec": "how the local cluster's checks reach its containers, named to contrast with ssh on AWS",
}
"""Spans that name a command without being one to run, and why."""
PLACEHOLDERS = {"SPEC": "examples/pools-aws.yaml", "<name>": "mlpools-admin", "...": ""}


@dataclass(frozen=True)
class Usage:
    """One command of a tool: how many positional arguments, which flags (those taking a value
    in `valued`), per the tool's reference."""

    positional: tuple[int, int]
    flags: frozenset[str] = frozenset()
    valued: frozenset[str] = frozenset()


def _usage(low: int, high: int, flags: str, valued: str = "") -> Usage:
    return Usage((low, high), frozenset(flags.split() + valued.split()), frozenset(valued.split()))


PULUMI_INHERITED = "--color -C --cwd --non-interactive -v --verbose --logtostderr -e --emoji"
PULUMI = {
    # pulumi.com/docs/iac/cli/commands/pulumi_<command>/ (the Options and the inherited ones)
    ("login",): _usage(0, 1, "-l --local --insecure", "-c --cloud-url --default-org"),
    ("stack", "init"): _usage(0, 1, "--no-select", "-s --stack --secrets-provider --copy-config-from --teams"),
    ("config", "set"): _usage(1, 2, "--secret --plaintext --path", "-s --stack --config-file"),
    ("preview",): _usage(0, 1, "--diff -r --refresh -j --json", "-s --stack --replace -t --target -c --config"),
    ("up",): _usage(0, 1, "-y --yes --skip-preview --diff -r --refresh -f --target-dependents",
                    "-s --stack --replace -t --target -c --config -p --parallel -m --message"),
    ("stack",): _usage(0, 0, "-i --show-ids --show-name --show-secrets -u --show-urns", "-s --stack -o --output"),
    ("stack", "output"): _usage(0, 1, "-j --json --shell --show-secrets", "-s --stack"),
    ("destroy",): _usage(0, 0, "-y --yes --skip-preview --diff -r --refresh --remove -f --target-dependents",
                         "-s --stack -t --target -m --message"),
}
AWS_GLOBAL = _usage(0, 0, "--debug --no-verify-ssl --no-paginate --no-sign-request --no-cli-pager",
                    "--endpoint-url --output --query --profile --region --color --ca-bundle --cli-read-timeout "
                    "--cli-connect-timeout --cli-binary-format")
"""docs.aws.amazon.com/cli/latest/reference/index.html, "Options"."""
AWS_OUTPUTS = ("json", "text", "table", "yaml", "yaml-stream")
AWS_CUSTOM = {("configure",): _usage(0, 0, "")}
"""AWS CLI commands not from a service model: docs.aws.amazon.com/cli/latest/reference/configure/."""
PIPX = {
    # pipx.pypa.io/stable/docs/ (pipx install, pipx environment)
    ("install",): _usage(1, 99, "--force -f --include-deps --system-site-packages --global --preinstall",
                         "--suffix --python --index-url --pip-args"),
    ("environment",): _usage(0, 0, "--global", "-V --value"),
}
PIPX_VARIABLES = ("PIPX_HOME", "PIPX_GLOBAL_HOME", "PIPX_BIN_DIR", "PIPX_GLOBAL_BIN_DIR", "PIPX_MAN_DIR",
                  "PIPX_GLOBAL_MAN_DIR", "PIPX_SHARED_LIBS", "PIPX_DEFAULT_PYTHON", "PIPX_USE_EMOJI",
                  "PIPX_HOME_ALLOW_SPACE", "PIPX_LOCAL_VENVS", "PIPX_LOG_DIR", "PIPX_TRASH_DIR", "PIPX_VENV_CACHEDIR")


def _prose(text: str) -> str:
    """The text outside fenced blocks, and the comments of its shell blocks."""
    comments = [line.split("#", 1)[1] for block in re.findall(r"^```(?:sh|bash|console)\n(.*?)^```", text, re.M | re.S)
                for line in block.splitlines() if "#" in line]
    return "\n\n".join([re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.M | re.S), *comments])


def prose_commands(text: str) -> list[str]:
    """Every command written in inline code outside the fenced blocks (and in their shell
    comments), in order, its line breaks made spaces."""
    group: Any = typer.main.get_command(app)
    found = []
    for span in re.findall(r"`([^`]+)`", _prose(text)):
        command = " ".join(span.split())
        if command.startswith("$("):
            command = command[2:].split(")")[0]
        words = command.split()
        if len(words) < 2:
            continue
        if words[0] in PROGRAMS or (words[0] in group.commands and words[1].startswith("-")):
            found.append(command)
    return found


def _words(command: str) -> list[str]:
    """The command's words up to a redirection or pipe, placeholders made values."""
    words = []
    for word in shlex.split(command):
        if word in (">", "|", ">>", "&&", ";"):
            break
        if word in PLACEHOLDERS:
            word = PLACEHOLDERS[word]
        if word:
            words.append(word.replace("<name>", PLACEHOLDERS["<name>"]))
    return words


def _against(usage: Usage, args: list[str], what: str) -> list[str]:
    problems, positional, index = [], 0, 0
    while index < len(args):
        arg = args[index]
        if arg.startswith("-"):
            flag = arg.split("=", 1)[0]
            if flag not in usage.flags:
                problems.append(f"`{what}`: {flag} is not an option of it")
            elif flag in usage.valued and "=" not in arg:
                index += 1
        else:
            positional += 1
        index += 1
    low, high = usage.positional
    if not low <= positional <= high:
        problems.append(f"`{what}` takes {low}-{high} arguments, not {positional}")
    return problems


def _table(table: dict[tuple[str, ...], Usage], words: list[str], tool: str,
           inherited: Usage | None = None) -> list[str]:
    for size in (2, 1):
        path = tuple(words[1:1 + size])
        if path in table:
            usage = table[path]
            if inherited:
                usage = Usage(usage.positional, usage.flags | inherited.flags, usage.valued | inherited.valued)
            return _against(usage, words[1 + size:], " ".join([tool, *path]))
    return [f"`{' '.join(words)}`: no such {tool} command in its reference"]


def check_slurmforge(words: list[str], root: Path) -> list[str]:
    group: Any = typer.main.get_command(app)  # a click group: typer ships click of its own
    args = split_local(words[1:] if words[0].endswith("slurmforge") else words)
    command = group
    while hasattr(command, "commands") and args and args[0] in command.commands:
        command, args = command.commands[args[0]], args[1:]
    if command is group:
        return [f"`{' '.join(words)}`: no such slurmforge command"]
    for attempt in (args, [*args, str(root)]):  # the prose may leave the last option's value out
        try:
            command.make_context(command.name or "", list(attempt), resilient_parsing=False)
            return []
        except Exception as e:  # click's usage errors, each with its message
            if not hasattr(e, "format_message"):
                raise
            message = str(e.format_message())
            if attempt is not args or "requires an argument" not in message:
                return [f"`{' '.join(words)}`: {message}"]
    raise AssertionError("not reached")


def check_aws(words: list[str], root: Path) -> list[str]:
    if tuple(words[1:2]) in AWS_CUSTOM:
        return _table(AWS_CUSTOM, words, "aws", AWS_GLOBAL)
    session = get_session()
    if len(words) < 3 or words[1] not in session.get_available_services():
        return [f"`{' '.join(words)}`: no such AWS service"]
    model = session.get_service_model(words[1])
    operations = {xform_name(name, "-"): name for name in model.operation_names}
    if words[2] not in operations:
        return [f"`{' '.join(words)}`: {words[1]} has no operation {words[2]}"]
    shape = model.operation_model(operations[words[2]]).input_shape
    members = {f"--{xform_name(name, '-')}": name for name in (shape.members if shape else {})}
    booleans = {flag for flag, name in members.items() if shape and shape.members[name].type_name == "boolean"}
    usage = Usage((0, 0), AWS_GLOBAL.flags | set(members) | {f"--no-{f[2:]}" for f in booleans},
                  AWS_GLOBAL.valued | (set(members) - booleans))
    problems = _against(usage, words[3:], " ".join(words[:3]))
    given = {w.split("=", 1)[0] for w in words[3:]}
    required = [f"--{xform_name(name, '-')}" for name in (shape.required_members if shape else [])]
    problems += [f"`{' '.join(words[:3])}` needs {flag}" for flag in required if flag not in given]
    if "--output" in given and words[words.index("--output") + 1] not in AWS_OUTPUTS:
        problems.append(f"`{' '.join(words)}`: --output is one of {', '.join(AWS_OUTPUTS)}")
    return problems


def check_pulumi(words: list[str], root: Path) -> list[str]:
    return _table(PULUMI, words, "pulumi", _usage(0, 0, PULUMI_INHERITED))


def check_pipx(words: list[str], root: Path) -> list[str]:
    problems = _table(PIPX, words, "pipx")
    if words[1] == "install":
        extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        for spec in (w for w in words[2:] if "[" in w):
            problems += [f"`{' '.join(words)}`: slurmforge has no extra {name!r}"
                         for name in spec[spec.index("[") + 1:spec.index("]")].split(",") if name not in extras]
    if "--value" in words and words[words.index("--value") + 1] not in PIPX_VARIABLES:
        problems.append(f"`{' '.join(words)}`: pipx environment knows no such variable")
    return problems


CHECKS: dict[str, Callable[[list[str], Path], list[str]]] = {
    "slurmforge": check_slurmforge, ".venv/bin/slurmforge": check_slurmforge, "pulumi": check_pulumi,
    "aws": check_aws, "pipx": check_pipx,
}


def problems(command: str, root: Path) -> list[str]:
    """What is wrong with a prose command ([] when its program accepts it)."""
    if command in MENTIONS:
        return []
    words = _words(command)
    check = CHECKS.get(words[0], check_slurmforge if words[0] not in PROGRAMS else None)
    if check is None:
        return [f"`{command}`: neither checked (a program of CHECKS) nor named in MENTIONS"]
    return check(words, root)
