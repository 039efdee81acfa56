"""`dsv4ctl diff`: the headline, the two starts, the differences ranked (each side's value and line, why it bears on
BAD's failure), the phases side by side with where they part, the explicit-length question, the command to run.
Prose wraps to the console's width with its indent; commands stand whole on their own line."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dsv4ctl.compare import Comparison, Difference, PhaseMark, Seen, StartRead, value_of
from dsv4ctl.compare.align import PHASE_NAMES
from dsv4ctl.render import print_command, print_prose
from dsv4ctl.render.tables import pack, print_table

SAME_WIDTH = 48  # a value the two starts share, longer than this, is named only (--json has it whole)
VERDICT_STYLE = {"healthy": "bold green", "failed": "bold red", "stuck": "bold yellow", "inconclusive": "yellow"}


def render_diff(c: Comparison, console: Console) -> None:
    print_prose(console, c.headline, style="bold")
    console.print()
    for side in (c.good, c.bad):
        _side(console, side)
    for note in c.notes:
        print_prose(console, f"Note: {note}", subsequent_indent="  ")
    console.print()
    _differences(console, c)
    _same(console, c)
    console.print()
    _timelines(console, c)
    console.print()
    q = c.explicit_length
    print_prose(console, f"{q.question} {q.answer}", style="bold")
    print_prose(console, q.note, indent="  ")
    _next(console, c)


def _side(console: Console, s: StartRead) -> None:
    rc = s.diagnosis.root_cause
    cause = f", {rc.id} (line {rc.line})" if rc is not None and rc.line else (f", {rc.id}" if rc else "")
    text = Text.assemble((f"{s.label:<5}", "bold"), " ", (s.verdict, VERDICT_STYLE.get(s.verdict, "")), cause)
    console.print(text, highlight=False)
    lines = f"lines {s.first_line}-{s.last_line}" if s.last_line else f"from line {s.first_line}"
    print_prose(console, f"{s.source}, start {s.number} of {s.count} ({lines})", indent="      ")


def _where(seen: Seen | None) -> str:
    return f"  (line {seen.line})" if seen is not None and seen.line else ""


def _differences(console: Console, c: Comparison) -> None:
    diffs = c.differences
    if not diffs:
        console.print("No difference in what diff compares.", style="bold", highlight=False)
        return
    console.print("Differences, by how they bear on BAD's failure", style="bold", highlight=False)
    for d in diffs:
        _difference(console, d)


def _difference(console: Console, d: Difference) -> None:
    console.print(Text.assemble((f"{d.rank:>2}. {d.name}", "bold"), f"  {d.status}"), highlight=False)
    for label, seen in (("GOOD", d.good), ("BAD", d.bad)):
        print_prose(console, f"{label:<5} {value_of(d, seen)}{_where(seen)}", indent="    ", subsequent_indent="          ")
    if d.bearing:
        print_prose(console, f"why   {d.bearing}", indent="    ", subsequent_indent="          ", style="dim")


def _same(console: Console, c: Comparison) -> None:
    same = [f"{f.name} {f.good.value}" if len(f.good.value) <= SAME_WIDTH else f"{f.name} (the same text)"
            for f in c.facts if not f.differs and f.good is not None]
    if same:
        console.print()
        console.print("The same on both", style="bold", highlight=False)
        for line in pack(same, console.width, indent="  ", sep="; "):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def _cell(m: PhaseMark | None) -> str:
    if m is None:
        return "-"
    clock = m.time.split(" ", 1)[-1] if m.time else ""
    took = f" {m.duration_s} s" if m.duration_s is not None else ""
    return f"{clock} l.{m.line}{took}".strip()


def _timelines(console: Console, c: Comparison) -> None:
    good, bad = {m.phase: m for m in c.good.phases}, {m.phase: m for m in c.bad.phases}
    table = Table(title="Phases (time, line, seconds to the next)", title_justify="left", title_style="bold")
    table.add_column("phase", no_wrap=True)
    table.add_column("GOOD", no_wrap=True)
    table.add_column("BAD", no_wrap=True)
    for phase, name in PHASE_NAMES.items():
        if phase in good or phase in bad:
            table.add_row(name, _cell(good.get(phase)), _cell(bad.get(phase)))
    print_table(console, table)
    print_prose(console, f"Where they part: {c.parting.text}", subsequent_indent="  ")


def _next(console: Console, c: Comparison) -> None:
    if c.pin_length is None:
        return
    console.print()
    print_prose(console, f"Pin the length BAD's own figures plan (--max-model-len {c.pin_length}):", style="bold")
    if c.bad.diagnosis.next_command:
        print_command(console, c.bad.diagnosis.next_command)
