"""The image's inputs hold the scheduler service's wheels from a lock (slurmforge.image,
slurmforge/data/service-wheels.lock): every machine - another admin's, a CI runner, with
another index or a newer release out - puts the same files in and gets the same digest, so
nobody's `pulumi up` rebakes the AMI for nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from slurmforge import image
from slurmforge.contract import service_requirements
from slurmforge.distro import DEBIAN_13

pytestmark = pytest.mark.unit


def test_the_lock_satisfies_the_services_requirements() -> None:
    locked = image.locked_wheels(image.service_lock().read_text())
    for line in service_requirements():
        req = Requirement(line)
        name = req.name.lower().replace("_", "-")
        assert name in locked and req.specifier.contains(locked[name]), (line, locked.get(name))
    assert all("--hash=sha256:" in line for line in image.service_lock().read_text().splitlines()
               if line and not line.startswith("#"))


def fake_pip(newest: str) -> Any:
    """`pip download` on a machine whose index has `newest` as every package's latest release:
    ranges resolve to it, a lock's pins are what they say."""
    def run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        target = Path(cmd[cmd.index("-d") + 1])
        if "-r" in cmd:
            pins = image.locked_wheels(Path(cmd[cmd.index("-r") + 1]).read_text())
        else:
            pins = {Requirement(a).name: newest for a in cmd[cmd.index("-d") + 2:]}
        for name, version in pins.items():
            (target / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(f"{name} {version}".encode())
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


@pytest.mark.parametrize("newest", ["99.0", "99.1"])
def test_every_machine_gets_the_same_inputs_digest(newest: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    digests = set()
    for machine, latest in (("a", "98.0"), ("b", newest)):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / machine / "cache"))
        monkeypatch.setattr(image.subprocess, "run", fake_pip(latest))
        digests.add(image.prepare_inputs(tmp_path / machine / "inputs", DEBIAN_13))
    assert len(digests) == 1
