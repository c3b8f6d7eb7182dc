"""Fixtures the service tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_service_world import SPEC


@pytest.fixture
def env(tmp_path: Path) -> dict[str, Path]:
    """A spec file, a spool, and where the daemon's state and heartbeat go."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    spool = tmp_path / "spool"
    spool.mkdir()
    return {"spec": spec, "spool": spool, "db": tmp_path / "state.db", "beat": tmp_path / "heartbeat"}


@pytest.fixture(autouse=True)
def no_remembered_cluster(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cluster `slurmforge use` remembers, in a scratch file: a default the machine's
    operator set must not change what a test's command acts on."""
    import slurmforge.target

    path = tmp_path_factory.mktemp("state") / slurmforge.target.CURRENT_FILE
    monkeypatch.setattr(slurmforge.target, "_current_file", lambda: path)
    return path
