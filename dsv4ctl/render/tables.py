"""Tables at any width: a number is never cropped, ellipsized or folded.

Rich squeezes a table that is wider than the terminal by cutting its cells (`139.…`, `cu…`). Here a
table is laid out by `fit_table` instead: a `no_wrap` column (figures) keeps its widest cell, a
wrapping column (names, notes) shrinks to what is left but never below its longest word that holds
a number; other long words (paths, identifiers) may fold, which keeps every character. When that
does not fit, `print_table` prints the same cells as key/value lines (`print_rows`), which fit any
width. Identical devices are collapsed by `group_same` before a table is built, so eight identical
GPUs are one row.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from dsv4ctl.render import NUMBER_RE, wrap_prose

T = TypeVar("T")

_UNBOUNDED = 10_000
# A word without a number may fold (keeping every character) down to this many columns.
_FOLD_FLOOR = 8


def group_same(items: Iterable[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """Items with the same key, in the order their first member came."""
    groups: dict[Hashable, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return list(groups.values())


def index_ranges(indices: Sequence[int]) -> str:
    """`0-2,4-7`: runs of consecutive indices as ranges, in the order given."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" if len(r) > 2 else f"{r[0]},{r[1]}" for r in runs)


def counted(name: str, n: int) -> str:
    """`8 × NVIDIA H200` for a group, the bare name for one device."""
    return f"{n} × {name}" if n > 1 else name


def plain(console: Console, cell: RenderableType | None) -> str:
    """A cell's text without its markup or style."""
    if cell is None:
        return ""
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return console.render_str(cell).plain
    return str(cell)


def _min_word(word: str) -> int:
    return len(word) if NUMBER_RE.search(word) else min(len(word), _FOLD_FLOOR)


def natural_width(console: Console, table: Table) -> int:
    """The width `table` takes with no cell wrapped."""
    return Measurement.get(console, console.options.update_width(_UNBOUNDED), table).maximum


def fit_table(console: Console, table: Table) -> bool:
    """Size `table` to the console without cutting a figure; False when that cannot be done.

    `no_wrap` columns keep their widest cell. Wrapping columns give up width, the widest first,
    down to their longest word with a number in it (Rich's own squeeze would cut below that)."""
    wide = console.options.update_width(_UNBOUNDED)
    excess = natural_width(console, table) - console.width
    if excess <= 0:
        return True
    shrinkable: list[list] = []  # [column, width now, narrowest allowed]
    for column in table.columns:
        if column.no_wrap or column.width is not None:
            continue
        cells = [column.header if table.show_header else "", *column.cells]
        widest = max(Measurement.get(console, wide, c).maximum for c in cells)
        words = [w for c in cells for w in plain(console, c).split()]
        shrinkable.append([column, widest, max((_min_word(w) for w in words), default=1)])
    if sum(width - least for _, width, least in shrinkable) < excess:
        return False
    while excess > 0:
        entry = max((e for e in shrinkable if e[1] > e[2]), key=lambda e: e[1])
        entry[1] -= 1
        excess -= 1
    for column, width, _ in shrinkable:
        column.width, column.overflow = width, "fold"  # a long word folds, every character kept
    return True


def print_table(console: Console, table: Table, *narrower: Table, heading_columns: int = 1) -> None:
    """The first layout that fits the width whole, else the first that fits with its text columns
    wrapped (`fit_table`), else the rows as key/value lines. `narrower` are the same rows laid out
    more tightly (two-line headers, fewer columns), tried in order."""
    layouts = (table, *narrower)
    for layout in layouts:
        if natural_width(console, layout) <= console.width:
            console.print(layout)
            return
    for layout in layouts:
        if fit_table(console, layout):
            console.print(layout)
            return
    print_rows(console, layouts[-1], heading_columns)


def print_rows(console: Console, table: Table, heading_columns: int = 1) -> None:
    """A table read row by row: a heading line (the first column's header and cell, then the cells
    of the other heading columns), then `header value` pairs packed into indented lines; a pair is
    never split across lines unless it alone is wider than a line."""
    if table.title:
        console.print(Text(plain(console, table.title), style=table.title_style or ""))
    headers = [" ".join(plain(console, c.header).split()) if table.show_header else "" for c in table.columns]
    columns = [list(c.cells) for c in table.columns]
    for row in range(table.row_count):
        cells = [" ".join(plain(console, column[row]).split()) for column in columns]
        head = "  ".join(x for x in (f"{headers[0]} {cells[0]}".strip(), *cells[1:heading_columns]) if x)
        for line in wrap_prose(head, console.width, subsequent_indent="    "):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        pairs = [f"{h} {c}".strip() for h, c in zip(headers[heading_columns:], cells[heading_columns:]) if c]
        for line in pack(pairs, console.width, indent="  "):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def pack(items: Sequence[str], width: int, indent: str = "", sep: str = "  ", hang: str | None = None) -> list[str]:
    """Items joined by `sep` into lines of at most `width`, the first line indented by `indent`, the
    others by `hang` (default: the same); an item is moved whole to the next line, and only one wider
    than a line is wrapped (at spaces, `wrap_prose`)."""
    hang = indent if hang is None else hang
    lines: list[str] = []
    line = ""
    for item in items:
        if line and len(line) + len(sep) + len(item) <= width:
            line += sep + item
            continue
        lead = hang if lines or line else indent
        if line:
            lines.append(line)
        if len(lead) + len(item) <= width:
            line = lead + item
        else:
            *whole, line = wrap_prose(item, width, lead, lead + "  ")
            lines.extend(whole)
    if line:
        lines.append(line)
    return lines
