"""The API server's view: what its answers and its request path say about the server.

- `down_after_error`: requests answered 500/503 after an engine error (and none answered otherwise after them): the
  server failed while serving; the engine's error is the cause and the request before it is named.
- `client_finding`: a 4xx answer is a client's request the server refused; the server was up, the access line is the
  evidence.
- `in_request_path` / `request_finding`: a traceback raised while the server handled one request (the OpenAI server's
  handlers, a tool or reasoning parser, the multimodal item limit, a KV connector's per-request handshake), with
  nothing after it that stops the server, is that request's error: the server stays healthy.
"""

from __future__ import annotations

from typing import Any

from dsv4ctl import re_cache
from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.diagnosis.analyzer import StartAnalyzer
from dsv4ctl.diagnosis.evidence import evidence_of, fill
from dsv4ctl.diagnosis.model import Finding
from dsv4ctl.logs.grammars import DEATH_RE, STEP_FUNCTIONS
from dsv4ctl.logs.reader import LogLine
from dsv4ctl.logs.records import ErrorRecord
from dsv4ctl.logs.timeline import ANSWERED_RE

# Functions that run for one request (vllm==0.32.0): entrypoints/openai/chat_completion/serving.py:258
# render_chat_request, :281 create_chat_completion, :466 chat_completion_stream_generator, :935
# chat_completion_full_generator; entrypoints/openai/completion/serving.py:88 render_completion_request, :109
# create_completion, :279 completion_stream_generator; multimodal/processing/context.py:608 validate_num_items
# (--limit-mm-per-prompt); tool_parsers/abstract_tool_parser.py:201 extract_tool_calls, :214
# extract_tool_calls_streaming; reasoning/abs_reasoning_parsers.py:153 extract_reasoning, :173
# extract_reasoning_streaming; distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:985 _nixl_handshake,
# :1268 _ensure_handshake, :1330 _background_nixl_handshake (a P/D request's side channel).
REQUEST_FUNCTIONS = frozenset({
    "render_chat_request", "create_chat_completion", "chat_completion_stream_generator",
    "chat_completion_full_generator", "render_completion_request", "create_completion", "completion_stream_generator",
    "validate_num_items", "extract_tool_calls", "extract_tool_calls_streaming", "extract_reasoning",
    "extract_reasoning_streaming", "_nixl_handshake", "_ensure_handshake", "_background_nixl_handshake",
})

# A request id as vLLM logs it ("Received request chatcmpl-…", "Added request cmpl-…").
_REQUEST_ID_RE = re_cache.compile(r"\b((?:chatcmpl|cmpl|resp|embd)-[0-9A-Za-z_-]{6,})")

# An ERROR record in words of its own that names the one request it is about ("Handshake failed for request chatcmpl-…",
# "… request_id=cmpl-…"): that request's error.
_ONE_REQUEST_RE = re_cache.compile(r"\bfor request (?:id )?\S+|\brequest[_ ]id[=:] ?\S+|\b(?:chatcmpl|cmpl|resp|embd)-[0-9A-Za-z_-]{6,}")

_REQUEST_LINE_RE = re_cache.compile(r'"(?P<request>[A-Z]+ \S* HTTP/[0-9.]+)" (?P<status>[0-9]{3})')


# An error payload with a server error's code inside a request's traceback ("input_value={'error': {'message': 'En…',
# …, 'code': 500}}"): the server itself failed that request, not the client (vLLM's ErrorInfo.code, vllm==0.33.0
# vllm/entrypoints/serve/engine/protocol.py:79-87).
_SERVER_ERROR_CODE_RE = re_cache.compile(r"""['"]code['"]: ?5[0-9]{2}\b""")


def _says_engine_died(text: str) -> bool:
    return "CUDA error" in text or bool(DEATH_RE.search(text)) or _SERVER_ERROR_CODE_RE.search(text) is not None


# uvicorn's line before the traceback of a request whose handler raised (uvicorn==0.54.0
# uvicorn/protocols/http/httptools_impl.py:426, h11_impl.py:415).
ASGI_ERROR = "Exception in ASGI application"


def asgi_lines(records: list[ErrorRecord]) -> frozenset[tuple[str, int]]:
    """Where uvicorn logged "Exception in ASGI application" (its traceback follows on the next line, unprefixed)."""
    return frozenset((r.line.source, r.line.lineno) for r in records if r.kind == "log_error" and ASGI_ERROR in r.text)


# Where vLLM's code for one request lives (vllm==0.33.0): the OpenAI server's handlers (entrypoints/openai/
# chat_completion/, completion/, responses/; older releases entrypoints/openai/serving_*.py) and the exception handlers
# that turn a request's error into an answer (entrypoints/serve/exception_handling/). The parsers and the chat template's
# rendering run at startup too (their constructors, --chat-template's check): their request functions name them
# (REQUEST_FUNCTIONS), not their files.
REQUEST_PATHS = re_cache.compile(
    r"vllm/entrypoints/openai/(?:chat_completion|completion|responses)/|vllm/entrypoints/openai/serving_"
    r"|vllm/entrypoints/serve/exception_handling/")
# The same files as vLLM's log record names them ("[hermes_tool_parser.py:123]", "[serving.py:952]"): a record logged
# there in words of its own is about one request. serving.py is the name of the handlers' module in every release that
# splits them by endpoint (entrypoints/openai/chat_completion/serving.py, completion/serving.py, responses/serving.py).
REQUEST_LOGGERS = re_cache.compile(r"^(?:\w+_tool_parser|abstract_tool_parser|\w*reasoning_parser|serving(?:_\w+)?"
                                   r"|chat_utils|message_assembly)\.py:[0-9]+$")


def signed_lines(a: StartAnalyzer) -> frozenset[tuple[str, int]]:
    """The lines a signature of a start's failure (a cause or a symptom) named: an error there is the engine's, as the
    signature says, and the message index is not asked where it was raised."""
    return frozenset((h.line.source, h.line.lineno) for h in a.hits if h.sig.role in ("cause", "symptom"))


def in_request_path(rec: ErrorRecord, asgi: frozenset[tuple[str, int]] = frozenset(),
                    signed: frozenset[tuple[str, int]] = frozenset()) -> bool:
    """Whether an error was raised or logged while handling one request and says nothing of the engine dying (an
    EngineDeadError met in a handler is the engine's failure, not the request's): a traceback through a request's
    functions or files, after uvicorn's "Exception in ASGI application", or an ERROR record a request's module logged.
    `asgi`: `asgi_lines`; `signed`: `signed_lines`."""
    first = rec.first or rec.line
    asgi_here = (rec.headline is not None and ASGI_ERROR in rec.headline.message) or (
        (first.source, first.lineno - 1) in asgi)
    said = rec.text + (" " + rec.headline.message if rec.headline is not None else "") + "".join(
        " " + e.detail.message for e in rec.exceptions if e.detail is not None)
    if rec.kind == "log_error":
        info = rec.line.fileinfo or ""
        names_one = _ONE_REQUEST_RE.search(rec.text) is not None
        return not _says_engine_died(said) and (REQUEST_LOGGERS.match(info) is not None or names_one or (
            (rec.line.source, rec.line.lineno) not in signed and _raised_for_a_request(rec)))
    if rec.kind != "python" or rec.is_wrapper:
        return False
    by_file = any(REQUEST_PATHS.search(fr.file) for fr in rec.frames)
    logged_there = REQUEST_LOGGERS.match((rec.headline or rec.line).fileinfo or "") is not None
    if not (asgi_here or rec.functions & REQUEST_FUNCTIONS or by_file or logged_there
            or (not rec.frames and (rec.line.source, rec.line.lineno) not in signed and _raised_for_a_request(rec))):
        return False
    return not _says_engine_died(said) and not (rec.functions & STEP_FUNCTIONS)


def _raised_for_a_request(rec: ErrorRecord) -> bool:
    """Whether the message index places an error the log shows without frames in a function of one request's path (the
    NIXL handshake of one request, a request handler): the raise site says the scope."""
    from dsv4ctl.diagnosis.ranking import lookup  # the index, read only for an error the log shows without its frames

    entry = lookup(rec, None)
    return entry is not None and entry.function.rsplit(".", 1)[-1] in REQUEST_FUNCTIONS


def _request_named(rec_seq: int, a: StartAnalyzer, rec: ErrorRecord | None = None) -> str | None:
    """The request the log names for an error: a request id in its text, else the last request line before it."""
    if rec is not None:
        for text in (rec.text, rec.headline.message if rec.headline is not None else ""):
            if (m := _REQUEST_ID_RE.search(text)) is not None:
                return m.group(1)
    before = [ln for seq, ln in a.requests if seq < rec_seq]
    if not before:
        return None
    ln = before[-1]
    m = _REQUEST_LINE_RE.search(ln.message) or _REQUEST_ID_RE.search(ln.message)
    return (m.group("request") if m and m.re is _REQUEST_LINE_RE else m.group(1)) if m else None


def request_finding(rec: ErrorRecord, a: StartAnalyzer) -> Finding:
    sig = BY_ID["request_error"]
    named = sorted(rec.functions & REQUEST_FUNCTIONS)
    where = named[0] if named else "a request handler (uvicorn: Exception in ASGI application)"
    request = _request_named(rec.seq, a, rec)
    details: dict[str, Any] = {"exception": rec.type, "message": rec.origin.text if rec.origin else rec.text,
                               "where": f"in {where}", "request": request,
                               "request_text": f" ({request})" if request else ""}
    lines = rec.evidence_lines()
    evidence = [evidence_of(ln) for ln in lines]
    return Finding(
        id=sig.id, severity=sig.severity, title=sig.title + f": {rec.type}", meaning=fill(sig.meaning, details) or sig.meaning,
        evidence=evidence[:6], details=details, actions=[fill(t, details) or t for t in sig.actions], role=sig.role,
        tier=sig.tier, order=rec.order,
    )


def down_after_error(a: StartAnalyzer) -> tuple[int, LogLine] | None:
    """The first 500/503 answer after an error that is not a request's own (a record of any process, not weak, not
    one the process went on after), when the server answered nothing else after it: the engine was gone."""
    if not a.down_answers:
        return None
    seq, line = a.down_answers[0]
    if a.alive_seq is not None and a.alive_seq > seq:
        return None
    asgi, signed = asgi_lines(a.records), signed_lines(a)
    if any(r.seq < seq and not r.weak and not r.survived and not in_request_path(r, asgi, signed) for r in a.records):
        return seq, line
    return None


def down_details(a: StartAnalyzer, down: tuple[int, LogLine], first_error_seq: int | None) -> dict[str, Any]:
    """What the 5xx answers add to the root cause: the answer, how many, and the request before the error."""
    seq, line = down
    m = _REQUEST_LINE_RE.search(line.message)
    details: dict[str, Any] = {"answered": m.group("request") + " " + m.group("status") if m else line.message,
                               "answered_line": line.lineno, "answers_5xx": len(a.down_answers)}
    if first_error_seq is not None:
        named = _request_named(first_error_seq, a)
        if named is not None:
            details["request_before"] = named
    return details


def client_finding(a: StartAnalyzer) -> Finding | None:
    """The client's requests the server refused (4xx answers): the server was up to answer them."""
    if not a.client_answers:
        return None
    sig = BY_ID["client_request_refused"]
    _, first = a.client_answers[0]
    m = _REQUEST_LINE_RE.search(first.message)
    details = {"status": m.group("status") if m else "4xx", "request": m.group("request") if m else first.message,
               "count": len(a.client_answers)}
    return Finding(
        id=sig.id, severity=sig.severity, title=fill(sig.title, details) or sig.title,
        meaning=fill(sig.meaning, details) or sig.meaning, evidence=[evidence_of(ln) for _, ln in a.client_answers[:3]],
        details=details, actions=list(sig.actions), role=sig.role, tier=sig.tier, order=("", a.client_answers[0][0]),
    )


def is_answer(line: LogLine) -> bool:
    return "HTTP/" in line.message and ANSWERED_RE.search(line.message) is not None
