"""The stack, rehearsed: `pulumi up` of stacks/ on the stand-in (stack.StandInEngine), the
head nodes and Ceph hosts booted from the golden image it baked with their own user data,
then the admin's side as docs/aws.md has it: the stack outputs saved, `slurmforge
inventory --from-stack-outputs`, SSH to the login node's public address with the key pair
named in the spec (the launch's key, which the machines' cloud-init installs for `admin`
from the metadata service), and every host reached the way the rollout reaches it - the
inventory's connection settings, through the login node as jump host, with sudo.

The admin's commands run as subprocesses with a HOME of their own (the rehearsal's
~/.ssh/known_hosts, ~/.local/state) and an ssh agent holding the key, as docs/aws.md asks
of a user. The spec is examples/pools-aws.yaml made to fit this machine (`rehearsal_spec`).

A golden image baked before from the same inputs is kept (as image_phase keeps its own):
with `reuse`, the engine registers an AMI for it instead of baking again, as Pulumi leaves
an unchanged dynamic resource alone on a second `pulumi up`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slurmforge.distro import DEBIAN_13
from slurmforge.errors import ProvisionError, SpecError
from slurmforge.image import RECORD
from slurmforge.inventory import HOSTS_FILE
from slurmforge.local.image_cache import prune_older
from slurmforge.local.podman import Podman
from slurmforge.package_data import examples, playbooks
from slurmforge.spec import validate_data
from slurmforge.state_dirs import secrets_dir
from tests.harness.rehearsal import image_phase
from tests.harness.rehearsal.parent import ensure_parent
from tests.harness.rehearsal.stack import StackRun, StandInEngine, run_main, stack_config, stack_output_json
from tests.harness.rehearsal.stand_in import StandIn

SOURCE_SPEC = examples() / "pools-aws.yaml"
CLUSTER = "rehearsal"
SPOT_POOL, SPOT_PARTITION = "cpu-spot", "ml-cpu-spot"
NOTICE_SECONDS = 120.0
"""EC2's warning: the instance is taken this long after the interruption notice."""
BOOT_TIMEOUT = 300
SSH_TIMEOUT = 120
ROLLOUT_TIMEOUT = 1800


def rehearsal_spec(out: Path, static: int = 0) -> Path:
    """examples/pools-aws.yaml as this machine can hold it, validated like a user's file:
    the cluster named `rehearsal` (its secrets and state apart from any real cluster's);
    the CPU pool, at most two nodes (the first `static` of them static: min_nodes), and a
    CPU spot pool of one node falling back to it (the example's spot pool is a GPU one); no
    Ceph (its EBS volumes need udev, which the machines lack). What is cut is named in
    docs/rehearsal.md."""
    data = yaml.safe_load(SOURCE_SPEC.read_text())
    data["name"] = CLUSTER
    data["target"]["key_name"] = f"{CLUSTER}-admin"
    data["pools"] = [{**p, "max_nodes": 2, "min_nodes": static} for p in data["pools"] if p["kind"] == "cpu"]
    kept = {p["name"] for p in data["pools"]}
    data["partitions"] = [p for p in data["partitions"] if set(p["pools"]) <= kept]
    # the example's spot pool is a GPU one: a CPU spot pool falling back to on-demand stands for it
    data["pools"].append({"name": SPOT_POOL, "kind": "cpu", "instance_types": ["t3.medium"], "market": "spot",
                          "max_nodes": 1, "fallback": ["cpu"], "zones": ["us-east-1a", "us-east-1b"]})
    data["partitions"].append({"name": SPOT_PARTITION, "pools": [SPOT_POOL], "max_time": "1-00:00:00",
                               "default_time": "01:00:00", "allow_groups": ["ml-users"]})
    data["scheduling"] = {k: v for k, v in data["scheduling"].items() if k != "default_gpu_pool"}
    del data["storage"]["ceph"]
    try:
        validate_data(data, f"{SOURCE_SPEC.name} (rehearsal)")
    except SpecError as e:
        raise ProvisionError(f"the rehearsal's spec: {'; '.join(p.line() for p in e.problems)}") from None
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


class RehearsalEngine(StandInEngine):
    """The stand-in's engine, keeping each golden image it bakes (image_phase's cache) while
    `keep` says so (an image baked for one test alone is not kept: keeping it would drop the
    kept one the other tests reuse)."""

    def __init__(self, aws: StandIn, podman: Podman, reuse: bool) -> None:
        super().__init__(aws.session)
        self.aws, self.podman, self.reuse = aws, podman, reuse
        self.keep = True
        self.baked: dict[str, bool] = {}
        """variant -> baked now (False: an image from the same inputs reused)"""

    def create_dynamic(self, name: str, provider: Any, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        machines = self.aws.machines
        kept = image_phase.cache_tag(str(props["inputs_digest"]), machines.images[str(props["parent_ami"])])
        variant = str(props.get("variant", "base"))
        if self.reuse and self.podman.image_exists(kept):
            ami = str(self.ec2.register_image(Name=f"{props['cluster']}-node-{variant}-{props['inputs_digest']}",
                                              Architecture="x86_64")["ImageId"])
            machines.images[ami] = kept
            record = json.loads(self.podman.run(["run", "--rm", "--network=none", kept, "cat", RECORD]))
            self.baked[variant] = False
            return ami, {**props, "ami_id": ami, "slurm": record.get("slurm"), "packages": None, "build_seconds": 0}
        made, outs = super().create_dynamic(name, provider, props)
        machines.wait(f"AMI {made}'s image", lambda: made in machines.images, BOOT_TIMEOUT)
        if self.keep:
            self.podman.run(["tag", machines.images[made], kept])
            prune_older(self.podman, kept)
        self.baked[variant] = True
        return made, outs


@dataclass
class Host:
    name: str
    role: str
    private_ip: str
    public_ip: str | None
    instance_id: str = ""
    container: str = ""
    cloud_init: str = ""
    reached: str = ""
    """`<hostname> <user>` as the host printed them over the inventory's connection with
    the inventory's become (the rollout's way in)."""


@dataclass
class StackPhase:
    run: StackRun
    engine: RehearsalEngine
    workdir: Path
    spec: Path
    outputs_file: Path
    inventory: Path
    env: dict[str, str]
    """The admin's environment (its ~/.ssh, SSH_AUTH_SOCK, the AWS endpoint)."""
    hosts: list[Host]
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall seconds of each phase run so far (stack, head nodes booted, inventory, ssh,
    rollout, the first jobs, validate, the spot notice, down)."""


ADMIN_SSH = "SLURMFORGE_REHEARSAL_SSH"
"""The admin's ~/.ssh on this machine, in the admin's environment."""


def _admin(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = SSH_TIMEOUT) -> str:
    """`argv` as the admin runs it. ssh reads and writes a user's known_hosts in the
    password database's home, not HOME: the command runs in a mount namespace of its own
    where the admin's ~/.ssh is mounted over this machine's, which is never read or written
    (an address the rehearsal hands out again would otherwise meet the host key of an
    earlier run's machine)."""
    wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               'mkdir -p -m 0700 ~/.ssh && mount --bind "$0" ~/.ssh && exec "$@"', env.get(ADMIN_SSH, ""), *argv]
    done = subprocess.run(wrapped if ADMIN_SSH in env else argv, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise ProvisionError(f"the rehearsal's admin: `{' '.join(argv)}` failed ({done.returncode}): "
                             f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


def admin_env(workdir: Path, aws: StandIn) -> dict[str, str]:
    """The admin's environment: an ~/.ssh of its own (`_admin`), an ssh agent with the key
    pair's private key (docs/aws.md: `ssh-add` it), AWS credentials and region (the
    stand-in's)."""
    home = workdir / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True, mode=0o700)
    agent = _admin(["ssh-agent", "-s", "-a", str(workdir / "agent.sock")], dict(os.environ), workdir)
    pid = next(line.split("=", 1)[1].split(";", 1)[0] for line in agent.splitlines()
               if line.startswith("SSH_AGENT_PID"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SSH_", "ANSIBLE_"))}
    env |= {ADMIN_SSH: str(home / ".ssh"), "SSH_AUTH_SOCK": str(workdir / "agent.sock"),
            "SSH_AGENT_PID": pid, "AWS_ENDPOINT_URL": aws.url, "AWS_DEFAULT_REGION": aws.region,
            "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"}
    return env


def key_pair(aws: StandIn, workdir: Path, name: str, env: dict[str, str]) -> None:
    """The EC2 key pair docs/aws.md has the user make, imported; its key in the agent."""
    key = workdir / "home" / ".ssh" / f"{name}.pem"
    _admin(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], env, workdir)
    aws.session.client("ec2").import_key_pair(KeyName=name, PublicKeyMaterial=key.with_suffix(".pem.pub").read_bytes())
    _admin(["ssh-add", "-q", str(key)], env, workdir)


def run(aws: StandIn, workdir: Path, reuse: bool, podman: Podman | None = None, static: int = 0) -> StackPhase:
    podman = podman or Podman()
    ec2 = aws.session.client("ec2")
    parent = ensure_parent(podman)
    aws.machines.images[str(ec2.register_image(Name=DEBIAN_13.parent_ami, Architecture="x86_64")["ImageId"])] = parent
    spec = rehearsal_spec(workdir / "cluster.yaml", static)
    env = admin_env(workdir, aws)
    key_pair(aws, workdir, f"{CLUSTER}-admin", env)
    seconds: dict[str, float] = {}

    started = time.monotonic()
    engine = RehearsalEngine(aws, podman, reuse)
    stack = run_main(stack_config(spec, aws.region), engine)
    seconds["stack"] = time.monotonic() - started
    outputs_file = workdir / f"{CLUSTER}-outputs.json"
    outputs_file.write_text(json.dumps(stack_output_json(stack), indent=2))

    started = time.monotonic()
    hosts = [Host(h["name"], h["role"], h["private_ip"], h.get("public_ip")) for h in stack.outputs["hosts"]]
    hosts += [Host(h["name"], "ceph", h["private_ip"], None) for h in stack.outputs.get("ceph_hosts", [])]
    for host in hosts:
        found = ec2.describe_instances(Filters=[{"Name": "private-ip-address", "Values": [host.private_ip]}])
        host.instance_id = str(found["Reservations"][0]["Instances"][0]["InstanceId"])
    for host in hosts:
        aws.machines.wait(f"{host.name}'s machine", lambda h=host: h.instance_id in aws.machines.machines, BOOT_TIMEOUT)
        host.container = aws.machines.machines[host.instance_id].container
        status = podman.exec(host.container, ["cloud-init", "status", "--wait", "--long"], timeout=BOOT_TIMEOUT,
                             check=False)
        host.cloud_init = (status.stdout + status.stderr).strip()
    seconds["head nodes booted"] = time.monotonic() - started

    started = time.monotonic()
    inventory = workdir / CLUSTER  # the rollout's log is named after it
    _admin(["slurmforge", "inventory", "--from-stack-outputs", str(outputs_file), "--out", str(inventory)], env,
           workdir)
    seconds["inventory"] = time.monotonic() - started

    started = time.monotonic()
    login = next(h for h in hosts if h.role == "login")
    _admin(["ssh", "-o", "StrictHostKeyChecking=accept-new",
            f"admin@{login.public_ip}", "true"], env, workdir)
    ansible = env | {"ANSIBLE_CONFIG": str(playbooks() / "ansible.cfg")}
    reached = _admin(["ansible", "all", "-i", str(inventory / HOSTS_FILE), "-o", "-b", "-m", "shell",
                      "-a", 'echo "$(hostname) $(id -un)"'], ansible, workdir, timeout=300)
    for line in reached.splitlines():
        name, _, rest = line.partition(" | ")
        for host in hosts:
            if host.name == name.strip() and "rc=0" in rest:
                host.reached = rest.rsplit(")", 1)[-1].strip()
    seconds["ssh"] = time.monotonic() - started
    return StackPhase(stack, engine, workdir, spec, outputs_file, inventory, env, hosts, seconds)


def roll_out(phase: StackPhase) -> str:
    """`slurmforge rollout --inventory` as the admin runs it (docs/aws.md); its output."""
    started = time.monotonic()
    printed = _admin(["slurmforge", "rollout", "--yes", "--inventory", str(phase.inventory)], phase.env, phase.workdir,
                     timeout=ROLLOUT_TIMEOUT)
    phase.seconds["rollout"] = time.monotonic() - started
    return printed


JOB_TIMEOUT = 600
RANKS = ("""srun -N2 --ntasks-per-node=1 bash -c 'echo "$SLURM_PROCID $(hostname)" $(for h in """
         """$(scontrol show hostnames "$SLURM_JOB_NODELIST"); do getent hosts "$h" >/dev/null && echo "$h"; done)'""")
"""Two ranks on two nodes; each prints its rank, its host name and the job's node names it
resolves."""


def login_shell(phase: StackPhase, user: str, command: str, timeout: float = JOB_TIMEOUT) -> str:
    """`command` as `user` on the login node, reached as the admin reaches it (its Elastic
    IP, the key pair, sudo)."""
    login = next(h for h in phase.hosts if h.role == "login")
    return _admin(["ssh", f"admin@{login.public_ip}",
                   # not `sudo -i`: it leaves $ unescaped for the login shell, which would expand the job's
                   # variables before the job runs
                   "sudo", "-u", user, "-H", "bash", "-lc", shlex.quote(f"cd && {command}")], phase.env, phase.workdir,
                  timeout=timeout)


def first_jobs(phase: StackPhase, user: str) -> dict[str, str]:
    """A user's first jobs: two ranks on the pool's powered-down nodes (the scheduler service
    launches them through EC2 Fleet, they join with their user data), each naming itself and
    the job's nodes as it resolves them; then the same on the nodes up. What each printed."""
    started = time.monotonic()
    cold = login_shell(phase, user, RANKS)
    phase.seconds["pool nodes launched -> job done"] = time.monotonic() - started
    started = time.monotonic()
    warm = login_shell(phase, user, RANKS)
    phase.seconds["job on nodes up"] = time.monotonic() - started
    return {"cold": cold, "warm": warm}


def _wait(what: str, check: Any, timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise ProvisionError(f"the rehearsal: {what} not after {int(timeout)} s")
        time.sleep(every)
    return found


def _node_instance(aws: StandIn, node: str) -> dict[str, Any] | None:
    found = [i for r in aws.session.client("ec2").describe_instances(Filters=[
        {"Name": "tag:slurmforge:node", "Values": [node]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]}])["Reservations"] for i in r["Instances"]]
    return found[0] if found else None


def spot_interruption(phase: StackPhase, aws: StandIn, user: str) -> dict[str, Any]:
    """A job on the spot pool's node; EC2's interruption warning for its instance, sent as
    EC2 sends it (an EventBridge event, which the stack's rule puts on the spot queue), and
    the instance taken NOTICE_SECONDS later unless gone before. The scheduler service reads
    the queue, drains the node, signals the job and requeues it with the spot link cooled:
    the job runs again on the node, now an on-demand instance of the fallback link. What
    happened, for the caller to judge."""
    node = f"{CLUSTER}-{SPOT_POOL}-01"
    job = login_shell(phase, user, f"sbatch --parsable -p {SPOT_PARTITION} --requeue -o spot-%j.out "
                      "--wrap 'for i in $(seq 1800); do sleep 1; done'").strip().split(";")[0]
    state = f"squeue -h -j {job} -o %T"
    _wait(f"job {job} running", lambda: login_shell(phase, user, state).strip() == "RUNNING", BOOT_TIMEOUT, 2)
    first = _wait(f"{node}'s instance", lambda: _node_instance(aws, node), 30)
    ec2, events = aws.session.client("ec2"), aws.session.client("events")
    noticed = time.monotonic()
    events.put_events(Entries=[{"Source": "aws.ec2", "DetailType": "EC2 Spot Instance Interruption Warning",
                                "Resources": [f"arn:aws:ec2:{aws.region}::instance/{first['InstanceId']}"],
                                "Detail": json.dumps({"instance-id": first["InstanceId"],
                                                      "instance-action": "terminate"})}])

    def take() -> None:  # EC2 takes the instance at the end of the warning
        time.sleep(NOTICE_SECONDS)
        ec2.terminate_instances(InstanceIds=[first["InstanceId"]])

    threading.Thread(target=take, daemon=True, name="spot-taken").start()
    reason = _wait(f"{node} drained for the notice", lambda: next((line for line in login_shell(
        phase, "root", f"sinfo -h -n {node} -o '%E'").splitlines() if "interrupt" in line), None), NOTICE_SECONDS, 1)

    def again() -> dict[str, Any] | None:
        now = _node_instance(aws, node)
        running = now is not None and now["InstanceId"] != first["InstanceId"]
        return now if running and login_shell(phase, user, state).strip() == "RUNNING" else None

    second = _wait(f"job {job} running again", again, 3 * NOTICE_SECONDS + BOOT_TIMEOUT, 2)
    phase.seconds["spot notice -> job running again"] = time.monotonic() - noticed
    states = login_shell(phase, user, f"sacct -j {job} -X -D -n -P -o State").split()
    login_shell(phase, user, f"scancel {job}")
    return {"job": job, "first": first, "second": second, "reason": reason, "states": states}


def validate(phase: StackPhase) -> str:
    """`slurmforge validate --inventory` as docs/aws.md has the admin run it: the
    live-cluster checks on every host, through the login node."""
    started = time.monotonic()
    printed = _admin(["slurmforge", "validate", "--inventory", str(phase.inventory)], phase.env, phase.workdir,
                     timeout=JOB_TIMEOUT)
    phase.seconds["validate"] = time.monotonic() - started
    return printed


def down(phase: StackPhase) -> str:
    """`slurmforge down --inventory` as docs/aws.md has the admin run it before `pulumi
    destroy`: the scheduler service stopped, every pool machine it launched terminated."""
    started = time.monotonic()
    printed = _admin(["slurmforge", "down", "--yes", "--inventory", str(phase.inventory)], phase.env, phase.workdir,
                     timeout=JOB_TIMEOUT)
    phase.seconds["down"] = time.monotonic() - started
    return printed


def destroy(phase: StackPhase) -> list[str]:
    """`pulumi destroy`, and the admin's agent stopped; problems, one line each."""
    problems = phase.engine.destroy()
    subprocess.run(["ssh-agent", "-k"], env=phase.env, capture_output=True)
    shutil.rmtree(phase.workdir / "home" / ".ssh", ignore_errors=True)
    shutil.rmtree(secrets_dir(CLUSTER).parent, ignore_errors=True)  # what `inventory` copied from the stack
    return problems
