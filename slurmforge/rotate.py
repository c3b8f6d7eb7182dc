"""`slurmforge rotate munge-key | db-password | jwt-key`: a new secret on a live cluster, no
job lost.

The new value goes into the secret store first (slurmforge.secrets.SecretStore: the
secrets directory, and on AWS Secrets Manager), so that a machine joining from then on
gets it; then to every running node.

Munge key. Slurm's daemons hold no key: every credential they make or check is one call
to the node's munged (a fresh libmunge context each time), so only munged changes key and
no Slurm daemon restarts. Between the first munged on the new key and the last, two nodes
on different keys cannot talk; that window is kept short in two passes: every node is
handed the new key beside the old one (`munge.key.new`, and the join program's copy, so a
reboot joins with it), then every node swaps the files and restarts munged at one agreed
instant by its own clock (`SWITCH_DELAY` after the last hand-over). What runs is not
touched: a job's processes and slurmstepd do not use munge while they compute; a message
between daemons that fails in the window (a step's completion, a node's ping) is retried
by Slurm; a command run in the window (`sbatch`, `srun`, `squeue`) fails with "Protocol
authentication error" and works again right after.

Database password. As the accounting user itself, with the password slurmdbd uses now:
SET PASSWORD for itself (no privilege needed; MariaDB keeps slurmdbd's open connections), then slurmdbd's
password file, then slurmdbd restarts; while it is down slurmctld queues the accounting
records and sends them once it is back, so sacct misses no job.

JWT key (the REST API's). Only the controllers hold it: slurmctld signs `scontrol token`'s
tokens with it, slurmctld and slurmdbd check every REST request's token with it. The new
key goes to every controller, then slurmdbd restarts, the slurmctld in control
reconfigures (24.11 starts a new slurmctld, which reads the key; jobs are not touched) and
a standby backup restarts (a standby restart touches no job either). Tokens signed with the
old key are refused from then on: users run `scontrol token` again.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurmforge.contract import AWS_VARS_FILE, JOIN_SECRETS_DIR, JWT_KEY_FILE, SLURMDBD_SECRET_CONF
from slurmforge.errors import ProvisionError
from slurmforge.fleet import on_each, on_each_machine, running_nodes
from slurmforge.hosts import Host, HostRole, controller_name
from slurmforge.remote.node import NodeExecutor, executor_for
from slurmforge.secrets import (
    CLUSTER_SECRETS,
    DB_PASSWORD,
    JWT_KEY,
    MUNGE_KEY,
    SecretStore,
    new_db_password,
    new_munge_key,
)
from slurmforge.spec import Cluster

SWITCH_DELAY = 1.5
"""Seconds between the last node's hand-over and the agreed instant of the switch: every
node's `podman exec`/ssh has started its wait by then."""
NODE_TIMEOUT = 60
DBD_WAIT = 60.0

MUNGE_DIR = "/etc/munge"
JOIN_KEY = f"{JOIN_SECRETS_DIR}/{MUNGE_KEY}"

# stdin: the key in base64. The join program's copy only where the machine does not
# provide it (a local pool container has it mounted read-only from the secret store's file).
STAGE_SCRIPT = f"""set -e
umask 077
base64 -d > {MUNGE_DIR}/munge.key.new
chown munge:munge {MUNGE_DIR}/munge.key.new
chmod 0400 {MUNGE_DIR}/munge.key.new
if [ -e {JOIN_KEY} ] && ! findmnt --noheadings --mountpoint {JOIN_KEY} >/dev/null; then
    install -o root -g root -m 0400 {MUNGE_DIR}/munge.key.new {JOIN_KEY}
fi
"""
# $1: the instant of the switch in ms since the epoch
SWITCH_SCRIPT = f"""set -e
wait=$(( $1 - $(date +%s%N) / 1000000 ))
if [ "$wait" -gt 0 ]; then sleep "$(printf '%d.%03d' $((wait / 1000)) $((wait % 1000)))"; fi
mv -f {MUNGE_DIR}/munge.key.new {MUNGE_DIR}/munge.key
systemctl restart munge
date +%s%N
"""
# stdin: a credential made on the controller; decoding it proves the same key
CHECK_SCRIPT = "unmunge >/dev/null"
# $1 user, $2 host, $3 port; stdin: the new password. The current one is the one slurmdbd uses.
DB_SCRIPT = f"""set -e
umask 077
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
read -r new
old=$(sed -n 's/^StoragePass=//p' {SLURMDBD_SECRET_CONF})
printf '[client]\\nuser=%s\\npassword=%s\\nhost=%s\\nport=%s\\n' "$1" "$old" "$2" "$3" > "$d/my.cnf"
printf "SET PASSWORD = PASSWORD('%s');\\n" "$new" | mariadb --defaults-extra-file="$d/my.cnf"
printf 'StoragePass=%s\\n' "$new" > "$d/conf"
install -o slurm -g slurm -m 0600 "$d/conf" {SLURMDBD_SECRET_CONF}
systemctl restart slurmdbd
"""


@dataclass
class Rotation:
    """What a rotation did and how long it took."""

    secret: str
    nodes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    switch_spread: float = 0.0
    """Seconds between the first and the last node's munged restart."""

    def summary(self) -> str:
        spread = f"; munged restarted on all within {self.switch_spread:.2f} s" if self.nodes else ""
        where = f"{len(self.nodes)} node(s)" if self.nodes else "slurmdbd"
        if self.secret == "JWT key":
            return (f"rotated the JWT key on {', '.join(self.nodes)} in {self.seconds:.1f} s; tokens signed "
                    "with the old key are refused: run `scontrol token` again")
        return f"rotated the {self.secret} on {where} in {self.seconds:.1f} s{spread}; no Slurm daemon restarted" \
            if self.secret == "munge key" else f"rotated the {self.secret} ({where} restarted) in {self.seconds:.1f} s"


def _check(done_ok: bool, what: str, host: str, reason: Callable[[], str]) -> None:
    if not done_ok:
        raise ProvisionError(f"{what} failed on {host}: {reason()}")


def rotate_munge_key(spec: Cluster, hosts: Sequence[Host], store: SecretStore,
                     clock: Callable[[], float] = time.time) -> Rotation:
    start = time.monotonic()
    key = new_munge_key()
    store.put(MUNGE_KEY, key)
    nodes = running_nodes(spec, hosts)
    encoded = base64.b64encode(key).decode() + "\n"

    def stage(host: Host) -> None:
        done = executor_for(host).run_with_input(["sh", "-c", STAGE_SCRIPT], encoded, NODE_TIMEOUT)
        _check(done.ok, "handing over the new munge key", host.name, done.reason)

    nodes = on_each_machine(spec, hosts, nodes, stage)
    switch_at = int((clock() + SWITCH_DELAY) * 1000)
    restarted: list[float] = []
    lock = threading.Lock()

    def switch(host: Host) -> None:
        done = executor_for(host).run(["sh", "-c", SWITCH_SCRIPT, "sh", str(switch_at)], timeout=NODE_TIMEOUT)
        _check(done.ok, "switching munged to the new key", host.name, done.reason)
        with lock:
            restarted.append(int(done.stdout.split()[-1]) / 1e9)

    nodes = on_each_machine(spec, hosts, nodes, switch)
    controller = executor_for(next(h for h in nodes if h.name == controller_name(spec)))
    credential = controller.run(["munge", "-n"], timeout=NODE_TIMEOUT)
    _check(credential.ok, "munge -n", controller.name, credential.reason)

    def check(host: Host) -> None:
        done = executor_for(host).run_with_input(["sh", "-c", CHECK_SCRIPT], credential.stdout, NODE_TIMEOUT)
        _check(done.ok, "decoding the controller's credential with the new key", host.name, done.reason)

    nodes = on_each_machine(spec, hosts, nodes, check)
    return Rotation("munge key", [h.name for h in nodes], time.monotonic() - start,
                    max(restarted) - min(restarted) if restarted else 0.0)


def rotate_db_password(spec: Cluster, hosts: Sequence[Host], store: SecretStore) -> Rotation:
    db = spec.accounting.database
    if not spec.accounting.enabled:
        raise ProvisionError("rotate db-password: the spec has no accounting (accounting.enabled: false)")
    start = time.monotonic()
    dbd = next((h for h in hosts if h.name == controller_name(spec)), None)
    if dbd is None:
        raise ProvisionError(f"rotate db-password: no host {controller_name(spec)} (slurmdbd's) in the inventory")
    password = new_db_password()
    node = executor_for(dbd)
    store.put(DB_PASSWORD, password.encode())
    host = db.host if db.kind == "external" and db.host else "localhost"
    done = node.run_with_input(["sh", "-c", DB_SCRIPT, "sh", db.user, str(host), str(db.port)],
                              password + "\n", NODE_TIMEOUT)
    _check(done.ok, "changing the accounting database password", dbd.name, done.reason)
    _wait_for_slurmdbd(node)
    return Rotation("database password", [], time.monotonic() - start)


# stdin: the key in base64; the file as the rollout writes it (roles/slurm_controller/tasks/jwt_key.yml)
JWT_SCRIPT = f"""set -e
umask 077
base64 -d > {JWT_KEY_FILE}.new
chown slurm:slurm {JWT_KEY_FILE}.new
chmod 0600 {JWT_KEY_FILE}.new
mv -f {JWT_KEY_FILE}.new {JWT_KEY_FILE}
"""


def rotate_jwt_key(spec: Cluster, hosts: Sequence[Host], store: SecretStore) -> Rotation:
    start = time.monotonic()
    controllers = [h for h in hosts if h.role is HostRole.CONTROLLER]
    primary = next((h for h in controllers if h.name == controller_name(spec)), None)
    if primary is None:
        raise ProvisionError(f"rotate jwt-key: no host {controller_name(spec)} (the controller) in the inventory")
    secret = next(s for s in CLUSTER_SECRETS if s.name == JWT_KEY)
    key = secret.make()
    store.put(JWT_KEY, key)
    encoded = base64.b64encode(key).decode() + "\n"

    def hand_over(host: Host) -> None:
        done = executor_for(host).run_with_input(["sh", "-c", JWT_SCRIPT], encoded, NODE_TIMEOUT)
        _check(done.ok, "writing the new JWT key", host.name, done.reason)

    on_each(controllers, hand_over)
    node = executor_for(primary)
    if spec.accounting.enabled:
        done = node.run(["systemctl", "try-restart", "slurmdbd"], timeout=NODE_TIMEOUT)
        _check(done.ok, "restarting slurmdbd on the new key", primary.name, done.reason)
        _wait_for_slurmdbd(node)
    done = node.run(["scontrol", "reconfigure"], timeout=NODE_TIMEOUT)
    _check(done.ok, "scontrol reconfigure (slurmctld reads the new key)", primary.name, done.reason)
    for backup in (h for h in controllers if h is not primary):
        done = executor_for(backup).run(["systemctl", "try-restart", "slurmctld"], timeout=NODE_TIMEOUT)
        _check(done.ok, "restarting the standby slurmctld on the new key", backup.name, done.reason)
    token = _wait_for_token(node)
    _check(bool(token), "scontrol token (a token signed with the new key)", primary.name, lambda: "no token")
    return Rotation("JWT key", [h.name for h in controllers], time.monotonic() - start)


def _wait_for_token(node: NodeExecutor) -> str:
    """A token from the slurmctld in control once it runs on the new key."""
    deadline = time.monotonic() + DBD_WAIT
    while True:
        done = node.run(["scontrol", "token", "lifespan=60"], timeout=15)
        if done.ok and "SLURM_JWT=" in done.stdout:
            return done.stdout.strip()
        if time.monotonic() > deadline:
            raise ProvisionError(f"slurmctld gave no token within {DBD_WAIT:.0f} s of its reconfigure: "
                                 f"{done.reason()}")
        time.sleep(0.5)


def _wait_for_slurmdbd(node: NodeExecutor) -> None:
    deadline = time.monotonic() + DBD_WAIT
    while True:
        done = node.run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], timeout=15)
        if done.ok and done.stdout.strip():
            return
        if time.monotonic() > deadline:
            raise ProvisionError(f"slurmdbd did not answer within {DBD_WAIT:.0f} s after its restart: {done.reason()}")
        time.sleep(0.5)


def store_for(spec: Cluster, inventory_dir: Path, directory: Path) -> SecretStore:
    """The cluster's secret store: its secrets directory, and on AWS Secrets Manager by the
    ARNs the inventory was written with (boto3, the stack's region)."""
    if spec.target.kind != "aws":
        return SecretStore(directory)
    import yaml


    try:
        aws = yaml.safe_load((inventory_dir / AWS_VARS_FILE).read_text()) or {}
    except OSError as exc:
        raise ProvisionError(f"{inventory_dir / AWS_VARS_FILE}: {exc.strerror}; fix: `slurmforge inventory`") from None
    arns = aws.get("slurmforge_aws_secret_arns") or {}
    import boto3  # type: ignore[import-untyped]

    client = boto3.client("secretsmanager", region_name=aws.get("slurmforge_aws_region") or spec.target.region)
    return SecretStore(directory, client, {s.name: arns[s.stack_key] for s in CLUSTER_SECRETS if s.stack_key in arns})


def dumps(rotation: Rotation) -> str:
    return json.dumps({"secret": rotation.secret, "nodes": rotation.nodes, "seconds": round(rotation.seconds, 2),
                       "switch_spread": round(rotation.switch_spread, 3)})
