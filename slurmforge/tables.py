"""Every table the command line prints (`status`, `pools`, `cost`, `modules list`), in the
formats people expect of a cluster tool (sinfo, squeue, kubectl):

- `table`, the default on a terminal: the title, aligned columns, the notes. It fits the
  terminal's width: long headers go on two lines, then the columns that matter least are
  left out (a note names them), free text wraps. Identifiers (node, pool, user names) are
  never cut: a table too wide even then runs past the edge rather than lose a character.
- `plain`, the default when stdout is not a terminal: a header of the column keys, then
  one row per line, every column and every row, values in full with no spaces inside
  (only the last column may hold free text), so `grep`, `awk '{print $1}'` and `sort`
  work on it.
- `csv` and `json`: the same keys and values, for programs. JSON is one object: the
  table's `meta` (the cluster, the period where there is one, counts), then `rows`, a list
  of objects; a key carries its unit (`spend_usd`, `cpu_hours`).

A table holds values, not text: a column knows how the `table` format shows its value
($1,234.50); the other formats print the value itself (1234.5).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Literal

Value = str | int | float | bool | None
Row = Sequence[Value]

GAP = "  "
"""Between two columns of the `table` and `plain` formats."""
WRAP_MIN = 12
"""A free-text column is not made narrower than this (or its longest word, if shorter)."""
MISSING = "-"


class Format(StrEnum):
    TABLE = "table"
    PLAIN = "plain"
    CSV = "csv"
    JSON = "json"


FORMAT_HELP = ("table (the default on a terminal: fits its width), plain (the default when piped: "
               "every column, one row per line, for grep and awk), csv or json.")


def _text(value: Value) -> str:
    return str(value)


@dataclass(frozen=True)
class Column:
    key: str
    """The column's name in `plain`, CSV and JSON: stable, lower case, no spaces."""
    header: str
    """The `table` format's heading."""
    show: Callable[[Value], str] = _text
    """How the `table` format shows a value that is not None (None shows as '-')."""
    numeric: bool = False
    """Right-aligned in the `table` format."""
    drop: int = 0
    """0: always shown. Otherwise, when the table is too wide for the terminal, the columns
    are left out highest `drop` first."""
    wrap: bool = False
    """Free text: wraps in the `table` format (put it last: `plain` keeps its spaces)."""
    scope: Literal["all", "table", "data"] = "all"
    """'table': only the `table` format shows it (a share, flags in one cell); 'data':
    only the other formats (what the table says in another column or a note)."""


@dataclass
class Table:
    title: str
    columns: Sequence[Column]
    rows: list[Row] = field(default_factory=list)
    footer: list[Row] = field(default_factory=list)
    """`table` format only, under a rule: totals, the rows beyond `limit` summed up."""
    notes: list[str] = field(default_factory=list)
    """`table` format only, under the table."""
    limit: int = 0
    """The `table` format shows this many rows at most (0: all); the others show all."""
    meta: dict[str, object] = field(default_factory=dict)
    """JSON only, before the rows: the cluster, the period, counts (JSON values, units in
    the keys)."""


def default_format() -> Format:
    return Format.TABLE if sys.stdout.isatty() else Format.PLAIN


def terminal_width() -> int:
    """The terminal's width ($COLUMNS first); 80 when stdout is not a terminal."""
    return shutil.get_terminal_size((80, 24)).columns


def emit(table: Table, fmt: Format | None = None) -> None:
    """Print the table on stdout in `fmt` (default: table on a terminal, plain otherwise)."""
    fmt = fmt or default_format()
    styled = fmt is Format.TABLE and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    sys.stdout.write(render(table, fmt, terminal_width(), styled))
    sys.stdout.flush()


def render(table: Table, fmt: Format, width: int = 80, styled: bool = False) -> str:
    if fmt is Format.TABLE:
        return render_table(table, width, styled)
    columns = [c for c in table.columns if c.scope != "table"]
    index = [table.columns.index(c) for c in columns]
    rows = [[row[i] for i in index] for row in table.rows]
    if fmt is Format.CSV:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([c.key for c in columns])
        writer.writerows([["" if v is None else data_text(v) for v in row] for row in rows])
        return out.getvalue()
    if fmt is Format.JSON:
        items = [{c.key: _json_value(v) for c, v in zip(columns, row, strict=True)} for row in rows]
        return json.dumps({"cluster": None, **table.meta, "rows": items}, indent=2) + "\n"
    cells = [[c.key for c in columns]] + [[_plain_cell(v, last=i == len(row) - 1) for i, v in enumerate(row)]
                                          for row in rows]
    return "".join(_line(row, [max(len(r[i]) for r in cells) for i in range(len(columns))]) for row in cells)


def data_text(value: Value) -> str:
    """A value as `plain` and CSV print it: numbers without separators or units, floats
    to 4 decimals without trailing zeros (181.4, not 181.400)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:.4f}".rstrip("0").rstrip(".")
        return "0" if text in ("-0", "") else text
    return str(value)


def iso_moment(seconds: float) -> str:
    """A moment in local time with its offset (ISO 8601), as JSON shows a period."""
    return datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")


def _json_value(value: Value) -> Value:
    return round(value, 4) if isinstance(value, float) else value


def _plain_cell(value: Value, last: bool) -> str:
    if value is None or value == "":
        return MISSING
    text = data_text(value)
    return text if last else "_".join(text.split())


def _line(cells: Sequence[str], widths: Sequence[int], numeric: Sequence[bool] = ()) -> str:
    parts = [cell.rjust(w) if numeric and numeric[i] else cell.ljust(w)
             for i, (cell, w) in enumerate(zip(cells, widths, strict=True))]
    return GAP.join(parts).rstrip() + "\n"


# --------------------------------------------------------------------------- the table format


def count(value: Value) -> str:
    """A count that may be fractional (a job split over pools): 181, 181.4, 0.25, 1,181.5
    - never three decimals, which read as thousands."""
    if not isinstance(value, int | float):
        return str(value)
    return f"{value:,.2f}".rstrip("0").rstrip(".") if value % 1 else f"{int(value):,}"


def money(value: Value) -> str:
    return f"${value:,.2f}" if isinstance(value, int | float) else str(value)


def _split_header(header: str) -> list[str]:
    """A heading on two lines at the space (or after the '/' or '-') that makes it
    narrowest; one line when it has none."""
    best = [header]
    for i, char in enumerate(header):
        if char in " /-":
            candidate = [header[:i] if char == " " else header[:i + 1], header[i + 1:]]
            if max(map(len, candidate)) < max(map(len, best)):
                best = candidate
    return best


@dataclass
class _Layout:
    columns: list[int]
    """Indices into the table's columns, in order."""
    headers: dict[int, list[str]]
    widths: dict[int, int]


def _layout(columns: Sequence[Column], cells: list[list[str]], width: int) -> tuple[_Layout, list[int]]:
    """Which columns, their headings and widths: single-line headings if the table fits,
    else two-line ones, then columns left out by `drop`, free text narrowed to fit."""
    candidates = [i for i, c in enumerate(columns) if c.scope != "data"]
    content = {i: max((len(row[i]) for row in cells), default=0) for i in candidates}

    def widths(shown: list[int], headers: dict[int, list[str]], narrow: bool) -> dict[int, int]:
        out = {}
        for i in shown:
            head = max(len(h) for h in headers[i])
            out[i] = max(head, min(content[i], WRAP_MIN) if columns[i].wrap and narrow else content[i])
        return out

    def total(w: dict[int, int]) -> int:
        return sum(w.values()) + len(GAP) * (len(w) - 1)

    shown = list(candidates)
    one = {i: [columns[i].header] for i in candidates}
    if total(widths(shown, one, narrow=False)) <= width:
        return _Layout(shown, one, widths(shown, one, narrow=False)), []
    two = {i: _split_header(columns[i].header) for i in candidates}
    dropped: list[int] = []
    order = sorted((i for i in candidates if columns[i].drop), key=lambda i: (-columns[i].drop, -i))
    while total(widths(shown, two, narrow=True)) > width and order:
        gone = order.pop(0)
        shown.remove(gone)
        dropped.append(gone)
    headers = one if total(widths(shown, one, narrow=True)) <= width else two
    final = widths(shown, headers, narrow=True)
    spare = width - total(final)
    for i in shown:  # give free text back the room left, up to its full length
        if columns[i].wrap and spare > 0:
            grow = max(0, min(spare, content[i] - final[i]))
            final[i] += grow
            spare -= grow
    return _Layout(shown, headers, final), dropped


def _table_cell(column: Column, value: Value, footer: bool) -> str:
    """A value as the `table` format shows it; a footer's empty cells stay empty."""
    if value is None or value == "":
        return "" if footer and value == "" else MISSING
    return column.show(value)


def render_table(table: Table, width: int = 80, styled: bool = False) -> str:
    """The `table` format at `width` columns; bold title and headings when styled."""
    columns = table.columns
    rows = table.rows[:table.limit] if table.limit > 0 else table.rows
    cells = [[_table_cell(c, v, footer=n >= len(rows)) for c, v in zip(columns, row, strict=True)]
             for n, row in enumerate([*rows, *table.footer])]
    layout, dropped = _layout(columns, cells, width)
    bold, reset = ("\x1b[1m", "\x1b[0m") if styled else ("", "")
    numeric = [columns[i].numeric for i in layout.columns]
    widths = [layout.widths[i] for i in layout.columns]
    out = [f"{bold}{table.title}{reset}\n"] if table.title else []
    depth = max(len(layout.headers[i]) for i in layout.columns)
    for line in range(depth):
        heads = [(layout.headers[i] if len(layout.headers[i]) == depth else ["", *layout.headers[i]])[line]
                 for i in layout.columns]
        out.append(f"{bold}{_line(heads, widths, numeric).rstrip()}{reset}\n")
    body = len(rows)
    for n, row in enumerate(cells):
        if n == body and table.footer:
            out.append("-" * min(width, sum(widths) + len(GAP) * (len(widths) - 1)) + "\n")
        wrapped = {i: textwrap.wrap(row[i], layout.widths[i], break_on_hyphens=False) or [""] if columns[i].wrap
                   else [row[i]]
                   for i in layout.columns}
        for k in range(max(len(v) for v in wrapped.values())):
            out.append(_line([wrapped[i][k] if k < len(wrapped[i]) else "" for i in layout.columns], widths,
                             numeric))
    notes = list(table.notes)
    if dropped:
        names = ", ".join(columns[i].header for i in sorted(dropped))
        notes.append(f"not shown at {width} columns: {names} (a wider terminal, or --format plain, shows them)")
    for note in notes:
        out.append("\n".join(textwrap.wrap(note, width, subsequent_indent="  ", break_long_words=False,
                                           break_on_hyphens=False)) + "\n")
    return "".join(out)
