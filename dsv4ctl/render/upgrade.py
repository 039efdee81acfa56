"""The upgrade view for people: the plan under each release side by side, then what the tables say changes (fixes,
flags, messages, log lines), each part saying where it comes from. The JSON form is `UpgradeView.to_json()`."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from dsv4ctl.render import print_prose
from dsv4ctl.render.tables import pack, print_table
from dsv4ctl.units import format_gib, format_tokens
from dsv4ctl.upgrade import ReleaseFit, UpgradeView

SHOWN_MESSAGES = 5  # per direction; --json has them all
MESSAGE_WIDTH = 64  # a message's text is cut here (the citation follows on its own line)
STATUS = {"needed": "needed", "not-needed": "not needed", "not-recorded": "not recorded"}
VERDICT = {"fits": "fits", "shrinks": "shrinks", "does_not_fit": "does not fit"}
FLAG_CHANGE = {"removed": "removed", "renamed": "renamed", "value-gone": "value no longer taken",
               "new-default": "new default"}


def render_upgrade(view: UpgradeView, console: Console) -> None:
    a, b = view.before.planned, view.after.planned
    print_prose(console, f"{view.model}: vLLM {a} -> {b}", style="bold")
    console.print()
    print_table(console, _plan_table(view))
    for fit in (view.before, view.after):
        if fit.sizing_why and view.before.sizing_mode != view.after.sizing_mode:
            print_prose(console, f"{fit.planned}: {fit.sizing_mode}: {fit.sizing_why}", indent="  ",
                        subsequent_indent="    ")
        for warning in fit.warnings:
            print_prose(console, f"{fit.planned}: {warning}", indent="  ", subsequent_indent="    ", style="dim")
    console.print()
    _fixes(view, console)
    console.print()
    _flags(view, console)
    console.print()
    _messages(view, console)
    console.print()
    _log_lines(view, console)
    for note in view.notes:
        print_prose(console, f"Note: {note}", subsequent_indent="  ")


def _fraction(value: float) -> str:
    text = f"{value:g}"
    return text if "." in text or "e" in text else f"{text}.0"


def _utilization(fit: ReleaseFit) -> str:
    """The fraction the plan used, then the flag's default in that release (none: vLLM resolves it at startup)."""
    used = "unused (--kv-cache-memory-bytes)" if fit.gpu_memory_utilization is None else _fraction(fit.gpu_memory_utilization)
    if not fit.utilization_default_recorded:
        return f"{used} (default not recorded)"
    default = "none" if fit.utilization_default is None else _fraction(fit.utilization_default)
    return f"{used} (default {default})"


def _plan_table(view: UpgradeView) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("planned")
    table.add_column(f"vLLM {view.before.planned}")
    table.add_column(f"vLLM {view.after.planned}")
    rows = [
        ("KV cache sizing", lambda f: f.sizing_mode),
        ("--gpu-memory-utilization", _utilization),
        ("KV memory per GPU", lambda f: f"{format_gib(f.kv_cache_memory_bytes)} ({f.kv_basis or 'given'})"),
        ("auto-fit --max-model-len", lambda f: format_tokens(f.autofit_max_model_len)),
        ("recommended length", lambda f: format_tokens(f.recommended_max_model_len) if f.refusal is None else "-"),
        ("verdict", lambda f: VERDICT.get(f.verdict, f.verdict)),
        ("startup-plan schema", lambda f: "not recorded" if f.plan_schema is None else str(f.plan_schema)),
    ]
    for label, cell in rows:
        before, after = cell(view.before), cell(view.after)
        style = "bold" if before != after else None
        table.add_row(label, before, after, style=style)
    return table


def _fixes(view: UpgradeView, console: Console) -> None:
    console.print("dsv4ctl's runtime fixes (serve --fixes), by the releases' code", style="bold", highlight=False)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("fix")
    table.add_column(view.before.planned)
    table.add_column(view.after.planned)
    table.add_column("on this launch's path")
    for row in view.fixes:
        takes = {True: "yes", False: "no", None: "unknown"}[row.path.applies]
        table.add_row(row.name, STATUS[row.before.status], STATUS[row.after.status], takes,
                      style="bold" if row.changed else None)
    print_table(console, table)
    for row in view.fixes:  # why, for a fix whose need changes or that the release compared to needs
        if not (row.changed or row.after.status == "needed"):
            continue
        print_prose(console, f"{row.name}: {row.after.reason}", indent="  ", subsequent_indent="    ")
        if row.after.where:
            print_prose(console, row.after.where, indent="    ", style="dim")
        if row.path.why:
            print_prose(console, f"this launch: {row.path.why}", indent="    ", subsequent_indent="      ", style="dim")


def _flags(view: UpgradeView, console: Console) -> None:
    flags, b = view.flags, view.after.planned
    console.print("vllm serve flags (the catalogue's table per release)", style="bold", highlight=False)
    if not flags.recorded:
        print_prose(console, flags.note or "not recorded", indent="  ", subsequent_indent="    ")
        return
    if not flags.launch:
        print_prose(console, "This launch's flags: none removed, renamed or with a new default.", indent="  ")
    for c in flags.launch:
        what = FLAG_CHANGE.get(c.change, c.change)
        if c.change == "new-default":
            reach = "the launch passes it: not reached" if c.given else "the launch leaves it: it applies"
            text = f"{c.option}: {what} {c.before} -> {c.after} ({reach})"
        elif c.change == "renamed":
            text = f"{c.option}: {what} {c.before} -> {c.after}"
        elif c.change == "value-gone":
            text = f"{c.option} {c.before}: {what} in {b}"
        else:
            text = f"{c.option}: {what} in {b}" + ("" if c.given else " (the launch leaves it)")
        print_prose(console, text + (f"  [{c.where}]" if c.where else ""), indent="  ", subsequent_indent="    ",
                    style="bold" if c.given or c.change == "new-default" else None)
    for label, items in ((f"Added in {b}", flags.added), (f"Removed in {b}", flags.removed)):
        if not items:
            print_prose(console, f"{label}: none.", indent="  ")
            continue
        for line in pack([f"{o}," for o in items[:-1]] + [items[-1]], console.width, indent=f"  {label} "
                         f"({len(items)}): ", hang="    ", sep=" "):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_WIDTH else text[: MESSAGE_WIDTH - 1] + "…"


def _messages(view: UpgradeView, console: Console) -> None:
    m = view.messages
    console.print("vLLM's messages (the message index)", style="bold", highlight=False)
    if not m.recorded:
        print_prose(console, m.note or "not recorded", indent="  ", subsequent_indent="    ")
        return
    scope = f"DeepSeek's {m.family} code" if m.family else "the model's code"
    print_prose(console, f"{m.appeared:,} appear in {view.after.planned}, {m.vanished:,} vanish; of {scope} or "
                f"raised on this launch's flags: {len(m.relevant_appeared)} appear, {len(m.relevant_vanished)} vanish.",
                indent="  ", subsequent_indent="    ")
    for sign, notes in (("+", m.relevant_appeared), ("-", m.relevant_vanished)):
        for note in notes[:SHOWN_MESSAGES]:
            print_prose(console, f"{sign} {_cut(note.template)}", indent="  ", subsequent_indent="    ")
            print_prose(console, note.where, indent="    ", style="dim")
        if len(notes) > SHOWN_MESSAGES:
            print_prose(console, f"{sign} {len(notes) - SHOWN_MESSAGES} more (--json lists them)", indent="  ",
                        style="dim")


def _log_lines(view: UpgradeView, console: Console) -> None:
    lines = view.log_lines
    console.print("Log lines a scraper may miss (the timeline's lines per release)", style="bold", highlight=False)
    if not lines.recorded:
        print_prose(console, lines.note or "not recorded", indent="  ", subsequent_indent="    ")
        return
    if not lines.missed:
        print_prose(console, f"None: every line the timeline reads in {view.before.planned} is printed the same "
                    f"in {view.after.planned}.", indent="  ", subsequent_indent="    ")
    for c in lines.missed:
        if c.change == "gone":
            text = f"{c.key}: gone in {view.after.planned} (was {c.before!r}, {c.before_where})"
        else:
            text = f"{c.key}: reworded to {c.after!r} ({c.after_where}; was {c.before!r})"
        print_prose(console, text, indent="  ", subsequent_indent="    ", style="bold")
    new = [c.key for c in lines.changes if c.change == "new"]
    if new:
        print_prose(console, f"New in {view.after.planned}: " + ", ".join(new), indent="  ", subsequent_indent="    ")
