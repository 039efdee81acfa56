"""Human-readable output of `dsv4ctl probe deepgemm`: what was probed, the case table, the verdict.

The lines and the table's columns come from `dsv4ctl.probe.text`, which the plain-text
`python -m dsv4ctl.probe` prints too; this module only lays them out with Rich."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from dsv4ctl.probe.deepgemm import ProbeResult
from dsv4ctl.probe.text import CASE_COLUMNS, case_rows, header_lines, verdict_line
from dsv4ctl.render.tables import print_table


def cases_table(result: ProbeResult) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for title, right in CASE_COLUMNS:
        table.add_column(title, justify="right" if right else "left", no_wrap=title != "detail")
    for row in case_rows(result):
        table.add_row(*row)
    return table


def render_probe(result: ProbeResult, console: Console) -> None:
    for line in header_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.cases:
        console.print()
        print_table(console, cases_table(result))
    console.print()
    console.print(verdict_line(result), markup=False, highlight=False, soft_wrap=True)
