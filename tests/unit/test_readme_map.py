"""The README's map of the package names every module of slurmforge/ once, and nothing that is
not there: a newcomer finds every file from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_map_names_every_module_once() -> None:
    text = (ROOT / "README.md").read_text()
    layout = text[text.index("## Layout"):]
    table = layout[:layout.index("\n\n", layout.index("| Where | What |"))]
    named = [m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", table, re.M)]
    package = ROOT / "slurmforge"
    modules = sorted([p.name for p in package.glob("*.py")] +
                     [p.name + "/" for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"])
    assert sorted(named) == modules
    assert len(named) == len(set(named))
