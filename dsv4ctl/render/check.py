"""`dsv4ctl check` and `dsv4ctl watch` for people: the verdict first, its evidence, the numbers.

On a terminal: Rich (colours, a live table for `watch`); piped: plain lines, never cut or wrapped, one
line per server and look for `watch`, so `watch … | grep wedged` works."""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from dsv4ctl.check.model import BUSY, DEAD, DEGRADED, HEALTHY, UNKNOWN, WEDGED, EngineNumbers, GroupCheck, ServerCheck
from dsv4ctl.check.watch import VerdictChange, WatchState

_STYLE = {HEALTHY: "bold white on green", DEGRADED: "bold black on yellow", BUSY: "bold white on blue", WEDGED: "bold white on red",
          DEAD: "bold white on red", UNKNOWN: "bold black on cyan"}


def badge(verdict: str, console: Console) -> Text:
    """`DEAD` in upper case; padded with a space on each side only where it is drawn on a coloured background
    (plain text, piped or NO_COLOR, gets no double spaces)."""
    text = Text()  # the style on a span, not the Text's own: what is appended to it keeps its own style
    if console.is_terminal and console.color_system is not None and not console.no_color:
        text.append(f" {verdict.upper()} ", style=_STYLE[verdict])
    else:
        text.append(verdict.upper(), style="bold")
    return text


def render_check(group: GroupCheck, console: Console) -> None:
    for server in group.servers:
        _server(server, console)
    if len(group.servers) > 1:
        counts = {}
        for s in group.servers:
            counts[s.verdict] = counts.get(s.verdict, 0) + 1
        parts = ", ".join(f"{n} {v}" for v, n in counts.items())
        line = Text("overall: ", style="bold")
        line.append(badge(group.verdict, console))
        line.append(f"  {len(group.servers)} servers: {parts}  (exit {int(group.exit_code)})")
        _print(console, line)


def _server(s: ServerCheck, console: Console) -> None:
    head = badge(s.verdict, console)
    head.append(f"  {s.url}", style="bold")
    if s.models:
        head.append(f"  {', '.join(s.models)}")
    head.append(f"  (exit {int(s.exit_code)}, {s.duration_s:.1f} s)", style="dim")
    _print(console, head)
    for line in s.evidence:
        _bullet(console, line)
    for e in s.engines:
        _bullet(console, engine_line(e), "  ", "dim")
    for note in s.notes:
        _bullet(console, note, "  note: ", "yellow")


def engine_line(e: EngineNumbers) -> str:
    gen, prompt = e.rate(e.generation_tokens), e.rate(e.prompt_tokens)
    parts = [f"engine {e.engine}:", f"running {_n(e.running)}", f"waiting {_n(e.waiting)}",
             f"KV {_pct(e.kv_usage)}", f"gen {_n(gen, '{:,.0f}')} tok/s", f"prompt {_n(prompt, '{:,.0f}')} tok/s",
             f"preemptions +{_n(e.preemptions)}", f"in {e.window_s:.1f} s"]
    return " ".join(parts[:1]) + " " + ", ".join(parts[1:])


def _n(value: float | None, fmt: str = "{:g}") -> str:
    return "?" if value is None else fmt.format(value)


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.1%}"


def _bullet(console: Console, line: str, lead: str = "  - ", style: str = "") -> None:
    """`lead` + text, continued under the text on a terminal (a hanging indent); one line when piped."""
    if console.is_terminal:
        grid = Table.grid()
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row(lead, Text(line, style=style))
        console.print(grid)
    else:
        _print(console, Text(f"{lead}{line}", style=style))


def _print(console: Console, text: Text) -> None:
    # Piped: one line per item whatever its length (soft wrap), no styles.
    if console.is_terminal:
        console.print(text, overflow="fold")
    else:
        console.print(text, soft_wrap=True)


# -- watch ------------------------------------------------------------------------------------------


def stamp(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def render_event(change: VerdictChange, console: Console) -> None:
    line = Text(f"{stamp(change.at)} ")
    line.append(f"{change.url} ", style="bold")
    line.append("is " if change.before is None else f"{change.before} -> ")
    line.append(badge(change.after, console))
    _print(console, line)
    if change.after != HEALTHY:
        for evidence in change.evidence:
            _bullet(console, evidence)


def watch_table(state: WatchState, now: float, interval_s: float) -> Group:
    """The live view: one row per engine of each server (the server's verdict on its first row)."""
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    for name, justify in (("server", "left"), ("verdict", "left"), ("eng", "right"), ("gen/s", "right"),
                          ("run", "right"), ("wait", "right"), ("KV", "right"), ("preempt", "right"),
                          ("last step", "right")):
        table.add_column(name, justify=justify, no_wrap=name != "server", overflow="fold")  # type: ignore[arg-type]
    group = state.latest
    for s in group.servers if group else ():
        last = _last_step(state, s, now, "{:.0f} s ago", ">{:.0f} s", "-")
        verdict = Text(s.verdict, style=_STYLE[s.verdict])
        rows = s.engines or (None,)
        for i, e in enumerate(rows):
            first = i == 0
            table.add_row(
                _short(s.url) if first else "", verdict if first else "",
                "-" if e is None else e.engine,
                "-" if e is None else _n(e.rate(e.generation_tokens), "{:,.0f}"),
                "-" if e is None else _n(e.running), "-" if e is None else _n(e.waiting),
                "-" if e is None else _pct(e.kv_usage), "-" if e is None else f"+{_n(e.preemptions)}",
                last if first else "",
            )
    checked = stamp(group.ended_at) if group else "-"
    footer = Text(f"looked at {checked}, every {interval_s:g} s; Ctrl-C to stop", style="dim")
    return Group(table, footer)


def watch_lines(state: WatchState, now: float) -> list[str]:
    """Piped: one plain line per server and look."""
    group = state.latest
    out = []
    for s in group.servers if group else ():
        engines = "; ".join(engine_line(e) for e in s.engines) or "; ".join(s.evidence)
        last = _last_step(state, s, now, "(last step {:.0f} s ago) ", "(no step seen in {:.0f} s) ", "")
        out.append(f"{stamp(group.ended_at)} {s.url} {s.verdict} {last}{engines}")
    return out


def _last_step(state: WatchState, s: ServerCheck, now: float, ago: str, unseen: str, nothing: str) -> str:
    """When the server's engine last moved; while it has not moved since the watch began, how long it has been
    watched without a step, for a server whose engines are read (a dead server has none: nothing to say)."""
    since, seen = state.since_last_step(s, now)
    if seen:
        return ago.format(since)
    return unseen.format(since) if s.engines else nothing


def stop_line(state: WatchState, looks: int) -> str:
    """What a watch stopped with Ctrl-C says on stderr: `watch stopped after 3 looks; 1 verdict change`."""
    changes = len(state.changes)
    said = "no verdict changed" if not changes else f"{changes} verdict change{'s' if changes != 1 else ''}"
    return f"watch stopped after {looks} look{'s' if looks != 1 else ''}; {said}"


def _short(url: str) -> str:
    return url.removeprefix("http://")
