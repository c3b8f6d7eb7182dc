"""The slurmforge command line. People-facing messages live here; everything below
raises typed errors that `main` turns into one line and an exit code.

Each command imports what it uses when it runs: at start, this module imports only typer,
the standard library and slurmforge's light modules, so `--help` answers at once and
`validate` pays for the spec's models but not for Ansible, Pulumi, boto3 or jinja2
(tests/unit/test_startup.py; bench/startup_bench.py).

No `from __future__ import annotations` here (nor in lmod/cli.py): typer reads every
command's parameters when it starts, whichever command runs, and evaluates string
annotations twice per command (inspect.signature and get_type_hints). Annotations are
objects, so the option types above the commands are defined before them; a name imported
only for type checking is quoted.
"""

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from slurmforge.confirm import YesOpt, confirm
from slurmforge.console import FormatOpt, fail, note, paint, report_errors, say
from slurmforge.contract import PROMETHEUS_PORT
from slurmforge.errors import exit_code_table
from slurmforge.lmod.cli import modules_app
from slurmforge.target import Target, resolve, split_local

if TYPE_CHECKING:
    from slurmforge.drain import JobPolicy
    from slurmforge.plan.deployed import Deployed
    from slurmforge.plan.engine import ClusterPlan
    from slurmforge.spec import Cluster
    from slurmforge.tables import Format

EPILOG = ("\b\nThe cluster: --local [NAME] (this machine's), --inventory DIR (any), or\n"
          "the one remembered by `slurmforge use`. -h after a command: its examples.\n\b\n"
          "Exit codes:\n" + exit_code_table())
app = typer.Typer(
    name="slurmforge",
    help="One cluster.yaml to a working Slurm cluster: validate, render, bring up, check.",
    epilog=EPILOG,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(modules_app, name="modules", short_help="Publish LMOD modules; move their defaults.")


def example(*lines: str) -> str:
    """A command's help epilog: its examples, kept as written."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        say(f"slurmforge {version('slurmforge')}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_version, help="Print slurmforge's version and exit.")] = False) -> None:
    """One cluster.yaml to a working Slurm cluster: validate, render, bring up, check."""


SpecArg = Annotated[Path, typer.Argument(help="The cluster spec.", show_default=True)]
LocalFlag = Annotated[bool, typer.Option(
    "--local", help="The local cluster (podman containers on this machine): --local, or --local NAME when there "
    "are several.")]
FullRolloutFlag = Annotated[bool, typer.Option(
    "--full-rollout", help="Run Ansible on every node, even those whose last rollout was this one.")]
ClusterOpt = Annotated[str | None, typer.Option(
    "--cluster", metavar="NAME", help="The local cluster's name, as --local NAME (default: the only one).")]
InventoryOpt = Annotated[Path | None, typer.Option("--inventory", help="The cluster of this inventory (any target).")]
RequeueFlag = Annotated[bool, typer.Option(
    "--requeue", help="Requeue the jobs on nodes the rollout rebuilds or removes (drained first) instead of "
    "waiting for them to end.")]
DrainTimeoutOpt = Annotated[float | None, typer.Option(
    "--drain-timeout", min=0, help="Seconds to wait for the jobs on drained nodes before giving up, changing "
    "nothing (default: as long as they run).")]

DEFAULT_SPEC = Path("cluster.yaml")


def load(spec: Path) -> "Cluster":
    from slurmforge.spec import load_spec

    return report_errors(lambda: load_spec(spec))


@app.command(short_help="Check a spec, or a live cluster (--local, --inventory).", epilog=example(
    "slurmforge validate cluster.yaml", "slurmforge validate cluster.yaml --format json",
    "sudo slurmforge validate --local", "slurmforge validate --inventory DIR --format json"))
def validate(
    spec: SpecArg = DEFAULT_SPEC,
    inventory: Annotated[
        Path | None, typer.Option(help="Validate the live cluster of this inventory (testinfra suite).")
    ] = None,
    local: LocalFlag = False,
    cluster: ClusterOpt = None,
    fmt: FormatOpt = None,
) -> None:
    """Check a spec (every problem at once, exit 2 when invalid), or a live cluster (--local,
    --inventory): its testinfra suite, with progress on a terminal (exit 5 when a check
    fails). Without --format: one line; with it, a spec's problems or every check's result."""
    if inventory is not None or local or cluster is not None:
        _validate_live(_target(local, cluster, inventory, "validate"), fmt)
        return
    if fmt is None:
        parsed = load(spec)
        nodes = sum(p.max_nodes for p in parsed.pools)
        say(f"{spec}: valid - cluster '{parsed.name}' ({parsed.target.kind}), "
            f"{len(parsed.pools)} pools, {nodes} nodes at most, {len(parsed.partitions)} partitions")
        return
    from slurmforge.errors import SpecError
    from slurmforge.findings import spec_table
    from slurmforge.spec import load_spec
    from slurmforge.tables import emit

    try:
        found, problems = load_spec(spec), []
    except SpecError as exc:
        found, problems = None, exc.problems
    emit(spec_table(spec, found, problems), fmt)
    if problems:
        fail(f"{len(problems)} problem(s) in {spec}", SpecError.exit_code)


def _validate_live(target: Target, fmt: "Format | None") -> None:
    """The live-cluster suite on the target's inventory; a line of progress on a terminal."""
    from slurmforge.findings import checks_table
    from slurmforge.inventory import read_inventory
    from slurmforge.progress import ProgressLine
    from slurmforge.tables import emit
    from slurmforge.upgrade_start import current_image
    from slurmforge.validation import SuiteRun, image_args, run_checks

    where = _inventory_of(target)

    def run() -> SuiteRun:
        line = ProgressLine(f"validate {where.name}")
        try:
            return run_checks(where, image_args(current_image(where)), on_progress=line.update)
        finally:
            line.done()

    result = report_errors(run)
    if fmt is not None:
        emit(checks_table(result, report_errors(lambda: read_inventory(where)[0].name), where), fmt)
    if not result.ok:
        report_errors(lambda: _raise(result.error()))
    if fmt is None:
        say(f"{where}: the live cluster passed every check")


def _raise(error: Exception) -> None:
    raise error


@app.command("render", short_help="Render Slurm's config files from the spec.", epilog=example(
    "slurmforge render cluster.yaml --show slurm.conf", "slurmforge render cluster.yaml --out rendered/"))
def render_cmd(
    spec: SpecArg = DEFAULT_SPEC,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Write every config file here.")] = None,
    show: Annotated[
        str | None, typer.Option(help="Print one of them, e.g. slurm.conf.")
    ] = None,
) -> None:
    """Render slurm.conf, gres.conf, cgroup.conf, slurmdbd.conf, dma.conf and job_submit.lua from the spec."""
    from slurmforge.render import CONFIG_FILES, render, render_all

    if show is not None and show not in CONFIG_FILES:
        fail(f"--show {show}: not a config file; use one of {', '.join(CONFIG_FILES)}")
    if out_dir is None and show is None:
        fail("nothing to do; pass --out DIR or --show slurm.conf")
    cluster = load(spec)
    if show is not None:
        sys.stdout.write(render(cluster, show, source=spec.name))
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, text in render_all(cluster, source=spec.name).items():
                (out_dir / name).write_text(text)
        except OSError as exc:
            fail(f"cannot write to {out_dir}: {exc.strerror}", 1)
        note(f"wrote {', '.join(CONFIG_FILES)} to {out_dir}")



def _need_local(local: bool, command: str) -> None:
    """`up` makes the local cluster only; an AWS cluster is made by `pulumi up` (docs/aws.md)."""
    if not local:
        fail(f"{command}: `up` makes this machine's cluster: pass --local; an AWS cluster is made with "
             "`pulumi up`, then rolled out with `slurmforge rollout --inventory DIR` (docs/aws.md)")


def _target(local: bool, cluster: str | None, inventory_dir: Path | None, command: str) -> Target:
    """The cluster the options name, else the remembered one (named on stderr); a local one
    needs root, said before podman says anything."""
    target = report_errors(lambda: resolve(local, cluster, inventory_dir, command))
    if target.remembered:
        note(f"{command}: {target.describe()} (remembered by `slurmforge use`; --local or --inventory for another)")
    report_errors(target.require_access)
    return target


def _inventory_of(target: Target) -> Path:
    return report_errors(target.inventory_dir)


def _print_accounting(lines: list[str]) -> None:
    """What the rollout changed in slurmdbd (QoS, accounts, users, limits), kept or left waiting."""
    for line in lines:
        say(f"accounting: {line}")


def _confirm_drains(shown: "ClusterPlan | None", policy: "JobPolicy", yes: bool) -> None:
    """An apply that drains nodes affects jobs: say which and how, then ask."""
    if shown is None or not shown.drains:
        return
    nodes = sorted({n for d in shown.drains for n in d.nodes})
    jobs = "requeued at once (--requeue)" if policy.requeue else "left to end first"
    confirm("apply it", [f"this apply drains {len(nodes)} node(s) ({', '.join(nodes[:8])}"
                         f"{', ...' if len(nodes) > 8 else ''}); the jobs on them are {jobs}"], yes)


@app.command(short_help="Bring up or converge the local cluster.", epilog=example(
    "sudo slurmforge up --local                 # the example cluster",
    "sudo slurmforge up --local cluster.yaml --yes"))
def up(
    spec: Annotated[Path | None, typer.Argument(
        help="The cluster spec (default: the example local.yaml that comes with slurmforge).")] = None,
    local: LocalFlag = False,
    no_job: Annotated[bool, typer.Option("--no-job", help="Skip the sample job.")] = False,
    no_validate: Annotated[bool, typer.Option("--no-validate", help="Skip the testinfra validation.")] = False,
    full_rollout: FullRolloutFlag = False,
    requeue: RequeueFlag = False,
    drain_timeout: DrainTimeoutOpt = None,
    yes: YesOpt = False,
) -> None:
    """Bring up (or converge) a cluster: image, nodes, rollout, validation, a sample job. Nodes
    whose machines are made again or that leave are drained first (their jobs end, or are
    requeued with --requeue): the plan is shown and, when it drains nodes, asked for."""
    _need_local(local, "up")
    from slurmforge.drain import JobPolicy
    from slurmforge.local.up import up as local_up
    from slurmforge.package_data import examples, require
    from slurmforge.ui import PhaseDisplay
    from slurmforge.upgrade_start import current_image
    from slurmforge.validation import image_args, validate_inventory

    report_errors(lambda: require("ansible_runner", "deploy", "up"))
    report_errors(Target(True).require_access)
    chosen = spec or examples() / "local.yaml"
    policy = JobPolicy(requeue, drain_timeout)
    shown = _plan_first(load(chosen), True, None, policy)
    report_errors(lambda: _confirm_drains(shown, policy, yes))
    display = PhaseDisplay()
    report = report_errors(lambda: local_up(chosen, display, run_sample_job=not no_job,
                                            validate=None if no_validate else
                                            lambda where: validate_inventory(where, image_args(current_image(where)),
                                                                               on_progress=display.event),
                                            full_rollout=full_rollout, drains=shown.drains if shown else [],
                                            policy=policy),
                           interrupted="interrupted; what was created stays: `slurmforge down --local` removes it")
    changed = report.rollout.total_changed if report.rollout else 0
    _print_accounting(report.rollout.accounting if report.rollout else [])
    if report.drain_seconds is not None:
        say(f"drained nodes emptied in {report.drain_seconds:.0f} s"
            + (f"; requeued job(s) {', '.join(map(str, report.requeued))}" if report.requeued else ""))
    say(f"\ncluster {paint(report.cluster, '1', sys.stdout)} is up - rollout changed {changed} thing(s); "
        f"inventory {report.inventory}; log {report.log}")
    if report.job_output:
        say(report.job_output)
    say(f"get in:  slurmforge ssh --local login --user <name>   (or podman exec -it {report.login} bash)")


@app.command(short_help="Remove a local cluster, or an AWS cluster's pool machines.", epilog=example(
    "sudo slurmforge down --local dev", "sudo slurmforge down --local dev --purge --yes",
    "slurmforge down --inventory DIR            # before `pulumi destroy`"))
def down(
    local: LocalFlag = False,
    cluster: ClusterOpt = None,
    purge: Annotated[bool, typer.Option(help="Also delete the NAS data, secrets and cached images.")] = False,
    inventory_dir: Annotated[Path | None, typer.Option(
        "--inventory", help="An AWS cluster's inventory: stop the scheduler service and terminate every pool "
        "machine it launched (before `pulumi destroy`).")] = None,
    force: Annotated[bool, typer.Option(help="With --inventory: go on when a controller cannot be reached.")] = False,
    yes: YesOpt = False,
) -> None:
    """Remove the cluster's nodes and network (--local; the image cache stays unless --purge),
    or release an AWS cluster's pool machines (--inventory). Says what it removes (with
    --purge each directory and its size) and asks first."""
    target = _target(local, cluster, inventory_dir, "down")
    if target.inventory is not None and not target.local:
        from slurmforge.aws.teardown import release, summary
        from slurmforge.target import is_local_inventory

        if is_local_inventory(target.inventory):
            fail(f"down: {target.inventory} is a local cluster's inventory; remove it with "
                 f"`sudo slurmforge down --local {target.inventory.name}`")
        where = target.inventory
        report_errors(lambda: confirm("release them", [
            f"down: stop the scheduler service of {target.describe()} and terminate every pool machine it "
            "launched (their jobs are lost)"], yes))
        say(summary(report_errors(lambda: release(where, force=force))))
        return
    from slurmforge.local.manage import down as local_down
    from slurmforge.local.manage import down_plan

    spec, hosts, lines = report_errors(lambda: down_plan(target.name, purge))
    report_errors(lambda: confirm("remove it" + (" and delete that data" if purge else ""), lines, yes))
    say(f"removed {report_errors(lambda: local_down(spec, hosts, purge))}")


@app.command(short_help="Nodes, their roles, Slurm state, node image and Slurm version.", epilog=example(
    "sudo slurmforge status --local", "slurmforge status --inventory DIR --format json"))
def status(local: LocalFlag = False, cluster: ClusterOpt = None, inventory_dir: InventoryOpt = None,
           fmt: FormatOpt = None) -> None:
    """Nodes, their roles, Slurm state, node image (its record's digest) and Slurm version, on
    any cluster: the local one also shows each node's container."""
    from slurmforge.tables import emit

    target = _target(local, cluster, inventory_dir, "status")
    if target.local:
        from slurmforge.local.manage import status_table

        emit(report_errors(lambda: status_table(target.name)), fmt)
        return
    from slurmforge.cluster_status import inventory_status

    emit(report_errors(lambda: inventory_status(_inventory_of(target))), fmt)


@app.command(short_help="Every pool: nodes by state, jobs, GPUs, launches.", epilog=example(
    "sudo slurmforge pools --local", "slurmforge pools --inventory DIR --format json"))
def pools(local: LocalFlag = False, cluster: ClusterOpt = None, inventory_dir: InventoryOpt = None,
          fmt: FormatOpt = None) -> None:
    """Every pool as the scheduler service sees it: nodes by state, GPUs, launches, cooldowns,
    spend this month."""
    from slurmforge.service.main import DEFAULT_PORT
    from slurmforge.service.web import pools_table
    from slurmforge.tables import emit

    target = _target(local, cluster, inventory_dir, "pools")
    if target.local:
        from slurmforge.local.manage import pools_snapshot

        emit(pools_table(report_errors(lambda: pools_snapshot(target.name))), fmt)
        return
    from slurmforge.cluster_status import inventory_pools

    emit(pools_table(report_errors(lambda: inventory_pools(_inventory_of(target), DEFAULT_PORT))), fmt)


@app.command(short_help="A shell on a node of the local cluster.", epilog=example(
    "sudo slurmforge ssh --local login --user alice", "sudo slurmforge ssh --local dev dev-cpu-01"))
def ssh(
    node: Annotated[str, typer.Argument(help="login, controller, or a node name.")] = "login",
    local: LocalFlag = False,
    cluster: ClusterOpt = None,
    user: Annotated[str | None, typer.Option(help="Log in as this cluster user.")] = None,
) -> None:
    """A shell on a node of the local cluster (a cluster of machines: ssh to its login node)."""
    from slurmforge.local.manage import shell

    target = _target(local, cluster, None, "ssh")
    if not target.local:
        fail(f"ssh: {target.describe()} is not a local cluster: ssh to its login node (the inventory's "
             "ansible_host) yourself")
    report_errors(lambda: shell(target.name, node, user))


@app.command(short_help="Write the inventory of an AWS stack.", epilog=example(
    "pulumi stack output --json > outputs.json && slurmforge inventory --from-stack-outputs outputs.json"))
def inventory(
    spec: Annotated[Path | None, typer.Argument(
        help="The cluster spec (default: the one the stack was built from, as its outputs name it).")] = None,
    from_stack_outputs: Annotated[
        Path, typer.Option("--from-stack-outputs", help="`pulumi stack output --json` saved here.")
    ] = Path("outputs.json"),
    out_dir: Annotated[Path | None, typer.Option("--out", help=(
        "Default: /var/lib/slurmforge/inventories/<cluster> as root, else "
        "~/.local/state/slurmforge/inventories/<cluster>."))] = None,
    fetch_secrets: Annotated[bool, typer.Option(help="Copy munge key and DB password from Secrets Manager.")] = True,
) -> None:
    """Write the inventory of an AWS stack (same format as the local provider's); the
    cluster's secrets go to /var/lib/slurmforge/<cluster>/secrets as root, else to
    ~/.local/state/slurmforge/<cluster>/secrets."""
    from slurmforge.aws.inventory import (
        fetch_stack_secrets,
        inventory_from_stack_outputs,
        read_stack_outputs,
        spec_of_outputs,
    )
    from slurmforge.bringup import inventory_dir
    from slurmforge.package_data import require

    if fetch_secrets:
        report_errors(lambda: require("boto3", "aws", "--fetch-secrets (the stack's secrets from Secrets Manager)"))
    outputs = report_errors(lambda: read_stack_outputs(from_stack_outputs))
    spec_path = spec or report_errors(lambda: spec_of_outputs(outputs, Path.cwd()))
    cluster = load(spec_path)
    target = out_dir or inventory_dir(cluster)
    written = report_errors(lambda: inventory_from_stack_outputs(outputs, spec_path, target))
    if fetch_secrets:
        import boto3  # type: ignore[import-untyped]

        region = str(outputs.get("region", getattr(cluster.target, "region", "")))
        secrets = report_errors(lambda: fetch_stack_secrets(
            outputs, boto3.client("secretsmanager", region_name=region)))
        say(f"copied the stack's secrets to {secrets}")
    say(f"wrote inventory {written} (spec {spec_path})")


@app.command(short_help="Ask the AWS account what only it knows, before pulumi up.", epilog=example(
    "slurmforge preflight cluster.yaml",
    "slurmforge preflight cluster.yaml --stack-outputs outputs.json --role-arn arn:aws:iam::123456789012:role/check"))
def preflight(
    spec: SpecArg = DEFAULT_SPEC,
    stack_outputs: Annotated[Path | None, typer.Option(
        "--stack-outputs", help="`pulumi stack output --json` saved here: also DryRun the service's calls.")] = None,
    role_arn: Annotated[str | None, typer.Option(
        "--role-arn", help="A role you may assume; the DryRuns run as it, narrowed to the service's policy.")] = None,
) -> None:
    """Ask the AWS account what only it knows, before `pulumi up` (docs/aws.md, "Preflight"): the key
    pair, Debian's parent AMI and its deprecation, the vCPU quotas the pools need, the types offered
    in their zones; with --stack-outputs, the scheduler service's calls as DryRuns."""
    from slurmforge.aws.preflight import run

    raise typer.Exit(report_errors(lambda: run(load(spec), stack_outputs, role_arn)))


@app.command(short_help="Roll a cluster out with Ansible (any target).", epilog=example(
    "slurmforge rollout --inventory DIR", "sudo slurmforge rollout --local --requeue --yes"))
def rollout(
    inventory_dir: InventoryOpt = None,
    local: LocalFlag = False,
    cluster: ClusterOpt = None,
    full_rollout: FullRolloutFlag = False,
    requeue: RequeueFlag = False,
    drain_timeout: DrainTimeoutOpt = None,
    yes: YesOpt = False,
) -> None:
    """Roll the cluster out (playbooks/site.yml) on any inventory, with progress. Nodes whose
    machines must be made again or that leave are drained first (their jobs end, or are
    requeued with --requeue); a rebuilt static node is set DOWN for the scheduler service to
    give it a new machine, and resumed once that one registered. Nodes of
    dynamic pools are left out: they have no machine until the scheduler service starts
    one, and a machine that starts gets its config from slurmctld (configless). So are the
    nodes whose last rollout was this one (each node's mark says), unless --full-rollout. A
    plan that drains nodes is shown and asked for first."""
    from slurmforge.bringup import await_ready, fixed_hosts, push_users, roll_out_changed
    from slurmforge.drain import JobPolicy, controller_client, drain, finish, replace
    from slurmforge.fleet import controller
    from slurmforge.inventory import read_inventory
    from slurmforge.package_data import require
    from slurmforge.state_dirs import log_dir
    from slurmforge.ui import PhaseDisplay

    inventory_dir = _inventory_of(_target(local, cluster, inventory_dir, "rollout"))
    report_errors(lambda: require("ansible_runner", "deploy", "the rollout"))
    policy = JobPolicy(requeue, drain_timeout)
    shown = _plan_first(report_errors(lambda: read_inventory(inventory_dir)[0]), False, inventory_dir, policy)
    report_errors(lambda: _confirm_drains(shown, policy, yes))
    drains = shown.drains if shown else []
    display = PhaseDisplay()
    log = log_dir() / f"{inventory_dir.name}-rollout.log"

    def run() -> None:
        spec, hosts = read_inventory(inventory_dir)
        client = controller_client(controller(spec, hosts)) if drains else None
        if client is not None:
            with display.phase("drain the nodes made again or removed"):
                drained = drain(client, drains, policy, display.note)
        with display.phase("roll out (Ansible)"):
            inventory = inventory_dir.resolve()
            result = roll_out_changed(inventory, fixed_hosts(hosts), log, display, full_rollout)
            if result.ok and result.skipped_hosts < len(fixed_hosts(hosts)):
                push_users(inventory, display)
        if client is not None and result.ok:
            with display.phase("new machines for the rebuilt nodes, then resume"):
                replace(client, drains)
                finish(client, drains, drained.since, display.note)
        if result.ok:
            with display.phase("the cluster answers (Ceph, every static node in service)"):
                await_ready(hosts, controller(spec, hosts), display)
        _print_accounting(result.accounting)
        say(f"rollout changed {result.total_changed} thing(s) in {result.seconds:.0f} s; log {log}")

    report_errors(run)



@app.command(short_help="Roll a new node image through the cluster, no job lost.", epilog=example(
    "sudo slurmforge upgrade --local --plan",
    "sudo slurmforge upgrade cluster.yaml --local --yes   # a new images.refresh",
    "slurmforge upgrade --inventory DIR --requeue --drain-timeout 3600 --yes"))
def upgrade(
    spec: Annotated[Path | None, typer.Argument(
        help="A spec whose images changed (a new images.refresh: patch day); default: the cluster's own.")] = None,
    local: LocalFlag = False,
    cluster: ClusterOpt = None,
    inventory_dir: InventoryOpt = None,
    plan_only: Annotated[bool, typer.Option("--plan", help="Show the plan only; change nothing.")] = False,
    requeue: RequeueFlag = False,
    drain_timeout: DrainTimeoutOpt = None,
    yes: YesOpt = False,
) -> None:
    """Patch day: the node image from the current packages of the pinned release (a new
    images.refresh builds it again; the AMI `pulumi up` baked, on AWS), rolled through the
    running cluster in Slurm's order - a dump of the accounting database, slurmdbd, the backup
    controller, the primary, the login nodes (in place), the static nodes in batches of
    maintenance.max_unavailable (drained, replaced, resumed), the dynamic ones as they power
    down. Shows the plan first, then asks. An interrupted upgrade goes on where it stopped
    (docs/upgrade.md, "Patch day")."""
    from slurmforge.drain import JobPolicy
    from slurmforge.package_data import require
    from slurmforge.tables import emit
    from slurmforge.ui import PhaseDisplay
    from slurmforge.upgrade.dump import take_backups
    from slurmforge.upgrade.engine import finished
    from slurmforge.upgrade.engine import upgrade as roll
    from slurmforge.upgrade.plan import Kind, plan_table
    from slurmforge.upgrade.progress import load, progress_path
    from slurmforge.upgrade_start import aws_start, local_start

    target = _target(local, cluster, inventory_dir, "upgrade")
    where = _inventory_of(target)
    report_errors(lambda: require("ansible_runner", "deploy", "upgrade"))
    policy, display = JobPolicy(requeue, drain_timeout), PhaseDisplay()
    start = report_errors(lambda: (local_start if target.local else aws_start)(where, display, policy,
                                                                                       plan_only, spec))
    record = progress_path(start.spec.name)
    done = report_errors(lambda: finished(start.fleet, start.plan, load(record, start.plan.image)))
    emit(plan_table(start.plan, done))
    say(start.archive)
    if all(s.key in done for s in start.plan.steps if s.kind not in (Kind.IMAGE, Kind.BACKUPS)):
        say(f"cluster {start.spec.name}: every host runs image {start.plan.image} (Slurm {start.plan.slurm}) - "
            "nothing to roll")
        return
    if plan_only:
        return
    report_errors(lambda: confirm("upgrade it", [
        f"upgrade: roll image {start.plan.image} (Slurm {start.plan.slurm}) through cluster {start.spec.name}, "
        f"{len(start.plan.steps)} steps; jobs on drained nodes are "
        f"{'requeued (--requeue)' if requeue else 'left to end first'}"], yes))
    primary = next((start.fleet.by_name[s.hosts[0]] for s in start.plan.steps if s.kind is Kind.BACKUPS), None)
    rolled = report_errors(lambda: roll(start.fleet, start.plan, record, display,
                                      lambda: take_backups(primary, start.spec) if primary else Path()),
                         interrupted="interrupted: every step done so far stays done; run `slurmforge upgrade` "
                                     "again to go on")
    for key, seconds in rolled.steps:
        say(f"{key}: {seconds:.0f} s")
    say(f"cluster {start.spec.name} runs image {start.plan.image} (Slurm {start.plan.slurm}) - "
        f"{len(rolled.steps)} step(s) in {rolled.seconds:.0f} s, {len(rolled.skipped)} already done"
        + (f"; requeued job(s) {', '.join(map(str, rolled.requeued))}" if rolled.requeued else "")
        + (f"; backups in {rolled.dump}" if rolled.dump else ""))


def _deployed(spec: "Cluster", local: bool, inventory_dir: Path | None) -> "Deployed":
    """What runs, read from the cluster's controller: the local one of the spec's name, or
    the inventory's."""
    from slurmforge.hosts import controller_names
    from slurmforge.plan import deployed

    if inventory_dir is not None:
        return deployed.read(deployed.inventory_controllers(inventory_dir))
    return deployed.read(deployed.local_controllers(controller_names(spec)))


@app.command(short_help="What applying the spec would change, before it does.", epilog=example(
    "sudo slurmforge plan cluster.yaml --local",
    "slurmforge plan cluster.yaml --inventory DIR --detailed-exitcode   # 12: changes",
    "slurmforge plan cluster.yaml --inventory DIR && slurmforge rollout --inventory DIR"))
def plan(
    spec: SpecArg = DEFAULT_SPEC,
    local: LocalFlag = False,
    cluster: ClusterOpt = None,
    inventory_dir: InventoryOpt = None,
    state: Annotated[Path | None, typer.Option(
        "--state", help="Plan against a state saved with --save-state (reaches no cluster).")] = None,
    save_state: Annotated[Path | None, typer.Option(
        "--save-state", help="Also save what was read from the cluster, to plan against later.")] = None,
    requeue: Annotated[bool, typer.Option(
        "--requeue", help="Plan an apply with --requeue (jobs on drained nodes requeued, not waited for).")] = False,
    fmt: FormatOpt = None,
    detailed_exitcode: Annotated[bool, typer.Option(
        "--detailed-exitcode", help="Exit 12 when the plan has changes (terraform's flag; 0: none).")] = False,
) -> None:
    """What applying the spec would do to the running cluster, before anything changes: nodes,
    pools, partitions, scheduling, accounts, users, storage; which daemons reconfigure or
    restart; which jobs are affected. Read from the cluster itself. Exit 0 when it could plan
    (with --detailed-exitcode 12 when there are changes), 2: the spec is invalid, 11: the
    cluster cannot be read."""
    from slurmforge.drain import JobPolicy
    from slurmforge.plan import deployed as d
    from slurmforge.plan.engine import make_plan

    if state is not None and (local or cluster is not None or inventory_dir is not None):
        fail("plan: --state FILE plans against a saved state: drop --local and --inventory")
    new = load(spec)
    if state is not None:
        saved = state
        deployed = report_errors(lambda: d.load(saved))
    else:
        target = _target(local, cluster, inventory_dir, "plan")
        deployed = report_errors(lambda: _deployed(new, target.local, target.inventory))
    if save_state is not None:
        try:
            d.save(deployed, save_state)
        except OSError as exc:
            fail(f"cannot write {save_state}: {exc.strerror}", 1)
    result = report_errors(lambda: make_plan(new, deployed, JobPolicy(requeue=requeue)))
    _show_plan(result, fmt)
    raise typer.Exit(result.exit_code if detailed_exitcode else 0)


def _show_plan(result: "ClusterPlan", fmt: "Format | None") -> None:
    """The plan's table on stdout; in the formats for programs, its title and notes on stderr."""
    from slurmforge.plan.show import plan_table
    from slurmforge.tables import Format, default_format, emit

    table = plan_table(result)
    shown = fmt or default_format()
    if shown is Format.TABLE and not result.changed:
        for line in [table.title, *table.notes]:
            say(line)
        return
    if shown is not Format.TABLE:  # the table format shows these itself
        for line in [table.title, *table.notes]:
            note(line)
    emit(table, shown)


def _plan_first(spec: "Cluster", local: bool, inventory_dir: Path | None, policy: "JobPolicy") -> "ClusterPlan | None":
    """What the apply that follows changes (`slurmforge plan`'s table), or why it cannot be
    told (a cluster not made yet); the apply goes on either way, draining what the plan says."""
    from slurmforge.errors import SlurmforgeError
    from slurmforge.plan.engine import make_plan

    try:
        result = make_plan(spec, _deployed(spec, local, inventory_dir), policy)
    except SlurmforgeError as exc:
        note(f"plan: cannot tell what changes ({exc}); going on")
        return None
    _show_plan(result, None)
    return result


rotate_app = typer.Typer(short_help="Rotate a secret on a live cluster, no job lost.",
                         help="A new munge key, accounting database password or REST API key on a live cluster, "
                              "no job lost.",
                         no_args_is_help=True)
app.add_typer(rotate_app, name="rotate")


def _rotate(which: str, local: bool, cluster: str | None, inventory_dir: Path | None, yes: bool) -> None:
    """One secret rotated on the local cluster (--local) or an inventory's, once confirmed."""
    from slurmforge import rotate as r
    from slurmforge.inventory import read_inventory
    from slurmforge.state_dirs import secrets_dir

    target = _target(local, cluster, inventory_dir, f"rotate {which}")
    where = _inventory_of(target)
    spec, hosts = report_errors(lambda: read_inventory(where))
    report_errors(lambda: confirm(f"rotate the {which}", [
        f"rotate {which}: {ROTATES[which]} on cluster {spec.name} ({len(hosts)} hosts)"], yes))

    def run() -> r.Rotation:
        store = r.store_for(spec, where, secrets_dir(spec.name))
        if which == "munge-key":
            return r.rotate_munge_key(spec, hosts, store)
        if which == "jwt-key":
            return r.rotate_jwt_key(spec, hosts, store)
        return r.rotate_db_password(spec, hosts, store)

    say(report_errors(run).summary())


ROTATES = {
    "munge-key": "a new munge key on every running node; munged switches everywhere at one instant",
    "db-password": "a new accounting database password; slurmdbd restarts",
    "jwt-key": "a new REST API key; slurmdbd restarts, slurmctld reconfigures, every token signed with the old key "
               "is refused"}
"""What each rotation does, as the question before it says."""
ROTATE_EXAMPLES = ("sudo slurmforge rotate {0} --local", "slurmforge rotate {0} --inventory DIR --yes")


@rotate_app.command("munge-key", short_help="A new munge key on every node, no job lost.",
                    epilog=example(*(e.format("munge-key") for e in ROTATE_EXAMPLES)))
def rotate_munge_key(local: LocalFlag = False, cluster: ClusterOpt = None, inventory_dir: InventoryOpt = None,
                     yes: YesOpt = False) -> None:
    """A new munge key in the secret store and on every running node (dynamic ones too);
    munged switches on every node at one instant, no Slurm daemon restarts (docs/day-two.md)."""
    _rotate("munge-key", local, cluster, inventory_dir, yes)


@rotate_app.command("db-password", short_help="A new accounting database password.",
                    epilog=example(*(e.format("db-password") for e in ROTATE_EXAMPLES)))
def rotate_db_password(local: LocalFlag = False, cluster: ClusterOpt = None,
                       inventory_dir: InventoryOpt = None, yes: YesOpt = False) -> None:
    """A new accounting database password in the secret store, the database and slurmdbd
    (slurmdbd restarts; slurmctld keeps its records meanwhile)."""
    _rotate("db-password", local, cluster, inventory_dir, yes)


@rotate_app.command("jwt-key", short_help="A new REST API (JWT) key; old tokens refused.",
                    epilog=example(*(e.format("jwt-key") for e in ROTATE_EXAMPLES)))
def rotate_jwt_key(local: LocalFlag = False, cluster: ClusterOpt = None, inventory_dir: InventoryOpt = None,
                   yes: YesOpt = False) -> None:
    """A new REST API (JWT) key in the secret store and on the controllers; slurmdbd restarts,
    slurmctld reconfigures; tokens signed with the old key are refused (docs/rest-api.md)."""
    _rotate("jwt-key", local, cluster, inventory_dir, yes)


@app.command(short_help="A one-page utilization report from Prometheus.", epilog=example(
    "sudo slurmforge report --local --since 24h", "slurmforge report --inventory DIR --since 7d --out report/",
    "slurmforge report --inventory DIR --format json   # the plots' numbers"))
def report(
    inventory_dir: InventoryOpt = None,
    local: LocalFlag = False,
    cluster: ClusterOpt = None,
    since: Annotated[str, typer.Option(help="How far back: 30m, 24h, 7d.")] = "24h",
    out_dir: Annotated[Path, typer.Option("--out", help="Where report.html and the PNGs go.")] = Path("report"),
    prometheus: Annotated[str | None, typer.Option(
        help=f"Prometheus' URL (default: the controller's, port {PROMETHEUS_PORT}; on AWS through an SSH "
        "tunnel).")] = None,
    fmt: FormatOpt = None,
) -> None:
    """A one-page utilization report (HTML + PNG plots) from Prometheus' data. Without
    --format: where it went; with it, every line of every plot (its mean and peak)."""
    from slurmforge.inventory import read_inventory
    from slurmforge.monitoring import controller_address
    from slurmforge.report import Prometheus, Report, make_report, parse_duration, report_table
    from slurmforge.tables import emit

    where = _inventory_of(_target(local, cluster, inventory_dir, "report"))

    def run() -> tuple[Report, str]:
        seconds = parse_duration(since)
        spec, hosts = read_inventory(where)
        url = prometheus or f"http://{controller_address(hosts)}:{PROMETHEUS_PORT}"
        return make_report(Prometheus(url), spec.name, seconds, out_dir), url

    done, url = report_errors(run)
    if fmt is None:
        say(f"wrote {done.html_path} ({len(done.images)} plots, last {since}, from {url})")
    else:
        emit(report_table(done, url), fmt)


@app.command(short_help="Spend per user, account, partition or pool, from sacct.", epilog=example(
    "sudo slurmforge cost --local --by user,pool --since 7d",
    "slurmforge cost --inventory DIR --format csv > spend.csv",
    "slurmforge cost cluster.yaml --sacct-file saved.txt"))
def cost(
    spec: Annotated[Path | None, typer.Argument(
        help="With --sacct-file: the spec that prices the jobs (default: cluster.yaml). A cluster's jobs are "
        "priced by its own spec.", show_default=False)] = None,
    inventory_dir: Annotated[Path | None, typer.Option(
        "--inventory", help="Run sacct on this inventory's controller (its spec prices the jobs).")] = None,
    local: LocalFlag = False,
    cluster: ClusterOpt = None,
    sacct_file: Annotated[Path | None, typer.Option(
        "--sacct-file", help="Read saved `sacct -a -X -P --format=...` output instead (docs/cost.md).")] = None,
    by: Annotated[str, typer.Option(help="Group by user, account, partition or pool; commas for several.")] = "account",
    since: Annotated[str | None, typer.Option(
        help="Start: YYYY-MM-DD[THH:MM] (local time) or a duration back (7d). Default: this month.")] = None,
    until: Annotated[str | None, typer.Option(help="End, in the same forms (default: now).")] = None,
    fmt: FormatOpt = None,
    plot_path: Annotated[Path | None, typer.Option(
        "--plot", help="Also draw spend per day, stacked by group, into this PNG.")] = None,
    top: Annotated[int, typer.Option(help="The table format's rows: the groups that cost most, the rest in one "
                                          "row; 0: all (the other formats show all).")] = 40,
) -> None:
    """Spend per user, account, partition or pool over a period, from Slurm's accounting
    (sacct) on any cluster, or saved sacct output, and the catalog's prices: the same money
    Slurm bills (TRES billing)."""
    import time

    from slurmforge import cost as c
    from slurmforge.tables import emit

    now = time.time()
    where: Path | None = None
    if sacct_file is None:
        if spec is not None:
            fail(f"cost: {spec}: a cluster's jobs are priced by its own spec; a SPEC prices only --sacct-file "
                 "output: drop it, or pass --sacct-file FILE")
        where = _inventory_of(_target(local, cluster, inventory_dir, "cost"))
    elif local or cluster is not None or inventory_dir is not None:
        fail("cost: --sacct-file reads saved output: drop --local and --inventory")
    options = report_errors(lambda: c.read_options(by, since, until, where, sacct_file, now))

    def run() -> tuple[c.CostReport, str]:
        lines: Iterable[str]
        if where is not None:
            spec_of, lines = c.sacct_on_controller(where, options.period, now)
            source = f"sacct on {spec_of.name}'s controller"
        else:
            assert sacct_file is not None
            spec_of, lines, source = load(spec or DEFAULT_SPEC), c.read_sacct_file(sacct_file), str(sacct_file)
        report = c.aggregate(lines, c.Pricing(spec_of), options.period, options.by, daily=plot_path is not None,
                             source=source)
        report.notes = c.price_notes(spec_of)
        if plot_path is not None:
            c.plot(report, plot_path, f"{spec_of.name}: spend per day by {', '.join(options.by)}, "
                                      f"{options.period.label()}")
        return report, spec_of.name

    report, name = report_errors(run)
    emit(c.cost_table(report, top, name), fmt)
    if plot_path is not None:
        note(f"wrote {plot_path}")


@app.command(short_help="Remember the cluster commands act on by default.", epilog=example(
    "sudo slurmforge use --local dev", "slurmforge use --inventory ~/.local/state/slurmforge/inventories/prod",
    "slurmforge use                             # which one", "slurmforge use --clear"))
def use(local: LocalFlag = False, cluster: ClusterOpt = None, inventory_dir: InventoryOpt = None,
        clear: Annotated[bool, typer.Option("--clear", help="Forget the remembered cluster.")] = False) -> None:
    """Remember a cluster (kubectl's current context): every command given neither --local nor
    --inventory then acts on it, and says so on stderr. Without options: which one it is."""
    from slurmforge.target import remember, remembered

    if clear:
        say(f"forgot the remembered cluster ({report_errors(lambda: remember(None))})")
        return
    if not (local or cluster is not None or inventory_dir is not None):
        current = remembered()
        say(current.describe() if current else "no cluster remembered: `slurmforge use --local NAME` or "
            "`slurmforge use --inventory DIR` remembers one")
        return
    target = report_errors(lambda: resolve(local, cluster, inventory_dir, "use"))
    if target.local:
        report_errors(target.require_access)
        target = Target(True, report_errors(target.inventory_dir).name)
    path = report_errors(lambda: remember(target))
    say(f"commands now act on {target.describe()} unless told otherwise (remembered in {path})")


@app.command(short_help="Print a shell completion script (bash, zsh, fish).", epilog=example(
    "slurmforge completion bash > /etc/bash_completion.d/slurmforge",
    "slurmforge completion zsh > \"${fpath[1]}/_slurmforge\"",
    "slurmforge completion fish > ~/.config/fish/completions/slurmforge.fish"))
def completion(shell: Annotated[str, typer.Argument(help="bash, zsh or fish.")]) -> None:
    """The completion script for a shell: commands, options and their values complete on Tab."""
    from typer._completion_shared import get_completion_script

    if shell not in ("bash", "zsh", "fish"):
        fail(f"completion {shell}: not a shell slurmforge completes; use bash, zsh or fish")
    sys.stdout.write(get_completion_script(prog_name="slurmforge", complete_var=COMPLETE_VAR, shell=shell) + "\n")


COMPLETE_VAR = "_SLURMFORGE_COMPLETE"
"""The variable the completion scripts set when they ask slurmforge for completions."""


def main() -> None:
    # slurmforge uses no pydantic plugins: looking for them reads every installed package's
    # metadata when the spec's validator is built (about 15 ms of `validate`). A plugin the
    # person asks for by name still loads (PYDANTIC_DISABLE_PLUGINS set already wins).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if COMPLETE_VAR in os.environ:  # a shell asking for completions: typer's classes answer
        from typer._completion_classes import completion_init

        completion_init()
    app(args=split_local(sys.argv[1:]), prog_name="slurmforge")


if __name__ == "__main__":
    main()
