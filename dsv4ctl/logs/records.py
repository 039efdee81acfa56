"""Error records: every error a log holds, assembled from its lines, independent of the catalogue.

`ErrorAssembler.feed(line)` is called for every line the prefilter selected, in order. It returns the
`ErrorRecord`s that line completes:

- a Python traceback becomes one record, whatever process printed it: its frames, the exception
  type and message, and the chained exceptions Python printed before it ("The above exception was
  the direct cause of the following exception:", "During handling of the above exception, another
  exception occurred:"). Python prints the originating exception first, so `origin` is the first of
  the chain and `exceptions[-1]` the wrapper that ended it;
- errors that are not Python tracebacks are recognised by their own wording (`GENERIC`): CUDA
  runtime errors as torch and C++ extensions print them, `Check failed:` assertions, C++
  `terminate called after throwing`, NCCL `WARN` lines and the ProcessGroupNCCL watchdog, the CUDA
  driver's core-dump report (`CUDBG_EXCEPTION_…` and the faulting kernel's mangled name, which
  `demangle` turns into `namespace::kernel`), OS errors (`[Errno N]`), processes killed by a signal
  or the OOM killer, and fatal interpreter crashes.

A record is a *wrapper* when its text only repeats an error printed elsewhere (`Worker failed with
error '…'`, `EngineCore failed to start`, `EngineDeadError`, RPC time-outs…): `is_wrapper` says so,
and `quoted` holds the error text a wrapper quotes, the best evidence when the worker's own
traceback is not in the log.

Every wording here is copied from the source that prints it (cited next to each pattern).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dsv4ctl.logs.reader import LogLine

MAX_FRAMES = 64
MAX_CHAIN = 8

# A frame line of a Python traceback (CPython's traceback module).
FRAME_RE = re.compile(r'^File "([^"]+)", line ([0-9]+), in (\S+)')
# The exception line that ends a traceback: `module.Type: message` or a bare `Type`. Outside a traceback
# only names with the suffixes exception classes use count (`…Error`, `…Exception`, `KeyboardInterrupt`,
# `SystemExit`, ray's `RayTaskError(RuntimeError)`); inside one, any class name (`triton.runtime.errors.
# OutOfResources: out of resource: …`): a code line of a frame never has the `Name: ` shape.
EXC_RE = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failed|Warning)(?:\([\w.]+\))?)(?::\s?(.*))?$"
)
TB_EXC_RE = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:\([\w.]+\))?)(?::\s(.*)|:)?$")
# CPython traceback.py: the two headers between the exceptions of a chain.
# pydantic's ValidationError names the failing check on a line of its own below the exception line
# ("1 validation error for ModelConfig" / "  Value error, <the validator's message> [type=value_error, …]"):
# that line holds the cause.
DETAIL_RE = re.compile(r"^(?:Value error|Assertion failed), ")
CHAIN_RE = re.compile(
    r"^(?:The above exception was the direct cause of the following exception:"
    r"|During handling of the above exception, another exception occurred:)"
)

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
    r"|WorkerProc hit an exception|EngineDeadError|output_handler failed|died unexpectedly"
)
QUOTED_RE = re.compile(r"Worker failed with error '(.*)', please check the stack trace above")


@dataclass(frozen=True)
class Frame:
    file: str
    lineno: int
    function: str
    line: LogLine


@dataclass
class ExceptionInfo:
    """One exception of a chain: `type: message` as Python printed it, and its innermost frame."""

    type: str
    message: str
    line: LogLine
    last_frame: Frame | None = None
    detail: LogLine | None = None  # pydantic's "Value error, …" line under a ValidationError

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass
class ErrorRecord:
    """One error: a whole Python traceback (with its chain) or one non-Python error line.

    kind: "python", "cuda", "cpp", "nccl", "coredump", "os", "killed", "crash".
    line: the line that holds the originating error (the first exception's line for a traceback).
    details: what the wording carries (the CUDA error text, the faulting kernel, the errno…).
    """

    kind: str
    line: LogLine
    text: str
    exceptions: list[ExceptionInfo] = field(default_factory=list)
    details: dict[str, object] = field(default_factory=dict)
    seq: int = 0
    order: tuple = ()
    first: LogLine | None = None  # the record's first line (a traceback's header)
    end: LogLine | None = None  # its last line (the exception that ended the chain)
    survived: bool = False  # the same process went on starting up after it

    def spans(self, line: LogLine) -> bool:
        """Whether `line` is one of this record's lines (same file and process, within its span)."""
        first, end = self.first or self.line, self.end or self.line
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
        crashed process, an NCCL failure, or a wrapper saying the engine died."""
        if self.kind == "python":
            return self.is_wrapper or "CUDA error" in self.text
        if self.kind == "nccl":
            return "collective" in self.details  # the watchdog's time-out; a WARN line alone can be benign
        return self.kind in ("coredump", "cuda", "killed", "crash", "cpp")

    @property
    def weak(self) -> bool:
        """Names a cause once a failure is certain, but does not make one: an ERROR record in words of its
        own, an NCCL WARN line (NCCL prints benign ones too)."""
        return self.kind == "log_error" or (self.kind == "nccl" and "nccl_warn" in self.details)

    @property
    def quoted(self) -> str | None:
        m = QUOTED_RE.search(self.text)
        return m.group(1) if m else None

    @property
    def frames_line(self) -> LogLine | None:
        origin = self.origin
        return origin.last_frame.line if origin and origin.last_frame else None


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
    # torch-2.11-fault-texts.txt): "torch.AcceleratorError: CUDA error: an illegal memory access was encountered".
    ("cuda", re.compile(r"CUDA error: (?P<cuda_error>[^.\n]+)")),
    # C++ extensions (FlashInfer, DeepGEMM, vLLM's CUDA_CHECK): "Cuda error <file>:<line> '<message>'"
    ("cuda", re.compile(r"Cuda error:? (?P<where>\S+?:[0-9]+) '(?P<cuda_error>[^']+)'")),
    # c10's CHECK (torch==2.13.0 torch/include/c10/util/logging_is_not_google_glog.h:109): "Check failed: <condition>"
    ("cpp", re.compile(r"Check failed: (?P<condition>.+)")),
    # GCC libstdc++'s verbose terminate handler (not a Python package: its text as the runtime prints it):
    # "terminate called after throwing an instance of 'c10::Error'"
    ("cpp", re.compile(r"terminate called after throwing an instance of '(?P<cpp_type>[^']+)'")),
    # NCCL's debug output (nvidia-nccl-cu13==2.30.7 libnccl.so.2, format "[%d] %s:%d NCCL WARN %s" after the
    # host:pid:tid prefix): "node1:123:456 [0] NCCL WARN <message>"
    ("nccl", re.compile(r"NCCL WARN (?P<nccl_warn>.+)")),
    # torch c10d ProcessGroupNCCL.cpp: "[PG ID 0 PG GUID 0 Rank 1] Watchdog caught collective operation timeout: …"
    ("nccl", re.compile(r"Watchdog caught collective operation timeout: (?P<collective>.+)")),
    # OS errors as Python prints them: "OSError: [Errno 98] Address already in use", and asyncio's bind error
    # (CPython 3.11.7 asyncio/base_events.py:962): "[Errno 98] error while attempting to bind on address …"
    ("os", re.compile(r"\[Errno (?P<errno>[0-9]+)\] (?P<os_error>.+)")),
    # Processes killed: vLLM's monitor reports the exit code (-9 = SIGKILL, the kernel's OOM killer);
    # the shell prints "Killed" for a foreground process killed by SIGKILL.
    ("killed", re.compile(r"died unexpectedly \(exit code: (?P<exit_code>-9)\)")),
    ("killed", re.compile(r"^(?:\S+: line [0-9]+: +[0-9]+ )?Killed(?:\s+.*)?$")),
    # CPython's fatal-error handler and the shell (not Python packages: their texts as they print them):
    # "Fatal Python error: Segmentation fault", "Segmentation fault (core dumped)"
    ("crash", re.compile(r"^Fatal Python error: (?P<fatal>.+)")),
    ("crash", re.compile(r"^(?:\S+: line [0-9]+: +[0-9]+ )?(?P<fatal>Segmentation fault|Aborted|Bus error)(?: +\(core dumped\))?")),
)

# cuda-gdb / the core dump's stack: a mangled C++ kernel name (Itanium ABI).
_MANGLED_RE = re.compile(r"\b(_Z[A-Za-z0-9_]+)")
_COREDUMP_FRAME_RE = re.compile(r"coredump:\s+#[0-9]+\s+0x[0-9a-fA-F]+\s+(_Z\w+)")
_GDB_PC_RE = re.compile(r"The exception was triggered at PC 0x[0-9a-fA-F]+\s+(?:void )?(?P<kernel>[\w:]+)")


def demangle(name: str) -> str:
    """The qualified name of an Itanium-mangled function, without template arguments or parameters.

    `_ZN9deep_gemm5sched30sm90_paged_mqa_logits_metadataILj256E…` -> `deep_gemm::sched::sm90_paged_mqa_logits_metadata`.
    Returns the input when it is not a mangled name this reads (substitutions, operators, …).
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
        if n <= 0 or j + n > len(name):
            break
        parts.append(name[j : j + n])
        i = j + n
        if not nested or (i < len(name) and name[i] in "EI"):
            break
    return "::".join(parts) if parts else name


def kernel_of(message: str) -> str | None:
    """The faulting kernel a core-dump or cuda-gdb line names, demangled; None when it names none."""
    if "coredump" not in message and "<<<" not in message and "exception was triggered" not in message:
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
_GENERIC_WORDS = ("CUDBG_EXCEPTION", "CUDA Exception", "CUDA error", "Cuda error", "Check failed", "terminate called",
                  "NCCL WARN", "Watchdog caught", "[Errno", "died unexpectedly", "Killed", "Fatal Python error",
                  "Segmentation fault", "Aborted", "Bus error")


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


class ErrorAssembler:
    """Assembles tracebacks per (source, process) from the lines fed in order; see the module docstring."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str | None], _Open] = {}

    def inside(self, line: LogLine) -> bool:
        """Whether `line` is part of a traceback being assembled (a frame, code or exception line)."""
        cur = self._open.get((line.source, line.process))
        return cur is not None and (cur.in_traceback or cur.chained)

    def feed(self, line: LogLine, seq: int, order: tuple = ()) -> list[ErrorRecord]:
        msg = line.message
        key = (line.source, line.process)
        out: list[ErrorRecord] = []
        cur = self._open.get(key)
        if msg.startswith("Traceback (most recent call last)"):
            if cur is not None and not cur.chained:
                # A new traceback without a chain header: the previous one ended unseen (its
                # exception line was cut off); keep what it had.
                if rec := cur.close():
                    out.append(rec)
                cur = None
            if cur is None:
                cur = self._open[key] = _Open(seq, order)
            cur.start_traceback(line)
            return out
        if cur is None or not msg:
            return out
        if msg.startswith("File ") and (m := FRAME_RE.match(msg)):
            cur.frame(Frame(m.group(1), int(m.group(2)), m.group(3), line))
            return out
        if CHAIN_RE.match(msg):
            cur.chained = True
            return out
        if cur.in_traceback and (m := EXC_RE.match(msg) or (cur.frames and TB_EXC_RE.match(msg))):
            cur.exception(ExceptionInfo(m.group(1), (m.group(2) or "").strip(), line, cur.last_frame))
            return out
        if not cur.in_traceback and cur.exceptions and DETAIL_RE.match(msg) and cur.exceptions[-1].detail is None:
            cur.exceptions[-1].detail = line
            return out
        if not cur.in_traceback and not cur.chained:
            # The chain ended: the record is complete.
            del self._open[key]
            if rec := cur.close():
                out.append(rec)
        return out

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
        self.in_traceback = False
        self.chained = False
        self.closed = False

    @property
    def last_frame(self) -> Frame | None:
        return self.frames[-1] if self.frames else None

    def start_traceback(self, line: LogLine) -> None:
        if self.first is None:
            self.first = line
        self.in_traceback = True
        self.chained = False
        self.frames = []

    def frame(self, frame: Frame) -> None:
        self.frames.append(frame)
        if len(self.frames) > MAX_FRAMES:
            del self.frames[:-MAX_FRAMES]

    def exception(self, info: ExceptionInfo) -> None:
        if len(self.exceptions) < MAX_CHAIN:
            self.exceptions.append(info)
        else:
            self.exceptions[-1] = info
        self.in_traceback = False

    def close(self) -> ErrorRecord | None:
        if self.closed or self.first is None:
            return None
        self.closed = True
        if not self.exceptions:
            # Frames without an exception line: name the innermost frame.
            last = self.last_frame
            if last is None:
                return None
            info = ExceptionInfo("traceback", f"ends in {last.function}", last.line, last)
            self.exceptions.append(info)
        origin = self.exceptions[0]
        text = " <- ".join(e.text for e in reversed(self.exceptions))
        last = self.exceptions[-1]
        return ErrorRecord(
            kind="python", line=origin.detail or origin.line, text=text, exceptions=list(self.exceptions), seq=self.seq,
            order=self.order, first=self.first, end=last.detail or last.line,
        )
