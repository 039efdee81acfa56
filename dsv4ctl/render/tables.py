"""Tables at any width: a number or an identifier is never cropped, ellipsized or folded.

Rich squeezes a table that is wider than the terminal by cutting its cells (`139.…`, `cu…`). Here a
table is laid out by `fit_table` instead: a `no_wrap` column (figures) keeps its widest cell, a
wrapping column (names, notes) shrinks to what is left but never below its longest word that holds
a number or names code or a path (`sparse_mla.py::_build_c128a_metadata`, a flag, a file); other long
words may fold, which keeps every character. When that
does not fit, `print_table` prints the same cells as key/value lines (`print_rows`), which fit any
width. Identical devices are collapsed by `group_same` before a table is built, so eight identical
GPUs are one row.
"""

from __future__ import annotations

import re
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


# A name of code or a path (`sparse_mla.py::_build_c128a_metadata`, `--max-model-len`, `/dev/shm`): folded, it
# reads as two names, so it is kept whole like a number.
_IDENTIFIER_RE = re.compile(r"[_/]|::|\w\.\w|^--?\w")


def _min_word(word: str) -> int:
    return len(word) if NUMBER_RE.search(word) or _IDENTIFIER_RE.search(word) else min(len(word), _FOLD_FLOOR)


def natural_width(console: Console, table: Table) -> int:
    """The width `table` takes with no cell wrapped: Rich's own measure (`Measurement.get`), in one pass over the
    cells where Rich's takes two (it lays the columns out at the unbounded width first, then measures them),
    read from the same per-column measure; Rich's whole measure when the table is not the plain kind."""
    wide = console.options.update_width(_UNBOUNDED)
    measure = getattr(table, "_measure_column", None)
    extra = getattr(table, "_extra_width", None)
    if measure is None or not isinstance(extra, int) or table.width is not None or table.min_width is not None:
        return Measurement.get(console, wide, table).maximum
    return sum(measure(console, wide, column).maximum for column in table.columns) + extra


def fit_table(console: Console, table: Table) -> bool:
    """Size `table` to the console without cutting a figure; False when that cannot be done.

    `no_wrap` columns keep their widest cell. Wrapping columns give up width, the widest first,
    down to their longest word with a number in it or naming code (Rich's own squeeze would cut below that)."""
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


def _as_lines(console: Console, table: Table) -> Table | None:
    """The same table as one column of whole rows, when it is the plain kind (no box, one line per cell, no sizes
    or footers) and fits the console unwrapped: Rich then measures and renders one cell per row where it took one
    per column and row (a diagnose of 38 starts spent 80 % of its rendering there). The text is Rich's to the
    character (tests/unit/test_render_width.py compares); None for any other table."""
    if (table.box is not None or table.expand or table.show_footer or table.show_lines or table.row_styles
            or table.leading or table.collapse_padding or table.width is not None or table.min_width is not None
            or tuple(table.padding) != (0, 1, 0, 1) or not table.columns):
        return None
    columns = table.columns
    if any(c.width is not None or c.min_width is not None or c.max_width is not None or c.ratio or c.highlight
           for c in columns):
        return None
    rows: list[list[Text]] = []
    if table.show_header:
        header_style = console.get_style(table.header_style or "", default="")
        rows.append([_cell(console, c.header, header_style + console.get_style(c.header_style or "", default=""))
                     for c in columns])
    cells = [list(c.cells) for c in columns]
    for i in range(table.row_count):
        rows.append([_cell(console, cells[k][i], console.get_style(c.style or "", default="")) for k, c in enumerate(columns)])
    if any(cell is None for row in rows for cell in row):
        return None
    widths = [max(cell.cell_len for cell in column) for column in zip(*rows)]
    last = len(columns) - 1
    pads = [((1 if k or table.pad_edge else 0), (1 if k < last or table.pad_edge else 0)) for k in range(len(columns))]
    if sum(w + a + b for w, (a, b) in zip(widths, pads)) > console.width:
        return None
    out = Table(title=table.title, title_style=table.title_style, title_justify=table.title_justify, caption=table.caption,
                caption_style=table.caption_style, caption_justify=table.caption_justify, show_header=False, box=None,
                pad_edge=False, padding=0, style=table.style)
    out.add_column(no_wrap=True, overflow="ignore")
    for row in rows:
        line = Text()
        for k, (cell, width, (a, b)) in enumerate(zip(row, widths, pads)):
            fill = width - cell.cell_len
            left = fill if columns[k].justify == "right" else fill // 2 if columns[k].justify == "center" else 0
            line.append(" " * (a + left))
            line.append_text(cell)
            line.append(" " * (fill - left + b))
        out.add_row(line)
    return out


def _cell(console: Console, cell: RenderableType | None, style) -> Text | None:
    """A cell as one line of styled text; None when it is not text, or not one line."""
    if cell is None:
        cell = ""
    if isinstance(cell, str):
        cell = console.render_str(cell, highlight=False)  # as Rich renders a str cell: markup and emoji, no highlighting (Column.highlight)
    if not isinstance(cell, Text) or "\n" in cell.plain or "\t" in cell.plain or cell.justify not in (None, "default", "left"):
        return None
    text = Text(style=style)  # the column's style under the cell's own, as Rich layers them
    text.append_text(cell)
    return text


def print_table(console: Console, table: Table, *narrower: Table, heading_columns: int = 1) -> None:
    """The first layout that fits the width whole, else the first that fits with its text columns
    wrapped (`fit_table`), else the rows as key/value lines. `narrower` are the same rows laid out
    more tightly (two-line headers, fewer columns), tried in order."""
    layouts = (table, *narrower)
    lines = _as_lines(console, table)
    if lines is not None:
        console.print(lines)
        return
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
