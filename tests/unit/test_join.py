"""The join program (slurmforge.node.program, templates/node/join.sh.j2): rendered for every example and
target it is valid bash that shellcheck passes, carries each target's inputs, and its
node-kit steps do what the kit says. Its whole run is proven on the live local cluster: the
rollout runs it on every compute node (roles/slurm_node), tests/integration checks the
result (slurmforge/validation: users, mounts, munge, slurmd)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from slurmforge.contract import HOSTS_REFRESH, JOIN_PROGRAM, JOIN_UNIT, KIT_POOL_HOSTS, NFS_OPTIONS
from slurmforge.hosts import Host, HostRole, controller_names
from slurmforge.inventory import JOIN, KIT, RENDERED, write_inventory
from slurmforge.local.provider import LocalProvider
from slurmforge.node.kit import kit_files
from slurmforge.node.program import JoinSettings, local_settings, render_join
from slurmforge.node.steps import names
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


def local_program() -> tuple[Cluster, list[Host], str]:
    spec = load_spec(ROOT / "examples/local.yaml")
    hosts = LocalProvider(spec, "img").hosts()
    return spec, hosts, render_join(spec, local_settings(spec, hosts))


def test_the_kit_lists_the_fixed_hosts_only() -> None:
    """A pool node's address is known once the service has its machine: the pool hosts,
    not the kit (on the local target every node has a fixed address, which made names
    resolve there that resolve nowhere else)."""
    spec, hosts, _ = local_program()
    listed = {line.split()[1] for line in kit_files(spec, hosts)["hosts"].splitlines()}
    assert listed == {h.name for h in hosts if not h.dynamic}
    assert "dev-cpu-01" in listed and not listed & {"dev-cpu-03", "dev-cpu-04", "dev-cpu-fallback-01"}


def kit_with_pool_hosts(tmp_path: Path, spec: Cluster, hosts: list[Host], pool_hosts: str) -> Path:
    """A node kit under tmp_path, at the spec's kit path (KIT and POOL_HOSTS say where)."""
    kit = tmp_path / "kit"
    (kit / "pool").mkdir(parents=True)
    (kit / "hosts").write_text(kit_files(spec, hosts)["hosts"])
    (kit / KIT_POOL_HOSTS).write_text(pool_hosts)
    return kit


POOL_HOSTS_TEXT = """# slurmforge pool hosts
10.89.7.23 dev-cpu-03
10.89.7.24 dev-cpu-04
10.89.7.99 dev-controller
10.89.7.98 dev-cpu-01
10.89.7.97 github.com evil
127.0.0.1 ; rm -rf /
"""


def test_the_hosts_block_has_the_controllers_the_kit_and_the_pool_hosts(tmp_path: Path) -> None:
    """The pool hosts add names and never move one: a controller and a fixed host keep
    their addresses; a line that is not `address name` is not taken."""
    spec, hosts, program = local_program()
    kit = kit_with_pool_hosts(tmp_path, spec, hosts, POOL_HOSTS_TEXT)
    done = sourced(program, tmp_path, f"KIT={kit}; POOL_HOSTS={kit}/{KIT_POOL_HOSTS}; hosts_block", {})
    assert done.returncode == 0, done.stderr
    fixed = {f"{h.address} {h.name}" for h in hosts if not h.dynamic}
    want = sorted(fixed | {"10.89.7.23 dev-cpu-03", "10.89.7.24 dev-cpu-04"}, key=lambda line: line.split()[1])
    assert done.stdout.splitlines() == want
    # no pool hosts yet (the service has not written them): the fixed hosts
    (kit / KIT_POOL_HOSTS).unlink()
    done = sourced(program, tmp_path, f"KIT={kit}; POOL_HOSTS={kit}/{KIT_POOL_HOSTS}; hosts_block", {})
    assert done.returncode == 0 and done.stdout.splitlines() == sorted(fixed, key=lambda line: line.split()[1])


def hosts_run(tmp_path: Path, kit: Path) -> str:
    """Where the program's hosts step writes, in tmp_path (set after sourcing it)."""
    return (f"KIT={kit}; POOL_HOSTS={kit}/{KIT_POOL_HOSTS}; HOSTS_FILE={tmp_path}/etc/hosts; "
            f"HOSTS_LOCK={tmp_path}/hosts.lock; ")


def test_the_hosts_step_rewrites_its_block_only_whole_and_only_when_it_changes(tmp_path: Path) -> None:
    spec, hosts, program = local_program()
    kit = kit_with_pool_hosts(tmp_path, spec, hosts, "10.89.7.23 dev-cpu-03\n")
    etc_hosts = tmp_path / "etc" / "hosts"
    etc_hosts.parent.mkdir()
    etc_hosts.write_text("127.0.0.1 localhost\n# BEGIN slurmforge hosts\n10.0.0.1 gone\n# END slurmforge hosts\n"
                         "192.168.1.5 admins-own\n")
    done = sourced(program, tmp_path, hosts_run(tmp_path, kit) + "update_hosts", {})
    assert done.returncode == 0, done.stderr
    assert f"changed {etc_hosts}" in done.stdout
    text = etc_hosts.read_text()
    assert text.startswith("127.0.0.1 localhost\n192.168.1.5 admins-own\n# BEGIN slurmforge hosts\n")
    assert "10.89.7.23 dev-cpu-03\n" in text and "gone" not in text and text.endswith("# END slurmforge hosts\n")
    assert etc_hosts.stat().st_mode & 0o777 == 0o644
    before = etc_hosts.stat()
    done = sourced(program, tmp_path, hosts_run(tmp_path, kit) + "update_hosts", {})
    assert done.returncode == 0 and "changed" not in done.stdout
    assert etc_hosts.stat().st_ino == before.st_ino and etc_hosts.stat().st_mtime_ns == before.st_mtime_ns
    (kit / KIT_POOL_HOSTS).write_text("10.89.7.23 dev-cpu-03\n10.89.7.24 dev-cpu-04\n")
    done = sourced(program, tmp_path, hosts_run(tmp_path, kit) + "update_hosts", {})
    assert "10.89.7.24 dev-cpu-04\n" in etc_hosts.read_text()
    assert etc_hosts.stat().st_ino != before.st_ino  # renamed over it, never truncated in place
    assert sorted(p.name for p in etc_hosts.parent.iterdir()) == ["hosts"]


def recorded_steps(tmp_path: Path) -> str:
    return "; ".join(f"step_{step}() {{ echo step {step} >> {tmp_path}/calls.log; }}" for step in names()) + "; "


@pytest.mark.parametrize("how", ["prolog", "only"])
def test_the_prolog_and_only_hosts_run_the_hosts_step_alone(tmp_path: Path, how: str) -> None:
    """Slurm runs the program as its Prolog (no arguments, SLURM_SCRIPT_CONTEXT set); the
    timer runs `--only hosts`: /etc/hosts is refreshed and nothing else of the join runs."""
    spec, hosts, program = local_program()
    kit = kit_with_pool_hosts(tmp_path, spec, hosts, "10.89.7.23 dev-cpu-03\n")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    call = "SLURM_SCRIPT_CONTEXT=prolog_slurmd SLURM_JOB_ID=42 main" if how == "prolog" else "main --only hosts"
    done = sourced(program, tmp_path, hosts_run(tmp_path, kit) + recorded_steps(tmp_path) + call, {})
    assert done.returncode == 0, done.stderr
    assert "10.89.7.23 dev-cpu-03" in (tmp_path / "etc" / "hosts").read_text()
    assert calls(tmp_path) == []  # no other step of the join ran
    assert (tmp_path / "hosts.lock").exists()  # the hosts step's own lock (the join's is held for seconds)


def test_the_prolog_never_fails_the_job(tmp_path: Path) -> None:
    """A failed Prolog drains the node and requeues the job: no kit (the NAS not mounted)
    leaves /etc/hosts as it is, and a refresh that fails is logged, with exit status 0."""
    spec, hosts, program = local_program()
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    prolog = "SLURM_SCRIPT_CONTEXT=prolog_slurmd SLURM_JOB_ID=42 main; echo exit $?"
    done = sourced(program, tmp_path, hosts_run(tmp_path, tmp_path / "no-kit") + prolog, {})
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "exit 0", done.stderr
    assert "no node kit" in done.stdout and (tmp_path / "etc" / "hosts").read_text() == "127.0.0.1 localhost\n"
    kit = kit_with_pool_hosts(tmp_path, spec, hosts, "10.89.7.23 dev-cpu-03\n")
    (tmp_path / "etc" / "hosts").unlink()  # awk cannot read it: the refresh fails
    done = sourced(program, tmp_path, hosts_run(tmp_path, kit) + prolog, {})
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "exit 0", done.stderr
    assert "not refreshed for job 42; the job starts anyway" in done.stdout
    assert not (tmp_path / "etc" / "hosts").exists() and list((tmp_path / "etc").iterdir()) == []


def test_only_runs_the_hosts_step_and_says_so(tmp_path: Path) -> None:
    _, _, program = local_program()
    done = sourced(program, tmp_path, recorded_steps(tmp_path) + "main --only munge", {})
    assert done.returncode == 1 and "--only munge: the hosts step is the one that runs alone" in done.stderr
    assert calls(tmp_path) == []


def test_the_join_installs_the_timer_that_runs_the_hosts_step(tmp_path: Path) -> None:
    """Every 30 s, for shells outside a job (the login node's): the timer's own service runs
    the program with --only hosts; written and enabled by the hosts step of the join."""
    _, _, program = local_program()
    written = tmp_path / "root"
    # `write` (the program's own helper) into tmp_path instead of /
    write = (f'write() {{ mkdir -p "{written}$(dirname "$1")"; printf "%s\\n" "$2" > "{written}$1"; '
             'CHANGED=yes; }; ')
    done = sourced(program, tmp_path, write + "update_hosts() { :; }; step_hosts", {"systemctl": ""})
    assert done.returncode == 0, done.stderr
    unit = written / "etc/systemd/system" / f"{HOSTS_REFRESH}"
    service = unit.with_suffix(".service").read_text()
    timer = unit.with_suffix(".timer").read_text()
    assert f"ExecStart={JOIN_PROGRAM} --only hosts" in service and "Type=oneshot" in service
    assert "OnUnitActiveSec=30" in timer and "AccuracySec=1s" in timer and "WantedBy=timers.target" in timer
    assert calls(tmp_path) == ["systemctl daemon-reload", f"systemctl enable --quiet --now {HOSTS_REFRESH}.timer"]


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
    steps = list(names())
    noop = "; ".join(f"step_{step}() {{ :; }}" for step in steps if step != "identity")
    done = sourced(program, tmp_path, f'{noop}; step_identity() {{ NODE=$1; }}; main dev-cpu-01', {"install": ""})
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    pattern = r"slurmforge-join: dev-cpu-01 joined in \d+\.\d{3} s \((\w+ \d+ ms(, )?){" + str(len(names())) + r"}\)"
    assert re.fullmatch(pattern, last), last
    assert [part.split()[0] for part in last.split("(", 1)[1].rstrip(")").split(", ")] == steps


@pytest.mark.parametrize(("load_state", "in_unit"), [("loaded", True), ("not-found", False)])
def test_as_user_data_it_installs_itself_and_joins_in_its_unit(tmp_path: Path, load_state: str, in_unit: bool) -> None:
    """cloud-init's copy installs the program and hands the join to the image's unit, which
    tries again until it succeeds (as at every boot); with no such unit it joins itself."""
    spec = load_spec(ROOT / "examples/local.yaml")
    program = render_join(spec, aws_settings(spec))
    steps = list(names())
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


def test_a_fresh_nas_gets_every_directory_of_the_layout_before_anything_mounts_it(tmp_path: Path) -> None:
    """A new EFS has only its root: the nas step mounts the root once (the NFS options, the
    source's root), makes each directory of the layout that is missing (Slurm's state too)
    and unmounts it; the mounts that follow find their directories. `mount` here stands in
    for the NFS server: the root 'mounted' is a directory of this test."""
    spec = load_spec(ROOT / "examples/local.yaml")
    program = render_join(spec, aws_settings(spec))
    server = tmp_path / "efs-root"
    (server / "home").mkdir(parents=True)  # one of them exists already: left alone
    stubs = {  # the root mount: the test's directory appears at the mount point
        "mount": f'target="${{!#}}"; rmdir "$target" && ln -s {server} "$target"',
        "umount": 'rm "$1" && mkdir "$1"',
        "mountpoint": "true"}  # this machine's /home etc. are not the test's to copy
    done = sourced(program, tmp_path, "nas_directories", stubs)
    assert done.returncode == 0, done.stderr
    layout = sorted(spec.storage.nas.mounts.model_dump())
    assert sorted(p.name for p in server.iterdir()) == layout == sorted(["home", "software", "slurm_state"])
    mount, umount = [c for c in calls(tmp_path) if not c.startswith("mountpoint")]
    assert mount.startswith(f"mount -t nfs4 -o {NFS_OPTIONS} fs-1.efs.eu-west-1.amazonaws.com:/ /run/slurmforge-nas.")
    assert umount == f"umount {mount.split()[-1]}"
    assert [line for line in done.stdout.splitlines() if "made" in line] == [
        "slurmforge-join: changed: made software on the NAS", "slurmforge-join: changed: made slurm_state on the NAS"]


def test_steps_run_only_what_is_asked(tmp_path: Path) -> None:
    """A head node's first pass (munge key, NAS) before the rollout publishes the kit there;
    a step that does not exist stops the join before any step runs."""
    spec = load_spec(ROOT / "examples/local.yaml")
    program = render_join(spec, local_settings(spec, LocalProvider(spec, "img").hosts()))
    steps = list(names())
    record = "; ".join(f"step_{s}() {{ echo step {s} >> {tmp_path}/calls.log; }}" for s in steps)
    record += f"; step_identity() {{ NODE=$1; echo step identity >> {tmp_path}/calls.log; }}"
    stubs = {"install": "", "flock": ""}
    joined = sourced(program, tmp_path, f'{record}; main --steps munge,nas dev-login', stubs)
    assert joined.returncode == 0, joined.stderr
    assert [c for c in calls(tmp_path) if c.startswith("step")] == ["step identity", "step munge", "step nas"]
    (tmp_path / "calls.log").unlink()
    wrong = sourced(program, tmp_path, f"{record}; main --steps munge,slurmdd dev-login", stubs)
    assert wrong.returncode == 1 and "no step slurmdd" in wrong.stderr
    assert not [c for c in calls(tmp_path) if c.startswith("step")]


def test_what_the_machine_held_under_a_nas_mount_point_is_copied_onto_the_nas_first(tmp_path: Path) -> None:
    """An instance from the AMI has the login the rollout arrived with in /home/admin; the
    NAS mounted over /home would hide it (its authorized_keys, Ansible's temporary files:
    the rollout lost the controller at its next task). It is copied onto the NAS before the
    mount, what the NAS has already winning (another host copied it first)."""
    spec = load_spec(ROOT / "examples/local.yaml")
    program = render_join(spec, aws_settings(spec))
    server, local = tmp_path / "efs-root", tmp_path / "local"
    (server / "home" / "admin").mkdir(parents=True)
    (server / "home" / "admin" / ".bashrc").write_text("the NAS's\n")
    (local / "home" / "admin" / ".ssh").mkdir(parents=True)
    (local / "home" / "admin" / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA admin\n")
    (local / "home" / "admin" / ".bashrc").write_text("this machine's\n")
    (local / "software").mkdir()  # empty: nothing to copy
    stubs = {"mount": f'target="${{!#}}"; rmdir "$target" && ln -s {server} "$target"',
             "umount": 'rm "$1" && mkdir "$1"', "mountpoint": "false"}
    mounts = f'NAS_MOUNTS=("home {local}/home" "software {local}/software"); '
    done = sourced(program, tmp_path, mounts + "nas_directories", stubs)
    assert done.returncode == 0, done.stderr
    assert (server / "home" / "admin" / ".ssh" / "authorized_keys").read_text() == "ssh-ed25519 AAAA admin\n"
    assert (server / "home" / "admin" / ".bashrc").read_text() == "the NAS's\n"
    assert sorted(p.name for p in (server / "software").iterdir()) == []
    assert [line for line in done.stdout.splitlines() if "copied" in line] == [
        f"slurmforge-join: changed: copied 1 item(s) of this machine's {local}/home onto the NAS"]  # .ssh/


def test_a_mount_whose_file_system_went_away_is_let_go(tmp_path: Path) -> None:
    """A CephFS FUSE mount whose daemon died with its Ceph host (seen on the local cluster
    after the Ceph host was made again: "mkdir: cannot stat '/data': No such device") fails
    every stat; the join lets it go so it is mounted again, instead of failing the join."""
    spec = load_spec(ROOT / "examples/local.yaml")
    program = render_join(spec, local_settings(spec, LocalProvider(spec, "img").hosts()))
    count = tmp_path / "stats"
    stubs = {"stat": f'n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}; [ "$n" -ge 1 ]',
             "umount": ""}
    mounted = "/proc"  # a mount point of this machine, standing for the dead one (umount is a stand-in)
    dead = sourced(program, tmp_path, f"let_go_if_dead {mounted}", stubs)
    assert dead.returncode == 0, dead.stderr
    assert f"umount -l {mounted}" in calls(tmp_path) and "was a mount whose file system went away" in dead.stdout
    (tmp_path / "calls.log").unlink()
    alive = sourced(program, tmp_path, f"let_go_if_dead {mounted}", stubs)  # stat answers now
    assert alive.returncode == 0 and not [c for c in calls(tmp_path) if c.startswith("umount")]
    unmounted = sourced(program, tmp_path, f"echo 0 > {count}; let_go_if_dead {tmp_path}/not-a-mount", stubs)
    assert unmounted.returncode == 0 and not [c for c in calls(tmp_path) if c.startswith("umount")]


def test_pool_nodes_coming_and_going_are_a_refresh_not_a_change(tmp_path: Path) -> None:
    """The pool hosts are the scheduler service's machines: a join that only brings them up
    to date says "refreshed" (no rollout counts it as a change); a fixed host's line is a change."""
    spec, hosts, program = local_program()
    kit = kit_with_pool_hosts(tmp_path, spec, hosts, "10.89.7.23 dev-cpu-03\n")
    etc_hosts = tmp_path / "etc" / "hosts"
    etc_hosts.parent.mkdir()
    etc_hosts.write_text("127.0.0.1 localhost\n")
    first = sourced(program, tmp_path, hosts_run(tmp_path, kit) + "update_hosts", {})
    assert first.returncode == 0 and f"changed {etc_hosts}" in first.stdout, first.stdout + first.stderr
    (kit / KIT_POOL_HOSTS).write_text("10.89.7.24 dev-cpu-04\n")  # one pool node went, another came
    pool = sourced(program, tmp_path, hosts_run(tmp_path, kit) + "update_hosts", {})
    assert pool.returncode == 0, pool.stderr
    assert f"refreshed {etc_hosts} (pool nodes)" in pool.stdout and "changed" not in pool.stdout
    assert "10.89.7.24 dev-cpu-04" in etc_hosts.read_text() and "dev-cpu-03" not in etc_hosts.read_text()
    fixed = next(h for h in hosts if not h.dynamic)
    etc_hosts.write_text(etc_hosts.read_text().replace(f"{fixed.address} {fixed.name}", f"10.1.1.1 {fixed.name}"))
    moved = sourced(program, tmp_path, hosts_run(tmp_path, kit) + "update_hosts", {})
    assert moved.returncode == 0 and f"changed {etc_hosts}" in moved.stdout
