"""The `dsv4ctl diagnose` report for people (Rich) and the examples list.

Verdict first, then the root cause with its evidence and actions, the other findings, the startup
timeline, the stale-max_model_len checklist, and the next command. Log text is printed as plain
text (never as Rich markup), so brackets in log lines are shown as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dsv4ctl.diagnosis.model import Diagnosis, Finding, start_kinds
from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.logs.timeline import StartupTimeline
from dsv4ctl.render import cut_around, print_command, print_prose
from dsv4ctl.render.tables import print_table
from dsv4ctl.units import format_tokens

if TYPE_CHECKING:
    from dsv4ctl.logs.examples import Example

_VERDICT_STYLE = {"failed": "bold white on red", "healthy": "bold white on green", "inconclusive": "bold black on yellow",
                  "stuck": "bold white on magenta"}
_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "dim"}
_ANSWER_STYLE = {"yes": "bold", "no": "bold", "not in log": "dim"}
_TEXT_LIMIT = 160
# Notes shown first and whole, like a root cause (their checks in full), when the start has none.
_LEAD_NOTES = ("log_ends_before_ready",)


def _clip(text: str, limit: int = _TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_diagnosis(d: Diagnosis, console: Console) -> None:
    multi = len(d.sources) > 1
    head = Text()
    head.append(f" {d.verdict.upper()} ", style=_VERDICT_STYLE.get(d.verdict, "bold"))
    if d.phase == "serving":
        head.append(" while serving", style="bold")
    head.append(f"  {d.summary}")
    head.append(f"  (exit {int(d.exit_code)})", style="dim")
    console.print(head)
    console.print()

    # Without a root cause, a note that says where the log ends leads, with its checks in full.
    lead = d.root_cause or next((f for f in d.findings if f.id in _LEAD_NOTES), None)
    if lead is not None:
        _finding(console, lead, multi, heading="Root cause" if lead is d.root_cause else "")
    others = [f for f in d.findings if f is not lead]
    if others:
        console.print(Text("Other findings", style="bold underline"))
        for f in others:
            _finding(console, f, multi, heading=None, compact=True)

    _starts(console, d, multi)
    _timeline(console, d.timeline)
    if d.checklist:
        _checklist(console, d)
    if d.next_command:
        console.print(Text("Next:", style="bold"))
        print_command(console, d.next_command)


# A log of more starts than this shows the first and the last few (`_EDGE` each) and counts the others by how they ended.
_ALL_STARTS = 10
_EDGE = 3
_KINDS_SHOWN = 8


def shown_id(finding_id: str | None) -> str:
    """A finding's id as a person reads it: without the `eco_` that files the ecosystem's signatures apart in the
    catalogue (the JSON keeps the id whole)."""
    return (finding_id or "").removeprefix("eco_")


def _verdict(verdict: str, phase: str | None) -> str:
    return verdict + (" (serving)" if phase == "serving" else "")


def _starts(console: Console, d: Diagnosis, multi: bool) -> None:
    """Every start of vLLM in the input, when there are several (the report above is about the last): a crash loop's
    hundreds in bounded output, counted by how they ended, with the first and last few."""
    n = len(d.starts)
    if n < 2:
        return
    console.print(Text(f"Starts in this log: {n:,}, the report is about the last", style="bold underline"))
    rows = list(enumerate(d.starts))
    if n > _ALL_STARTS:
        kinds = start_kinds(d.starts)
        tally = Table(show_header=True, header_style="dim", box=None, pad_edge=False)
        tally.add_column("starts", justify="right", no_wrap=True)
        tally.add_column("verdict", no_wrap=True)
        tally.add_column("root cause", overflow="fold")
        tally.add_column("first", justify="right", style="dim", no_wrap=True)
        tally.add_column("last", justify="right", style="dim", no_wrap=True)
        for k in kinds[:_KINDS_SHOWN]:
            tally.add_row(Text(f"{k.count:,}"), Text(_verdict(k.verdict, k.phase)), Text(shown_id(k.root_cause)),
                          Text(f"#{k.first:,}"), Text(f"#{k.last:,}"))
        print_table(console, tally)
        if len(kinds) > _KINDS_SHOWN:
            rest = sum(k.count for k in kinds[_KINDS_SHOWN:])
            console.print(Text(f"… {len(kinds) - _KINDS_SHOWN:,} more kinds of start ({rest:,} starts; dsv4ctl "
                               "diagnose --json lists every start)", style="dim"))
        console.print()
        rows = rows[:_EDGE] + [None] + rows[-_EDGE:]
    table = Table(header_style="dim", box=None, pad_edge=False)
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("lines", style="cyan", no_wrap=True)
    table.add_column("vLLM", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("root cause", overflow="fold")
    for row in rows:
        if row is None:
            table.add_row(Text("…"), Text(f"{n - 2 * _EDGE:,} more"), Text(""), Text(""), Text(""))
            continue
        i, st = row
        span = ""
        if st.first and st.last:
            span = f"{_where(st.first.source, st.first.line, multi)}–{_where(st.last.source, st.last.line, multi)}"
        # Text, not str: nothing in a row is Rich markup, and a Text is not parsed again by each measure
        table.add_row(Text(f"{i + 1:,}"), Text(span), Text(st.vllm_version or ""), Text(_verdict(st.verdict, st.phase)),
                      Text(shown_id(st.root_cause)))
    print_table(console, table)
    console.print()


def _where(f_source: str, line: int, multi: bool) -> str:
    return f"{f_source}:{line}" if multi else f"{line}"


def _finding(console: Console, f: Finding, multi: bool, heading: str | None, compact: bool = False) -> None:
    title = Text()
    if heading:
        title.append(f"{heading}: ", style="bold")
    title.append(f"[{f.severity}] ", style=_SEVERITY_STYLE.get(f.severity, ""))
    title.append(f.title, style="bold" if heading is not None else "")
    title.append(f"  ({shown_id(f.id)}", style="dim")
    if f.line is not None:
        title.append(f", line {f.line}", style="dim")
    title.append(")", style="dim")
    console.print(title)
    print_prose(console, f.meaning, indent="  ")
    details = f.details
    if "arithmetic" in details:
        print_prose(console, "Why it asserts: " + details["arithmetic"], indent="  ", subsequent_indent="    ")
    if details.get("attribution"):
        how = {
            "traced": "traced: the log shows the scheduler-metadata call with the fault",
            "attributable": "attributed: the fault hit FULL CUDA-graph capture of a DeepSeek-V4 model",
        }[details["attribution"]]
        if details.get("masked_by_nccl"):
            how += "; only an NCCL 'unhandled cuda error' surfaced"
        if details.get("capture"):
            how += f" ({details['capture']})"
        print_prose(console, "How it was identified: " + how, indent="  ", subsequent_indent="    ")
    if f.id == "unrecognized_error" and details.get("chain"):
        print_prose(console, "Chain (originating first): " + " → ".join(_clip(c, 80) for c in details["chain"]),
                    indent="  ", subsequent_indent="    ")
    if details.get("kernel"):
        console.print(Text(f"  Faulting kernel: {details['kernel']}"))
    if f.id == "cuda_oom" and details.get("phase"):
        possible = details.get("possible_phases")
        console.print(Text(f"  Phase: {details['phase']}" + (f" (one of: {', '.join(possible)})" if possible else "")))
    safe = details.get("safe_length")
    if safe and not compact:
        print_prose(console, safe["line"][:1].upper() + safe["line"][1:], indent="  ", subsequent_indent="    ")
        if safe.get("cliff_line"):
            print_prose(console, "At the cliff: " + safe["cliff_line"], indent="  ", subsequent_indent="    ")
    if details.get("note"):
        print_prose(console, "Note: " + str(details["note"]), indent="  ", subsequent_indent="    ")
    if details.get("startup_completed_later"):
        console.print(Text("  The startup completed afterwards, so this did not stop it.", style="dim"))
    if details.get("symptom_of"):
        console.print(Text(f"  A symptom of {details['symptom_of']}.", style="dim"))
    if f.id == "stale_max_model_len" and details.get("version_status"):
        status = {"affected": "is affected", "fixed": "has the fix", "not_affected": "predates the assertion"}[
            details["version_status"]
        ]
        console.print(Text(f"  vLLM {details.get('vllm_version')} {status} (affected {details['affected']}, fixed in {details['fixed']})."))
    limit = 3 if compact else len(f.evidence)
    keep = BY_ID[f.id].patterns if f.id in BY_ID else ()
    # The lines that matter most (the finding's own line first), shown in the log's order.
    shown = sorted(f.evidence[:limit], key=lambda e: (e.source, e.line))
    for ev in shown:
        line = Text("    ")
        line.append(f"{_where(ev.source, ev.line, multi):>6}  ", style="cyan")
        if ev.process:
            line.append(f"({ev.process}) ", style="dim")
        room = max(40, console.width - len(line.plain))
        if ev is f.evidence[0] and heading and len(ev.text) > room:
            # The root cause's own line is read whole: wrapped under itself, not cut.
            print_prose(console, _clip(ev.text, 4 * _TEXT_LIMIT), indent=line.plain, subsequent_indent=" " * len(line.plain))
            continue
        # Cut around what matters (the signature's words, else the numbers), never through it.
        line.append(cut_around(_clip(ev.text, 4 * _TEXT_LIMIT), room, keep=keep))
        console.print(line, soft_wrap=True)
    if len(f.evidence) > limit:
        console.print(Text(f"    … {len(f.evidence) - limit} more line(s)", style="dim"))
    occurrences = details.get("occurrences") or 0
    if occurrences > len(f.evidence):
        console.print(Text(f"    (matched {occurrences:,} lines in all)", style="dim"))
    if f.actions and not compact:
        console.print(Text("  What to do:", style="bold"))
        for i, action in enumerate(f.actions, 1):
            _action(console, f"    {i}. ", action)
    elif f.actions and f.severity != "info":
        _action(console, "  → ", f.actions[0])
    console.print()


_COMMAND_START = ("dsv4ctl ", "vllm ", "VLLM_", "pip ", "docker ", "hf ", "huggingface-cli ", "nvidia-smi", "dmesg",
                  "pgrep ", "df ", "ss ", "ls ", "cat ", "kubectl ", "python ", "python3 ", "ray ")


def split_action(action: str) -> tuple[str, str | None]:
    """An action's words and the command it ends with (None when it has none): a command (or flags to paste)
    follows ": " and runs to the end of the action, so it is printed on a line of its own and pastes whole."""
    at = -1
    for start in (*_COMMAND_START, "--"):
        i = action.find(": " + start)
        if i >= 0 and (at < 0 or i + 2 < at):
            at = i + 2
    if at <= 0:
        return action, None
    return action[:at].rstrip(), action[at:]


def _action(console: Console, lead: str, action: str) -> None:
    """An action: its words wrapped with the indent kept; a command in it on a line of its own, whole."""
    words, command = split_action(action)
    print_prose(console, words, indent=lead, subsequent_indent=" " * len(lead))
    if command is not None:
        print_command(console, command, indent=" " * (len(lead) + 2))


def _timeline_rows(tl: StartupTimeline) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []

    def add(label: str, value: object | None) -> None:
        if value is not None and value != "":
            rows.append((label, str(value)))

    add("vLLM", tl.vllm_version)
    add("model", tl.model)
    if tl.max_model_len is not None or tl.max_model_len_arg is not None:
        arg = f" (--max-model-len {tl.max_model_len_arg})" if tl.max_model_len_arg else ""
        value = format_tokens(tl.max_model_len) if tl.max_model_len is not None else "?"
        add("max_model_len", value + arg)
    add("kv-cache dtype", tl.kv_cache_dtype)
    par = [f"{name}={v}" for name, v in (("TP", tl.tensor_parallel_size), ("PP", tl.pipeline_parallel_size), ("DP", tl.data_parallel_size)) if v]
    if tl.enable_expert_parallel:
        par.append("EP")
    add("parallelism", " ".join(par) or None)
    comp = " / ".join(x for x in (tl.compilation_mode, tl.cudagraph_mode) if x)
    if tl.enforce_eager:
        comp = (comp + " (enforce_eager)").strip()
    add("compilation", comp or None)
    add("model runner", tl.model_runner)
    if tl.weights_gib is not None:
        secs = f" in {tl.weights_seconds:.1f} s" if tl.weights_seconds is not None else ""
        add("weights", f"{tl.weights_gib:.2f} GiB{secs}")
    reserved = tl.available_kv_gib is not None and tl.kv_memory_gib != tl.available_kv_gib
    if tl.available_kv_gib is not None:
        # vLLM 0.34's measured mode: "Available KV cache memory" is the tentative plan's reservation, not the KV size.
        add("KV reservation" if reserved else "available KV memory",
            f"{tl.available_kv_gib} GiB per worker" + (" (tentative plan, before CUDA graphs)" if reserved else ""))
    if tl.measured is not None:
        of = f", the least of {len(tl.measured_per_worker)} workers" if len(tl.measured_per_worker) > 1 else ""
        add("measured KV", f"{tl.measured.blocks:,} blocks ({tl.measured.gib} GiB) after CUDA graphs and warmup{of}")
    if tl.tentative_autofit is not None:
        t = tl.tentative_autofit
        add("tentative fit", "full context fits" if t.from_len == t.to_len
            else f"reduced {format_tokens(t.from_len)} → {format_tokens(t.to_len)}")
    if tl.autofit is not None:
        mem = f" ({tl.autofit.memory_text})" if tl.autofit.memory_text else ""
        add("auto-fit", f"reduced {format_tokens(tl.autofit.from_len)} → {format_tokens(tl.autofit.to_len)}{mem}")
    elif tl.autofit_full_fit:
        add("auto-fit", "full context fits")
    if tl.kv_cache_tokens is not None or tl.max_concurrency is not None:
        parts = []
        if tl.kv_cache_tokens is not None:
            parts.append(f"{format_tokens(tl.kv_cache_tokens)} tokens")
        if tl.max_concurrency is not None:
            parts.append(f"{tl.max_concurrency:.2f}x at {format_tokens(tl.max_concurrency_tokens or 0)} tokens/request")
        add("KV cache", ", ".join(parts))
    if tl.capture is not None:
        prog = f" {tl.capture.n}/{tl.capture.total}" if tl.capture.total else ""
        add("CUDA graphs", f"{tl.capture.desc}{prog}")
    if tl.graph_capture_gib is not None:
        add("graph memory", f"{tl.graph_capture_gib:.2f} GiB in {tl.graph_capture_seconds:.0f} s")
    if tl.ready:
        at = f" (line {tl.ready_ref.line})" if tl.ready_ref else ""
        if tl.ready_url:
            add("ready", tl.ready_url)
        elif tl.serving:
            add("ready", f"yes{at}")
        else:
            add("ready", f"engine only{at}; no API server ready line")
    add("last phase", tl.last_phase)
    return rows


def _timeline(console: Console, tl: StartupTimeline) -> None:
    rows = _timeline_rows(tl)
    if not rows:
        return
    table = Table(title="Startup timeline", title_justify="left", title_style="bold underline", show_header=False, box=None, pad_edge=False)
    table.add_column(style="dim", no_wrap=True)
    table.add_column(overflow="fold")
    for label, value in rows:
        table.add_row(label, Text(value))
    print_table(console, table)
    console.print()


def _checklist(console: Console, d: Diagnosis) -> None:
    table = Table(
        title="Stale max_model_len checklist",
        title_justify="left",
        title_style="bold underline",
        show_header=True,
        header_style="dim",
        box=None,
        pad_edge=False,
    )
    table.add_column("#", justify="right", style="dim", no_wrap=True)
    table.add_column("question", overflow="fold")
    table.add_column("answer", no_wrap=True)
    table.add_column("line", justify="right", style="cyan", no_wrap=True)
    table.add_column("why", overflow="fold", style="dim")
    for i, item in enumerate(d.checklist, 1):
        line = str(item.evidence.line) if item.evidence else ""
        table.add_row(str(i), Text(item.question), Text(item.answer, style=_ANSWER_STYLE.get(item.answer, "")), line, Text(item.note or ""))
    print_table(console, table)
    console.print()


def render_examples(examples: tuple[Example, ...], console: Console) -> None:
    table = Table(show_header=True, header_style="dim", box=None, pad_edge=False)
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("what it shows", overflow="fold")
    for ex in examples:
        table.add_row(ex.name, ex.description)
    print_table(console, table)
    console.print(Text("Run one: dsv4ctl diagnose --example NAME", style="dim"))
