"""`pulumi` for the docs' commands (tests/pulumi/test_aws_doc.py): the subcommands
docs/aws.md uses, served by the Pulumi program run under the mocks as `pulumi up` runs it
(stacks/program.py with the stack's config), AWS in the moto server AWS_ENDPOINT_URL names.

The stack lives in the directory $SLURMFORGE_PULUMI_SHIM_STATE (state.json):

  login [URL]                                  logged in
  stack init NAME                              the stack (one)
  config set KEY VALUE                         the stack's config
  preview                                      the program runs under recording mocks
  up [--yes] [--replace=URN ...]               the program makes its resources in moto; the outputs are kept
                                               (each --replace names one URN of the stack, as pulumi's must;
                                               on a stack already up the program runs again under the
                                               recording mocks and moto keeps what the first made)
  stack --show-urns                            the stack's resources, each with its URN line
  stack output [NAME] [--json] [--show-secrets]    the outputs, as pulumi prints them
  destroy [--yes]                              the outputs are forgotten

Anything else exits 2 naming it, as does a command out of order (config before a stack,
outputs before `up`): a doc line the shim does not serve fails the test.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

STATE = "SLURMFORGE_PULUMI_SHIM_STATE"
SECRET = "[secret]"


class Refused(Exception):
    """What real pulumi would refuse too (or the shim does not serve)."""


def _load(state: Path) -> dict[str, Any]:
    return json.loads(state.read_text()) if state.exists() else {}


def _stack(data: dict[str, Any]) -> dict[str, Any]:
    if not data.get("logged_in"):
        raise Refused("not logged in: run `pulumi login` first")
    if "stack" not in data:
        raise Refused("no stack selected: run `pulumi stack init NAME` first")
    return data


def _run(config: dict[str, str], in_moto: bool) -> dict[str, Any]:
    import pulumi

    from slurmforge.spec import load_spec
    from stacks import program
    from tests.pulumi.conftest import MotoMocks, RecordingMocks, run_main

    if in_moto:
        region = config.get("aws:region") or load_spec(program.spec_path(config["slurmforge:spec"])).target.region
        mocks: RecordingMocks = MotoMocks(str(region))
    else:
        mocks = RecordingMocks()
    try:
        run = run_main(config, mocks)
    except pulumi.RunError as exc:
        raise Refused(f"error: {exc}") from None
    monitor: Any = pulumi.runtime.settings.get_monitor()
    return {"outputs": run.outputs, "secret": run.secret, "resources": len(run.resources),
            "urns": sorted(monitor.resources)}


def _replace(data: dict[str, Any], flags: list[str]) -> list[str]:
    """The URNs of `--replace=URN` flags: each one URN the stack has (pulumi refuses others)."""
    urns = []
    args = iter(flags)
    for flag in args:
        if flag in ("--yes", "-y"):
            continue
        if flag == "--replace":
            urn = next(args, "")
        elif flag.startswith("--replace="):
            urn = flag.removeprefix("--replace=")
        else:
            raise Refused(f"the test's pulumi does not serve `pulumi up {flag}`")
        if urn not in data.get("up", {}).get("urns", []):
            raise Refused(f"--replace {urn!r}: no such resource in the stack")
        urns.append(urn)
    return urns


def _output(data: dict[str, Any], args: list[str]) -> str:
    if "up" not in data:
        raise Refused("current stack does not have any outputs: run `pulumi up` first")
    as_json, show = "--json" in args, "--show-secrets" in args
    names = [a for a in args if not a.startswith("--")]
    up = data["up"]
    shown = {k: v if show or not up["secret"][k] else SECRET for k, v in up["outputs"].items()}
    if not names:
        return json.dumps(shown, indent=2) if as_json else "\n".join(f"{k}  {json.dumps(v)}" for k, v in shown.items())
    if names[0] not in shown:
        raise Refused(f"current stack does not have output property '{names[0]}'")
    value = shown[names[0]]
    return json.dumps(value, indent=2) if as_json or not isinstance(value, str) else value


def main(argv: list[str]) -> int:
    state = Path(os.environ[STATE]) / "state.json"
    data = _load(state)
    try:
        match argv:
            case ["login", *_]:
                data["logged_in"] = True
                print("Logged in (the test's shim)")
            case ["stack", "init", name]:
                if not data.get("logged_in"):
                    raise Refused("not logged in: run `pulumi login` first")
                data = {"logged_in": True, "stack": name, "config": {}}
                print(f"Created stack '{name}'")
            case ["config", "set", key, value]:
                _stack(data)["config"][key] = value
            case ["preview"]:
                print(f"Previewing: {_run(_stack(data)['config'], in_moto=False)['resources']} resources")
            case ["up", *flags]:
                replaced = _replace(_stack(data), flags)
                if "up" in data:  # an update: the program runs again (under the recording mocks), moto keeps
                    ran = _run(data["config"], in_moto=False)  # what the first `up` made
                    print(f"Resources: {ran['resources']} unchanged, {len(replaced)} replaced")
                else:
                    data["up"] = _run(data["config"], in_moto=True)
                    print(f"Resources: {data['up']['resources']} created")
            case ["stack", "--show-urns"]:
                if "up" not in _stack(data):
                    raise Refused("the stack has no resources: run `pulumi up` first")
                print("\n".join(f"    URN: {urn}" for urn in data["up"]["urns"]))
            case ["stack", "output", *args]:
                print(_output(_stack(data), args))
            case ["destroy", *flags] if set(flags) <= {"--yes", "-y"}:
                _stack(data).pop("up", None)
                print("Resources: all deleted")
            case _:
                raise Refused(f"the test's pulumi does not serve `pulumi {' '.join(argv)}`")
    except Refused as exc:
        print(f"pulumi: {exc}", file=sys.stderr)
        return 2
    state.write_text(json.dumps(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
