"""One start of vLLM as its lines arrive: the timeline, the catalogue's hits and the error records, with the
bookkeeping of when it was ready, serving or shutting down (per-start state; the conclusion is `conclude`)."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from dsv4ctl import re_cache
from dsv4ctl.catalogue.signature import Signature
from dsv4ctl.catalogue.signature_index import LineSorter, SignatureIndex
from dsv4ctl.catalogue.signatures import CATALOGUE
from dsv4ctl.diagnosis.model import MAX_EVIDENCE
from dsv4ctl.logs.reader import LogLine
from dsv4ctl.logs.grammars import kernel_of
from dsv4ctl.logs.records import ErrorAssembler, ErrorRecord
from dsv4ctl.logs.timeline import ANSWERED_RE, StartupTracker

# Memory stays bounded on logs full of errors: per signature (and per before/after ready/shutdown) only
# the first HIT_CAP matches are kept, the rest are counted; likewise for exception lines.
HIT_CAP = 2 * MAX_EVIDENCE

RECORD_CAP = 256

WEAK_RECORD_CAP = 32

@dataclass
class Hit:
    sig: Signature
    line: LogLine
    seq: int
    order: tuple
    phase: str | None
    capture_mode: str | None
    groups: dict[str, str]
    after_ready: bool = False
    after_shutdown: bool = False

# Lines that look like vLLM's or Python's own output (a log record, a process tag, a traceback):
# a text without any of them is not a vLLM log.
_PY_LINE_RE = re_cache.compile(r"^(?:Traceback \(most recent call last\)|File \"[^\"]+\", line [0-9]+)")

_ERROR_LEVELS = (None, "ERROR", "CRITICAL")

# The server answered a request after an error (uvicorn's access line with any status but 500 and 503, which
# a server whose engine died answers with; vLLM's throughput line; see timeline.py "answered"): that error did
# not take it down.
_DOWN_STATUSES = ("500", "503")

# The method a worker ran when it raised, as the executor's wrapper names it (vllm==0.6.3
# executor/multiproc_worker_utils.py "Exception in worker %s while processing method %s."; worker/worker_base.py
# "Error executing method %r. This might cause deadlock in distributed execution.").
_WORKER_METHOD_RE = re_cache.compile(r"while processing method (\w+)|Error executing method '?(\w+)")

# The stale-max_model_len fix as dsv4ctl's plugin reports it in every process (dsv4ctl/fixes summary_line).
_STALE_FIX_RE = re_cache.compile(r"dsv4ctl fixes:.*\bstale-max-model-len applied")

# Which signatures can match a line, in one pass over it (most selected lines: none).
_INDEX = SignatureIndex(CATALOGUE)

# While a start serves quietly, a raw line is analysed only when it can matter (see `LogPass.feed_raw`):
# - a start or shutdown marker, or a sign that the server is going down (the wording of fatal catalogue
#   signatures, wrappers that say the engine died, errors that are not Python's);
_SERVING_ALERT = (
    r"server version", r"non-default args", r"Initializing a V1 LLM engine", r"█",
    r"shutdown", r"Shutting down", r"Finished server process", r"KeyboardInterrupt",
    # (phrases, not the process tags: "(EngineCore pid=…)" is on every engine line)
    r"EngineCore failed", r"EngineCore encountered", r"Engine core initialization", r"EngineDead", r"WorkerProc",
    r"terminating server process", r"Uncaught exception",
    r"Worker proc", r"died unexpectedly", r"fatal error", r"output_handler", r"RPC call", r"has died", r"were killed",
    r"killed due to", r"NODE_OUT_OF_MEMORY", r"died or was killed", r"dsv4ctl serve: engine process",
    r"Assertion error \(", r"Failed to initialize the TMA descriptor", r"is not divisible by weight quantization",
    r"CUDA error", r"Cuda error", r"illegal memory", r"cudaErrorIllegalAddress", r"CUDBG", r"coredump", r"CUDA Exception",
    r"NCCL", r"Watchdog", r"Check failed", r"paged_mqa_logits_metadata",
    r"terminate called", r"Killed", r"Segmentation fault", r"Fatal Python", r"Aborted", r"Bus error", r"Errno 98",
    r"out of memory", r"OutOfMemory",
    # DSpark's reported crashes (catalogue/signatures_dspark.py): FlashMLA's host check, the draft's id mapping, Ascend's
    # index check
    r"Failed to create tensormap", r"kerutils/host", r"map_draft_to_target", r"IndexCheckKernel",
    r"Index out of range in dimension", r"VllmQuantLightningIndexerMetadata",
    # a wait while serving (a worker that stopped answering the engine's broadcast); an answer with a server error
    # (500/503: the engine may be gone)
    r"No available shared memory broadcast", r'HTTP/[0-9.]+" 50[03] ',
)

# - the catalogue's request-level errors (a prompt too long, no chat template): warnings, analysed alone.
_REQUEST_SIGNATURES = tuple(sig for sig in CATALOGUE if sig.role == "request")

# A request line's kind names its signature: LineSorter.REQUEST + its index here.
SERVING_SORTER = LineSorter(_SERVING_ALERT, [sig.patterns for sig in _REQUEST_SIGNATURES])

def request_signature(kind: int) -> Signature:
    """The request-level signature of a line the sorter gave `kind` (its patterns have no anchors, so they
    match the raw line as they match its message)."""
    return _REQUEST_SIGNATURES[kind - LineSorter.REQUEST]

HELD_LINES = 256  # held lines analysed when trouble starts: a (long) traceback printed just before the sign

# The catalogue's waits (dsv4ctl/catalogue/signatures_waits.py, and the shared-memory broadcast's): their last
# line is kept whatever the cap (a wait's last line is what `diagnosis.stuck` needs).
WAIT_IDS = frozenset({"wait_placement_group", "wait_dp_coordinator", "wait_engines", "wait_frontend", "engine_waiting",
                      "wait_download"})

ANSWER_CAP = MAX_EVIDENCE  # the first 5xx and 4xx answers kept, and the last request lines before an error

# vLLM's throughput line of an engine that runs requests and makes no progress (vllm==0.32.0
# vllm/v1/metrics/loggers.py:283, "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s"):
# logged while it hangs, so no sign of progress.
_NO_THROUGHPUT = "throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s"


@dataclass
class WaitRun:
    """One kind of wait a start showed: its first and last line and how many times it was logged."""

    kind: str
    first: LogLine
    first_seq: int
    last: LogLine
    last_seq: int
    count: int = 1
    seconds: int | None = None  # the largest wait the lines state themselves ("for 70 seconds")
    # How many times each process logged it: a wait's own count is one process's clock (four workers that each log
    # the 60-second line once have waited 60 s, not 240 s).
    per_process: dict[tuple[str, str | None, int | None], int] = field(default_factory=dict)

    @property
    def most_by_one(self) -> int:
        """The most times one process logged the wait (its own clock)."""
        return max(self.per_process.values()) if self.per_process else self.count

class StartAnalyzer:
    """Everything one start of vLLM showed: the timeline, signature hits and error records."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.tracker = StartupTracker()
        self.assembler = ErrorAssembler()
        self.hits: list[Hit] = []
        self.records: list[ErrorRecord] = []
        self.ready_seq: int | None = None
        self.shutdown_seq: int | None = None
        self.last_ts: dict[str, str] = {}
        self.traced_deepgemm: list[tuple[int, LogLine]] = []
        self.progress_phase: str | None = None  # the last startup phase, ignoring failed/shutdown
        self.hit_counts: dict[tuple[str, bool, bool], int] = {}
        self.record_counts: dict[bool, int] = {}
        self.first: LogLine | None = None
        self.last: LogLine | None = None
        self.log_lines = 0
        self.stale_fix_active = False
        self.evidence_seen = False  # a signature matched or an error was recognised (in any grammar)
        self.alive: LogLine | None = None  # the last line showing the server answer a request (not with a 5xx)
        self.alive_seq: int | None = None
        self.light = False  # an earlier start: its verdict and root cause only, no planning for the report
        self.alert = False  # while serving, a sign that the server is going down was seen
        self.ready_source: str | None = None
        self._unsettled: dict[tuple[str, str | None], list[ErrorRecord]] = {}
        # What `diagnosis.stuck` and `diagnosis.serving_view` read: the last line of each process, the last line that
        # showed progress, the waits, NCCL's init lines, the answers with an error status, the recent requests.
        self.proc_last: dict[tuple[str, str | None], tuple[int, LogLine]] = {}
        self.progress_seq = 0
        self.waits: dict[str, WaitRun] = {}
        self.nccl_first: tuple[int, LogLine] | None = None
        self.nccl_last: tuple[int, LogLine] | None = None
        self.nccl_complete_seq = 0
        self.down_answers: list[tuple[int, LogLine]] = []
        self.client_answers: list[tuple[int, LogLine]] = []
        self.requests: deque[tuple[int, LogLine]] = deque(maxlen=ANSWER_CAP)
        self.full_read = False  # every line of the start's file was fed (a paste), not only the selected ones
        # A V0 engine's config lines printed again by the same process after its engine began: the main module ran
        # again (a spawned child importing an unguarded script); (the first line, the repeat).
        self._pre_engine: dict[str, LogLine] | None = {}
        self._compiling: dict[tuple[str, str | None], LogLine] = {}  # torch.compile's suffix line, per process
        self.rerun: tuple[LogLine, LogLine] | None = None
        self.worker_methods: set[str] = set()  # the methods a worker raised in, as its executor's wrapper names them

    @property
    def quiet_serving(self) -> bool:
        """Answering requests (uvicorn's startup complete, or a request answered), not shutting down, no sign of
        trouble: most lines can change nothing now. Until then the server may still fail to start."""
        return (self.ready_seq is not None and self.shutdown_seq is None and not self.alert
                and self.tracker.timeline.answering)

    @property
    def settled(self) -> bool:
        """The start reached an end: ready, failing or shutting down."""
        tl = self.tracker.timeline
        return tl.ready or tl.last_phase in ("failed", "shutdown") or any(self._unsettled.values())

    def feed(self, line: LogLine, seq: int) -> None:
        msg = line.message
        if self.first is None:
            self.first = line
        self.last = line
        if line.level is not None or line.process is not None or _PY_LINE_RE.match(msg):
            self.log_lines += 1
        if line.timestamp:
            self.last_ts[line.source] = line.timestamp
        order = (self.last_ts.get(line.source, ""), seq)
        phase_before = self.progress_phase
        capture = self.tracker.timeline.capture
        capture_mode = capture.mode if capture is not None else None
        if line.process is not None:
            self.proc_last[(line.source, line.process)] = (seq, line)
        events = self.tracker.feed(line)
        # Evidence that the start went on: a log record of its own (a wait's line takes this back in `_wait`).
        progress_before = self.progress_seq
        if events or (line.level is not None and line.level != "DEBUG"):
            self.progress_seq = seq
        answer_line = "HTTP/" in msg
        for ev in events:
            if ev.phase not in ("failed", "shutdown"):
                self.progress_phase = ev.phase
                # The process went on starting up: what it printed before was not fatal. An access line is the API
                # server answering (with a 500, the engine may be gone): no such proof for the process that failed.
                if not answer_line:
                    for rec in self._unsettled.pop((line.source, line.process), ()):
                        rec.survived = True
            if ev.phase == "ready" and self.ready_seq is None:
                self.ready_seq = seq
                self.ready_source = line.source
            if ev.phase == "shutdown" and self.shutdown_seq is None:
                self.shutdown_seq = seq
        if ('HTTP/' in msg or "Avg prompt throughput" in msg) and (m := ANSWERED_RE.search(msg)) is not None:
            self._answered(m.group("status"), msg, line, seq, progress_before)
        elif "Received request" in msg:
            self.requests.append((seq, line))
        if self._pre_engine is not None and line.level == "INFO":
            self._watch_rerun(msg, line)
        if "NCCL INFO" in msg:
            if self.nccl_last is None or self.nccl_last[0] < self.progress_seq:
                self.nccl_first = (seq, line)
            self.nccl_last = (seq, line)
            if "Init COMPLETE" in msg:
                self.nccl_complete_seq = seq
        if "paged_mqa_logits_metadata" in msg or "IndexerMetadataBuilder" in msg:
            if len(self.traced_deepgemm) < 2 * MAX_EVIDENCE:
                self.traced_deepgemm.append((seq, line))
        if "ing method " in msg and len(self.worker_methods) < 8 and (m := _WORKER_METHOD_RE.search(msg)) is not None:
            self.worker_methods.add(m.group(1) or m.group(2))
        if "dsv4ctl fixes:" in msg and _STALE_FIX_RE.search(msg):
            self.stale_fix_active = True
        # An access line proves the API server answered, not that the process that logged an error went on: the
        # answers decide that separately (`_answered`).
        self._records_of(line, seq, order, not answer_line and any(ev.phase not in ("failed", "shutdown") for ev in events))
        if "TORCHDYNAMO_VERBOSE=1" in msg:
            self._compile_suffix(line)
        if (kernel := kernel_of(msg, coredump=line.process == "coredump")) is not None:
            dumps = [r for r in self.records if r.kind == "coredump" and "kernel" not in r.details]
            if dumps:
                dumps[-1].details["kernel"] = kernel
                dumps[-1].details["kernel_line"] = line
            elif not any(r.kind == "coredump" for r in self.records):
                # The faulting warp's stack without the exception line above it (an excerpt): the driver
                # prints a kernel's stack in a core dump only for the warp that faulted.
                rec = ErrorRecord(kind="coredump", line=line, text=msg, details={"kernel": kernel, "kernel_line": line})
                rec.first = rec.end = line
                rec.seq, rec.order = seq, order
                self._add_record(rec)
        for sig in _INDEX.candidates(msg):
            m = sig.match(msg)
            if m and sig.id in WAIT_IDS:
                self._wait(sig.id, line, seq, m)
                if self.progress_seq == seq:
                    self.progress_seq = progress_before
            if m and self._count_hit(sig.id, seq):
                groups = {k: v for k, v in m.groupdict().items() if v is not None}
                self.hits.append(Hit(sig, line, seq, order, phase_before, capture_mode, groups))
                self.evidence_seen = True

    def _records_of(self, line: LogLine, seq: int, order: tuple, went_on: bool) -> None:
        """The records `line` completes. A record the line closed while its process went on starting up (`went_on`: a
        milestone of the same process) was not fatal."""
        for rec in self.assembler.feed(line, seq, order):
            self._add_record(rec)
            if went_on and (rec.line.source, rec.line.process) == (line.source, line.process) and rec.seq < seq:
                rec.survived = True
                pending = self._unsettled.get((line.source, line.process))
                if pending and rec in pending:
                    pending.remove(rec)

    def _compile_suffix(self, line: LogLine) -> None:
        """torch.compile's own words after the error it failed on (torch==2.14.1 torch/_dynamo/exc.py: "Set
        TORCHDYNAMO_VERBOSE=1 for the internal stack trace …", the end of a BackendCompilerFailed message): the error
        just above it in the same process was raised while compiling."""
        for rec in reversed(self.records[-8:]):
            if _near_end(rec, line):
                rec.details["compiling"] = True
                return
        self._compiling[(line.source, line.process)] = line  # the record is still being assembled

    def _answered(self, status: str | None, msg: str, line: LogLine, seq: int, progress_before: int) -> None:
        """The server answered (an access line with its status, or the throughput line; one that reports no tokens
        is no progress)."""
        if status not in _DOWN_STATUSES:
            self.alive, self.alive_seq = line, seq
            if status is not None:
                self.progress_seq = seq
            elif _NO_THROUGHPUT in msg:
                self.progress_seq = progress_before
            if status is not None and status[0] == "4" and len(self.client_answers) < ANSWER_CAP:
                self.client_answers.append((seq, line))
        else:
            self.alert = True  # a server error: whether it answers otherwise later decides, so read on
            if len(self.down_answers) < ANSWER_CAP:
                self.down_answers.append((seq, line))
        if status is not None:
            self.requests.append((seq, line))

    def _watch_rerun(self, msg: str, line: LogLine) -> None:
        """vllm==0.5.0 vllm/config.py:623 and the other config lines, then vllm/engine/llm_engine.py:161 "Initializing an
        LLM engine (v%s) with config"; the process's next record one of the first again: the main module ran again."""
        pre = self._pre_engine
        if self.progress_phase not in (None, "starting"):
            self._pre_engine = None  # it went on: a later repeat is another LLM() of the same script
        elif "Initializing an LLM engine (v" in msg:
            pre[""] = line  # the engine began
        elif "" not in pre:
            if len(pre) < 8:
                pre.setdefault(msg, line)
        elif line.process == pre[""].process:
            # The next record of the engine's process: a config line again, or the engine going on.
            first = pre.get(msg)
            if first is not None and first.process == line.process:
                self.rerun = (first, line)
            self._pre_engine = None

    def _wait(self, kind: str, line: LogLine, seq: int, m: re.Match[str]) -> None:
        run = self.waits.get(kind)
        stated = m.groupdict().get("seconds")
        if run is None:
            run = self.waits[kind] = WaitRun(kind, line, seq, line, seq)
        else:
            run.last, run.last_seq = line, seq
            run.count += 1
        if len(run.per_process) < 4096:
            who = (line.source, line.process, line.pid)
            run.per_process[who] = run.per_process.get(who, 0) + 1
        if stated is not None:
            run.seconds = max(run.seconds or 0, int(stated))

    def _add_record(self, rec: ErrorRecord) -> None:
        if rec.line.level not in _ERROR_LEVELS:
            return  # a traceback logged at INFO/WARNING level: vLLM handled it
        suffix = self._compiling.pop((rec.line.source, rec.line.process), None)
        if suffix is not None and _near_end(rec, suffix):
            rec.details["compiling"] = True
        self.evidence_seen = True
        # Weak records (ERROR lines in words of their own) have a cap of their own: a log full of them
        # never crowds out the traceback that holds the cause.
        weak = rec.weak
        self.record_counts[weak] = self.record_counts.get(weak, 0) + 1
        if self.record_counts[weak] > (WEAK_RECORD_CAP if weak else RECORD_CAP):
            return
        self.records.append(rec)
        self._unsettled.setdefault((rec.line.source, rec.line.process), []).append(rec)

    def finish(self) -> None:
        for rec in self.assembler.close():
            self._add_record(rec)
        for h in self.hits:
            h.after_ready = self.after_ready(h.seq)
            h.after_shutdown = self.after_shutdown(h.seq)

    def after_ready(self, seq: int) -> bool:
        return self.ready_seq is not None and seq > self.ready_seq

    def after_shutdown(self, seq: int) -> bool:
        return self.shutdown_seq is not None and seq >= self.shutdown_seq

    def _count_hit(self, sig_id: str, seq: int) -> bool:
        key = (sig_id, self.ready_seq is not None, self.shutdown_seq is not None)
        n = self.hit_counts.get(key, 0) + 1
        self.hit_counts[key] = n
        return n <= HIT_CAP

    def count_beyond_cap(self, sig_id: str, n: int = 1) -> bool:
        """Count `n` more matches of `sig_id` without their lines when HIT_CAP matches are held already."""
        key = (sig_id, self.ready_seq is not None, self.shutdown_seq is not None)
        if self.hit_counts.get(key, 0) < HIT_CAP:
            return False
        self.hit_counts[key] += n
        return True

    def capped(self, sig_id: str) -> bool:
        return self.hit_counts.get((sig_id, self.ready_seq is not None, self.shutdown_seq is not None), 0) >= HIT_CAP

    def occurrences(self, sig_id: str) -> int:
        return sum(n for (sid, _, _), n in self.hit_counts.items() if sid == sig_id)


def _near_end(rec: ErrorRecord, line: LogLine) -> bool:
    """Whether `line` is the end of `rec` or within three lines after it, in the same process."""
    end = rec.end or rec.line
    return end.source == line.source and end.process == line.process and 0 <= line.lineno - end.lineno <= 3


def window_of(a: StartAnalyzer, seq: int) -> str:
    """Which window of the start a line at `seq` is in: "startup", "serving" (after ready) or "noise"."""
    if a.after_shutdown(seq):
        return "noise"
    if a.after_ready(seq):
        return "serving"
    return "startup"
