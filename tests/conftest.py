"""Fixtures every test directory may use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.judge import Judge, node_image


@pytest.fixture(scope="session")
def judge() -> Iterator[Judge]:
    """One container from the node image for the session: its promtool, amtool, Lmod and
    python3 judge what slurmforge renders (built on first use when the image is missing)."""
    with Judge(node_image()) as container:
        yield container
