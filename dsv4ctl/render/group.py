"""`diagnose` of a deployment (a bundle, or several launches' logs): the group's verdict, its members and
ranks, a timeline per rank side by side, the root cause with its node, pod and rank, the silent ranks,
what the others saw, and the group's advice. `--svg FILE` saves the same report through Rich's own SVG
export (for a bug report)."""

from __future__ import annotations

import io
import shlex
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dsv4ctl.group import GroupReading, MemberReading
from dsv4ctl.render import print_command, print_prose

PHASE_ROWS = (("engine_config", "engine configured"), ("kv_cache_size", "KV cache sized"),
              ("init_engine", "engine initialised"), ("ready", "ready"), ("startup_complete", "serving"),
              ("failed", "failed"))


def _clock(stamp: str | None) -> str:
    return stamp.split(" ", 1)[-1] if stamp else "-"


def _column(r: MemberReading) -> str:
    rank = f"rank {r.rank_text}" if r.ranks else "no rank"
    return f"{rank}\n{r.label}"


def timeline_table(g: GroupReading) -> Table:
    table = Table(title="Timeline per rank", title_justify="left", show_lines=False)
    table.add_column("", no_wrap=True)
    ordered = sorted(g.readings, key=lambda r: (r.ranks[0] if r.ranks else 1 << 30, r.label))
    for r in ordered:
        table.add_column(_column(r), overflow="fold")
    for phase, label in PHASE_ROWS:
        cells = []
        for r in ordered:
            m = next((m for m in r.milestones if m.phase == phase), None)
            cells.append(f"{_clock(m.time)} (l.{m.line})" if m and m.line else (_clock(m.time) if m else ""))
        if any(cells):
            table.add_row(label, *cells)
    table.add_row("last line", *[_clock(r.last_time) for r in ordered])
    table.add_row("verdict", *[Text(r.verdict, style="bold red" if r.verdict == "failed" else "") for r in ordered])
    return table


def members_table(g: GroupReading) -> Table:
    table = Table(title="Members", title_justify="left")
    for name in ("log", "node", "pod/container", "ranks", "role", "vLLM", "status"):
        table.add_column(name, overflow="fold")
    for r in g.readings:
        m = r.member
        term = m.termination or {}
        status = term.get("reason") and f"{term.get('reason')} (exit {term.get('exit_code')})" or ""
        if m.restart_count:
            status = f"{status}; {m.restart_count} restart(s)".strip("; ")
        cells = (m.name.rsplit("/", 1)[-1], m.node or "-", f"{m.pod}/{m.container}" if m.pod else "-",
                 r.rank_text, r.role, r.vllm_version or "-", status or "-")
        table.add_row(*(Text(c) for c in cells))  # names as written, never Rich markup
    return table


def _who(r: MemberReading) -> str:
    return f"rank {r.rank_text} ({r.label})" if r.ranks else r.label


def render_separate(g: GroupReading, console: Console) -> None:
    """Logs of separate launches: why they are not one group, then each log's own reading."""
    console.print()
    console.print(Text("Why they are separate", style="bold"))
    for why in g.apart:
        print_prose(console, why, indent="  ", subsequent_indent="    ")
    console.print()
    console.print(Text("Each log on its own", style="bold"))
    for r in g.readings:
        seen = f"{r.root_title} (line {r.root_line})" if r.root_title and r.root_line else (r.root_title or r.summary)
        print_prose(console, f"{r.label}: {r.verdict}: {seen}", indent="  ", subsequent_indent="    ")
    if g.bundle is None:
        console.print("  Each one's full report, one log at a time:", markup=False)
        for r in g.readings:
            print_command(console, f"dsv4ctl diagnose {shlex.quote(r.member.path)}", indent="    ")


def render_group(g: GroupReading, console: Console) -> None:
    style = {"failed": "bold red", "stuck": "bold yellow", "healthy": "bold green"}.get(g.verdict, "bold")
    console.print(Text(g.summary, style=style))
    console.print()
    console.print(members_table(g))
    if g.separate:
        render_separate(g, console)
        return
    console.print()
    console.print(timeline_table(g))
    if g.root is not None:
        r = g.root
        console.print()
        console.print(Text("Root cause", style="bold"))
        where = ", ".join(x for x in (f"rank {r.rank_text}" if r.ranks else None,
                                      f"node {r.member.node}" if r.member.node else None,
                                      f"pod {r.member.pod}" if r.member.pod else None) if x)
        console.print(f"  {r.root_title}" + (f" — {where}" if where else ""), markup=False)
        at = f"{r.member.name}:{r.root_line}" if r.root_line else r.member.name
        console.print(f"  {at}  {r.root_text or ''}", markup=False, overflow="fold")
        if r.root_time:
            console.print(f"  at {r.root_time} ({g.root_reason})", markup=False)
    if g.silent:
        console.print()
        console.print(Text("Went silent while the others went on", style="bold"))
        for r in g.silent:
            console.print(f"  {_who(r)}: last line at {_clock(r.last_time)}", markup=False)
    others = [r for r in g.readings if r is not g.root]
    if g.root is not None and others:
        console.print()
        console.print(Text("What the other members saw", style="bold"))
        for r in others:
            seen = r.root_title or r.summary
            if r.echo:
                seen += " — an echo of the root cause: this rank waited for the one that failed"
            console.print(f"  {_who(r)}: {r.verdict}: {seen}", markup=False, overflow="fold")
    if g.findings:
        console.print()
        console.print(Text("The group", style="bold"))
        for f in g.findings:
            console.print(f"  {f.title}", markup=False)
            console.print(f"    {f.detail}", markup=False, overflow="fold")
            if f.action:
                console.print(f"    → {f.action}", markup=False)


def group_svg(g: GroupReading) -> str:
    """The same report as an SVG document, through Rich's own SVG export (the command writes it)."""
    console = Console(record=True, width=120, file=io.StringIO(), color_system="truecolor")
    render_group(g, console)
    return console.export_svg(title="dsv4ctl diagnose")
