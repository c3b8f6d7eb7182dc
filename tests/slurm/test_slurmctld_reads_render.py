"""Proof against the real thing: the node image's slurmctld reads what `render_all` writes
and reports, through `scontrol`, exactly the partitions and nodes the spec describes.

Each spec is rendered into a temp dir; slurm.conf is adapted only to run there (see
`adapt_for_tmp`: host, user, paths, ports, munge socket, no slurmdbd), gres.conf and
cgroup.conf are used as rendered. slurmctld runs with a private munged and a throwaway
key in a judge container from the node image (tests/judge.py), removed when a spec's
tests end.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import hostlist
import pytest
import yaml

from slurmforge.billing import billing_weights, partition_weights, pool_price
from slurmforge.distro import release_tuple
from slurmforge.local.image_cache import slurm_version
from slurmforge.local.podman import Podman
from slurmforge.render import NODES_READY_NEEDED_THROUGH, needs_nodes_ready, render_all
from slurmforge.spec import Cluster, load_spec, validate_data
from slurmforge.spec.models import AwsTarget, Partition
from slurmforge.spec.nodes import NodeHardware, index_width, pool_hardware
from slurmforge.spec.routing import routing
from slurmforge.spec.slurmtime import parse_slurm_time
from tests.judge import Judge, node_image
from tests.slurm.daemons import (
    AS_RENDERED,
    RunDir,
    parse_records,
    running_slurmctld,
    scontrol,
    without_gres_weights,
)
from tests.slurm.specs import qos_spec, suspend_spec

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slurm]

# error: lines slurmctld logs here for reasons that are not the rendered config. Anything
# else logged as error: or fatal: fails the test.
KNOWN_ERRORS = [
    # consequences of dropping AccountingStorage* (no slurmdbd in a temp dir)
    (r"Job accounting information gathered, but not stored", "no slurmdbd"),
    (r"Even though we are collecting accounting information", "no slurmdbd"),
    (r"PriorityWeight(Age|Fairshare) can only be used with SlurmDBD", "no slurmdbd"),
    # the backup controller of a spec that has one is not running here (tests/slurm/daemons.py)
    (r"_shutdown_bu_thread:send/recv \S+-controller-backup: Network is unreachable", "no backup here"),
    # a new, empty StateSaveLocation
    (r"Could not open \w+ state file|NOTE: Trying backup state save file", "fresh state dir"),
    # the machine is busy (slurmctld times its clock at start): load, not the config
    (r"High latency for 1000 calls to gettimeofday", "a loaded machine"),
]


def mixed_spec() -> Cluster:
    """local.yaml plus what the examples lack: a partition over two pools without time
    limits, several features and AllowGroups, node weights."""
    data = yaml.safe_load((ROOT / "examples/local.yaml").read_text())
    data["pools"][0] |= {"features": ["fast", "ib"], "weight": 10}
    data["pools"][1] |= {"features": ["nvlink"], "weight": 100}
    data["partitions"].append({"name": "all", "pools": ["cpu", "gpu"], "allow_groups": ["ml-users", "guests"]})
    return validate_data(data, "mixed")


SPECS: dict[str, Callable[[], Cluster]] = {
    "local": lambda: load_spec(ROOT / "examples/local.yaml"),
    "lab": lambda: load_spec(ROOT / "examples/lab.yaml"),
    # every node CLOUD (powered down until the service starts it); render needs no AWS access
    "pools-aws": lambda: load_spec(ROOT / "examples/pools-aws.yaml"),
    "mixed": mixed_spec,
    "suspend": suspend_spec,
    "qos": qos_spec,
}


@dataclass(frozen=True)
class ExpectedNode:
    """What the spec says one node is."""

    hardware: NodeHardware
    features: frozenset[str]
    partitions: frozenset[str]
    weight: int
    cloud: bool
    pool: str = ""


def expected_nodes(spec: Cluster) -> dict[str, ExpectedNode]:
    aws = isinstance(spec.target, AwsTarget)
    nodes = {}
    for pool in spec.pools:
        hw = pool_hardware(pool)
        assert hw is not None, pool.name
        features = frozenset(([hw.gpu_model] if hw.gpus and hw.gpu_model else []) + pool.features)
        partitions = frozenset(p.name for p in spec.partitions if pool.name in p.pools)
        width = index_width(pool)
        for i in range(1, pool.max_nodes + 1):
            # nodes above min_nodes (on AWS: all nodes) start on demand: Slurm CLOUD nodes
            cloud = aws or i > pool.min_nodes
            nodes[f"{spec.node_prefix(pool)}-{i:0{width}d}"] = ExpectedNode(
                hw, features, partitions, pool.weight or 1, cloud, pool.name)
    return nodes


@dataclass(frozen=True)
class Controller:
    name: str
    spec: Cluster
    rendered: dict[str, str]
    run: RunDir
    judge: Judge

    def show(self, entity: str) -> dict[str, dict[str, str]]:
        """`scontrol show <entity> -o` by name."""
        rc, out, err = scontrol(self.judge, self.run, "show", entity, "-o")
        assert rc == 0, f"scontrol show {entity}: {err}\n{self.log()}"
        return parse_records(out, "PartitionName" if entity == "partition" else "NodeName")

    def log(self) -> str:
        return self.run.ctld_log.read_text(errors="replace") if self.run.ctld_log.exists() else ""


@pytest.fixture(scope="module", params=sorted(SPECS))
def controller(request: pytest.FixtureRequest) -> Iterator[Controller]:
    name: str = request.param
    spec = SPECS[name]()
    rendered = render_all(spec, source=f"{name}.yaml")
    try:
        with running_slurmctld(spec, rendered) as (judge, run):
            yield Controller(name, spec, rendered, run, judge)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


def config_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("NodeName=", "PartitionName="))]


def test_only_settings_were_adapted(controller: Controller) -> None:
    """Node and partition lines reach slurmctld exactly as rendered (but for GRES billing
    weights, which need slurmdbd: see without_gres_weights); so do gres.conf, cgroup.conf
    and job_submit.lua."""
    adapted = controller.run.conf.read_text()
    rendered = config_lines(controller.rendered["slurm.conf"])
    assert config_lines(adapted) == [without_gres_weights(line) for line in rendered]
    for name in AS_RENDERED:
        assert (controller.run.root / name).read_text() == controller.rendered[name]


def assert_time(got: str, want: str | None, unset: str, what: str) -> None:
    if want is None:
        assert got == unset, what
    else:
        assert parse_slurm_time(got) == parse_slurm_time(want), f"{what}: Slurm has {got}, spec says {want}"


def test_partitions_as_in_spec(controller: Controller) -> None:
    spec, shown = controller.spec, controller.show("partition")
    assert sorted(shown) == sorted(p.name for p in spec.partitions)
    nodes = expected_nodes(spec)
    for part in spec.partitions:
        got = shown[part.name]
        want_nodes = {name for name, node in nodes.items() if part.name in node.partitions}
        assert set(hostlist.expand_hostlist(got["Nodes"])) == want_nodes, part.name
        assert_time(got["MaxTime"], part.max_time, "UNLIMITED", f"{part.name} MaxTime")
        assert_time(got["DefaultTime"], part.default_time, "NONE", f"{part.name} DefaultTime")
        assert set(got["AllowGroups"].split(",")) == set(part.allow_groups or ["ALL"]), part.name
        assert set(got["AllowAccounts"].split(",")) == set(part.allow_accounts or ["ALL"]), part.name
        assert got["Default"] == ("YES" if part.default else "NO"), part.name
        assert got["State"] == part.state.value, part.name
        assert int(got["PriorityTier"]) == (1 if part.priority_tier is None else part.priority_tier), part.name
        assert set(got["PreemptMode"].split(",")) == partition_preempt_mode(spec, part), part.name


def partition_preempt_mode(spec: Cluster, part: Partition) -> set[str]:
    """What scontrol shows as a partition's PreemptMode: its own, else the cluster's (GANG
    included); OFF without preemption."""
    pre = spec.scheduling.preemption
    if pre.type == "none":
        return {part.preempt_mode or "OFF"}
    return set((part.preempt_mode or pre.mode).split(","))


def show_config(controller: Controller) -> dict[str, str]:
    rc, out, err = scontrol(controller.judge, controller.run, "show", "config")
    assert rc == 0, err
    return {key.strip(): value.strip() for key, _, value in (line.partition("=") for line in out.splitlines())}


def test_policy_as_in_spec(controller: Controller) -> None:
    """Default pools, priority and preemption settings as slurmctld took them."""
    spec, config = controller.spec, show_config(controller)
    sched, pre = controller.spec.scheduling, controller.spec.scheduling.preemption
    assert config["JobSubmitPlugins"] == ("lua" if routing(spec).active else "(null)")
    assert config["PreemptType"] == ("(null)" if pre.type == "none" else f"preempt/{pre.type}")
    if pre.type != "none":
        assert set(config["PreemptMode"].split(",")) == set(pre.mode.split(","))
    assert parse_slurm_time(config["PreemptExemptTime"]) == parse_slurm_time(pre.exempt_time or "0")
    assert parse_slurm_time(config["PriorityCalcPeriod"]) == parse_slurm_time(sched.priority.calc_period or "5")
    if sched.default_mem_per_cpu_mb is None:
        assert config["DefMemPerNode"] == "UNLIMITED"
    else:
        assert config["DefMemPerCPU"] == str(sched.default_mem_per_cpu_mb)


def _null_set(value: str) -> set[str]:
    return set() if value in ("(null)", "") else set(value.split(","))


def test_nodes_as_in_spec(controller: Controller) -> None:
    """Every node, none missing (slurmctld hides a node it turned FUTURE), none extra."""
    want, shown = expected_nodes(controller.spec), controller.show("node")
    assert sorted(shown) == sorted(want)
    for name, node in want.items():
        got, hw = shown[name], node.hardware
        # a flexible pool of differently laid out types names only CPUs: Slurm then
        # lays them out itself, and only the count is ours to check
        layout = hw.uniform_layout
        assert {
            "RealMemory": int(got["RealMemory"]),
            "CPUTot": int(got["CPUTot"]),
            "Sockets": int(got["Sockets"]) if layout else None,
            "CoresPerSocket": int(got["CoresPerSocket"]) if layout else None,
            "ThreadsPerCore": int(got["ThreadsPerCore"]) if layout else None,
            "Gres": got["Gres"],
            "AvailableFeatures": _null_set(got["AvailableFeatures"]),
            "Partitions": _null_set(got["Partitions"]),
            "Weight": int(got["Weight"]),
        } == {
            "RealMemory": hw.memory_mb,
            "CPUTot": hw.cpus,
            "Sockets": hw.sockets if layout else None,
            "CoresPerSocket": hw.cores_per_socket if layout else None,
            "ThreadsPerCore": hw.threads_per_core if layout else None,
            "Gres": f"{hw.gres_name}:{hw.gpus}" if hw.gpus else "(null)",
            "AvailableFeatures": set(node.features),
            "Partitions": set(node.partitions),
            "Weight": node.weight,
        }, name


def test_cloud_nodes_are_powered_down(controller: Controller) -> None:
    shown = controller.show("node")
    for name, node in expected_nodes(controller.spec).items():
        flags = set(shown[name]["State"].split("+"))
        if node.cloud:
            assert {"CLOUD", "POWERED_DOWN"} <= flags, f"{name}: {shown[name]['State']}"
        else:
            assert not flags & {"CLOUD", "POWERED_DOWN"}, f"{name}: {shown[name]['State']}"


def test_billing_is_what_a_node_costs(controller: Controller) -> None:
    """slurmctld's own billing of each whole node (its CfgTRES billing: the highest
    MAX_TRES-weighted value over the node's partitions) is what the node costs per hour,
    in hundredths of a cent; partitions without prices bill CPUs (Slurm's default)."""
    spec, weights = controller.spec, billing_weights(controller.spec)
    parts, shown = controller.show("partition"), controller.show("node")
    for part in spec.partitions:
        want = weights.get(part.name)
        got = parts[part.name].get("TRESBillingWeights")
        assert got == (without_gres_weights(f"PartitionName=x TRESBillingWeights={want.text()}").split("=", 2)[2]
                       if want else None), part.name
    priced = 0
    for name, node in expected_nodes(spec).items():
        billing = int(dict(i.split("=", 1) for i in shown[name]["CfgTRES"].split(","))["billing"])
        hw = node.hardware
        # no slurmdbd here, so no GRES TRES: only CPU and memory weights reach slurmctld
        bills = [w.billing(hw.cpus, hw.memory_mb) for p in node.partitions if (w := weights.get(p))]
        assert billing == (max(bills) if bills else hw.cpus), name
        cost = pool_price(spec.pool(node.pool))
        if not bills or cost is None:
            continue
        # never billed below its price; exactly its price where its pool sets every rate
        # of its partitions (a pool dearer per CPU, MB or GPU in a shared partition bills more)
        own = partition_weights(spec, Partition(name="own", pools=[node.pool]))
        assert billing >= int(cost.units_per_hour), (name, billing, cost)
        if all(weights.get(p) == own for p in node.partitions):
            assert billing == int(cost.units_per_hour), (name, billing, cost)
            priced += 1
    assert priced or not weights, "no node checked against its price"


def test_slurmctld_logs_no_config_errors(controller: Controller) -> None:
    log = controller.log()
    assert "Running as primary controller" in log, log
    errors = [line for line in log.splitlines() if re.search(r"\b(error|fatal):", line)]
    unexpected = [line for line in errors if not any(re.search(p, line) for p, _ in KNOWN_ERRORS)]
    assert not unexpected, (f"slurmctld ({controller.name}) logged:\n" + "\n".join(unexpected)
                            + f"\n--- full log\n{log}\n--- slurm.conf\n{controller.run.conf.read_text()}")


def test_the_nodes_ready_workaround_is_rechecked_when_slurm_moves() -> None:
    """slurmforge-nodes-ready (PrologSlurmctld) exists because slurmctld starts a job on
    resumed nodes only at its 30 s periodic check (PERIODIC_TIMEOUT in
    src/slurmctld/controller.c, hard-coded through 24.11). A node image with a newer Slurm
    fails here until someone reads that release's controller.c and either raises
    NODES_READY_NEEDED_THROUGH or lets needs_nodes_ready() drop the program."""
    version = slurm_version(Podman(), node_image())
    assert version, "the node image carries no Slurm version label"
    assert release_tuple(version) <= release_tuple(NODES_READY_NEEDED_THROUGH), (
        f"the node image runs Slurm {version}: re-check PERIODIC_TIMEOUT in its slurmctld (see this test's docstring)")
    assert needs_nodes_ready(load_spec(ROOT / "examples/local.yaml"))


def test_a_backup_controller_is_what_slurmctld_reads(controller: Controller) -> None:
    """With head.backup_controller (examples/local.yaml) slurmctld knows both hosts, primary
    first, and the short SlurmctldTimeout; without one, a single host and Slurm's default."""
    rc, out, err = scontrol(controller.judge, controller.run, "show", "config")
    assert rc == 0, err
    hosts = re.findall(r"^SlurmctldHost\[\d\]\s*=\s*(\S+)", out, re.M)
    timeout = re.search(r"^SlurmctldTimeout\s*=\s*(\d+)", out, re.M)
    assert timeout is not None, out
    if controller.spec.head.backup_controller:
        assert len(hosts) == 2 and hosts[1].startswith(f"{controller.spec.name}-controller-backup"), hosts
        assert timeout.group(1) == "10"
    else:
        assert len(hosts) == 1 and timeout.group(1) == "120", (hosts, timeout.group(1))
