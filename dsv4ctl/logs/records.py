"""Error records: every error a log holds, assembled from its lines, whatever is left of them.

`ErrorAssembler.feed(line, seq)` is called for every line the prefilter selected, in order, and returns
the `ErrorRecord`s that line completes. Operators paste excerpts, so nothing here needs a header, a
banner or vLLM's record prefix:

- a Python traceback becomes one record per process (source and process tag), with its frames, the
  exception type and message, and the exceptions chained before it ("The above exception was the
  direct cause of the following exception:", "During handling of the above exception, another
  exception occurred:"). Python prints the originating exception first, so `origin` is the first of the
  chain and `exceptions[-1]` the wrapper that ended it;
- a fragment is assembled as far as it goes: frames without the `Traceback (most recent call last):`
  header open a record too, an exception line on its own is a record of its own (`Name: message` with
  dotted names, `torch.AcceleratorError`, `triton.runtime.errors.OutOfResources`, a bare `AssertionError`),
  and a traceback cut before its exception line is named by what it still shows: the `raise X("…")`
  statement of its innermost frame, the line logged just before the traceback (vLLM logs
  `logger.exception("…")` messages and an exception's text there), else the innermost frame;
- a bare `AssertionError` takes the `assert …` statement Python printed above it as its message;
- pydantic's `Value error, …` line belongs to the ValidationError above it, or stands for one alone;
- errors that are not Python tracebacks are recognised by their own wording (`GENERIC`): CUDA runtime
  errors as torch and C++ extensions print them, C/C++ assertions (`Assertion \\`…\\` failed`,
  `Check failed:`), `terminate called after throwing`, NCCL `WARN` lines and the ProcessGroupNCCL
  watchdog, the CUDA driver's core dump (`CUDBG_EXCEPTION_…` and the faulting kernel's mangled name,
  which `demangle` turns into `namespace::kernel`), OS errors (`[Errno N]`), processes killed by a
  signal or the OOM killer, fatal interpreter crashes;
- an ERROR/CRITICAL log record in words of its own is the weakest record (`log_error`).

A record is a *wrapper* when its text only repeats an error printed elsewhere (`Worker failed with
error '…'`, `EngineCore failed to start`, `EngineDeadError`, RPC time-outs…): `is_wrapper` says so,
and `quoted` holds the error text a wrapper quotes, the best evidence when the worker's own
traceback is not in the log.

Every wording here is copied from the source that prints it (cited next to each pattern).

Kept whole: the record, the assembler and its open records are one state machine fed every selected line; the joins
across lines (a traceback's chain, a pydantic detail, libstdc++'s what(), CANN's report, a wrapped message) read and
change the same per-process state, and split across modules each would reach into the others'.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dsv4ctl import re_cache
from dsv4ctl.logs.grammars import (
    CHAIN_RE,
    DEATH_RE,
    DETAIL_RE,
    EXC_RE,
    GENERIC,
    HEADER_RE,
    MAX_CHAIN,
    MAX_FRAMES,
    MAX_RAISE_LINES,
    PYDANTIC_LOC_RE,
    QUOTED_RE,
    SHORT_FRAME_RE,
    STEP_FUNCTIONS,
    TB_EXC_RE,
    WRAPPER_RE,
    CALL_RE,
    FRAME_RE,
    ExceptionInfo,
    Frame,
    is_entry_frame,
    same_record,
    exception_line,
    generic_words,
    is_gap,
    opens_error_body,
    raised,
)
from dsv4ctl.logs.reader import LogLine

@dataclass
class ErrorRecord:
    """One error: a whole Python traceback (with its chain) or one non-Python error line.

    kind: "python", "cuda", "hip", "npu" (Ascend: torch_npu's checks, CANN codes, ACL calls), "cpp", "nccl",
    "coredump", "os", "killed", "crash" (also the kernel's segfault and register dump), "text", "native" (a C++
    component's E/F record), "log_error".
    line: the line that holds the originating error (the first exception's line for a traceback).
    details: what the wording carries (the CUDA error text, the faulting kernel, the errno…).
    frames: the innermost frames of the originating exception (file, function), innermost last.
    """

    kind: str
    line: LogLine
    text: str
    exceptions: list[ExceptionInfo] = field(default_factory=list)
    details: dict[str, object] = field(default_factory=dict)
    seq: int = 0
    order: tuple = ()
    first: LogLine | None = None  # the record's first line (a traceback's header or first frame)
    end: LogLine | None = None  # its last line (the exception that ended the chain)
    survived: bool = False  # the same process went on starting up after it
    headline: LogLine | None = None  # the line logged just before its traceback
    frames: tuple[Frame, ...] = ()
    functions: frozenset[str] = frozenset()  # every function its frames name, outermost to innermost, all chained
    also: list[LogLine] = field(default_factory=list)  # the lines of one report joined to it (CANN's, line after line)
    # The message index's entries for it, by quoting wrapper (diagnosis.ranking.lookup's memo: one lookup per record).
    indexed: dict[int | None, object] = field(default_factory=dict, repr=False, compare=False)

    def spans(self, line: LogLine) -> bool:
        """Whether `line` is one of this record's lines (same file and process, within its span)."""
        first, end = self.first or self.line, self.end or self.line
        if self.headline is not None and line.lineno == self.headline.lineno and line.source == self.headline.source:
            return True
        return (
            line.source == first.source
            and line.process == first.process
            and first.lineno <= line.lineno <= end.lineno
        )

    @property
    def origin(self) -> ExceptionInfo | None:
        return self.exceptions[0] if self.exceptions else None

    @property
    def process(self) -> str | None:
        return self.line.process

    @property
    def type(self) -> str:
        return self.origin.type if self.origin else self.kind

    @property
    def is_wrapper(self) -> bool:
        return bool(WRAPPER_RE.search(self.origin.text if self.origin else self.text))

    @property
    def fatal(self) -> bool:
        """Seen while serving, this error means the engine is down: a CUDA fault (sticky), a killed or
        crashed process, an NCCL failure, words saying the engine died, or an error raised in the engine's
        step (the model running). An RPC of another kind that failed (loading a LoRA adapter) leaves it up."""
        if self.kind == "python":
            if self.details.get("uncaught"):
                return True  # the interpreter printed it as the process exited
            said = self.text + (" " + self.headline.message if self.headline is not None else "")
            if "CUDA error" in said or DEATH_RE.search(said):
                return True
            return bool(self.functions & STEP_FUNCTIONS)
        if self.kind == "nccl":
            return "collective" in self.details  # the watchdog's time-out; a WARN line alone can be benign
        if self.kind == "log_error":
            return bool(DEATH_RE.search(self.text))  # the API server's own words that its engine is gone
        return self.kind in ("coredump", "cuda", "killed", "crash", "cpp", "npu", "hip")

    @property
    def weak(self) -> bool:
        """Names a cause once a failure is certain, but does not make one: an ERROR record in words of its
        own, an NCCL WARN line (NCCL prints benign ones too), an error body a client received (the server
        answered it)."""
        return self.kind in ("log_error", "http_error") or (self.kind == "nccl" and "nccl_warn" in self.details)

    @property
    def quoted(self) -> str | None:
        m = QUOTED_RE.search(self.text)
        return m.group(1) if m else None

    @property
    def complete(self) -> bool:
        """Whether the originating exception's own line is in the log (not inferred from what is left)."""
        origin = self.origin
        return origin is not None and origin.shown_by in (None, "assert")

    @property
    def frames_line(self) -> LogLine | None:
        origin = self.origin
        return origin.last_frame.line if origin and origin.last_frame else None

    def evidence_lines(self) -> list[LogLine]:
        """The lines that state this error, the originating one first: its exception line (or what stands
        for it), the `assert` statement of a bare AssertionError, the rest of the chain, the innermost frame."""
        out: list[LogLine] = [self.line]
        origin = self.origin
        if origin is not None and origin.support is not None:
            out.append(origin.support)
        if origin is not None and origin.detail is not None and origin.line is not self.line:
            out.append(origin.line)  # pydantic's `ValidationError: N validation errors for <Model>` above its detail
        out += [e.line for e in self.exceptions[1:]]
        if self.frames_line is not None:
            out.append(self.frames_line)
        if isinstance(self.details.get("terminate_line"), LogLine):
            out.append(self.details["terminate_line"])
        return out + self.also


# The source file of a C++ component's record (glog, c10 and Ray's C++ core: "core_worker.cc:496",
# "ProcessGroupNCCL.cpp:632").
_NATIVE_FILE_RE = re_cache.compile(r"\.(?:cc|cpp|cxx|cu|h|hpp)(?::[0-9]+)?$")


def log_error(line: LogLine) -> ErrorRecord:
    """An ERROR/CRITICAL log record that states an error in words of its own (no traceback, no known
    wording): the weakest evidence, used for the root cause only when nothing stronger is in the log. A C++
    component's E/F record (glog, c10, Ray's core: its file is a .cc/.cpp) is an error on its own (`native`):
    such a process prints no Python traceback."""
    native = line.fileinfo is not None and _NATIVE_FILE_RE.search(line.fileinfo) is not None
    return ErrorRecord(kind="native" if native else "log_error", line=line, text=line.message)


def generic_error(line: LogLine) -> ErrorRecord | None:
    """The non-Python error a line states, or None."""
    msg = line.message
    if not generic_words(msg):
        return None
    for kind, rx in GENERIC:
        m = rx.search(msg)
        if m:
            details = {k: v for k, v in m.groupdict().items() if v is not None}
            return ErrorRecord(kind=kind, line=line, text=msg, details=details)
    return None


class ErrorAssembler:
    """Assembles records per (source, process) from the lines fed in order; see the module docstring."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str | None], _Open] = {}
        self._prev: dict[tuple[str, str | None], LogLine] = {}  # the last line of each process
        self._terminate: dict[tuple[str, str | None], ErrorRecord] = {}  # libstdc++'s terminate line, for its what()
        self._npu: dict[tuple[str, str | None], ErrorRecord] = {}  # the last NPU record, for the lines of its report
        self._last: LogLine | None = None  # the last line of any process (a wrapped message goes on there)

    def inside(self, line: LogLine) -> bool:
        """Whether `line` is part of a traceback being assembled (a frame, code or exception line)."""
        cur = self._open.get((line.source, line.process))
        return cur is not None and (cur.in_traceback or cur.chained)

    def feed(self, line: LogLine, seq: int, order: tuple = ()) -> list[ErrorRecord]:
        if self._wrapped(line):
            return []
        out = self._feed(line, seq, order)
        if line.message:
            self._prev[(line.source, line.process)] = line
            self._last = line
        return out

    def _wrapped(self, line: LogLine) -> bool:
        """A line that only continues the exception line just before it (a paste wrapped the message: a bare line that
        goes on from a message ending in "," "-" or ":", or that starts with "-"): joined to that exception's message."""
        last = self._last
        msg = line.message
        if last is None or not msg or line.level is not None or line.indent or last.source != line.source:
            return False
        cur = self._open.get((last.source, last.process))
        if cur is None or cur.in_traceback or not cur.exceptions or cur.exceptions[-1].line is not last:
            return False
        exc = cur.exceptions[-1]
        if not (exc.message.endswith((",", "-", ":")) or msg.startswith("-")) or exception_line(msg) or is_gap(msg):
            return False
        exc.message += msg if msg.startswith("-") or exc.message.endswith("-") else " " + msg
        self._last = line
        return True

    def _feed(self, line: LogLine, seq: int, order: tuple) -> list[ErrorRecord]:
        """One line into the open record of its process: the assembler's state machine (see the module docstring).

        Kept whole: it runs on every selected line, and its branches share the open record's state in an order
        that matters (a gap, a chain line, a frame, an exception line, a pydantic detail, a headline).
        """
        msg = line.message
        key = (line.source, line.process)
        out: list[ErrorRecord] = []
        cur = self._open.get(key)
        if not msg or is_gap(msg):
            return out
        header = HEADER_RE.search(msg) if "Traceback" in msg else None
        if header is not None:
            before = msg[: header.start()].strip()
            if cur is not None and cur.chained:
                cur.start_traceback(line)
                return out
            headline: LogLine | None = None
            if cur is not None and cur.can_head and same_record(cur.last_line, line):
                # The message of the log record whose next lines are the traceback (logger.exception), or an
                # exception's text vLLM logs before its traceback: the same record, so the same prefix. Without
                # a prefix an exception line before a traceback ended another one.
                headline = cur.headline_line()
                del self._open[key]
            elif cur is not None:
                # A new traceback without a chain header: the previous one ended unseen (its exception
                # line was cut off); keep what it had.
                out += self._close(key)
            cur = self._open[key] = _Open(seq, order)
            cur.headline = line if before else headline
            cur.start_traceback(line)
            return out
        if msg.startswith("File ") and (m := FRAME_RE.match(msg)) or (
            line.level is None and line.indent < 4 and ".py:" in msg and " in " in msg and (m := SHORT_FRAME_RE.match(msg))
        ):
            if cur is None or not (cur.in_traceback or cur.chained):
                # Frames without their header: a fragment of a traceback.
                out += self._close(key)
                cur = self._open[key] = _Open(seq, order)
                cur.start_traceback(line)
            elif cur.chained:
                cur.start_traceback(line)
            cur.frame(Frame(m.group(1), int(m.group(2)), m.group(3), line))
            cur.last_line = line
            return out
        if cur is not None and CHAIN_RE.match(msg):
            cur.chained = True
            cur.last_line = line
            return out
        exc = None
        if cur is not None and cur.in_traceback and (cur.frames or cur.first is not None):
            m = EXC_RE.match(msg)
            if m is None and cur.frames and line.indent < 4:
                m = TB_EXC_RE.match(msg)
            if m is not None and (not m.group(1).endswith("Warning") or cur.frames):
                exc = (m.group(1), (m.group(2) or "").strip())
        if exc is None and line.indent < 4:
            exc = exception_line(msg)
        if exc is not None:
            if cur is None or not (cur.in_traceback or cur.chained):
                out += self._close(key)
                cur = self._open[key] = _Open(seq, order)
                cur.first = line
            cur.exception(ExceptionInfo(exc[0], exc[1], line, cur.last_frame), code=cur.last_code)
            cur.last_line = line
            return out
        if cur is not None and cur.in_traceback and cur.frames and line.indent >= 4:
            cur.code(line)  # a frame's source line (or the continuation of a multi-line statement)
            cur.last_line = line
            return out
        if line.indent >= 4 and (cur is None or not (cur.in_traceback or cur.chained)) and generic_error(line) is None:
            # A frame's source line with no frame before it: the excerpt starts inside a traceback.
            out += self._close(key)
            cur = self._open[key] = _Open(seq, order)
            cur.start_traceback(line)
            cur.last_line = line
            return out
        if cur is not None and not cur.in_traceback and cur.exceptions and DETAIL_RE.match(msg):
            if cur.exceptions[-1].detail is None:
                cur.exceptions[-1].detail = line
                cur.exceptions[-1].support = cur.loc
                cur.last_line = line
                return out
        if (
            cur is not None and not cur.in_traceback and cur.exceptions and cur.loc is None
            and cur.exceptions[-1].type.endswith("ValidationError") and PYDANTIC_LOC_RE.match(msg)
        ):
            cur.loc = cur.last_line = line  # the field the next line's error is about
            return out
        if DETAIL_RE.match(msg):
            # pydantic's detail line without its ValidationError above: the validator's message stands alone,
            # with the field the line above names.
            loc = self._prev.get(key)
            out += self._close(key)
            exc = "ValueError" if msg.startswith("Value error") else "ValidationError"
            info = ExceptionInfo(exc, msg, line, support=loc if loc is not None and PYDANTIC_LOC_RE.match(loc.message) else None)
            rec = ErrorRecord(kind="python", line=line, text=msg, exceptions=[info])
            rec.first = rec.end = line
            rec.seq, rec.order = seq, order
            return out + [rec]
        rec = generic_error(line)
        if rec is not None and rec.kind == "http_error" and msg.startswith('"message"') and not opens_error_body(
                self._prev.get(key)):
            rec = None  # a `"message": …` line of some other JSON document (a log record pretty-printed), not an answer
        if rec is None and cur is not None:
            if cur.in_traceback or cur.chained:
                if line.level is None or cur.first is None or line.level == cur.first.level:
                    return out  # other text inside an open traceback (a message's continuation, a C++ stack)
            elif (cur.exceptions or cur.log_line is not None) and same_record(cur.last_line, line):
                cur.last_line = line  # the next line of a multi-line log record (vLLM repeats its prefix)
                return out
        out += self._close(key)
        if rec is None and line.level in ("ERROR", "CRITICAL"):
            # An ERROR record in words of its own: a traceback may follow it (logger.exception's message).
            pending = self._open[key] = _Open(seq, order)
            pending.first = pending.last_line = line
            pending.log_line = line
            return out
        if rec is not None:
            term = self._terminate.pop(key, None)
            if "what" in rec.details and term is not None and term.end is self._prev.get(key):
                # "terminate called after throwing an instance of 'c10::Error'" then "  what():  <message>": one
                # error, whose message is the what() line (quoted first), the terminate line beside it.
                term.details.update(what=rec.details["what"], terminate_line=term.line)
                term.line, term.end, term.text = line, line, rec.details["what"]
                return out
            if rec.kind == "npu" and (last := self._npu.get(key)) is not None and last.end is self._prev.get(key):
                # CANN reports one error over several lines (the call that failed, its code, "EZ9999: Inner Error!",
                # its own account with [FUNC:][FILE:]): the next line of the same report joins the record.
                last.text += " | " + rec.text
                for k, v in rec.details.items():
                    last.details.setdefault(k, v)
                last.end = line
                last.also.append(line)
                return out
            rec.first = rec.end = line
            rec.seq, rec.order = seq, order
            if "cpp_type" in rec.details:
                self._terminate[key] = rec
            if rec.kind == "npu":
                self._npu[key] = rec
            out.append(rec)
        return out

    def _close(self, key: tuple[str, str | None]) -> list[ErrorRecord]:
        cur = self._open.pop(key, None)
        rec = cur.close() if cur is not None else None
        return [rec] if rec is not None else []

    def close(self) -> list[ErrorRecord]:
        """Records still open at the end of the input (a log that ends inside a traceback)."""
        out = [rec for cur in self._open.values() if (rec := cur.close())]
        self._open.clear()
        return out


class _Open:
    def __init__(self, seq: int, order: tuple) -> None:
        self.seq = seq
        self.order = order
        self.first: LogLine | None = None
        self.exceptions: list[ExceptionInfo] = []
        self.frames: list[Frame] = []
        self.origin_frames: tuple[Frame, ...] = ()
        self.in_traceback = False
        self.chained = False
        self.closed = False
        self.headline: LogLine | None = None
        self.last_line: LogLine | None = None
        self.log_line: LogLine | None = None  # a pending ERROR line (see `ErrorAssembler.feed`)
        self.raise_lines: list[LogLine] = []
        self.had_traceback = False
        self.functions: set[str] = set()
        self.uncaught = False  # a traceback from the process's entry: the interpreter printed it as it exited
        self.loc: LogLine | None = None  # the field a pydantic ValidationError's next line is about

    @property
    def last_frame(self) -> Frame | None:
        return self.frames[-1] if self.frames else None

    @property
    def last_code(self) -> LogLine | None:
        last = self.last_frame
        return last.code if last else None

    @property
    def can_head(self) -> bool:
        """Whether this may be the line logged just before a traceback: a lone exception line or ERROR line."""
        if self.log_line is not None:
            return True
        return not self.had_traceback and len(self.exceptions) == 1 and not self.chained

    def headline_line(self) -> LogLine | None:
        if self.log_line is not None:
            return self.log_line
        return self.exceptions[0].line if self.exceptions else None

    def start_traceback(self, line: LogLine) -> None:
        if self.first is None:
            self.first = line
        self.in_traceback = True
        self.had_traceback = True
        self.chained = False
        self.frames = []

    def frame(self, frame: Frame) -> None:
        if not self.frames and is_entry_frame(frame):
            self.uncaught = True
        self.frames.append(frame)
        if len(self.functions) < 4 * MAX_FRAMES:
            self.functions.add(frame.function)
        self.raise_lines = []
        if len(self.frames) > MAX_FRAMES:
            del self.frames[:-MAX_FRAMES]

    def code(self, line: LogLine) -> None:
        last = self.frames[-1]
        if last.code is None:
            self.frames[-1] = Frame(last.file, last.lineno, last.function, last.line, line)
            # The function this frame was calling is on the stack too, even when the excerpt ends here
            # ("engine_core.run_busy_loop()").
            if (call := CALL_RE.search(line.message)) is not None and len(self.functions) < 4 * MAX_FRAMES:
                self.functions.add(call.group(1))
            self.raise_lines = [line] if line.message.startswith("raise ") else []
        elif self.raise_lines and len(self.raise_lines) < MAX_RAISE_LINES:
            self.raise_lines.append(line)

    def exception(self, info: ExceptionInfo, code: LogLine | None = None) -> None:
        if not info.message and info.type.endswith("AssertionError") and code is not None and code.message.startswith("assert "):
            info.support = code  # Python 3.11+ prints the failing assert statement above a bare AssertionError
        if not self.exceptions:
            self.origin_frames = tuple(self.frames[-8:])
        if len(self.exceptions) < MAX_CHAIN:
            self.exceptions.append(info)
        else:
            self.exceptions[-1] = info
        self.in_traceback = False
        self.chained = False

    def close(self) -> ErrorRecord | None:
        if self.closed or self.first is None:
            return None
        self.closed = True
        if self.log_line is not None and not self.frames and not self.exceptions:
            rec = log_error(self.log_line)
            rec.seq, rec.order, rec.first, rec.end = self.seq, self.order, self.log_line, self.log_line
            return rec
        if self.in_traceback and (self.frames or self.headline is not None):
            # The traceback was cut before its exception line: name it by what is left.
            self.exceptions.append(self._inferred())
            if len(self.exceptions) == 1:
                self.origin_frames = tuple(self.frames[-8:])
        if not self.exceptions:
            return None
        origin = self.exceptions[0]
        text = " <- ".join(e.text for e in reversed(self.exceptions))
        last = self.exceptions[-1]
        end = last.detail or last.line
        if self.last_line is not None and self.last_line.lineno > end.lineno and self.last_line.source == end.source:
            end = self.last_line
        return ErrorRecord(
            kind="python", line=origin.detail or origin.line, text=text, exceptions=list(self.exceptions), seq=self.seq,
            order=self.order, first=self.first, end=end, headline=self.headline, frames=self.origin_frames,
            functions=frozenset(self.functions), details={"uncaught": True} if self.uncaught else {},
        )

    def _inferred(self) -> ExceptionInfo:
        last = self.last_frame
        code = self.raise_lines[0] if self.raise_lines else None
        if code is not None:
            joined = " ".join(ln.message for ln in self.raise_lines)
            if (r := raised(joined)) is not None:
                return ExceptionInfo(r[0], r[1], code, last, shown_by="raise")
        if self.headline is not None:
            exc = exception_line(self.headline.message)
            if exc is not None:
                return ExceptionInfo(exc[0], exc[1], self.headline, last, shown_by="headline")
            text = HEADER_RE.sub("", self.headline.message).strip().rstrip(":")
            return ExceptionInfo("error", text, self.headline, last, shown_by="headline")
        assert last is not None  # `close` infers only with frames or a headline
        return ExceptionInfo("traceback", f"ends in {last.function}", last.line, last, shown_by="frame")
