"""Slurm hostlist expressions in pure Python: `gpu-[01-03,07]` <-> names.

The scheduler service never hands a hostlist to `scontrol show hostnames` (Slurm passes
thousands of nodes to ResumeProgram; an expanded list does not belong in argv) and ships
from the project's wheel, so it carries its own small implementation.

Syntax handled (as Slurm writes it): comma-separated items outside brackets; inside
brackets, comma-separated numbers and ranges `lo-hi`; the width of `lo` sets zero padding
(`[08-10]` -> 08, 09, 10); several bracket groups in one item expand as a product
(`r[1-2]-n[1-2]` -> r1-n1, r1-n2, r2-n1, r2-n2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

MAX_EXPANSION = 1_000_000
"""Refuse expressions larger than this (a typo like [1-99999999] must not eat memory)."""

_SUFFIX = re.compile(r"^(.*?)(\d+)$")


class HostlistError(ValueError):
    """The expression is not a valid hostlist."""


def expand(expression: str) -> list[str]:
    """Every name the expression stands for, in order, duplicates kept."""
    names: list[str] = []
    for item in _split_top_level(expression.strip()):
        names.extend(_expand_item(item))
        if len(names) > MAX_EXPANSION:
            raise HostlistError(f"{expression[:60]!r}: more than {MAX_EXPANSION} names")
    return names


def compress(names: Iterable[str]) -> str:
    """The shortest usual form: names sharing a prefix and a digit count become one
    bracketed range list. Sorted, duplicates dropped; `expand(compress(x))` == sorted set."""
    groups: dict[tuple[str, int], set[int]] = {}
    plain: set[str] = set()
    for name in names:
        match = _SUFFIX.match(name)
        if match is None:
            plain.add(name)
            continue
        prefix, digits = match.groups()
        groups.setdefault((prefix, len(digits)), set()).add(int(digits))
    parts = [(name, name) for name in plain]
    for (prefix, width), numbers in groups.items():
        parts.append((f"{prefix}{min(numbers):0{width}d}", _ranged(prefix, sorted(numbers), width)))
    return ",".join(text for _, text in sorted(parts))


def _ranged(prefix: str, numbers: list[int], width: int) -> str:
    spans = list(_spans(numbers))
    if len(spans) == 1 and spans[0][0] == spans[0][1]:
        return f"{prefix}{spans[0][0]:0{width}d}"
    text = ",".join(f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}" for lo, hi in spans)
    return f"{prefix}[{text}]"


def _spans(numbers: list[int]) -> Iterator[tuple[int, int]]:
    lo = prev = numbers[0]
    for n in numbers[1:]:
        if n != prev + 1:
            yield lo, prev
            lo = n
        prev = n
    yield lo, prev


def _split_top_level(expression: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(expression):
        if char == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"{expression!r}: nested '['")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"{expression!r}: ']' without '['")
        elif char == "," and depth == 0:
            items.append(expression[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"{expression!r}: '[' without ']'")
    items.append(expression[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_item(item: str) -> list[str]:
    """`r[1-2]-n[01-02]` -> the product of its bracket groups, in order."""
    results = [""]
    for literal, group in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
        if literal:
            results = [r + literal for r in results]
        if group:
            numbers = _expand_group(item, group)
            results = [r + n for r in results for n in numbers]
            if len(results) > MAX_EXPANSION:
                raise HostlistError(f"{item[:60]!r}: more than {MAX_EXPANSION} names")
    return results


def _expand_group(item: str, group: str) -> list[str]:
    numbers: list[str] = []
    for part in group.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"{item!r}: '{part}' is not a number or a range lo-hi")
        if not sep:
            numbers.append(lo)
            continue
        first, last = int(lo), int(hi)
        if last < first:
            raise HostlistError(f"{item!r}: range {part} runs backwards")
        if last - first > MAX_EXPANSION:
            raise HostlistError(f"{item!r}: range {part} is larger than {MAX_EXPANSION}")
        width = len(lo)
        numbers.extend(f"{n:0{width}d}" for n in range(first, last + 1))
    return numbers
