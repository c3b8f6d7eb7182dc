"""Every step a compute node needs to serve jobs is the join program's (templates/node/join.sh.j2),
so a machine the scheduler service makes - a replacement, a power-up - is the node the rollout
made. Held here at two levels:

- the rollout: every play of playbooks/cluster.yml that reaches a compute node does nothing
  to that node but run the join program (or hand it its inputs, check, or act once for the
  whole cluster); a role that configured a compute node itself - the gpu role made the local
  GPUs' device files, so a replaced GPU node's slurmd stopped on `fatal: can't stat gres.conf
  file /dev/nvidia0` - fails this test, naming the task;
- the program: for a node of each pool kind, the machine the service makes runs the same
  program as the rollout, with the same steps, and the gpus step gives a GPU pool's node its
  devices (the local target's stand-ins) and a CPU node none.

The live comparison of a service-made and a rollout-made node (packages, units, /dev/nvidia*,
`slurmd -C`, the node's Gres) is tests/integration/test_node_health.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from test_join import sourced as join_sourced

from slurmforge.contract import JOIN_PROGRAM, JOIN_STEPS_FILE, NVIDIA_DEVICES_UNIT, PATHS
from slurmforge.hosts import HostRole
from slurmforge.inventory import hosts_document
from slurmforge.local.container import compute_container
from slurmforge.local.provider import LocalProvider
from slurmforge.node.program import JoinSettings, local_settings, render_join
from slurmforge.node.steps import names
from slurmforge.spec import Cluster, load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "examples" / "local.yaml"

# ------------------------------------------------------------------ the rollout's plays

COMPUTE_GROUPS = {"all", "slurm_cluster", "slurm_compute", "slurm_gpu"}
"""The inventory groups a compute node is in (inventory.hosts_document), its pool's aside."""


def reaches_compute(pattern: str) -> bool:
    """Whether a play's hosts pattern (`a:b:!c`, as cluster.yml writes them) takes a compute node."""
    parts = pattern.split(":")
    included = any(p in COMPUTE_GROUPS or p.startswith("pool_") for p in parts if not p.startswith("!"))
    excluded = any(p[1:] in COMPUTE_GROUPS - {"all", "slurm_cluster"} for p in parts if p.startswith("!"))
    return included and not excluded


def task_file(role: str, name: str) -> Path:
    return ROOT / "roles" / role / "tasks" / f"{name.removesuffix('.yml')}.yml"


def tasks_of(path: Path, role: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, task) of a task file, includes followed (include_tasks in the role,
    include_role's tasks_from), blocks opened."""
    out: list[tuple[str, dict[str, Any]]] = []
    for task in yaml.safe_load(path.read_text()) or []:
        out += expand_task(task, role, f"{path.relative_to(ROOT)}: {task.get('name', '?')}")
    return out


def expand_task(task: dict[str, Any], role: str, where: str) -> list[tuple[str, dict[str, Any]]]:
    if "block" in task:
        return [pair for t in task["block"] for pair in expand_task({**t, **{k: v for k, v in task.items()
                                                                            if k == "when"}}, role, where)]
    if "ansible.builtin.include_tasks" in task:
        return tasks_of(task_file(role, task["ansible.builtin.include_tasks"]), role)
    if "ansible.builtin.include_role" in task:
        included = task["ansible.builtin.include_role"]
        return tasks_of(task_file(included["name"], included.get("tasks_from", "main")), included["name"])
    return [(where, task)]


def play_tasks(play: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    for role in play.get("roles", []):
        found += tasks_of(task_file(role, "main"), role)
    for task in play.get("tasks", []):
        found += expand_task(task, "", f"playbooks/cluster.yml: {task.get('name', '?')}")
    return found


def runs_join_program(task: dict[str, Any]) -> bool:
    command = task.get("ansible.builtin.command")
    argv = command.get("argv") if isinstance(command, dict) else None
    if isinstance(argv, list):  # the program first
        return bool(argv) and "slurmforge_paths.join_program" in str(argv[0])
    return isinstance(argv, str) and re.match(r"\{\{ *\[ *slurmforge_paths\.join_program\b", argv.strip()) is not None


def hands_inputs(task: dict[str, Any]) -> bool:
    """Gives the program what a machine the service makes gets from its provider (the local
    container's read-only mounts, the EC2 user data): the program, the munge key, the steps file."""
    entries = (task.get("slurmforge_files") or {}).get("entries", [])
    paths = {"slurmforge_paths.join_program", "slurmforge_paths.join_secrets", "slurmforge_paths.join_steps"}
    return bool(entries) and all(any(p in str(e.get("path")) for p in paths) for e in entries)


def is_check(task: dict[str, Any]) -> bool:
    return (task.get("changed_when") is False or "ansible.builtin.assert" in task or "ansible.builtin.wait_for" in task
            or "ansible.builtin.stat" in task)


def not_on_compute(task: dict[str, Any]) -> bool:
    when = " ".join(map(str, task.get("when", []) if isinstance(task.get("when"), list) else [task.get("when", "")]))
    return "slurmforge_role == 'controller'" in when


def verdict(task: dict[str, Any]) -> str | None:
    """Why the task is no step of the node's own (None: it is one, and the program lacks it)."""
    if runs_join_program(task):
        return "the join program"
    if hands_inputs(task):
        return "the program's inputs"
    if task.get("run_once") or task.get("delegate_to") == "localhost":
        return "once for the cluster"
    if not_on_compute(task):
        return "not on compute nodes"
    if is_check(task):
        return "a check"
    return None


def compute_plays() -> list[dict[str, Any]]:
    plays = yaml.safe_load((ROOT / "playbooks" / "cluster.yml").read_text())
    return [p for p in plays if "hosts" in p and reaches_compute(p["hosts"])]


def test_every_play_that_reaches_a_compute_node_only_runs_the_join_program() -> None:
    plays = compute_plays()
    assert len(plays) >= 2  # the join play and CephFS at least: the audit sees them
    lacking = [where for play in plays for where, task in play_tasks(play) if verdict(task) is None]
    assert not lacking, f"steps a machine the service makes would lack (move them into the join program): {lacking}"
    join_runs = [task for play in plays for _, task in play_tasks(play) if runs_join_program(task)]
    assert join_runs, "no play runs the join program on compute nodes"


def test_the_audit_catches_a_role_that_configures_a_node_itself() -> None:
    """What the gpu role did before: a file and a command on every GPU node, at rollout only."""
    made = {"ansible.builtin.copy": {"dest": "/etc/tmpfiles.d/slurmforge-gpus.conf"}}
    run = {"ansible.builtin.command": "systemd-tmpfiles --create", "changed_when": True}
    assert verdict(made) is None and verdict(run) is None
    assert reaches_compute("slurm_gpu") and reaches_compute("slurm_cluster")
    assert not reaches_compute("slurm_cluster:!slurm_compute") and not reaches_compute("slurm_controller")


def host_joins(spec: Cluster) -> dict[HostRole, dict[str, Any]]:
    """The inventory's slurmforge_join of one host per role (the local example's hosts)."""
    top = hosts_document(spec, LocalProvider(spec, "img").hosts())["all"]["children"]
    groups = top["slurm_cluster"]["children"]
    first = {role: next(iter(hosts.values()))["slurmforge_join"] for role, hosts in (
        (HostRole.CONTROLLER, groups["slurm_controller"]["hosts"]), (HostRole.LOGIN, groups["slurm_login"]["hosts"]),
        (HostRole.COMPUTE, groups["slurm_compute"]["hosts"]), (HostRole.CEPH, top["ceph"]["hosts"]))}
    return first


def role_task(name: str) -> dict[str, Any]:
    tasks = yaml.safe_load((ROOT / "roles" / "slurm_node" / "tasks" / "configure.yml").read_text())
    return next(task for task in tasks if task.get("name", "").startswith(name))


def rollout_run(join: dict[str, Any], node: str, slurm_node_pass: str = "steps") -> tuple[list[str], str]:
    """What roles/slurm_node does with a host's join: (the command it runs, the steps file's state)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    names_ = {"slurmforge_join": join, "slurm_node_pass": slurm_node_pass, "inventory_hostname": node,
              "slurmforge_paths": PATHS}
    argv = env.compile_expression(role_task("The host joins")["ansible.builtin.command"]["argv"].strip("{} "))(**names_)
    state = env.from_string(role_task("The steps this host's join runs at boot")["slurmforge_files"]["entries"][0]
                            ["state"]).render(**names_)
    return argv, state


def test_the_inventory_hands_each_host_its_steps_and_the_rollout_runs_them() -> None:
    """A compute node runs every step at rollout and keeps no steps file: a machine the service
    makes runs the program with no arguments at boot, every step; a head node all but the GPUs
    and slurmd (its roles run slurmctld or sackd), munge key and NAS first, before the rollout
    publishes the kit; a Ceph host, no Slurm node, the node exporter alone."""
    joins = host_joins(load_spec(LOCAL))
    compute = joins[HostRole.COMPUTE]
    assert compute == {"steps": list(names()[1:]), "before_kit": [], "at_boot": None, "secrets": ["munge.key"]}
    assert rollout_run(compute, "dev-cpu-01") == ([JOIN_PROGRAM, "--steps", ",".join(names()[1:]), "dev-cpu-01"],
                                                  "absent")
    head = ["munge", "nas", "kit", "hosts", "cephfs", "lmod", "exporter"]
    for role in (HostRole.CONTROLLER, HostRole.LOGIN):
        assert joins[role] == {"steps": head, "before_kit": ["munge", "nas"], "at_boot": ",".join(head),
                               "secrets": ["munge.key"]}
    assert rollout_run(joins[HostRole.LOGIN], "dev-login", "before_kit") == (
        [JOIN_PROGRAM, "--steps", "munge,nas", "dev-login"], "file")
    assert joins[HostRole.CEPH] == {"steps": ["exporter"], "before_kit": [], "at_boot": "exporter", "secrets": []}
    assert PATHS["join_program"] == JOIN_PROGRAM and PATHS["join_steps"] == JOIN_STEPS_FILE


# ------------------------------------------------------------------ the program, per pool kind

def local_program(spec: Cluster) -> str:
    return render_join(spec, local_settings(spec, LocalProvider(spec, "img").hosts()))


def run_main(program: str, tmp_path: Path, node: str, at_boot: bool) -> tuple[list[str], list[str]]:
    """The program's main on `node` with every step recorded: (steps run, the gpus step's
    device lines). At boot (the unit) it has no argument and takes the host name; at rollout
    (slurm_node) it is given the node's steps and name, as the inventory has them. The gpus
    step runs for real, against a tmpfiles stand-in."""
    record = "; ".join(f"step_{s}() {{ echo step {s} >> {tmp_path}/steps; }}" for s in names()
                       if s not in ("identity", "gpus"))
    script = (f"{record}; eval \"real_$(declare -f step_identity)\"; eval \"real_$(declare -f step_gpus)\"; "
              f"step_identity() {{ echo step identity >> {tmp_path}/steps; real_step_identity \"$@\"; }}; "
              f"step_gpus() {{ echo step gpus >> {tmp_path}/steps; real_step_gpus; }}; "
              f"GPU_STAND_INS_FILE={tmp_path}/gpus.conf; main {'' if at_boot else ' '.join(rollout_args(node))}")
    hostname = f'[ "$1" = -s ] && echo {node}; [ "$1" = -I ] && echo 10.0.0.9; true'
    out = sourced(program, tmp_path, script, {"hostname": hostname})
    assert out.returncode == 0, out.stderr
    steps = [line.split()[1] for line in (tmp_path / "steps").read_text().splitlines()]
    conf = tmp_path / "gpus.conf"
    devices = [line for line in conf.read_text().splitlines() if line.startswith("c ")] if conf.exists() else []
    return steps, devices


def rollout_args(node: str) -> list[str]:
    """The program's arguments when roles/slurm_node runs it on a compute node (from the inventory)."""
    return rollout_run(host_joins(load_spec(LOCAL))[HostRole.COMPUTE], node)[0][1:]


def sourced(program: str, tmp_path: Path, script: str, stubs: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """test_join's: the program sourced, `script` run, with stand-ins for what the gpus step and
    main call (and `stubs`)."""
    return join_sourced(program, tmp_path, script,
                        {"systemd-tmpfiles": "", "systemctl": "", "install": "", "flock": "", **(stubs or {})})


@pytest.mark.parametrize(("node", "devices"), [("dev-cpu-01", 0), ("dev-cpu-03", 0), ("dev-gpu-01", 2)],
                         ids=["cpu-static", "cpu-dynamic", "gpu-static"])
def test_a_replaced_node_and_a_rolled_out_one_run_the_same_program_and_steps(
        tmp_path: Path, node: str, devices: int) -> None:
    spec = load_spec(LOCAL)
    provider = LocalProvider(spec, "img", join_program=tmp_path / "rendered" / "join.sh", state_root=tmp_path / "st")
    container = compute_container(spec, provider.service_settings(), node)  # what the service makes
    mounted = {m.target: m for m in container.mounts}
    assert mounted[JOIN_PROGRAM].source == str((tmp_path / "rendered" / "join.sh").resolve())  # the rollout's file
    assert mounted[JOIN_PROGRAM].read_only and JOIN_STEPS_FILE not in mounted
    program = local_program(spec)
    (tmp_path / "boot").mkdir()
    (tmp_path / "rollout").mkdir()
    at_boot, boot_devices = run_main(program, tmp_path / "boot", node, at_boot=True)  # the unit's run: no arguments
    at_rollout, rollout_devices = run_main(program, tmp_path / "rollout", node, at_boot=False)  # slurm_node's: the name
    assert at_boot == at_rollout == list(names())
    assert boot_devices == rollout_devices == [f"c /dev/nvidia{i} 0666 root root - 195:{i}" for i in range(devices)]


def test_the_gpus_step_makes_lost_devices_again_at_every_run(tmp_path: Path) -> None:
    """systemd-tmpfiles makes the missing devices on every run (not only when the file changed:
    a device lost since the last join is made again), and the join says which it made; the
    file itself is written once."""
    program = local_program(load_spec(LOCAL))
    out = sourced(program, tmp_path, f"GPU_STAND_INS_FILE={tmp_path}/gpus.conf; NODE=dev-gpu-01; step_gpus; step_gpus")
    assert out.returncode == 0, out.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls.count(f"systemd-tmpfiles --create {tmp_path}/gpus.conf") == 2
    assert f"systemctl show -P LoadState {NVIDIA_DEVICES_UNIT}" in calls
    assert out.stdout.count(f"changed {tmp_path}/gpus.conf") == 1
    # no device files here (the stub makes none): each run says it made both
    assert out.stdout.count("changed: made /dev/nvidia0 /dev/nvidia1") == 2
    none = sourced(program, tmp_path, f"GPU_STAND_INS_FILE={tmp_path}/gpus.conf; NODE=dev-cpu-01; step_gpus")
    assert none.returncode == 0 and f"changed: removed {tmp_path}/gpus.conf" in none.stdout
    assert not (tmp_path / "gpus.conf").exists()


def test_on_aws_the_gpu_images_unit_makes_the_devices_and_its_failure_stops_the_join(tmp_path: Path) -> None:
    spec = load_spec(LOCAL)
    aws = render_join(spec, JoinSettings(target="aws", controllers=(("dev-controller", "10.1.0.1"),)))
    assert "GPU_STAND_INS=()" in aws  # no stand-ins: the driver's devices
    ok = sourced(aws, tmp_path, "NODE=t-gpu-01; step_gpus", {"systemctl": '[ "$1" = show ] && echo loaded; true'})
    assert ok.returncode == 0, ok.stderr
    assert f"systemctl start {NVIDIA_DEVICES_UNIT}" in (tmp_path / "calls.log").read_text()
    failed = sourced(aws, tmp_path, "NODE=t-gpu-01; step_gpus", {
        "systemctl": '[ "$1" = show ] && echo loaded; [ "$1" != start ]',
        "journalctl": "echo 'slurmforge-nvidia-devices: the NVIDIA driver found no GPU'"})
    assert failed.returncode == 1
    assert f"{NVIDIA_DEVICES_UNIT}: slurmforge-nvidia-devices: the NVIDIA driver found no GPU" in failed.stderr


# ------------------------------------------------------------------ slurmd's failure, on the NAS

JOURNAL = """slurmd: slurmd version 24.11.5 started
slurmd: error: Couldn't find the specified plugin name for gpu/nvml looking at all files
slurmd: fatal: can't stat gres.conf file /dev/nvidia0: No such file or directory
"""


@pytest.mark.parametrize(("result", "recorded"), [("exit-code", True), ("success", False)])
def test_a_slurmd_that_failed_leaves_its_fatal_line_in_the_kit(tmp_path: Path, result: str, recorded: bool) -> None:
    """slurmd's ExecStopPost: a failure's last fatal line, from the journal of that run, goes to
    the kit as `<epoch> <line>` under the node's name; a stop leaves nothing."""
    program = local_program(load_spec(LOCAL))
    journal = tmp_path / "journal"
    journal.write_text(JOURNAL)
    out = sourced(program, tmp_path, f"SLURMD_FAILURES={tmp_path}/slurmd; slurmd_stopped", {
        "journalctl": f"cat {journal}", "install": 'mkdir -p "${!#}"', "date": "echo 1700000000"})
    assert out.returncode == 0, out.stderr
    record = tmp_path / "slurmd" / "dev-gpu-01"
    if recorded:
        line = "fatal: can't stat gres.conf file /dev/nvidia0: No such file or directory"
        assert record.read_text() == f"1700000000 {line}\n"
        assert "journalctl -q --no-pager -o cat _SYSTEMD_INVOCATION_ID=run-1" in (tmp_path / "calls.log").read_text()
    else:
        assert not record.exists()


@pytest.fixture(autouse=True)
def _slurmd_environment(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    if "slurmd_that_failed" in request.node.name:
        result = "success" if "success" in request.node.name else "exit-code"
        monkeypatch.setenv("SERVICE_RESULT", result)
        monkeypatch.setenv("INVOCATION_ID", "run-1")
        monkeypatch.setenv("SLURMFORGE_NODE", "dev-gpu-01")


def test_slurmds_unit_records_its_failure_through_the_program() -> None:
    program = local_program(load_spec(LOCAL))
    assert f"ExecStopPost=-{JOIN_PROGRAM} --slurmd-stopped" in program
    assert "Environment=SLURMFORGE_NODE=$NODE" in program
    assert 'if [ "${1:-}" = --slurmd-stopped ]; then slurmd_stopped; return; fi' in program
