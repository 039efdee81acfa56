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
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from dsv4ctl.logs.reader import LogLine

MAX_FRAMES = 64
MAX_CHAIN = 8
MAX_RAISE_LINES = 6  # continuation lines of a `raise X("…" "…")` statement kept for its message

# A frame line of a Python traceback (CPython's traceback module), and the short form rich-style
# tracebacks and pasted call chains use ("vllm/models/deepseek_v4/sparse_mla.py:262 in _build_c128a_metadata").
FRAME_RE = re.compile(r'^File "([^"]+)", line ([0-9]+), in (\S+)')
SHORT_FRAME_RE = re.compile(r"^(?:[│|]\s*)?((?:[\w.<>-]+/)*[\w.<>-]+\.py):([0-9]+) in (\w+)")
# The exception line that ends a traceback: `module.Type: message` or a bare `Type`. Outside a traceback
# only names with the suffixes exception classes use count (`…Error`, `…Exception`, `KeyboardInterrupt`,
# `SystemExit`, ray's `RayTaskError(RuntimeError)`), builtins without one (`Exception`, `StopIteration`) and
# classes of an exceptions module (`torch._dynamo.exc.Unsupported`, `triton.runtime.errors.OutOfResources`);
# inside one, any class name: a frame's code line never has the `Name: ` shape.
_EXC_SUFFIX = r"(?:Error|Exception|Interrupt|Exit|Failed|Warning)"
EXC_RE = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*" + _EXC_SUFFIX + r"|Exception|BaseException|StopIteration|GeneratorExit"
    r"|OutOfResources)(?:\([\w.]+\))?"
    r"|(?:[A-Za-z_]\w*\.)*(?:exc|errors?|exceptions)\.[A-Z]\w*"
    # C modules' own lower-case classes: socket.gaierror, socket.herror
    r"|(?:[A-Za-z_]\w*\.)+[a-z]\w*error)(?::\s?(.*))?$"
)
TB_EXC_RE = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:\([\w.]+\))?)(?::\s(.*)|:)?$")
# CPython traceback.py: the header, and the two headers between the exceptions of a chain. vLLM also logs
# a traceback as the text of one record ("EngineCore hit an exception: Traceback (most recent call last):").
HEADER_RE = re.compile(r"Traceback \(most recent call last\):?\s*$")
CHAIN_RE = re.compile(
    r"^(?:The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:)"
)
# pydantic's ValidationError names the failing check on a line of its own below the exception line
# ("1 validation error for ModelConfig" / "  Value error, <the validator's message> [type=value_error, …]"):
# that line holds the cause.
# A field's error names the field on the line above it ("gpu_memory_utilization" / "  Input should be less than or
# equal to 1 [type=less_than_equal, input_value=90.0, input_type=float]"): pydantic-core==2.50.5's display
# format (its binary's string table: " [type=", ", input_value=", ", input_type=").
DETAIL_RE = re.compile(r"^(?:Value error|Assertion failed), |^\S.*? \[type=[a-z_]+(?:, input_value=.*)?\]$")
PYDANTIC_LOC_RE = re.compile(r"^[A-Za-z_][\w.\[\]]*$")
# What is not log content: a gap an excerpt marks ("...", "…", "[... trimmed ...]"), Python 3.13's elided
# lines ("...<2 lines>..."), the carets under a frame's code, a Markdown code fence around a paste.
GAP_RE = re.compile(r"^(?:\.\.\.|…)|^\[\.\.\..*\]$|^[\^~]+$|^```|^\+[-+]")

# Messages that only repeat an error printed elsewhere (vllm 0.32.0 sources):
#   v1/executor/multiproc_executor.py:442  TimeoutError(f"RPC call to {method} timed out.")
#   v1/executor/multiproc_executor.py:445  RuntimeError(f"Worker failed with error '{result}', please check the stack trace above for the root cause")
#   v1/executor/multiproc_executor.py:316  "Worker proc %s died unexpectedly (exit code: %s), shutting down executor."
#   v1/engine/core.py:1510 / 1512 / 2663   "EngineCore failed to start." / "EngineCore encountered a fatal error."
#   v1/engine/utils.py:1428 / 1433         "… failed during engine core initialization. See root cause above. …"
#   v1/engine/exceptions.py:16             "EngineCore encountered an issue. See stack trace (above) for the root cause."
WRAPPER_RE = re.compile(
    r"Worker failed with error '|RPC call to \S+ timed out|EngineCore failed to start|EngineCore encountered"
    r"|Engine core initialization failed|Frontend process failed during engine core initialization"
    r"|See root cause above|See stack trace \(above\)|WorkerProc initialization failed|WorkerProc failed to start"
    r"|WorkerProc hit an exception|EngineDeadError|output_handler failed|died unexpectedly|EngineCore hit an exception"
    r"|Exception in worker \S+ while processing method"
    r"|ExceptionGroup: "  # an exception group only gathers the errors printed in it
)
QUOTED_RE = re.compile(r"Worker failed with error '(.*)', please check the stack trace above")
# Words that say the engine died (vllm==0.33.0 v1/engine/core.py:1586 "EngineCore encountered a fatal error.",
# v1/engine/exceptions.py EngineDeadError, v1/engine/async_llm.py:943 "AsyncLLM output_handler failed.",
# v1/executor/multiproc_executor.py "Worker proc %s died unexpectedly").
DEATH_RE = re.compile(r"EngineCore encountered a fatal error|EngineDeadError|output_handler failed|died unexpectedly")
# The engine's step, the model running in it (vllm==0.32.0 v1/engine/core.py run_busy_loop/step,
# v1/worker/gpu_worker.py execute_model/sample_tokens; torch's Module call): an error there ends the engine.
STEP_FUNCTIONS = frozenset({
    "run_busy_loop", "_process_engine_step", "step", "step_with_batch_queue", "execute_model", "sample_tokens",
    "execute_dummy_batch", "_call_impl", "forward",
})


def _is_entry_frame(frame: "Frame") -> bool:
    """The outermost frame of a process's own stack: a script's top level (`vllm` in bin/, not a module being
    imported from site-packages) or `python -m`'s runpy entry. A traceback that starts there was not caught."""
    if frame.function == "_run_module_as_main":
        return True
    return frame.function == "<module>" and "-packages/" not in frame.file and "<frozen" not in frame.file


# `raise X(…)` as a frame's code line shows it: the type, and the string literals of its message.
_RAISE_RE = re.compile(r"^raise ((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\b\s*(?:\((.*))?$")
_CALL_RE = re.compile(r"([A-Za-z_]\w*)\s*\(")
_STRING_RE = re.compile(r"""(?:[rRbBuU]|[fF][rR]?|[rR][fF])?("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")


@dataclass(frozen=True)
class Frame:
    file: str
    lineno: int
    function: str
    line: LogLine
    code: LogLine | None = None  # the source line Python printed under the frame


@dataclass
class ExceptionInfo:
    """One exception of a chain: `type: message` as Python printed it, and its innermost frame.

    shown_by: how the log shows it when not by its own exception line: "raise" (the `raise` statement of
    the innermost frame), "headline" (the line logged before the traceback), "frame" (only the frames),
    "assert" (a bare AssertionError whose `assert` statement is the message)."""

    type: str
    message: str
    line: LogLine
    last_frame: Frame | None = None
    detail: LogLine | None = None  # pydantic's "Value error, …" line under a ValidationError
    shown_by: str | None = None
    support: LogLine | None = None  # a second line that states it (the `assert` statement of a bare AssertionError)

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass
class ErrorRecord:
    """One error: a whole Python traceback (with its chain) or one non-Python error line.

    kind: "python", "cuda", "cpp", "nccl", "coredump", "os", "killed", "crash", "text", "log_error".
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
        return self.kind in ("coredump", "cuda", "killed", "crash", "cpp")

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
        out += [e.line for e in self.exceptions[1:]]
        if self.frames_line is not None:
            out.append(self.frames_line)
        return out


# ---------------------------------------------------------------------------------------------
# Errors that are not Python tracebacks. (kind, regex); named groups become the record's details.
GENERIC: tuple[tuple[str, re.Pattern[str]], ...] = (
    # CUDA driver core dump (CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1, CUDA_COREDUMP_SHOW_PROGRESS=1), as driver
    # 580.159.04 prints it (benchmarks/results/h200-2026-11-30/coredump-deepgemm-0.27.1-stderr.txt):
    #   "coredump: Detected an exception of type CUDBG_EXCEPTION_WARP_OUT_OF_RANGE_ADDRESS (5)"
    ("coredump", re.compile(r"Detected an exception of type (?P<exception>CUDBG_EXCEPTION_\w+)")),
    # cuda-gdb on that core: "CUDA Exception: Warp Out-of-range Address"
    ("coredump", re.compile(r"^CUDA Exception: (?P<exception>.+)")),
    # torch's CUDA check, as torch 2.11 printed it on the H200 (benchmarks/results/h200-2026-11-30/
    # torch-2.11-fault-texts.txt): "torch.AcceleratorError: CUDA error: an illegal memory access was encountered";
    # a condensed chain quotes the code too ("CUDA error 700: an illegal memory access was encountered").
    ("cuda", re.compile(r"CUDA error(?: (?P<code>[0-9]+))?: (?P<cuda_error>[^.\n]+)")),
    # C++ extensions (FlashInfer, DeepGEMM, vLLM's CUDA_CHECK): "Cuda error <file>:<line> '<message>'"
    ("cuda", re.compile(r"Cuda error:? (?P<where>\S+?:[0-9]+) '(?P<cuda_error>[^']+)'")),
    # c10's CHECK (torch==2.13.0 torch/include/c10/util/logging_is_not_google_glog.h:109): "Check failed: <condition>"
    ("cpp", re.compile(r"Check failed: (?P<condition>.+)")),
    # C and CUDA assertions: glibc's assert (glibc 2.36 assert/assert.c: "%s%s%s:%u: %s%sAssertion `%s' failed."),
    # the CUDA device-side assert (torch-2.11-fault-texts.txt: "… Assertion `…` failed."), and kernels' own
    # host asserts in that form (FlashMLA: "Assertion `res == CUresult::CUDA_SUCCESS` failed (file:line):").
    ("cpp", re.compile(r"Assertion `(?P<condition>[^`']+)['`] failed")),
    # GCC libstdc++'s verbose terminate handler (not a Python package: its text as the runtime prints it):
    # "terminate called after throwing an instance of 'c10::Error'"
    ("cpp", re.compile(r"terminate called after throwing an instance of '(?P<cpp_type>[^']+)'")),
    # NCCL's debug output (nvidia-nccl-cu13==2.30.7 libnccl.so.2, format "[%d] %s:%d NCCL WARN %s" after the
    # host:pid:tid prefix): "node1:123:456 [0] NCCL WARN <message>"
    ("nccl", re.compile(r"NCCL WARN (?P<nccl_warn>.+)")),
    # torch c10d ProcessGroupNCCL.cpp: "[PG ID 0 PG GUID 0 Rank 1] Watchdog caught collective operation timeout: …"
    ("nccl", re.compile(r"Watchdog caught collective operation timeout: (?P<collective>.+)")),
    # OS errors as Python prints them: "OSError: [Errno 98] Address already in use", and asyncio's bind error
    # (CPython 3.11.7 asyncio/base_events.py:1525): "[Errno 98] error while attempting to bind on address …"
    ("os", re.compile(r"\[Errno (?P<errno>-?[0-9]+)\] (?P<os_error>.+)")),
    # argparse's error exit (CPython 3.11.7 argparse.py:2630 "%(prog)s: error: %(message)s"): "vllm serve: error: …"
    ("usage", re.compile(r"^(?P<prog>[\w.-]+(?: [\w.-]+)?): error: (?P<usage_error>.+)")),
    # An HTTP error body as a client prints it (vLLM's ErrorResponse, pretty-printed by jq): '"message": "…",'
    ("http_error", re.compile(r'^"message": "(?P<http_error>.+?)",?$')),
    # Processes killed: vLLM's monitor reports the exit code (-9 = SIGKILL, the kernel's OOM killer);
    # the shell prints "Killed" for a foreground process killed by SIGKILL.
    ("killed", re.compile(r"died unexpectedly \(exit code: (?P<exit_code>-9)\)")),
    ("killed", re.compile(r"^(?:\S+: line [0-9]+: +[0-9]+ )?Killed(?:\s+.*)?$")),
    # CPython's fatal-error handler and the shell (not Python packages: their texts as they print them):
    # "Fatal Python error: Segmentation fault", "Segmentation fault (core dumped)"
    ("crash", re.compile(r"^Fatal Python error: (?P<fatal>.+)")),
    ("crash", re.compile(r"^(?:\S+: line [0-9]+: +[0-9]+ )?(?P<fatal>Segmentation fault|Aborted|Bus error)(?: +\(core dumped\))?")),
    # A program's own "Error: <message>" line (FlashMLA's TMA set-up: "Error: Failed to initialize the TMA descriptor").
    ("text", re.compile(r"^(?:Error|FATAL|Fatal error): (?P<error>\S.*)")),
)

# cuda-gdb / the core dump's stack: a mangled C++ kernel name (Itanium ABI).
_MANGLED_RE = re.compile(r"\b(_Z[A-Za-z0-9_]+)")
_COREDUMP_FRAME_RE = re.compile(r"(?:coredump:\s+|^)#\s?[0-9]+\s+0x[0-9a-fA-F]+\s+(_Z\w+)")
_GDB_PC_RE = re.compile(r"The exception was triggered at PC 0x[0-9a-fA-F]+\s+(?:void )?(?P<kernel>[\w:]+)")


def demangle(name: str) -> str:
    """The qualified name of an Itanium-mangled function, without template arguments or parameters.

    `_ZN9deep_gemm5sched30sm90_paged_mqa_logits_metadataILj256E…` -> `deep_gemm::sched::sm90_paged_mqa_logits_metadata`.
    A name cut short in the log keeps what it has (`_ZN9deep_gemm5sched30sm90_paged_mqa_lo` ->
    `deep_gemm::sched::sm90_paged_mqa_lo…`). Returns the input when it is not a mangled name this reads.
    """
    if not name.startswith("_Z"):
        return name
    i = 2
    nested = name.startswith("_ZN")
    if nested:
        i = 3
        while i < len(name) and name[i] in "rVKRO":  # cv- and ref-qualifiers of a member function
            i += 1
    parts: list[str] = []
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        if n <= 0:
            break
        if j + n > len(name):
            if j < len(name):
                parts.append(name[j:] + "…")  # the log cut the name
            break
        parts.append(name[j : j + n])
        i = j + n
        if not nested or (i < len(name) and name[i] in "EI"):
            break
    return "::".join(parts) if parts else name


def kernel_of(message: str, coredump: bool = False) -> str | None:
    """The faulting kernel a core-dump or cuda-gdb line names, demangled; None when it names none.
    `coredump`: the line came from the core dump (its "coredump:" tag already taken off by the reader)."""
    if not coredump and "coredump" not in message and "<<<" not in message and "exception was triggered" not in message:
        return None
    m = _COREDUMP_FRAME_RE.search(message)
    if m:
        return demangle(m.group(1))
    m = _GDB_PC_RE.search(message)
    if m:
        return m.group("kernel")
    if "<<<" in message and (m := _MANGLED_RE.search(message)):
        return demangle(m.group(1))
    return None


# A word each GENERIC wording contains: most lines hold none, and `in` is cheaper than any regex.
_GENERIC_WORDS = ("CUDBG_EXCEPTION", "CUDA Exception", "CUDA error", "Cuda error", "Check failed", "Assertion `",
                  "terminate called", "NCCL WARN", "Watchdog caught", "[Errno", "died unexpectedly", "Killed",
                  "Fatal Python error", "Segmentation fault", "Aborted", "Bus error", "Error: ", "FATAL: ",
                  "Fatal error: ", ": error: ", '"message": "')


def log_error(line: LogLine) -> ErrorRecord:
    """An ERROR/CRITICAL log record that states an error in words of its own (no traceback, no known
    wording): the weakest evidence, used for the root cause only when nothing stronger is in the log."""
    return ErrorRecord(kind="log_error", line=line, text=line.message)


def generic_error(line: LogLine) -> ErrorRecord | None:
    """The non-Python error a line states, or None."""
    msg = line.message
    if not any(word in msg for word in _GENERIC_WORDS):
        return None
    for kind, rx in GENERIC:
        m = rx.search(msg)
        if m:
            details = {k: v for k, v in m.groupdict().items() if v is not None}
            return ErrorRecord(kind=kind, line=line, text=msg, details=details)
    return None


def exception_line(msg: str) -> tuple[str, str] | None:
    """(type, message) when `msg` is an exception line on its own (see `EXC_RE`), else None."""
    if not msg or not (msg[0].isalpha() or msg[0] == "_"):
        return None
    m = EXC_RE.match(msg)
    if m is None or m.group(1).endswith("Warning"):
        return None  # a warning is not an error
    return m.group(1), (m.group(2) or "").strip()


def raised(code: str) -> tuple[str, str] | None:
    """(type, message) of a `raise X("…")` statement as a frame's code line shows it; the message is the
    string literals it holds (an f-string's placeholders kept as written), "" when it shows none."""
    m = _RAISE_RE.match(code)
    if m is None:
        return None
    parts = []
    for lit in _STRING_RE.findall(m.group(2) or ""):
        try:
            value = ast.literal_eval(lit)
        except (ValueError, SyntaxError):
            value = lit[1:-1]
        parts.append(value if isinstance(value, str) else "")
    return m.group(1), "".join(parts).strip()


def is_gap(msg: str) -> bool:
    return bool(msg) and GAP_RE.match(msg) is not None


def _same_record(a: LogLine | None, b: LogLine) -> bool:
    """Whether `b` continues the log record `a` started: the same level, location and time (vLLM's
    NewLineFormatter repeats the whole prefix on every line of a multi-line message)."""
    return (
        a is not None and b.level is not None and b.level == a.level and b.fileinfo is not None
        and b.fileinfo == a.fileinfo and b.timestamp == a.timestamp and b.process == a.process
    )


class ErrorAssembler:
    """Assembles records per (source, process) from the lines fed in order; see the module docstring."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str | None], _Open] = {}
        self._prev: dict[tuple[str, str | None], LogLine] = {}  # the last line of each process

    def inside(self, line: LogLine) -> bool:
        """Whether `line` is part of a traceback being assembled (a frame, code or exception line)."""
        cur = self._open.get((line.source, line.process))
        return cur is not None and (cur.in_traceback or cur.chained)

    def feed(self, line: LogLine, seq: int, order: tuple = ()) -> list[ErrorRecord]:
        out = self._feed(line, seq, order)
        if line.message:
            self._prev[(line.source, line.process)] = line
        return out

    def _feed(self, line: LogLine, seq: int, order: tuple) -> list[ErrorRecord]:
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
            if cur is not None and cur.can_head and _same_record(cur.last_line, line):
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
        if rec is None and cur is not None:
            if cur.in_traceback or cur.chained:
                if line.level is None or cur.first is None or line.level == cur.first.level:
                    return out  # other text inside an open traceback (a message's continuation, a C++ stack)
            elif (cur.exceptions or cur.log_line is not None) and _same_record(cur.last_line, line):
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
            rec.first = rec.end = line
            rec.seq, rec.order = seq, order
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
        if not self.frames and _is_entry_frame(frame):
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
            if (call := _CALL_RE.search(line.message)) is not None and len(self.functions) < 4 * MAX_FRAMES:
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
