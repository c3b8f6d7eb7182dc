"""The service's own hostlist expand/compress, checked against Slurm's syntax and
against python-hostlist (a dev dependency only)."""

from __future__ import annotations

import random

import hostlist as reference
import pytest

from slurmforge.hostlists import HostlistError, compress, expand

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("n1", ["n1"]),
        ("gpu-[01-03]", ["gpu-01", "gpu-02", "gpu-03"]),
        ("gpu-[01-02,07]", ["gpu-01", "gpu-02", "gpu-07"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
        ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
        ("lab-gpu-[01-02],lab-cpu-01", ["lab-gpu-01", "lab-gpu-02", "lab-cpu-01"]),
        (" x[1] ", ["x1"]),
        ("", []),
    ],
)
def test_expand(expression: str, names: list[str]) -> None:
    assert expand(expression) == names


@pytest.mark.parametrize("bad", ["n[1-", "n]1", "n[a-b]", "n[3-1]", "n[[1]]", "n[1-9999999999]"])
def test_expand_refuses(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand(bad)


@pytest.mark.parametrize(
    ("names", "expression"),
    [
        (["gpu-01", "gpu-02", "gpu-03"], "gpu-[01-03]"),
        (["gpu-03", "gpu-01", "gpu-02", "gpu-07", "gpu-01"], "gpu-[01-03,07]"),
        (["n1"], "n1"),
        (["login", "n2", "n1"], "login,n[1-2]"),
        (["a-001", "b-1", "a-002"], "a-[001-002],b-1"),
        ([], ""),
    ],
)
def test_compress(names: list[str], expression: str) -> None:
    assert compress(names) == expression


def test_round_trip_matches_python_hostlist() -> None:
    rng = random.Random(7)
    for _ in range(200):
        names = {f"{rng.choice(['gpu', 'cpu-x', 'n'])}-{rng.randint(1, 300):03d}" for _ in range(rng.randint(1, 60))}
        text = compress(names)
        assert expand(text) == sorted(names, key=lambda n: (n.rsplit("-", 1)[0], n))
        assert set(reference.expand_hostlist(text)) == names
        assert expand(reference.collect_hostlist(sorted(names))) == reference.expand_hostlist(
            reference.collect_hostlist(sorted(names)))


def test_large_list_stays_short() -> None:
    names = [f"c-gpu-{i:05d}" for i in range(1, 20_001)]
    assert compress(names) == "c-gpu-[00001-20000]"
    assert expand("c-gpu-[00001-20000]") == names
