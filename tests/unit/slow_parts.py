"""Stand-ins for what makes `slurmforge up` slow, for tests that run the command line as a
user would (a real process on a pty or a pipe) without podman or Ansible: podman as the
node image build needs it (`FakePodman`: build.sh's output, the commit), Ansible's runner
as the rollout drives it (`FakeRunner`: the events ansible-runner hands its event handler).
`install()` puts them in place in the process that then runs `slurmforge.cli.main`."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slurmforge import image as pipeline

BUILD_OUTPUT = [
    "Get:1 http://deb.debian.org/debian trixie InRelease [140 kB]",
    "Unpacking ansible-core (2.19.4-1) ...",
    "Setting up ansible-core (2.19.4-1) ...",
    "PLAY [Install every package a slurmforge node may need] ************************",
    "TASK [Gathering Facts] *********************************************************",
    "ok: [localhost]",
    "TASK [slurm_common : Slurm packages] *******************************************",
    "changed: [localhost]",
    "slurmforge-image: built in 212 s: Slurm 24.11.5-4+deb13u1, 612 packages",
]
"""build.sh's output, as apt, ansible-playbook and the script itself print it (shortened)."""


class FakePodman:
    """Just enough of slurmforge.local.podman.Podman to count builds."""

    def __init__(self, images: set[str], in_use: frozenset[str] = frozenset()) -> None:
        self.images = images
        self.in_use = in_use
        self.commits: list[str] = []
        self.removed: list[str] = []
        self.slurm_version = "24.11.5-4+deb13u1"
        self.building = threading.Event()
        """Set once build.sh runs."""

    def json(self, argv: list[str]) -> list[dict[str, object]]:
        assert argv[:2] == ["images", "--format"]
        repository = argv[-1].removeprefix("reference=")
        return [{"Names": [t]} for t in sorted(self.images) if t.startswith(f"{repository}:")]

    def remove_image(self, tag: str) -> bool:
        if tag in self.in_use:
            return False
        self.images.discard(tag)
        self.removed.append(tag)
        return True

    def image_exists(self, tag: str) -> bool:
        return tag in self.images

    def remove_container(self, name: str) -> None:
        pass

    def run(self, argv: list[str], **_: object) -> str:
        if argv[0] == "commit":
            time.sleep(0.2)  # a build takes a while; the other `up` arrives meanwhile
            self.commits.append(argv[-1])
            self.images.add(argv[-1])
        return ""

    def exec_lines(self, name: str, argv: list[str], on_line: Callable[[str], None], **_: object) -> tuple[int, str]:
        """build.sh, as its output begins and ends."""
        assert argv == ["bash", f"{pipeline.WORKDIR}/{pipeline.BUILD_SCRIPT}"]
        self.building.set()
        for line in BUILD_OUTPUT:
            on_line(line)
        return 0, "\n".join(BUILD_OUTPUT)

    def exec(self, name: str, argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        """The builder: build.sh succeeds and records the Slurm it installed."""
        out = ""
        if argv == ["cat", pipeline.RECORD]:
            out = json.dumps({"slurm": self.slurm_version, "packages": 1})
        elif argv == ["cat", pipeline.PACKAGES]:
            out = f"slurm-client {self.slurm_version}\n"
        return subprocess.CompletedProcess(argv, 0, out, "")


RUNNER_EVENTS: list[dict[str, Any]] = [
    {"event": "playbook_on_play_start", "event_data": {"play": "Head nodes - the join program"}},
    {"event": "playbook_on_task_start", "event_data": {"task": "Munge key"}},
    {"event": "runner_on_start", "event_data": {"host": "dev-controller"}},
    {"event": "runner_on_ok", "event_data": {"host": "dev-controller"}},
    {"event": "runner_on_start", "event_data": {"host": "dev-login"}},
    {"event": "runner_on_ok", "event_data": {"host": "dev-login"}},
    {"event": "playbook_on_play_start", "event_data": {"play": "Controller - slurmctld"}},
    {"event": "playbook_on_task_start", "event_data": {"task": "slurmctld running"}},
    {"event": "runner_on_start", "event_data": {"host": "dev-controller"}},
    {"event": "runner_on_ok", "event_data": {"host": "dev-controller"}},
    {"event": "playbook_on_stats", "event_data": {"changed": {"dev-controller": 2}}},
]
"""What ansible-runner hands the rollout's event handler, in order (shortened)."""


def fake_runner() -> types.ModuleType:
    """ansible_runner as run_playbook uses it: run() hands every event to the handler."""
    runner = types.ModuleType("ansible_runner")
    utils = types.ModuleType("ansible_runner.utils")

    def run(event_handler: Callable[[dict[str, Any]], bool], **_: object) -> types.SimpleNamespace:
        for event in RUNNER_EVENTS:
            event_handler({**event, "stdout": ""})
        return types.SimpleNamespace(rc=0, status="successful")

    runner.run = run  # type: ignore[attr-defined]
    utils.signal_handler = lambda: None  # type: ignore[attr-defined]
    runner.utils = utils  # type: ignore[attr-defined]
    runner.__spec__ = importlib.machinery.ModuleSpec("ansible_runner", None)  # what package_data.require asks
    return runner


RECORDED = Path(__file__).parent / "plan_states" / "dev-live.json"
"""The local cluster "dev" as `slurmforge plan --save-state` read it (test_plan's)."""
SPOT_NODE = "dev-cpu-spot-01"
"""The running dynamic node the users and groups are pushed to."""
REQUEUED = 4242
"""The job the drain requeued."""


def stand_ins() -> Path:
    """What `up` and `rollout` share: the fake runner, the plan made against RECORDED, the
    users pushed to SPOT_NODE, root's access granted; $FAKE_DIR, the test's directory."""
    from slurmforge import cli, fleet
    from slurmforge.plan.deployed import Deployed
    from slurmforge.target import Target

    fake = fake_runner()
    sys.modules["ansible_runner"], sys.modules["ansible_runner.utils"] = fake, fake.utils
    recorded = Deployed.from_json(json.loads(RECORDED.read_text()))
    # setattr: replacing a module's function is what mypy would refuse
    setattr(cli, "_deployed", lambda *_: recorded)  # noqa: B010  # it reads the running cluster
    setattr(Target, "require_access", lambda self: None)  # noqa: B010  # root's, which a test need not be
    setattr(fleet, "push_accounts", lambda spec, hosts: [SPOT_NODE])  # noqa: B010  # podman exec on the node
    return Path(os.environ["FAKE_DIR"])


def install() -> None:
    """`up --local` with the plan made against RECORDED, the node image built by FakePodman
    (the image lock at $FAKE_DIR/image.lock: a test that holds it makes `up` wait), the
    rollout run by the fake runner, the users pushed to SPOT_NODE, and REQUEUED reported by
    the drain; nothing else of `up` (this machine, containers) runs."""
    from slurmforge import bringup, inventory
    from slurmforge.local import image_cache, up
    from slurmforge.local.image_cache import base_tag, ensure_images
    from slurmforge.rollout import CLUSTER_PLAYBOOK, run_playbook

    work = stand_ins()
    setattr(image_cache, "prepare_inputs", lambda dest, os: dest.mkdir(parents=True) or "digest")  # noqa: B010
    setattr(inventory, "read_inventory", lambda where: (None, []))  # noqa: B010

    def fake_up(spec_path: Path, ui: Any, **_: object) -> up.UpReport:
        with ui.phase("node image (built once, cached by content hash)"):
            ensure_images(FakePodman({base_tag()}), work / "up.log", lock=work / "image.lock",  # type: ignore[arg-type]
                          on_wait=ui.note, on_step=ui.event)
        with ui.phase("roll out (Ansible)"):
            result = run_playbook(CLUSTER_PLAYBOOK, str(work), work / "up.log", ui.event)
            bringup.push_users(work, ui)
        return up.UpReport("dev", work, work / "up.log", rollout=result, login="dev-login", drain_seconds=3,
                           requeued=[REQUEUED])

    setattr(up, "up", fake_up)  # noqa: B010


def install_rollout() -> None:
    """`rollout --inventory $FAKE_DIR` of $FAKE_DIR/cluster.yaml on its controller alone, the
    playbook run by the fake runner (its log in $FAKE_DIR), the plan made against RECORDED,
    the users pushed to SPOT_NODE."""
    from slurmforge import bringup, inventory
    from slurmforge.hosts import Host, HostRole
    from slurmforge.rollout import CLUSTER_PLAYBOOK, run_playbook
    from slurmforge.spec import load_spec

    work = stand_ins()
    hosts = [Host("dev-controller", "10.0.0.10", HostRole.CONTROLLER)]
    setattr(inventory, "read_inventory", lambda where: (load_spec(work / "cluster.yaml"), hosts))  # noqa: B010
    setattr(bringup, "roll_out_changed", lambda where, hosts, log, ui, full: run_playbook(  # noqa: B010
        CLUSTER_PLAYBOOK, str(where), work / "rollout.log", ui.event))


SUITE = '''
import time

from slurmforge.validation.problems import tell


def test_reads_the_hosts():
    for done, waiting in ((1, ["lab-login", "lab-cpu-01"]), (2, ["lab-cpu-01"]), (3, [])):
        tell(hosts=[done, 3], waiting=waiting)
        time.sleep(0.05)


def test_munge_runs():
    wrong = ["lab-cpu-01: munged found not running, wanted running"]
    assert not wrong, "\\n".join(wrong)


def test_fine():
    pass
'''
"""A live-cluster suite of three checks that reads its hosts as the real one does (problems.tell)."""


def install_suite() -> None:
    """`validate --inventory` runs SUITE (written into $FAKE_DIR/suite) instead of the real checks."""
    from slurmforge import validation

    suite = Path(os.environ["FAKE_DIR"]) / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "test_live.py").write_text(SUITE)
    (suite / "conftest.py").write_text("def pytest_addoption(parser):\n    parser.addoption('--inventory')\n")
    setattr(validation, "validation_suite", lambda: suite)  # noqa: B010
