"""Which error started a failure, and how a failure no signature explains is named (the message index, else
the originating error as it stands)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dsv4ctl import re_cache
from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.diagnosis.evidence import evidence_of, fill, make_finding
from dsv4ctl.diagnosis.model import Finding
from dsv4ctl.logs.records import ErrorRecord
from dsv4ctl.logs.timeline import StartupTimeline

# Compile-time code of torch.compile (not the compiled graph running): an error raised there is a compile error.
COMPILE_FRAME_RE = re_cache.compile(r"/torch/(?:_dynamo/|_inductor/(?!runtime/|output_code\.py))")

def ends_in(record: ErrorRecord, function: str) -> bool:
    origin = record.origin
    return bool(origin and origin.last_frame and origin.last_frame.function == function)

def originating(records: list[ErrorRecord], *, survived: bool = False) -> ErrorRecord | None:
    """The error that started a failure: a process's own error before any wrapper that repeats it, the
    engine's and workers' before the API server's (which only reacts to the engine), then the earliest
    across processes; a wrapper that quotes the error when nothing else is in the log, else the first
    wrapper (what an excerpt holds of a worker that died: "WorkerProc hit an exception."). `survived`: also
    errors the process went on after."""
    live = [r for r in records if (survived or not r.survived) and r.type != "KeyboardInterrupt"]
    own = [r for r in live if not r.is_wrapper]
    quoting = [r for r in live if r.quoted]
    if own:
        best = min(own, key=lambda r: (r.weak, _is_frontend(r), r.order))
        if best.origin is not None and best.origin.shown_by == "frame":
            # Frames alone, after a wrapper that quotes the error: the re-raise of what it quotes.
            earlier = [r for r in quoting if r.order < best.order]
            if earlier:
                return min(earlier, key=lambda r: r.order)
        return _deeper(best, own)
    if quoting:
        return min(quoting, key=lambda r: r.order)
    return min(live, key=lambda r: (r.weak, r.order)) if live else None

# The words of a record that only reports that something below it failed: a subprocess's exit (CPython
# subprocess.py:502 "Command %r returned non-zero exit status %d."), an NPU call that failed with a code (torch_npu's
# check, "… function error: call X failed, error code is N"; "ERR00100 PTA call acl api failed"; CANN's "EZ9999: Inner
# Error!"), whose cause the lines after it print: the child's own traceback, CANN's detail for the code.
_REPORTS_BELOW = re_cache.compile(r"returned non-zero exit status|function error: |PTA call acl api failed|Inner Error!?\s*$"
                                  r"|The Inner error is reported as above")
_NEAR = 40  # lines: how far below the report its cause may be printed

def _deeper(best: ErrorRecord, own: list[ErrorRecord]) -> ErrorRecord:
    """`best`, or the error printed just below it that it only reports (see `_REPORTS_BELOW`); and a fragment of frames
    alone when the complete record of the same traceback starts right after it (a paste that lost a line's prefix)."""
    after = sorted((r for r in own if r is not best and r.line.source == best.line.source and r.order > best.order),
                   key=lambda r: r.order)
    end = (best.end or best.line).lineno
    if best.origin is not None and best.origin.shown_by == "frame":
        follow = next((r for r in after if r.complete and (r.first or r.line).lineno - end <= 3), None)
        if follow is not None:
            return follow
    said = best.origin.text if best.origin is not None else best.text
    if _REPORTS_BELOW.search(said):
        subprocess_exit = "returned non-zero exit status" in said
        for r in after:
            if r.line.lineno - end > _NEAR:
                break
            text = r.origin.text if r.origin is not None else r.text
            if _REPORTS_BELOW.search(text):
                continue
            # A child's own traceback below a subprocess's exit; CANN's account of the code below an NPU call's failure.
            if (subprocess_exit and r.kind == "python") or (not subprocess_exit and r.kind == "npu" and (
                    "cann_code" in r.details or "cann_message" in r.details)):
                return r
    return best


def _is_frontend(record: ErrorRecord) -> bool:
    """An error of the API server process, which at startup only reacts to the engine's."""
    process = record.process or ""
    return process.startswith(("APIServer", "ApiServer")) or bool(record.functions & {"run_server", "build_async_engine_client"})

def quoting_wrapper(origin: ErrorRecord, records: list[ErrorRecord]) -> ErrorRecord | None:
    """A wrapper after an origin whose own exception line is cut off that quotes the exception
    (`Worker failed with error '…'`): what the log says of the exception."""
    if origin.complete:
        return None
    later = [r for r in records if r.quoted is not None and r is not origin and r.order >= origin.order]
    return min(later, key=lambda r: r.order) if later else None

# The error body vLLM's API answers with, as a client quotes it in its own exception: ErrorResponse(error=
# ErrorInfo(message, type, param, code)) (vllm==0.33.0 vllm/entrypoints/serve/engine/protocol.py:79-87;
# 0.27.1 vllm/entrypoints/openai/engine/protocol.py:63).
_ERROR_BODY_RE = re_cache.compile(r'"error":\s*\{"message":\s*"((?:[^"\\]|\\.){10,})"')

def lookup(record: ErrorRecord, quote: ErrorRecord | None) -> Any:
    """The index entry (dsv4ctl.catalogue.message_index) of the message that states this error, or None:
    the wrapper's quote of an exception whose own line is cut off, the exception's message, the `assert`
    statement of a bare AssertionError, what stands for a cut exception, the wording of a non-Python error.
    An entry whose source function is not the innermost frame the log shows for it is another message with
    the same words (SGLang's "Hidden size mismatch" is not vLLM's)."""
    key = id(quote) if quote is not None else None
    if key not in record.indexed:
        record.indexed[key] = _lookup(record, quote)
    return record.indexed[key]


def _lookup(record: ErrorRecord, quote: ErrorRecord | None) -> Any:
    from dsv4ctl.catalogue import message_index  # read at the first lookup: only a failure no signature knows pays it

    origin = record.origin
    candidates: list[tuple[str, str | None]] = []
    if quote is not None and quote.quoted:
        candidates.append((quote.quoted, None))
    if origin is not None and not record.is_wrapper:
        if origin.detail is not None:
            # pydantic's "Value error, <message> [type=…]" under a config class's ValidationError: the validator's own
            # message, the one the index knows.
            candidates.append((origin.detail.message, None))
        if origin.support is not None:
            candidates.append((origin.support.message, None))
        if origin.shown_by != "frame" and origin.message and origin.type not in ("error", "traceback"):
            candidates.append((f"{origin.type}: {origin.message}", None))
        elif origin.shown_by == "headline":
            candidates.append((origin.line.message, None))
    if record.kind == "http_error" and record.details.get("http_error"):
        candidates.append((str(record.details["http_error"]).replace('\\"', '"'), "remote"))
    elif record.kind not in ("python", "log_error"):
        candidates.append((record.text, None))
    if record.kind == "python" and (body := _ERROR_BODY_RE.search(record.text)) is not None:
        # A client's exception quoting the server's error body: the message is the server's, not its frame's.
        candidates.append((body.group(1), "remote"))
    frame = record.frames[-1] if record.frames else None
    for text, where in candidates:
        entry = message_index.lookup_line(text)
        if entry is None:
            continue
        if frame is not None and where is None and entry.kind in ("raise", "assert", "assert_bare"):
            own = entry.function.rsplit(".", 1)[-1]
            if own != frame.function and not any(frame.file.endswith(src.file) for src in entry.sources):
                continue
        return entry
    return None


def indexed_finding(record: ErrorRecord, quote: ErrorRecord | None, tl: StartupTimeline, entry: Any) -> Finding:
    """The finding for an error no signature explains but the message index knows: its source, and the
    flags that feed the check with what this launch set them to (from `non-default args`)."""
    f = unrecognized_finding(record, quote)
    sig = BY_ID["indexed_error"]
    release, src = entry.newest
    releases = entry.releases
    span = releases[0] if len(releases) == 1 else f"{releases[0]}–{releases[-1]}"
    args = tl.serve_args or {}
    flags = []
    for flag in entry.flags:
        key = flag.lstrip("-").replace("-", "_")
        flags.append(f"{flag} ({args[key]!r} in this launch)" if key in args else flag)
    details = {
        **f.details,
        "package": entry.package,
        "function": entry.function,
        "cite": _cite_for(entry, tl.vllm_version),
        "cites": list(entry.cites()[:4]),
        "releases": list(releases),
        "release_span": f"{entry.package} {span}" if entry.package != "vllm" else f"vLLM {span}",
        "source_kind": entry.kind,
        "template": entry.template,
        "flags": list(entry.flags),
        "flags_text": ", ".join(flags),
        "_entry": entry,  # the index's entry itself, for the answer from its raise site (not in the JSON)
    }
    if tl.vllm_version and entry.package == "vllm" and tl.vllm_version.split("+")[0] not in releases:
        details["note"] = (f"This log's vLLM is {tl.vllm_version}; the index holds the message for vLLM {span}, "
                           "so the line there may differ.")
    meaning = fill(sig.meaning, details) or sig.meaning
    actions = [a for a in (fill(t, details) for t in sig.actions) if a]
    if not entry.flags:
        actions = [a for a in actions if "{flags_text}" not in a and not a.startswith("Check the settings")]
    title = f"{details['exception']} from {entry.package}'s {entry.function}"
    return replace(f, id=sig.id, title=title, meaning=meaning, details=details, actions=actions, role=sig.role,
                   tier=sig.tier, severity=sig.severity)

def _cite_for(entry: Any, version: str | None) -> str:
    """The citation of the log's own release when the index has the message there (vllm==0.32.0 …:688 for a 0.32.0
    log), else the newest release's."""
    plain = version.split("+")[0] if version else None
    if entry.package == "vllm" and plain:
        for cite in entry.cites():
            if cite.startswith(f"vllm=={plain} "):
                return cite
    return entry.cite


def unrecognized_finding(record: ErrorRecord, quote: ErrorRecord | None = None) -> Finding:
    """The finding for an originating error no signature explains: `unrecognized_error`, or
    `compile_error` when its frames are torch.compile's own. `quote`: a wrapper that quotes the exception
    whose own line the log lacks."""
    origin = record.origin
    message = (quote.quoted if quote else None) or record.quoted or (origin.text if origin else record.text)
    if quote is None and origin is not None and origin.detail is not None and origin.detail.message.startswith(
            ("Value error, ", "Assertion failed, ")):
        # A config class's validator refused a value: its message is what the ValidationError says.
        message = origin.detail.message.split(", ", 1)[1].split(" [type=", 1)[0]
    exception = record.type
    if quote is not None and quote.quoted:
        exception = quote.quoted.split(":", 1)[0].strip() or exception
    details: dict[str, Any] = {"exception": exception, "message": message, "kind": record.kind}
    if origin is not None and origin.shown_by:
        details["shown_by"] = origin.shown_by
    if len(record.exceptions) > 1:
        details["chain"] = [e.text for e in record.exceptions]
    details.update({k: v for k, v in record.details.items() if isinstance(v, (str, int, float))})
    compile_frame = next((f for f in reversed(record.frames) if COMPILE_FRAME_RE.search(f.file)), None)
    compiling = compile_frame is not None or bool(record.details.get("compiling"))
    sig = BY_ID["compile_error"] if compiling else BY_ID["unrecognized_error"]
    if compile_frame is not None:
        details["frame"] = f"{compile_frame.file}:{compile_frame.lineno} in {compile_frame.function}"
    # The line that states the error first (the wrapper's quote when the exception line is cut off), then
    # the rest: the assert statement of a bare AssertionError, the chain, the innermost frame.
    own = record.evidence_lines()
    first = [quote.line] if quote is not None else []
    f = make_finding(sig, [], details, extra=first + own)
    lead = first[0] if first else own[0]
    rest = [e for e in f.evidence if (e.source, e.line) != (lead.source, lead.lineno)]
    rest.sort(key=lambda e: (e.source, e.line))
    f.evidence = [evidence_of(lead)] + rest
    f.order = record.order
    return f
