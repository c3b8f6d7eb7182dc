"""One description of a node's container (slurmforge.local.container): `podman run` for the CLI
and the libpod create body for the scheduler service say the same thing, for every host of the
example cluster; the service's pool node is the static node `up` makes plus the join program
and the munge key, read-only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurmforge.contract import JOIN_PROGRAM, JOIN_SECRETS_DIR
from slurmforge.hosts import HostRole
from slurmforge.local.container import INIT, compute_container
from slurmforge.local.provider import LocalProvider
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SPEC = load_spec(ROOT / "examples" / "local.yaml")


def from_run_args(args: list[str]) -> dict[str, Any]:
    """What `podman run ARGS` makes, read back from its arguments."""
    assert args[:2] == ["run", "-d"]
    seen: dict[str, Any] = {"labels": {}, "mounts": set(), "hosts": None, "flags": set()}
    rest = args[2:]
    while rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag in ("--no-hosts", "--privileged") or "=" in flag:
            seen["flags"].add(flag)
            continue
        value = rest.pop(0)
        if flag == "--label":
            key, _, label = value.partition("=")
            seen["labels"][key] = label
        elif flag == "-v":
            source, target, *options = value.split(":")
            seen["mounts"].add((source, target, options == ["ro"]))
        elif flag == "--add-host":
            name, _, address = value.partition(":")
            seen["hosts"] = (seen["hosts"] or set()) | {(name, address)}
        else:
            seen[flag] = value
    seen["image"], seen["command"] = rest[0], rest[1:]
    return seen


def from_create_body(body: dict[str, Any]) -> dict[str, Any]:
    """What libpod's create makes of BODY, in from_run_args' terms."""
    [(network, options)] = body["Networks"].items()
    flags = {"--systemd=always"} if body["systemd"] == "always" else set()
    flags |= {"--cgroupns=host"} if body["cgroupns"] == {"nsmode": "host"} else set()
    flags |= {"--privileged"} if body["privileged"] else set()
    flags |= {"--no-hosts"} if body.get("use_image_hosts") else set()
    hosts = {tuple(h.split(":", 1)) for h in body["hostadd"]} if "hostadd" in body else None
    assert body["netns"] == {"nsmode": "bridge"}
    return {"--name": body["name"], "--hostname": body["hostname"], "--network": network,
            "--ip": options["static_ips"][0], "--mac-address": options["static_mac"], "labels": body["labels"],
            "mounts": {(m["source"], m["destination"], "ro" in m["options"]) for m in body["mounts"]},
            "hosts": hosts, "flags": flags, "image": body["image"], "command": body["command"]}


def test_the_cli_and_the_api_make_the_same_container_for_every_host(tmp_path: Path) -> None:
    provider = LocalProvider(SPEC, "localhost/slurmforge/node:t1", state_root=tmp_path,
                             join_program=tmp_path / "join.sh")
    hosts = provider.hosts()
    assert {h.role for h in hosts} == set(HostRole)
    for host in hosts:
        container = provider.container(host, hosts)
        assert from_run_args(container.run_args()) == from_create_body(container.create_body()), host.name
    pool_node = compute_container(SPEC, provider.service_settings(), "dev-cpu-03")
    assert from_run_args(pool_node.run_args()) == from_create_body(pool_node.create_body())


def test_a_static_node_up_makes_is_the_node_the_service_makes(tmp_path: Path) -> None:
    """Both with the join program and the munge key, read-only: every compute node joins at
    boot; the service's replacement of a static node is the node `up` made."""
    provider = LocalProvider(SPEC, "img", state_root=tmp_path, join_program=tmp_path / "inv" / "join.sh")
    hosts = provider.hosts()
    static = next(h for h in hosts if h.role is HostRole.COMPUTE and not h.dynamic)
    made_by_up = from_run_args(provider.container(static, hosts).run_args())
    made_by_service = from_create_body(compute_container(SPEC, provider.service_settings(), static.name).create_body())
    joins = {(str(tmp_path / "inv" / "join.sh"), JOIN_PROGRAM, True),
             (str(tmp_path / "dev" / "secrets" / "munge.key"), f"{JOIN_SECRETS_DIR}/munge.key", True)}
    assert made_by_service == made_by_up and joins <= made_by_up["mounts"]
    assert made_by_up["--ip"] == static.address and made_by_up["--mac-address"] == "02:42:" + ":".join(
        f"{int(o):02x}" for o in static.address.split("."))
    assert made_by_up["labels"] | {"slurmforge.pool": "cpu", "slurmforge.dynamic": "False"} == made_by_up["labels"]
    assert (str(tmp_path / "dev" / "nas" / "home"), "/home", False) in made_by_up["mounts"]
    assert made_by_up["command"] == ["sh", "-c", INIT] and "--no-hosts" in made_by_up["flags"]


def test_a_pools_new_hardware_is_a_new_container_for_its_nodes_only(tmp_path: Path) -> None:
    """As a new instance type is a new instance on AWS: the machine description names the
    pool's hardware, so `up` makes the gpu pool's static node again (drained first) and
    leaves the cpu pool's alone."""
    data = SPEC.model_dump(mode="json")
    data["pools"][1]["hardware"]["memory_mb"] = 2048
    bigger = SPEC.model_validate(data)
    provider = LocalProvider(SPEC, "img", state_root=tmp_path, join_program=tmp_path / "join.sh")
    settings = provider.service_settings()
    before = {n: compute_container(SPEC, settings, n) for n in ("dev-gpu-01", "dev-cpu-01")}
    after = {n: compute_container(bigger, settings, n) for n in ("dev-gpu-01", "dev-cpu-01")}
    assert before["dev-gpu-01"].labels["slurmforge.hardware"] == "1x2x1 1024MB 2 fakegpu"
    assert after["dev-gpu-01"].digest != before["dev-gpu-01"].digest
    assert after["dev-cpu-01"].digest == before["dev-cpu-01"].digest


def test_a_node_boots_at_uptime_zero() -> None:
    """The node's init starts at uptime 0 in its time namespace, not up to 1 s later: slurmctld
    ignores a powering-up node's registration whose boot (now minus uptime, whole seconds) is
    before the power-up request, so a machine up within a second of the request that reported
    a second too much uptime stayed "still booting" until ResumeTimeout (seen in the
    rehearsal's spot phase). The node image's own shell, awk and unshare, privileged as a
    node's container is; /sbin/init replaced by a read of the uptime, five times."""
    import subprocess

    from tests.judge import node_image

    script = INIT.replace("/sbin/init", "cat /proc/uptime")
    ups = []
    for _ in range(5):
        out = subprocess.run(["podman", "run", "--rm", "--privileged", node_image(), "sh", "-c", script],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        ups.append(float(out.split()[0]))
    assert max(ups) < 0.25, ups
