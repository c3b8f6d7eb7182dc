"""The one renderer: golden files for every example, the lines seed 002 asks for,
and hostlist ranges instead of one line per node."""

from __future__ import annotations

import os
import re
from pathlib import Path

import hostlist
import pytest
import yaml

from slurmforge import contract
from slurmforge.render import CONFIG_FILES, render_all, slurm_kv
from slurmforge.spec import load_spec, parse_spec, validate_data
from slurmforge.spec.routing import JOB_SUBMIT_SCRIPT

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split())


def find_line(text: str, key: str, value: str) -> dict[str, str]:
    for line in text.splitlines():
        if line.startswith(f"{key}="):
            f = fields(line)
            if set(hostlist.expand_hostlist(f[key])) == set(hostlist.expand_hostlist(value)):
                return f
    raise AssertionError(f"no {key}={value} line in:\n{text}")


# job_submit.lua is the same script in every example but for the partitions it names: one
# golden file (local), and the others compared to it line by line below
ONE_GOLDEN = {JOB_SUBMIT_SCRIPT: "local"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_golden(example: Path) -> None:
    rendered = render_all(load_spec(example), source=example.name)
    for name in CONFIG_FILES:
        if ONE_GOLDEN.get(name, example.stem) != example.stem:
            continue
        golden = GOLDEN / example.stem / name
        if os.environ.get("UPDATE_GOLDEN"):
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(rendered[name])
        assert rendered[name] == golden.read_text(), f"{example.stem}/{name} differs from its golden file"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_job_submit_script_differs_from_the_golden_one_only_in_names(example: Path) -> None:
    spec = load_spec(example)
    rendered = render_all(spec, source="local.yaml")[JOB_SUBMIT_SCRIPT].splitlines()
    golden = (GOLDEN / ONE_GOLDEN[JOB_SUBMIT_SCRIPT] / JOB_SUBMIT_SCRIPT).read_text().splitlines()
    assert len(rendered) == len(golden)
    differ = [(a, b) for a, b in zip(rendered, golden, strict=True) if a != b]
    names = {p.name for p in spec.partitions} | {p.name for p in spec.pools} | {"ml-cpu", "ml-gpu", "cpu", "gpu"}
    for mine, theirs in differ:
        assert re.sub(r"[\w-]+", "W", mine) == re.sub(r"[\w-]+", "W", theirs), (mine, theirs)
        assert set(re.findall(r"[\w-]+", mine)) - set(re.findall(r"[\w-]+", theirs)) <= names, (mine, theirs)


def test_lab_lines_seed_002() -> None:
    conf = render_all(load_spec(ROOT / "examples/lab.yaml"))
    node = find_line(conf["slurm.conf"], "NodeName", "lab-gpu-[01-02]")
    assert node == {
        "NodeName": node["NodeName"], "RealMemory": "122880", "Sockets": "2", "CoresPerSocket": "12",
        "ThreadsPerCore": "2", "Feature": '"rtx4080"', "Gres": "gpu:4",
    }
    gres = find_line(conf["gres.conf"], "NodeName", "lab-gpu-[01-02]")
    assert gres["Name"] == "gpu" and gres["File"] == "/dev/nvidia[0-3]"
    for part, nodes in (("ml-cpu", "lab-cpu-[01-02]"), ("ml-gpu", "lab-gpu-[01-02]")):
        p = find_line(conf["slurm.conf"], "PartitionName", part)
        assert set(hostlist.expand_hostlist(p["Nodes"])) == set(hostlist.expand_hostlist(nodes))
        assert p["MaxTime"] == "5-00:00:00" and p["DefaultTime"] == "04:00:00"
        assert p["State"] == "UP" and p["AllowGroups"] == "ml-users"
        assert p.get("Default") == ("YES" if part == "ml-cpu" else None)
    settings = dict(line.split("=", 1) for line in conf["slurm.conf"].splitlines() if "=" in line and " " not in line)
    assert settings["SchedulerType"] == "sched/backfill"
    assert settings["SelectType"] == "select/cons_tres"
    assert settings["SelectTypeParameters"] == "CR_CPU_Memory"
    assert settings["GresTypes"] == "gpu"


def test_nodes_are_ranges_not_lines() -> None:
    text = (ROOT / "examples/pools-aws.yaml").read_text().replace("max_nodes: 4", "max_nodes: 200")
    conf = render_all(parse_spec(text))["slurm.conf"]
    node_lines = [line for line in conf.splitlines() if line.startswith("NodeName=")]
    assert len(node_lines) == 3
    assert any(line.startswith("NodeName=mlpools-gpu-[001-200] ") for line in node_lines)
    assert all("State=CLOUD" in line for line in node_lines)


def test_slurmdbd_conf_holds_no_secret() -> None:
    conf = render_all(load_spec(ROOT / "examples/local.yaml"))["slurmdbd.conf"]
    assert "StoragePass" not in fields_lines(conf)
    assert "Include /etc/slurm/slurmdbd-storage.conf" in conf


def fields_lines(text: str) -> set[str]:
    return {line.split("=", 1)[0] for line in text.splitlines() if "=" in line and not line.startswith("#")}


def test_slurm_kv_drops_none_joins_lists_and_spells_booleans() -> None:
    assert slurm_kv({"A": None, "B": [], "C": ["x", "y"], "D": True, "E": False, "F": 3}) == "C=x,y D=YES E=NO F=3"


def test_a_backup_controller_is_a_second_slurmctld_host_with_a_short_timeout() -> None:
    conf = render_all(load_spec(ROOT / "examples/local.yaml"))["slurm.conf"]
    hosts = [line.split("=", 1)[1] for line in conf.splitlines() if line.startswith("SlurmctldHost=")]
    assert hosts == ["dev-controller", "dev-controller-backup"]  # Slurm's order: primary first
    assert "\nSlurmctldTimeout=10\n" in conf
    single = render_all(load_spec(ROOT / "examples/lab.yaml"))["slurm.conf"]
    assert [line for line in single.splitlines() if line.startswith("SlurmctldHost=")] == ["SlurmctldHost=lab-ctl"]
    assert "SlurmctldTimeout" not in single  # Slurm's default: there is no backup to take over
    # the programs that restart a backup which held control, once it stands by again
    assert f"\nSlurmctldPrimaryOnProg={contract.CTLD_IN_CONTROL_PROGRAM}\n" in conf
    assert f"\nSlurmctldPrimaryOffProg={contract.CTLD_STANDBY_PROGRAM}\n" in conf
    assert "SlurmctldPrimaryO" not in single


def test_no_decay_always_comes_with_a_usage_reset() -> None:
    """Slurm 24.11 refuses PriorityDecayHalfLife=0 without PriorityUsageResetPeriod (sacctmgr:
    "You have to either have PriorityDecayHalfLife != 0 or PriorityUsageResetPeriod set"),
    budgets or not: seen when a spec turned decay off and removed its last budget."""
    data = yaml.safe_load((ROOT / "examples/local.yaml").read_text())
    data["scheduling"].setdefault("priority", {})["decay_half_life"] = "0"
    spec = validate_data(data, "local.yaml")
    conf = render_all(spec)["slurm.conf"]
    assert "\nPriorityDecayHalfLife=0\n" in conf and "\nPriorityUsageResetPeriod=MONTHLY\n" in conf
    assert "PriorityUsageResetPeriod" not in render_all(load_spec(ROOT / "examples/local.yaml"))["slurm.conf"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_a_requeued_job_is_held_seconds_not_two_minutes(example: Path) -> None:
    """slurmctld holds a requeued batch job for the credential lifetime + 1 s (121 s by
    default): every cluster sets a short one, as slurm.conf's AuthInfo."""
    conf = render_all(load_spec(example), source=example.name)["slurm.conf"]
    assert re.findall(r"^AuthInfo=(.*)$", conf, re.M) == ["cred_expire=10"]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_slurmctld_and_slurmdbd_verify_rest_api_tokens_with_one_key(example: Path) -> None:
    """`scontrol token` and the REST API: slurmctld and slurmdbd take JSON Web Tokens beside
    munge, both with the cluster's key (the rollout writes it there from the secret store)."""
    rendered = render_all(load_spec(example), source=example.name)
    for name in ("slurm.conf", "slurmdbd.conf"):
        conf = rendered[name]
        assert re.findall(r"^AuthType=(.*)$", conf, re.M) == ["auth/munge"], name
        assert re.findall(r"^AuthAltTypes=(.*)$", conf, re.M) == ["auth/jwt"], name
        assert re.findall(r"^AuthAltParameters=(.*)$", conf, re.M) == [f"jwt_key={contract.JWT_KEY_FILE}"], name
