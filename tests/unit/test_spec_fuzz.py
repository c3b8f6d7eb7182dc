"""The loader never fails with anything but SpecError, whatever the text: property-based
tests (hypothesis, derandomized: the same examples on every run, bounded in number and
time) over mutated valid specs, random YAML documents and random text, plus the corpus
of inputs that once crashed it (tests/unit/specs/corpus/, one file per kind of crash).

Every problem is one line, of bounded length, with a fix."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurmforge.errors import SpecError
from slurmforge.spec import API_VERSION, parse_spec, validate_data
from slurmforge.spec.document import MAX_DEPTH

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SPECS = Path(__file__).parent / "specs"
CORPUS = sorted((SPECS / "corpus").glob("*.yaml"))
VALID = sorted((ROOT / "examples").glob("*.yaml")) + sorted(SPECS.glob("valid-*.yaml"))
TEXTS = [p.read_text() for p in VALID]
DATA = [yaml.safe_load(t) for t in TEXTS]
# path (200) + message (400) + value (80 and its length) + fix (400), shortened parts
# marked "... (N characters)": see errors.Problem.line
MAX_LINE = 1200

BOUNDED = settings(derandomize=True, max_examples=300, deadline=None, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# what YAML gives a special meaning, and values at Slurm's and Python's edges
TOKENS = ["!!int", "!!float", "!!str", "!!bool", "!!null", "!!binary", "!!timestamp", "!!set", "!!omap", "!!pairs",
          "!!map", "!!seq", "!x", "!<tag:yaml.org,2002:int>", "&a", "*a", "<<: ", "? ", ": ", "- ", "[", "]", "{", "}",
          ",", "\n", "  ", "'", '"', "#", "|", ">", "~", "null", "true", "yes", "OFF", "0x1F", "0o17", "017", "1e400",
          "-1", "0", "4294967294", "9" * 400, ".inf", ".nan", "1:30:00", "2024-01-01", "/", "//", "/../", "\t", "%",
          "@", "`", "\\", "\u2028", "\x85", "---", "...", "=", "{[a]: 1}", "? [a, b]\n: 1", "!!python/none",
          "&b [*b]", "x" * 300]


def assert_loads_or_reports(text: str) -> None:
    try:
        parse_spec(text, "fuzz.yaml")
    except SpecError as exc:
        assert_problems(exc)


def assert_problems(exc: SpecError) -> None:
    assert exc.problems
    for problem in exc.problems:
        line = problem.line()
        assert line.splitlines() == [line], line[:300]
        assert len(line) <= MAX_LINE, line[:300]
        assert problem.fix, line


@st.composite
def mutated_text(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(text)))
        token = draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=6)))
        cut = draw(st.sampled_from([0, 0, 1, 4, 12, 40]))
        text = text[:pos] + token + text[pos + cut:]
    return text


@BOUNDED
@given(mutated_text())
def test_mutated_specs_load_or_report_problems(text: str) -> None:
    assert_loads_or_reports(text)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
                    st.sampled_from(["/", "/var", "/etc/x", "a\nb", "https://x.org", "1:30", "0", "UNLIMITED"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8), inner, max_size=4), max_leaves=12)


def _paths(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else []
    found = []
    for key, value in items:
        found.append((*path, key))
        found.extend(_paths(value, (*path, key)))
    return found


@BOUNDED
@given(st.data())
def test_valid_specs_with_values_replaced_report_problems(data: st.DataObject) -> None:
    """Like a person editing a valid spec: any value replaced by any other value."""
    spec = copy.deepcopy(data.draw(st.sampled_from(DATA)))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(spec)))
        parent = spec
        for part in path[:-1]:
            parent = parent[part]
        parent[path[-1]] = data.draw(VALUES)
    text = yaml.safe_dump(spec, allow_unicode=True)
    assert_loads_or_reports(text)
    try:
        validate_data(spec, "fuzz")
    except SpecError as exc:
        assert_problems(exc)


@BOUNDED
@given(st.dictionaries(st.text(max_size=10), VALUES, max_size=6))
def test_random_yaml_documents_report_problems(document: dict[str, Any]) -> None:
    assert_loads_or_reports(yaml.safe_dump({"api_version": API_VERSION, **document}, allow_unicode=True))


@BOUNDED
@given(st.text(max_size=200))
def test_random_text_reports_problems(text: str) -> None:
    assert_loads_or_reports(text)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_corpus_of_former_crashes_reports_problems(path: Path) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(path.read_text(), path.name)
    assert_problems(info.value)


def test_corpus_covers_the_crashes_found() -> None:
    assert len(CORPUS) >= 15


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 200_000])
def test_deep_nesting_is_refused_quickly(depth: int) -> None:
    """libyaml's composer recursed once per level (a segfault near 100,000), PyYAML's
    raised RecursionError near 1,000; the parser itself is quadratic in the depth."""
    with pytest.raises(SpecError) as info:
        parse_spec(f"api_version: {API_VERSION}\nname: " + "[" * depth + "]" * depth + "\n")
    assert "nesting deeper than" in info.value.problems[0].line()


def test_validate_exits_2_on_the_corpus_without_a_traceback() -> None:
    """A real process for a few of them: nothing may escape the CLI."""
    for path in CORPUS[:6]:
        proc = subprocess.run([sys.executable, "-m", "slurmforge.cli", "validate", str(path)],
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 2, (path.name, proc.stderr[-500:])
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("parser", ["libyaml", "python"])
def test_deep_nesting_names_the_same_place_with_either_parser(parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """libyaml 0.2.6 (PyYAML 6.0.3+ wheels) stops at its own limit of 1,000 levels before
    the composer sees level 65, at another column: the problem is the same one, at the
    same place, whichever parser PyYAML was built with."""
    import yaml

    from slurmforge.spec import document

    if parser == "python":
        monkeypatch.setattr(document, "_PARSER", yaml.SafeLoader)
    text = f"api_version: {API_VERSION}\nname: " + "[" * 2000 + "]" * 2000 + "\n"
    with pytest.raises(SpecError) as info:
        parse_spec(text)
    column = len("name: ") + MAX_DEPTH  # the top-level mapping is the first level
    assert info.value.problems[0].line().startswith(
        f"nesting deeper than {MAX_DEPTH} levels at line 2, column {column};"), info.value.problems[0].line()
