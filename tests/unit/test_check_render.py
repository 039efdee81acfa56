"""check's and watch's output at 80 columns: nothing cut, every number shown (recorded readings, tests/fixtures/check)."""

from __future__ import annotations

import io

from rich.console import Console

from dsv4ctl.check import GroupCheck, HttpAnswer, Readings, judge
from dsv4ctl.check.watch import WatchState
from dsv4ctl.render.check import render_check, render_event, watch_lines, watch_table
from test_check_judge import readings


def group() -> GroupCheck:
    healthy = judge(readings("busy-1.prom", "busy-2.prom", window=1.0))
    wedged = judge(Readings(**{**readings("engine-stopped-1.prom", "engine-stopped-2.prom").__dict__,
                               "url": "http://10.200.300.400:18000"}))
    dead = judge(Readings(url="http://127.0.0.1:1", health=HttpAnswer(None, 0.0, error="connection refused")))
    return GroupCheck((healthy, wedged, dead), checked_at=1_000_000.0)


def terminal(width: int = 80) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, force_terminal=True, color_system=None, highlight=False), out


def test_the_live_table_fits_80_columns_with_every_number():
    state = WatchState(started_at=999_990.0)
    state.update(group(), 1_000_002.0)
    console, out = terminal()
    console.print(watch_table(state, 1_000_004.0, 2.0))
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in out.getvalue()
    wedged_row = next(line for line in lines if "wedged" in line)
    assert "10.200.300.400:18000" in out.getvalue() and " 6 " in wedged_row and "2.3%" in wedged_row
    assert "2 s ago" in next(line for line in lines if "healthy" in line)  # it moved at the look
    assert ">14 s" in wedged_row  # not since the watch began


def test_the_report_and_events_wrap_at_80_columns_and_stay_whole_when_piped():
    console, out = terminal()
    render_check(group(), console)
    for change in WatchState(started_at=0.0).update(group(), 1_000_002.0):
        render_event(change, console)
    assert max(len(line) for line in out.getvalue().splitlines()) <= 80
    assert "…" not in out.getvalue()
    piped = io.StringIO()
    render_check(group(), Console(file=piped, width=80, force_terminal=False, highlight=False))
    text = piped.getvalue()
    assert any(len(line) > 80 for line in text.splitlines())  # one line per item, not cut
    assert "/health still answered 200: vLLM's /health only turns 503 when the engine is known dead" in text
    state = WatchState(started_at=0.0)
    state.update(group(), 1_000_002.0)
    assert len(watch_lines(state, 1_000_003.0)) == 3


def test_a_verdict_is_padded_only_where_it_is_drawn_on_a_colour():
    state = WatchState(started_at=999_990.0)
    (_, _, dead) = state.update(group(), 1_000_002.0)
    piped = io.StringIO()
    plain = Console(file=piped, width=80, force_terminal=False, highlight=False)
    render_event(dead, plain)
    render_check(group(), plain)
    text = piped.getvalue()
    assert "http://127.0.0.1:1 is DEAD\n" in text and "is  DEAD" not in text
    assert "\nDEAD  http://127.0.0.1:1  (exit 10," in text
    coloured = io.StringIO()
    colour = Console(file=coloured, width=80, force_terminal=True, color_system="standard")
    render_event(dead, colour)
    render_check(GroupCheck((group().servers[2],)), colour)
    assert "\x1b[1;37;41m DEAD \x1b[0m" in coloured.getvalue()
    assert "\x1b[1;37;41m  http://" not in coloured.getvalue()  # only the badge is on red


def test_a_dead_server_has_no_last_step_to_tell():
    state = WatchState(started_at=1_000_000.0)
    state.update(group(), 1_000_000.0)
    lines = watch_lines(state, 1_000_000.0)
    dead = next(line for line in lines if " dead " in line)
    assert "step" not in dead and dead.endswith(" dead /health: connection refused")
    wedged = next(line for line in lines if " wedged " in line)
    assert "(no step seen in 0 s)" in wedged  # an engine is read: how long it has been watched without a step
    console, out = terminal()
    console.print(watch_table(state, 1_000_000.0, 2.0))
    dead_row = next(line for line in out.getvalue().splitlines() if "dead" in line)
    assert dead_row.rstrip().endswith("-") and ">" not in dead_row


def test_the_stop_line_counts_changes_not_first_looks():
    from dsv4ctl.render.check import stop_line

    state = WatchState(started_at=0.0)
    state.update(group(), 1.0)
    assert stop_line(state, 1) == "watch stopped after 1 look; no verdict changed"
    healthy_again = GroupCheck((group().servers[0], group().servers[0].__class__(
        **{**group().servers[1].__dict__, "verdict": "healthy", "evidence": ()}), group().servers[2]))
    state.update(healthy_again, 2.0)
    assert stop_line(state, 2) == "watch stopped after 2 looks; 1 verdict change"
