"""Table-driven spec tests: every valid-*.yaml / examples/*.yaml loads; every
invalid-*.yaml fails with the messages its `# expect:` lines name (one per line, each
a substring of one reported problem line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmforge.errors import SpecError
from slurmforge.spec import load_spec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).parent / "specs"
VALID = sorted(SPECS.glob("valid-*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))
INVALID = sorted(SPECS.glob("invalid-*.yaml"))


def expectations(path: Path) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in path.read_text().splitlines() if line.startswith("# expect:")]


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_spec_loads(path: Path) -> None:
    spec = load_spec(path)
    assert spec.pools and spec.partitions


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_spec_reports_each_expected_problem(path: Path) -> None:
    expected = expectations(path)
    assert expected, f"{path.name} has no '# expect:' line"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    lines = [p.line() for p in info.value.problems]
    for want in expected:
        assert any(want in line for line in lines), f"{want!r} not in:\n" + "\n".join(lines)
    # every problem is one line that names where it is (except file-level ones)
    assert all("\n" not in line for line in lines)
