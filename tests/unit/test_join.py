"""The join program (slurmforge.join, templates/join.sh.j2): rendered for every example and
target it is valid bash that shellcheck passes, carries each target's inputs, and its
node-kit steps do what the kit says. Its whole run is proven on the live local cluster: the
rollout runs it on every compute node (roles/slurm_node), tests/integration checks the
result (tests/infra: users, mounts, munge, slurmd)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from slurmforge.contract import JOIN_PROGRAM, JOIN_UNIT, NFS_OPTIONS
from slurmforge.hosts import Host, HostRole
from slurmforge.inventory import JOIN, KIT, RENDERED, write_inventory
from slurmforge.join import JoinSettings, kit_files, local_settings, render_join
from slurmforge.providers.local import LocalProvider
from slurmforge.render import controller_names
from slurmforge.spec import Cluster, load_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def hosts_of(spec: Cluster) -> list[Host]:
    hosts = [Host(name, f"10.0.0.{10 + i}", HostRole.CONTROLLER) for i, name in enumerate(controller_names(spec))]
    return [*hosts, Host(f"{spec.name}-login", "10.0.0.30", HostRole.LOGIN),
            Host(f"{spec.name}-cpu-01", "10.0.0.40", HostRole.COMPUTE, "cpu")]


def aws_settings(spec: Cluster) -> JoinSettings:
    controllers = tuple((name, f"10.1.0.{i}") for i, name in enumerate(controller_names(spec)))
    return JoinSettings(target="aws", controllers=controllers,
                        identity="aws-tag", secrets="aws", region="eu-west-1",
                        munge_key_arn="arn:aws:secretsmanager:eu-west-1:123456789012:secret:munge-AbC",
                        nas_source="fs-1.efs.eu-west-1.amazonaws.com:")


def programs() -> list[tuple[str, str]]:
    out = []
    for example in EXAMPLES:
        spec = load_spec(example)
        out.append((f"{example.stem}-own", render_join(spec, local_settings(spec, hosts_of(spec)))))
        out.append((f"{example.stem}-aws", render_join(spec, aws_settings(spec))))
    return out


@pytest.mark.parametrize(("name", "program"), programs(), ids=[name for name, _ in programs()])
def test_every_rendering_is_bash_that_shellcheck_passes(name: str, program: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.sh"
    path.write_text(program)
    subprocess.run(["bash", "-n", str(path)], check=True, capture_output=True)
    # the Makefile installs shellcheck (Debian's); warnings are defects in a program that runs as root at boot
    lint = subprocess.run(["shellcheck", "-S", "warning", str(path)], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout


def test_each_target_gets_its_inputs() -> None:
    spec = load_spec(ROOT / "examples/local.yaml")
    local = render_join(spec, local_settings(spec, LocalProvider(spec, "img").hosts()))
    assert "SLURMD_FLAGS='-b '" in local  # slurmd boot time = its start, in a container
    assert "NAS_SOURCE=''" in local and "CEPH_FUSE=yes" in local  # bind mounts; no Ceph in the kernel
    assert "CONF_SERVER=dev-controller,dev-controller-backup" in local
    assert "imds" not in local and "secretsmanager" not in local
    aws = render_join(spec, aws_settings(spec))
    assert "meta-data/tags/instance/slurmforge:node" in aws and "meta-data/local-ipv4" in aws
    assert "arn:aws:secretsmanager:eu-west-1:123456789012:secret:munge-AbC" in aws
    assert f"NFS_OPTIONS={NFS_OPTIONS}" in aws and "NAS_SOURCE=fs-1.efs.eu-west-1.amazonaws.com:" in aws
    assert "CEPH_FUSE=no" in aws and "SLURMD_FLAGS=''" in aws
    with pytest.raises(ValueError, match="munge_key_arn"):
        render_join(spec, JoinSettings(target="aws", controllers=(), secrets="aws", region="eu-west-1"))


def sourced(program: str, tmp_path: Path, script: str, stubs: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `script` after sourcing the program (its main does not run), with stand-ins for
    the named commands that append their arguments to calls.log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in stubs.items():
        tool = bin_dir / name
        tool.write_text(f'#!/bin/bash\necho "{name} $*" >> {tmp_path}/calls.log\n{body}\n')
        tool.chmod(0o755)
    (tmp_path / "join.sh").write_text(program)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURMFORGE_JOIN_SOURCE_ONLY": "1"}
    return subprocess.run(["bash", "-c", f"set -euo pipefail; . {tmp_path}/join.sh; {script}"], env=env,
                          capture_output=True, text=True, timeout=30, check=False)


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_the_kit_accounts_become_groups_and_users(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples/local.yaml")
    program = render_join(spec, local_settings(spec, LocalProvider(spec, "img").hosts()))
    kit = tmp_path / "accounts"
    kit.write_text("# kit\ngroup ml 3000\nuser alice 2001 ml,sudo\nuser bob 2002")  # bob: a last line without \\n
    # a new node: nobody exists yet
    done = sourced(program, tmp_path, f"apply_accounts {kit}", {"getent": "exit 2", "groupadd": "", "useradd": "",
                                                               "usermod": "", "groupmod": "", "id": ""})
    assert done.returncode == 0, done.stderr
    made = [c for c in calls(tmp_path) if not c.startswith("getent")]
    assert made == ["groupadd -g 3000 ml", "groupadd -g 2001 alice",
                    "useradd -u 2001 -g alice -G ml,sudo -s /bin/bash -M alice",
                    "groupadd -g 2002 bob", "useradd -u 2002 -g bob -s /bin/bash -M bob"]
    assert "changed: user alice added" in done.stdout


def test_an_account_that_drifted_is_changed_back_and_a_current_one_left_alone(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples/local.yaml")
    program = render_join(spec, local_settings(spec, LocalProvider(spec, "img").hosts()))
    kit = tmp_path / "accounts"
    kit.write_text("user alice 2001 ml\nuser bob 2002\n")
    getent = """case "$1 $2" in
  "group alice") echo alice:x:2001: ;;
  "group bob") echo bob:x:2002: ;;
  "passwd alice") echo alice:x:1999:2001::/home/alice:/bin/bash ;;
  "passwd bob") echo bob:x:2002:2002::/home/bob:/bin/bash ;;
  *) exit 2 ;;
esac"""
    ident = 'case "$2" in alice) echo alice ;; bob) echo bob ;; esac'
    done = sourced(program, tmp_path, f"apply_accounts {kit}", {"getent": getent, "groupadd": "", "useradd": "",
                                                               "usermod": "", "groupmod": "", "id": ident})
    assert done.returncode == 0, done.stderr
    changed = [c for c in calls(tmp_path) if c.split()[0] in ("groupadd", "useradd", "usermod", "groupmod")]
    assert changed == ["usermod -u 2001 -g alice -G ml -s /bin/bash alice"]  # alice: uid and groups; bob as he is


def test_a_kit_line_of_an_unknown_kind_stops_the_join(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples/local.yaml")
    program = render_join(spec, local_settings(spec, LocalProvider(spec, "img").hosts()))
    kit = tmp_path / "accounts"
    kit.write_text("member alice ml\n")
    done = sourced(program, tmp_path, f"apply_accounts {kit}", {"getent": "exit 2"})
    assert done.returncode != 0 and "unknown line kind 'member'" in done.stderr


def test_the_hosts_block_has_the_controllers_and_the_kit(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples/local.yaml")
    hosts = LocalProvider(spec, "img").hosts()
    program = render_join(spec, local_settings(spec, hosts))
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "hosts").write_text(kit_files(spec, hosts)["hosts"])
    done = sourced(program, tmp_path, f"KIT={tmp_path}/kit; hosts_block", {})
    want = sorted({f"{h.address} {h.name}" for h in hosts}, key=lambda line: line.split()[1])
    assert done.stdout.splitlines() == want


def test_the_inventory_carries_the_program_and_the_kit(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "examples/lab.yaml").read_text())
    (data.get("storage") or {}).pop("ceph", None)  # no Ceph hosts among these machines
    spec_path = tmp_path / "lab.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    spec = load_spec(spec_path)
    inventory = write_inventory(spec, spec_path, hosts_of(spec), tmp_path / "inv", tmp_path / "secrets",
                                provider_settings={})
    rendered = inventory / RENDERED
    assert (rendered / JOIN).read_text() == render_join(spec, local_settings(spec, hosts_of(spec)), source="lab.yaml")
    assert (rendered / JOIN).stat().st_mode & 0o777 == 0o755  # a local pool node runs it from there
    accounts = (rendered / KIT / "accounts").read_text()
    for user in spec.users:
        assert f"user {user.name} {user.uid}" in accounts
    assert "10.0.0.40 lab-cpu-01" in (rendered / KIT / "hosts").read_text()


def test_its_last_line_says_how_long_each_step_took(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "examples/local.yaml")
    program = render_join(spec, local_settings(spec, LocalProvider(spec, "img").hosts()))
    steps = ["identity", "munge", "nas", "kit", "hosts", "cephfs", "lmod", "exporter", "slurmd"]
    noop = "; ".join(f"step_{step}() {{ :; }}" for step in steps if step != "identity")
    done = sourced(program, tmp_path, f'{noop}; step_identity() {{ NODE=$1; }}; main dev-cpu-01', {"install": ""})
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert re.fullmatch(r"slurmforge-join: dev-cpu-01 joined in \d+\.\d{3} s \((\w+ \d+ ms(, )?){9}\)", last), last
    assert [part.split()[0] for part in last.split("(", 1)[1].rstrip(")").split(", ")] == steps


@pytest.mark.parametrize(("load_state", "in_unit"), [("loaded", True), ("not-found", False)])
def test_as_user_data_it_installs_itself_and_joins_in_its_unit(tmp_path: Path, load_state: str, in_unit: bool) -> None:
    """cloud-init's copy installs the program and hands the join to the image's unit, which
    tries again until it succeeds (as at every boot); with no such unit it joins itself."""
    spec = load_spec(ROOT / "examples/local.yaml")
    program = render_join(spec, aws_settings(spec))
    steps = ["identity", "munge", "nas", "kit", "hosts", "cephfs", "lmod", "exporter", "slurmd"]
    noop = "; ".join(f"step_{step}() {{ echo step {step} >> {tmp_path}/calls.log; }}" for step in steps)
    done = sourced(program, tmp_path, f"{noop}; NODE=t-cpu-01; main", {
        "install": "", "flock": "",
        "systemctl": f'[ "$1" = show ] && echo {load_state}; true'})
    assert done.returncode == 0, done.stderr
    log = calls(tmp_path)
    assert log[0] == f"install -D -m 0755 bash {JOIN_PROGRAM}"
    if in_unit:
        assert log[1:] == [f"systemctl show -P LoadState {JOIN_UNIT}", f"systemctl start --no-block {JOIN_UNIT}"]
        assert f"joining in {JOIN_UNIT}" in done.stdout
    else:
        assert [line for line in log if line.startswith("step")] == [f"step {s}" for s in steps]
