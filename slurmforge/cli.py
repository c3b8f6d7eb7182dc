"""The slurmforge command line. People-facing messages live here; everything below
raises typed errors that `main` turns into one line and an exit code.

Each command imports what it uses when it runs: at start, this module imports only typer,
the standard library and slurmforge's light modules, so `--help` answers at once and
`validate` pays for the spec's models but not for Ansible, Pulumi, boto3, jinja2 or rich
(tests/unit/test_startup.py; bench/startup_bench.py).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from slurmforge.console import FormatOpt, fail, note, paint, report_errors, rich_console, say
from slurmforge.contract import PROMETHEUS_PORT
from slurmforge.lmod.cli import modules_app

if TYPE_CHECKING:
    from slurmforge.drain import JobPolicy
    from slurmforge.plan.deployed import Deployed
    from slurmforge.plan.engine import ClusterPlan
    from slurmforge.spec import Cluster
    from slurmforge.tables import Format

app = typer.Typer(
    name="slurmforge",
    help="One cluster.yaml to a working Slurm cluster: validate, render, bring up, check.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(modules_app, name="modules")

SpecArg = Annotated[Path, typer.Argument(help="The cluster spec.", show_default=True)]
DEFAULT_SPEC = Path("cluster.yaml")


def require_inventory(inventory_dir: Path) -> None:
    """Exit 2 with one line unless inventory_dir is a slurmforge inventory."""
    if not (inventory_dir / "hosts.yml").exists():
        fail(f"{inventory_dir} is not a slurmforge inventory (no hosts.yml)")


def load(spec: Path) -> Cluster:
    from slurmforge.spec import load_spec

    return report_errors(lambda: load_spec(spec))


@app.command()
def validate(
    spec: SpecArg = DEFAULT_SPEC,
    inventory: Annotated[
        Path | None, typer.Option(help="Validate a live cluster from this inventory (testinfra suite).")
    ] = None,
) -> None:
    """Check a spec (every problem at once, exit 2 when invalid), or a live cluster."""
    if inventory is not None:
        from slurmforge.validation import validate_inventory

        report_errors(lambda: validate_inventory(inventory))
        say(f"{inventory}: the live cluster passed every check")
        return
    cluster = load(spec)
    nodes = sum(p.max_nodes for p in cluster.pools)
    say(
        f"{spec}: valid - cluster '{cluster.name}' ({cluster.target.kind}), "
        f"{len(cluster.pools)} pools, {nodes} nodes at most, {len(cluster.partitions)} partitions"
    )


@app.command("render")
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


LocalFlag = Annotated[bool, typer.Option("--local", help="The local cluster (podman containers on this machine).")]
FullRolloutFlag = Annotated[bool, typer.Option(
    "--full-rollout", help="Run Ansible on every node, even those whose last rollout was this one.")]
ClusterOpt = Annotated[str | None, typer.Option("--cluster", help="Cluster name (default: the only one).")]
RequeueFlag = Annotated[bool, typer.Option(
    "--requeue", help="Requeue the jobs on nodes the rollout rebuilds or removes (drained first) instead of "
    "waiting for them to end.")]
DrainTimeoutOpt = Annotated[float | None, typer.Option(
    "--drain-timeout", min=0, help="Seconds to wait for the jobs on drained nodes before giving up, changing "
    "nothing (default: as long as they run).")]


def _need_local(local: bool, command: str) -> None:
    if not local:
        fail(f"{command}: only --local is handled here; for AWS run `pulumi up` (docs/aws.md), then "
             "`slurmforge rollout --inventory ...`")


def _print_accounting(lines: list[str]) -> None:
    """What the rollout changed in slurmdbd (QoS, accounts, users, limits), kept or left waiting."""
    for line in lines:
        say(f"accounting: {line}")


@app.command()
def up(
    spec: Annotated[Path | None, typer.Argument(
        help="The cluster spec (default: the example local.yaml that comes with slurmforge).")] = None,
    local: LocalFlag = False,
    no_job: Annotated[bool, typer.Option("--no-job", help="Skip the sample job.")] = False,
    no_validate: Annotated[bool, typer.Option("--no-validate", help="Skip the testinfra validation.")] = False,
    full_rollout: FullRolloutFlag = False,
    requeue: RequeueFlag = False,
    drain_timeout: DrainTimeoutOpt = None,
) -> None:
    """Bring up (or converge) a cluster: image, nodes, rollout, validation, a sample job. Nodes
    whose machines are made again or that leave are drained first (their jobs end, or are
    requeued with --requeue)."""
    _need_local(local, "up")
    from slurmforge.drain import JobPolicy
    from slurmforge.local.up import up as local_up
    from slurmforge.package_data import examples, require
    from slurmforge.ui import PhaseDisplay
    from slurmforge.validation import validate_inventory

    report_errors(lambda: require("ansible_runner", "deploy", "up"))
    chosen = spec or examples() / "local.yaml"
    policy = JobPolicy(requeue, drain_timeout)
    shown = _plan_first(load(chosen), True, None, policy)
    display = PhaseDisplay(rich_console())
    report = report_errors(lambda: local_up(chosen, display, run_sample_job=not no_job,
                                            validate=None if no_validate else validate_inventory,
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


@app.command()
def down(
    local: LocalFlag = False,
    cluster: ClusterOpt = None,
    purge: Annotated[bool, typer.Option(help="Also delete the NAS data, secrets and cached images.")] = False,
    inventory_dir: Annotated[Path | None, typer.Option(
        "--inventory", help="An AWS cluster's inventory: stop the scheduler service and terminate every pool "
        "machine it launched (before `pulumi destroy`).")] = None,
    force: Annotated[bool, typer.Option(help="With --inventory: go on when a controller cannot be reached.")] = False,
) -> None:
    """Remove the cluster's nodes and network (--local; the image cache stays unless --purge),
    or release an AWS cluster's pool machines (--inventory)."""
    if inventory_dir is not None and not local:
        from slurmforge.aws.teardown import release, summary

        require_inventory(inventory_dir)

        say(summary(report_errors(lambda: release(inventory_dir, force=force))))
        return
    if not local:
        fail("down: name the cluster: --local for this machine's, or --inventory DIR to release an AWS "
             "cluster's pool machines before `pulumi destroy` (docs/aws.md)")
    from slurmforge.local.manage import down as local_down

    removed = report_errors(lambda: local_down(cluster, purge))
    say(f"removed {removed}")


@app.command()
def status(local: LocalFlag = False, cluster: ClusterOpt = None, fmt: FormatOpt = None) -> None:
    """Nodes, their roles and Slurm state."""
    _need_local(local, "status")
    from slurmforge.local.manage import status_table
    from slurmforge.tables import emit

    emit(report_errors(lambda: status_table(cluster)), fmt)


@app.command()
def pools(local: LocalFlag = False, cluster: ClusterOpt = None, fmt: FormatOpt = None) -> None:
    """Every pool as the scheduler service sees it: nodes by state, GPUs, launches, cooldowns."""
    _need_local(local, "pools")
    from slurmforge.local.manage import pools_snapshot
    from slurmforge.service.web import pools_table
    from slurmforge.tables import emit

    emit(pools_table(report_errors(lambda: pools_snapshot(cluster))), fmt)


@app.command()
def ssh(
    node: Annotated[str, typer.Argument(help="login, controller, or a node name.")] = "login",
    local: LocalFlag = False,
    cluster: ClusterOpt = None,
    user: Annotated[str | None, typer.Option(help="Log in as this cluster user.")] = None,
) -> None:
    """A shell on a node of the local cluster."""
    _need_local(local, "ssh")
    from slurmforge.local.manage import shell

    report_errors(lambda: shell(cluster, node, user))


@app.command()
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


@app.command()
def preflight(
    spec: SpecArg = DEFAULT_SPEC,
    stack_outputs: Annotated[Path | None, typer.Option(
        "--stack-outputs", help="`pulumi stack output --json` saved here: also DryRun the service's calls.")] = None,
    role_arn: Annotated[str | None, typer.Option(
        "--role-arn", help="A role you may assume; the DryRuns run as it, narrowed to the service's policy.")] = None,
) -> None:
    """Ask the AWS account what only it knows, before `pulumi up` (docs/aws.md, "Preflight")."""
    from slurmforge.aws.preflight import run

    raise typer.Exit(report_errors(lambda: run(load(spec), stack_outputs, role_arn)))


@app.command()
def rollout(
    inventory_dir: Annotated[Path, typer.Option("--inventory", help="A slurmforge inventory directory.")],
    full_rollout: FullRolloutFlag = False,
    requeue: RequeueFlag = False,
    drain_timeout: DrainTimeoutOpt = None,
) -> None:
    """Roll the cluster out (playbooks/site.yml) on any inventory, with progress. Nodes whose
    machines must be made again or that leave are drained first (their jobs end, or are
    requeued with --requeue); a rebuilt static node is set DOWN for the scheduler service to
    give it a new machine, and resumed once that one registered. Nodes of
    dynamic pools are left out: they have no machine until the scheduler service starts
    one, and a machine that starts gets its config from slurmctld (configless). So are the
    nodes whose last rollout was this one (each node's mark says), unless --full-rollout."""
    from slurmforge.bringup import fixed_hosts, log_dir, push_users, roll_out_changed
    from slurmforge.drain import JobPolicy, controller_client, drain, finish, replace
    from slurmforge.fleet import controller
    from slurmforge.inventory import read_inventory
    from slurmforge.package_data import require
    from slurmforge.ui import PhaseDisplay

    require_inventory(inventory_dir)
    report_errors(lambda: require("ansible_runner", "deploy", "the rollout"))
    policy = JobPolicy(requeue, drain_timeout)
    shown = _plan_first(report_errors(lambda: read_inventory(inventory_dir)[0]), False, inventory_dir, policy)
    drains = shown.drains if shown else []
    display = PhaseDisplay(rich_console())
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
        _print_accounting(result.accounting)
        say(f"rollout changed {result.total_changed} thing(s) in {result.seconds:.0f} s; log {log}")

    report_errors(run)


InventoryOpt = Annotated[Path | None, typer.Option("--inventory", help="The cluster of this inventory (any target).")]


def _deployed(spec: Cluster, local: bool, inventory_dir: Path | None) -> Deployed:
    """What runs, read from the cluster's controller: the local one of the spec's name, or
    the inventory's."""
    from slurmforge.hosts import controller_names
    from slurmforge.plan import deployed

    if inventory_dir is not None:
        return deployed.read(deployed.inventory_controllers(inventory_dir))
    if local:
        from slurmforge.local.host import require_root

        require_root()
    return deployed.read(deployed.local_controllers(controller_names(spec)))


@app.command()
def plan(
    spec: SpecArg = DEFAULT_SPEC,
    local: LocalFlag = False,
    inventory_dir: InventoryOpt = None,
    state: Annotated[Path | None, typer.Option(
        "--state", help="Plan against a state saved with --save-state (reaches no cluster).")] = None,
    save_state: Annotated[Path | None, typer.Option(
        "--save-state", help="Also save what was read from the cluster, to plan against later.")] = None,
    requeue: Annotated[bool, typer.Option(
        "--requeue", help="Plan an apply with --requeue (jobs on drained nodes requeued, not waited for).")] = False,
    fmt: FormatOpt = None,
) -> None:
    """What applying the spec would do to the running cluster, before anything changes: nodes,
    pools, partitions, scheduling, accounts, users, storage; which daemons reconfigure or
    restart; which jobs are affected. Read from the cluster itself. Exit 0: no changes, 12:
    changes, 2: the spec is invalid, 11: the cluster cannot be read."""
    from slurmforge.drain import JobPolicy
    from slurmforge.plan import deployed as d
    from slurmforge.plan.engine import make_plan

    if [local, inventory_dir is not None, state is not None].count(True) != 1:
        fail("plan: name the cluster: --local (this machine's), --inventory DIR, or --state FILE")
    if inventory_dir is not None:
        require_inventory(inventory_dir)
    cluster = load(spec)
    deployed = report_errors(lambda: d.load(state) if state is not None else _deployed(cluster, local, inventory_dir))
    if save_state is not None:
        try:
            d.save(deployed, save_state)
        except OSError as exc:
            fail(f"cannot write {save_state}: {exc.strerror}", 1)
    result = report_errors(lambda: make_plan(cluster, deployed, JobPolicy(requeue=requeue)))
    _show_plan(result, fmt)
    raise typer.Exit(result.exit_code)


def _show_plan(result: ClusterPlan, fmt: Format | None) -> None:
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


def _plan_first(spec: Cluster, local: bool, inventory_dir: Path | None, policy: JobPolicy) -> ClusterPlan | None:
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


rotate_app = typer.Typer(help="A new munge key, accounting database password or REST API key on a live cluster, "
                              "no job lost.",
                         no_args_is_help=True)
app.add_typer(rotate_app, name="rotate")


def _rotate(which: str, local: bool, cluster: str | None, inventory_dir: Path | None) -> None:
    """One secret rotated on the local cluster (--local) or an inventory's."""
    from slurmforge import rotate as r
    from slurmforge.inventory import read_inventory
    from slurmforge.state_dirs import secrets_dir

    if local == (inventory_dir is not None):
        fail(f"rotate {which}: name the cluster: --local (this machine's) or --inventory DIR")

    def run() -> r.Rotation:
        if inventory_dir is not None:
            require_inventory(inventory_dir)
            spec, hosts = read_inventory(inventory_dir)
            where = inventory_dir
        else:
            from slurmforge.local.host import require_root
            from slurmforge.local.manage import find_cluster
            from slurmforge.state_dirs import default_inventory

            require_root()
            spec, hosts = find_cluster(cluster)
            where = default_inventory(spec.name)
        store = r.store_for(spec, where, secrets_dir(spec.name))
        if which == "munge-key":
            return r.rotate_munge_key(spec, hosts, store)
        if which == "jwt-key":
            return r.rotate_jwt_key(spec, hosts, store)
        return r.rotate_db_password(spec, hosts, store)

    say(report_errors(run).summary())


@rotate_app.command("munge-key")
def rotate_munge_key(local: LocalFlag = False, cluster: ClusterOpt = None, inventory_dir: InventoryOpt = None) -> None:
    """A new munge key in the secret store and on every running node (dynamic ones too);
    munged switches on every node at one instant, no Slurm daemon restarts (docs/day-two.md)."""
    _rotate("munge-key", local, cluster, inventory_dir)


@rotate_app.command("db-password")
def rotate_db_password(local: LocalFlag = False, cluster: ClusterOpt = None,
                       inventory_dir: InventoryOpt = None) -> None:
    """A new accounting database password in the secret store, the database and slurmdbd
    (slurmdbd restarts; slurmctld keeps its records meanwhile)."""
    _rotate("db-password", local, cluster, inventory_dir)


@rotate_app.command("jwt-key")
def rotate_jwt_key(local: LocalFlag = False, cluster: ClusterOpt = None, inventory_dir: InventoryOpt = None) -> None:
    """A new REST API (JWT) key in the secret store and on the controllers; slurmdbd restarts,
    slurmctld reconfigures; tokens signed with the old key are refused (docs/rest-api.md)."""
    _rotate("jwt-key", local, cluster, inventory_dir)


@app.command()
def report(
    inventory_dir: Annotated[Path, typer.Option("--inventory", help="A slurmforge inventory directory.")],
    since: Annotated[str, typer.Option(help="How far back: 30m, 24h, 7d.")] = "24h",
    out_dir: Annotated[Path, typer.Option("--out", help="Where report.html and the PNGs go.")] = Path("report"),
    prometheus: Annotated[str | None, typer.Option(
        help=f"Prometheus' URL (default: the controller's, port {PROMETHEUS_PORT}; on AWS through an SSH "
        "tunnel).")] = None,
) -> None:
    """A one-page utilization report (HTML + PNG plots) from Prometheus' data."""
    from slurmforge.inventory import read_inventory
    from slurmforge.monitoring import controller_address
    from slurmforge.report import Prometheus, make_report, parse_duration

    require_inventory(inventory_dir)

    def run() -> None:
        seconds = parse_duration(since)
        spec, hosts = read_inventory(inventory_dir)
        url = prometheus or f"http://{controller_address(hosts)}:{PROMETHEUS_PORT}"
        done = make_report(Prometheus(url), spec.name, seconds, out_dir)
        say(f"wrote {done.html_path} ({len(done.images)} plots, last {since}, from {url})")

    report_errors(run)


@app.command()
def cost(
    spec: SpecArg = DEFAULT_SPEC,
    inventory_dir: Annotated[Path | None, typer.Option(
        "--inventory", help="Run sacct on this inventory's controller (its spec prices the jobs).")] = None,
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
    (sacct) and the catalog's prices: the same money Slurm bills (TRES billing)."""
    import time

    from slurmforge import cost as c
    from slurmforge.tables import emit

    now = time.time()
    options = report_errors(lambda: c.read_options(by, since, until, inventory_dir, sacct_file, now))

    def run() -> c.CostReport:
        lines: Iterable[str]
        if inventory_dir is not None:
            require_inventory(inventory_dir)
            cluster, lines = c.sacct_on_controller(inventory_dir, options.period, now)
            source = f"sacct on {cluster.name}'s controller"
        else:
            assert sacct_file is not None
            cluster, lines, source = load(spec), c.read_sacct_file(sacct_file), str(sacct_file)
        report = c.aggregate(lines, c.Pricing(cluster), options.period, options.by, daily=plot_path is not None,
                             source=source)
        report.notes = c.price_notes(cluster)
        if plot_path is not None:
            c.plot(report, plot_path, f"{cluster.name}: spend per day by {', '.join(options.by)}, "
                                      f"{options.period.label()}")
        return report

    report = report_errors(run)
    emit(c.cost_table(report, top), fmt)
    if plot_path is not None:
        note(f"wrote {plot_path}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
