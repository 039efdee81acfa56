"""Diagnose a vLLM startup log: verdict, root cause, findings with evidence, timeline, checklist.

`diagnose(sources)` reads the log once (streaming, bounded memory) through the prefilter;
`diagnose_lines(lines)` does the same for callers that already hold `LogLine`s. Both return a
`Diagnosis` dataclass; `Diagnosis.to_json()` is the `--json` contract (docs/diagnose.md).

The steps, one module each: `reader` (lines) -> `prefilter` (the few lines that matter) -> `starts`
(which launch of vLLM a line belongs to) -> per start, `records` (tracebacks assembled, errors that
are not Python's) and catalogue hits (`signatures`) -> the conclusion here (verdict, phase, root cause,
findings) -> renderers. The verdict, root cause, numbers and timeline are those of the last start;
`Diagnosis.starts` lists every start with its own verdict.

How the root cause is chosen (not the last line):
- a finding is evidence from a catalogue signature, or the originating error of a failure no
  signature explains (`unrecognized_error`, quoting that line);
- a start fails in phase `startup` when an error ends it before it was ready; in phase `serving`
  when, after it was ready, an error that takes the server down follows (a fatal signature, the
  engine dead, a worker killed, a CUDA fault). Errors after shutdown began are `shutdown_noise`;
  request-level errors after ready leave it healthy, as warnings;
- symptoms and wrappers (EngineCore failed to start, `Worker failed with error '…'`, RPC time-outs,
  EngineDeadError, a worker died, NCCL errors after a CUDA fault) are never the root cause while a
  cause exists; specific signatures beat generic classes and unrecognised errors, then the earliest
  evidence wins (a worker's own error first; with several files, ordered by the log timestamps).
"""

from __future__ import annotations

import functools
import json
import re
from collections import deque
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from dsv4ctl.errors import ExitCode
from dsv4ctl.logs import deployment, parallel, prefilter
from dsv4ctl.logs.reader import LogLine, Source, close_source, open_source, parse_line, printable, source_list, source_name
from dsv4ctl.logs.records import DEATH_RE, ErrorAssembler, ErrorRecord, kernel_of
from dsv4ctl.catalogue.signature_index import LineSorter, SignatureIndex
from dsv4ctl.logs.starts import StartSplitter

if TYPE_CHECKING:
    from dsv4ctl.planning.safe_length import SafeLength
from dsv4ctl.catalogue.signatures import AFFECTED_STALE, BY_ID, CATALOGUE, FIXED_STALE, Signature
from dsv4ctl.logs.timeline import LineRef, StartupTimeline, StartupTracker
from dsv4ctl.units import GiB, cdiv, format_tokens, round_up

# DeepSeek-V4 constants the arithmetic uses (vllm/models/deepseek_v4/sparse_mla.py):
C128A_COMPRESS_RATIO = 128  # the HCA layers' compress_ratio, whose metadata the assertion checks
C128A_TOPK_ALIGNMENT = 128  # _C128A_TOPK_ALIGNMENT
DSV4_BLOCK_SIZE = 256  # the only KV block size DeepSeek-V4's sparse-MLA kernels accept

VERDICT_EXIT = {
    "healthy": ExitCode.OK,
    "inconclusive": ExitCode.INCONCLUSIVE,
}

MAX_EVIDENCE = 6
# Memory stays bounded on logs full of errors: per signature (and per before/after ready/shutdown) only
# the first HIT_CAP matches are kept, the rest are counted; likewise for exception lines.
HIT_CAP = 2 * MAX_EVIDENCE
RECORD_CAP = 256
WEAK_RECORD_CAP = 32


def safe_length_from_log(tl: StartupTimeline, fits: int) -> "SafeLength":
    """The explicit --max-model-len to recommend when the log says `fits` tokens fit: what
    `fit-length MODEL --from-log LOG` recommends (the one safe-length rule, planned from the log's KV
    memory and the launch's own flags); scaled from `fits` when dsv4ctl cannot plan the model."""
    from dsv4ctl.planning.safe_length import safe_length_scaled  # the planner only when a length is asked

    if tl.model and tl.available_kv_gib and tl.available_kv_gib > 0.005:
        args = json.dumps(deployment.launch_args(tl), sort_keys=True, default=str)
        planned = _planned_safe_length(tl.model, tl.available_kv_gib, tl.vllm_version, args)
        if planned is not None and planned.ceiling > 0:
            return planned
    # vLLM logs the memory rounded to 0.01 GiB: the margin is taken from the low end of that interval.
    memory = int(round(tl.available_kv_gib * GiB) - 0.005 * GiB) if tl.available_kv_gib and tl.available_kv_gib > 0.005 else None
    return safe_length_scaled(fits, memory, tl.max_model_len)


@functools.lru_cache(maxsize=32)
def _planned_safe_length(model: str, available_kv_gib: float, vllm_version: str | None, args: str) -> "SafeLength | None":
    """fit-length's plan for a log's figures; one per configuration (the starts of a crash loop repeat one)."""
    from dsv4ctl.errors import Dsv4ctlError
    from dsv4ctl.planning.fit import FitRequest, LogCalibration, plan_fit

    calibration = LogCalibration(
        path="<log>", available_kv_bytes=int(round(available_kv_gib * GiB)), weights_bytes=None, graph_bytes=None,
        autofit_from=None, autofit_to=None, max_model_len=None, vllm_version=vllm_version, serve_args=json.loads(args),
    )
    try:
        return plan_fit(FitRequest(model=model, inherit_from_log=True), timeline=calibration).safe_length
    except Dsv4ctlError:
        return None


def c128a_capacity(reduced_len: int) -> int:
    """C128A top-k capacity the metadata builder allocates for the reduced length."""
    return round_up(cdiv(reduced_len, C128A_COMPRESS_RATIO), C128A_TOPK_ALIGNMENT)


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    if not text:
        return None
    m = re.search(r"([0-9]+)\.([0-9]+)(?:\.([0-9]+))?", text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def stale_bug_status(version: str | None) -> str | None:
    """"affected" (0.29.0-0.30.x), "fixed" (>= 0.31.0), "not_affected" (< 0.29), None if unknown."""
    v = parse_version(version)
    if v is None:
        return None
    if v[:2] < (0, 29):
        return "not_affected"
    if v[:2] <= (0, 30):
        return "affected"
    return "fixed"


# ---------------------------------------------------------------------------------------------
# Result types


@dataclass(frozen=True)
class Evidence:
    """A quoted log line: its source, 1-based line number, message text (the wrappers peeled off) and process
    tag, and `raw`, the line as it stands in the log (`reader.printable`)."""

    source: str
    line: int
    text: str
    process: str | None = None
    raw: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line, "text": self.text, "process": self.process, "raw": self.raw}


@dataclass
class Finding:
    """One signature found in the log, with the lines that show it and what to do."""

    id: str
    severity: str
    title: str
    meaning: str
    evidence: list[Evidence]
    details: dict[str, Any] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)
    is_root_cause: bool = False
    role: str = "cause"
    tier: int = 0
    order: tuple = ()

    @property
    def line(self) -> int | None:
        return self.evidence[0].line if self.evidence else None

    def to_json(self) -> dict[str, Any]:
        first = self.evidence[0] if self.evidence else None
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "line": first.line if first else None,
            "source": first.source if first else None,
            "evidence": first.text if first else None,
            "evidence_lines": [e.to_json() for e in self.evidence],
            "meaning": self.meaning,
            "details": {k: v for k, v in self.details.items() if not k.startswith("_")},
            "actions": self.actions,
            "role": self.role,
            "is_root_cause": self.is_root_cause,
        }


@dataclass
class ChecklistItem:
    """One question of the stale-max_model_len checklist, answered from the log."""

    question: str
    answer: str  # "yes" | "no" | "not in log"
    evidence: Evidence | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.answer,
            "line": self.evidence.line if self.evidence else None,
            "source": self.evidence.source if self.evidence else None,
            "evidence": self.evidence.text if self.evidence else None,
            "note": self.note,
        }


@dataclass
class StartSummary:
    """One start (launch of vLLM) in the input: where it is and how it ended."""

    index: int
    first: Evidence | None
    last: Evidence | None
    verdict: str
    phase: str | None
    root_cause: str | None
    vllm_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "first_line": self.first.to_json() if self.first else None,
            "last_line": self.last.to_json() if self.last else None,
            "verdict": self.verdict,
            "phase": self.phase,
            "root_cause": self.root_cause,
            "vllm_version": self.vllm_version,
        }


@dataclass
class Diagnosis:
    """What a log says about its last start: verdict ("failed" | "healthy" | "inconclusive"), the phase
    it failed in ("startup" | "serving"), root cause, findings; `starts` lists every start."""

    verdict: str
    findings: list[Finding]
    root_cause: Finding | None
    timeline: StartupTimeline
    checklist: list[ChecklistItem]
    next_command: str | None
    sources: list[str]
    lines_examined: int = 0
    phase: str | None = None
    starts: list[StartSummary] = field(default_factory=list)
    lines_read: int = 0
    lines_selected: int = 0
    phase_basis: PhaseBasis | None = None

    @property
    def summary(self) -> str:
        """One line: the verdict, and the root cause with its line when the startup failed."""
        return _summary(self)

    @property
    def exit_code(self) -> ExitCode:
        if self.verdict == "failed":
            return ExitCode.FAILED_KNOWN_CAUSE if self.root_cause_known else ExitCode.FAILED_UNKNOWN_CAUSE
        return VERDICT_EXIT[self.verdict]

    @property
    def root_cause_known(self) -> bool:
        return self.root_cause is not None and self.root_cause.id != "unrecognized_error"

    def to_json(self) -> dict[str, Any]:
        """The `--json` document, less `schema_version` (which `render.emit_json` adds)."""
        af = self.timeline.autofit
        return {
            "verdict": self.verdict,
            "phase": self.phase,
            "phase_basis": self.phase_basis.to_json() if self.phase_basis else None,
            "exit_code": int(self.exit_code),
            "summary": self.summary,
            "root_cause": self.root_cause.id if self.root_cause else None,
            "findings": [f.to_json() for f in self.findings],
            "autofit": af.to_json() if af else None,
            "timeline": self.timeline.to_json(),
            "checklist": [c.to_json() for c in self.checklist],
            "next_command": self.next_command,
            "sources": self.sources,
            "lines_examined": self.lines_examined,
            "lines_read": self.lines_read,
            "lines_selected": self.lines_selected,
            "starts": [st.to_json() for st in self.starts],
        }


# ---------------------------------------------------------------------------------------------
# The single pass: lines -> starts -> per start, signature hits and error records


@dataclass
class _Hit:
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
_PY_LINE_RE = re.compile(r"^(?:Traceback \(most recent call last\)|File \"[^\"]+\", line [0-9]+)")
_ERROR_LEVELS = (None, "ERROR", "CRITICAL")
# The server answered a request after an error (uvicorn's access line with a status below 500, vLLM's throughput
# line; see timeline.py "answered"): that error did not take it down.
_ALIVE_RE = re.compile(r'- "[A-Z]+ \S* HTTP/[0-9.]+" [1-4][0-9]{2}|Engine [0-9]+: Avg prompt throughput: ')
# The stale-max_model_len fix as dsv4ctl's plugin reports it in every process (dsv4ctl/fixes summary_line).
_STALE_FIX_RE = re.compile(r"dsv4ctl fixes:.*\bstale-max-model-len applied")


# Which signatures can match a line, in one pass over it (most selected lines: none).
_INDEX = SignatureIndex(CATALOGUE)

# While a start serves quietly, a raw line is analysed only when it can matter (see `_Pass.feed_raw`):
# - a start or shutdown marker, or a sign that the server is going down (the wording of fatal catalogue
#   signatures, wrappers that say the engine died, errors that are not Python's);
_SERVING_ALERT = (
    r"server version", r"non-default args", r"Initializing a V1 LLM engine", r"█",
    r"shutdown", r"Shutting down", r"Finished server process", r"KeyboardInterrupt",
    # (phrases, not the process tags: "(EngineCore pid=…)" is on every engine line)
    r"EngineCore failed", r"EngineCore encountered", r"Engine core initialization", r"EngineDead", r"WorkerProc",
    r"Worker proc", r"died unexpectedly", r"fatal error", r"output_handler", r"RPC call", r"has died", r"were killed",
    r"killed due to", r"NODE_OUT_OF_MEMORY", r"died or was killed",
    r"CUDA error", r"Cuda error", r"illegal memory", r"cudaErrorIllegalAddress", r"CUDBG", r"coredump", r"CUDA Exception",
    r"NCCL", r"Watchdog", r"Check failed", r"paged_mqa_logits_metadata",
    r"terminate called", r"Killed", r"Segmentation fault", r"Fatal Python", r"Aborted", r"Bus error", r"Errno 98",
    r"out of memory", r"OutOfMemory",
)
# - the catalogue's request-level errors (a prompt too long, no chat template): warnings, analysed alone.
_REQUEST_SIGNATURES = tuple(sig for sig in CATALOGUE if sig.role == "request")
# A request line's kind names its signature: LineSorter.REQUEST + its index here.
_SERVING_SORTER = LineSorter(_SERVING_ALERT, [sig.patterns for sig in _REQUEST_SIGNATURES])


def _request_signature(kind: int) -> Signature:
    """The request-level signature of a line the sorter gave `kind` (its patterns have no anchors, so they
    match the raw line as they match its message)."""
    return _REQUEST_SIGNATURES[kind - LineSorter.REQUEST]
HELD_LINES = 256  # held lines analysed when trouble starts: a (long) traceback printed just before the sign


class _Analyzer:
    """Everything one start of vLLM showed: the timeline, signature hits and error records."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.tracker = StartupTracker()
        self.assembler = ErrorAssembler()
        self.hits: list[_Hit] = []
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

    @property
    def quiet_serving(self) -> bool:
        """Serving, not shutting down, no sign of trouble: most lines can change nothing now."""
        return (self.ready_seq is not None and self.shutdown_seq is None and not self.alert
                and self.tracker.timeline.serving)

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
        for ev in self.tracker.feed(line):
            if ev.phase not in ("failed", "shutdown"):
                self.progress_phase = ev.phase
                # The process went on starting up: what it printed before was not fatal.
                for rec in self._unsettled.pop((line.source, line.process), ()):
                    rec.survived = True
            if ev.phase == "ready" and self.ready_seq is None:
                self.ready_seq = seq
                self.ready_source = line.source
            if ev.phase == "shutdown" and self.shutdown_seq is None:
                self.shutdown_seq = seq
        if ('HTTP/' in msg or "Avg prompt throughput" in msg) and _ALIVE_RE.search(msg):
            self.alive, self.alive_seq = line, seq
        if "paged_mqa_logits_metadata" in msg or "IndexerMetadataBuilder" in msg:
            if len(self.traced_deepgemm) < 2 * MAX_EVIDENCE:
                self.traced_deepgemm.append((seq, line))
        if "dsv4ctl fixes:" in msg and _STALE_FIX_RE.search(msg):
            self.stale_fix_active = True
        for rec in self.assembler.feed(line, seq, order):
            self._add_record(rec)
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
            if m and self._count_hit(sig.id, seq):
                groups = {k: v for k, v in m.groupdict().items() if v is not None}
                self.hits.append(_Hit(sig, line, seq, order, phase_before, capture_mode, groups))
                self.evidence_seen = True

    def _add_record(self, rec: ErrorRecord) -> None:
        if rec.line.level not in _ERROR_LEVELS:
            return  # a traceback logged at INFO/WARNING level: vLLM handled it
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


class _Pass:
    """Routes every line to the analyzer of its start.

    With one input, a start that a new one followed is concluded at once and only its summary is kept
    (lines never go back to it), so memory stays bounded on a crash loop of any length; with several
    inputs a further file's lines may belong to an earlier start, so every start stays open."""

    def __init__(self) -> None:
        self.splitter = StartSplitter()
        self.analyzers: dict[int, _Analyzer] = {0: _Analyzer(0)}
        self.closed: list[StartSummary] = []
        self.sources: set[str] = set()
        self.seq = 0
        self.lines_read = 0
        self.log_lines = 0
        self._held: deque[tuple[str, str, int]] = deque(maxlen=HELD_LINES)
        self.evidence_seen = False
        self.selected = 0  # lines the prefilter selected (analysed or held)

    def feed_batch(
        self, base: int, batch: prefilter.Batch, source: str,
        reread: Callable[[int, prefilter.Gap], Iterable[tuple[int, prefilter.Batch]]] | None = None,
    ) -> None:
        """The lines of a scanned batch (line numbers plus `base`), tagged by `_SERVING_SORTER`: while the
        current start serves quietly, a run of lines of kind SKIP is held as a whole (its last HELD_LINES),
        without a step per line, and a `Gap` a scanner left is only counted; otherwise every line goes through
        `feed_raw` with its kind, a gap's lines read again from the file (`reread`)."""
        lines, kinds, marks, gaps = batch
        if kinds is None:
            for lineno, raw in lines:
                self.feed_raw(raw, source, base + lineno)
            return
        at = {gap.pos: gap for gap in gaps or ()}
        i = 0
        for j in [*marks, len(lines)]:
            if i in at:
                gap = at[i]
                a = self.analyzers.get(self.splitter.current)
                if self._quiet(source) and all(a.capped(_request_signature(k).id) for k, _ in gap.kinds):
                    # Lines that can change nothing now: counted (the request errors among them by signature).
                    self.selected += gap.count
                    for k, n in gap.kinds:
                        a.count_beyond_cap(_request_signature(k).id, n)
                    if gap.kinds:
                        self._held.clear()
                else:
                    if reread is None:
                        raise ValueError("a batch with gaps needs the source to read them again")
                    for base2, again in reread(base, gap):
                        self.feed_batch(base2, again, source)
            if j > i:
                if self._quiet(source):
                    self.selected += j - i
                    self._held.extend((raw, source, base + lineno) for lineno, raw in lines[max(i, j - HELD_LINES):j])
                else:
                    for lineno, raw in lines[i:j]:
                        self.feed_raw(raw, source, base + lineno, kind=LineSorter.SKIP)
            if j < len(lines):
                lineno, raw = lines[j]
                self.feed_raw(raw, source, base + lineno, kind=kinds[j])
            i = j + 1

    def _quiet(self, source: str) -> bool:
        a = self.analyzers.get(self.splitter.current)
        return a is not None and a.quiet_serving and source == a.ready_source

    def feed_raw(
        self, raw: str, source: str, lineno: int, parsed: LogLine | None = None, kind: int | None = None,
        selected: bool = True,
    ) -> None:
        """A selected line as read. While the current start is serving quietly, lines that can change
        nothing (request-time tracebacks, per-request ERROR lines) are held instead of parsed: only a
        start or shutdown marker, a request-level error of the catalogue, or a sign that the server is
        going down is analysed. At such a sign the last held lines are analysed first (a worker's
        traceback printed just before), and the start is analysed in full from then on. `selected`: whether
        the prefilter selects the line (an input read in full feeds every line)."""
        self.selected += selected
        a = self.analyzers.get(self.splitter.current)
        # Only in the file that showed the start ready: another file of the same launch (the engine's own
        # log after the API server's) still has its startup lines to tell.
        if a is not None and a.quiet_serving and source == a.ready_source:
            if kind is None:
                kind = _SERVING_SORTER.sort(raw)
            if kind == LineSorter.ALERT:
                a.alert = True
                held, self._held = self._held, deque(maxlen=HELD_LINES)
                for item in held:
                    self.feed(parse_line(*item))
            elif kind == LineSorter.SKIP:
                self._held.append((raw, source, lineno))
                return
            elif a.count_beyond_cap(_request_signature(kind).id):
                # One more request answered with an error the start already holds HIT_CAP examples of:
                # counted, not parsed (it can change no verdict, and its first lines are the evidence).
                self._held.clear()
                return
        # Held lines are those since the last analysed one, so a replay never goes back in time.
        self._held.clear()
        self.feed(parsed if parsed is not None else parse_line(raw, source, lineno))

    def feed(self, line: LogLine) -> None:
        self.seq += 1
        self.sources.add(line.source)
        current = self.analyzers[self.splitter.current]
        index, opened = self.splitter.route(line, current.settled)
        if opened:
            if len(self.sources) == 1:
                self._close(current)
            self.analyzers[index] = _Analyzer(index)
        self.analyzers[index].feed(line, self.seq)

    def _close(self, a: _Analyzer) -> None:
        del self.analyzers[a.index]
        a.finish()
        self.log_lines += a.log_lines
        self.evidence_seen = self.evidence_seen or a.evidence_seen
        if a.first is not None:
            a.light = True
            self.closed.append(_summary_of(a, _conclude(a, sorted(self.sources))))

    def conclude(self, sources: list[str]) -> "Diagnosis":
        open_starts = sorted(self.analyzers.values(), key=lambda a: a.index)
        for a in open_starts:
            a.finish()
        lines_read = self.lines_read
        if not self.log_lines and not any(a.log_lines or a.evidence_seen for a in open_starts) and not self.evidence_seen:
            foreign = _not_a_vllm_log(sources, lines_read, self.seq)
            foreign.lines_selected = self.selected
            return foreign
        starts = [a for a in open_starts if a.first is not None] or open_starts[:1]
        for a in starts[:-1]:
            a.light = True
        results = [_conclude(a, sources) for a in starts]
        last = results[-1]
        summaries = self.closed + [_summary_of(a, d) for a, d in zip(starts, results)]
        last.starts = [replace(st, index=i) for i, st in enumerate(summaries)]
        last.lines_examined = self.seq
        last.lines_selected = self.selected
        last.lines_read = lines_read
        return last


def _summary_of(a: _Analyzer, d: "Diagnosis") -> StartSummary:
    return StartSummary(
        index=a.index,
        first=_ev(a.first) if a.first else None,
        last=_ev(a.last) if a.last else None,
        verdict=d.verdict,
        phase=d.phase,
        root_cause=d.root_cause.id if d.root_cause else None,
        vllm_version=d.timeline.vllm_version,
    )


def diagnose(
    sources: Iterable[Source] | Source,
    *,
    engine: str = "auto",
    workers: int | None = None,
    parallel_min_bytes: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Diagnosis:
    """Diagnose one or more logs (paths, "-" for stdin, .gz, binary streams), reading each once.

    `progress`, when given, is called with the bytes of all the sources read so far (a .gz: compressed
    bytes), at most every few MiB.

    A regular, uncompressed file of at least `parallel_min_bytes` is scanned by `workers` processes
    (default: the usable CPUs, at most 4; `dsv4ctl.logs.parallel`); the result is the same.
    `parallel_min_bytes` defaults to `parallel.PARALLEL_MIN_BYTES` (64 MiB).
    """
    if parallel_min_bytes is None:
        parallel_min_bytes = parallel.PARALLEL_MIN_BYTES
    items = source_list(sources)
    names = [source_name(s) for s in items]
    run = _Pass()
    n_workers = parallel.default_workers() if workers is None else max(1, workers)
    bytes_read = prefilter.SourceOffsets(progress)
    for source, name in zip(items, names):
        report = bytes_read.next_source()
        if n_workers > 1 and isinstance(source, (str, Path)) and parallel.parallel_size(source, parallel_min_bytes):
            count: list[int] = []
            for base, batch in parallel.scan_file_batches(
                source, engine=engine, workers=n_workers, progress=report, line_count=count, tagger=_SERVING_SORTER,
                hold=HELD_LINES,
            ):
                run.feed_batch(base, batch, name, reread=parallel.rereader(source, engine, _SERVING_SORTER))
            run.lines_read += count[0] if count else 0
            continue
        stream = open_source(source)
        count: list[int] = []
        try:
            head = _read_up_to(stream, FULL_READ_BYTES + 1)
            if len(head) <= FULL_READ_BYTES:
                # A paste, or a log this short: every line is read (the prefilter only says which it selects).
                for lineno, raw in prefilter.split_lines(head):
                    run.feed_raw(raw, name, lineno, selected=prefilter.line_matches(raw))
                    count = [lineno]
                if report is not None:
                    report(len(head))
            else:
                for batch in prefilter.scan_batches(
                    prefilter.Rejoined(head, stream), engine=engine, line_count=count, progress=report,
                    tagger=_SERVING_SORTER,
                ):
                    run.feed_batch(0, batch, name)
        finally:
            close_source(source, stream)
        run.lines_read += count[0] if count else 0
    return run.conclude(names)


# An input this small (a paste, a short log) is read line by line in full: its lines without a prefilter
# keyword count too (a server's access lines, which show it answered requests around an error).
FULL_READ_BYTES = 1 << 20


def _read_up_to(stream, n: int) -> bytes:
    """Up to `n` bytes of a stream (fewer only at its end); a truncated .gz gives what it had."""
    parts: list[bytes] = []
    size = 0
    reader = prefilter.reader_of(stream)
    while size < n:
        block = reader.read(n - size)
        if not block:
            break
        parts.append(block)
        size += len(block)
    return b"".join(parts)


def diagnose_lines(lines: Iterable[LogLine]) -> Diagnosis:
    """Diagnose lines a caller already parsed (e.g. `iter_log_lines`); same result as `diagnose`: a source of
    at most `FULL_READ_BYTES` is read in full, a longer one through the prefilter."""
    sources: list[str] = []
    run = _Pass()
    read = 0
    held: list[LogLine] = []  # the lines of the current source while it may still be small
    size = 0
    full = True

    def flush(small: bool) -> None:
        for ln in held:
            if small:
                run.feed_raw(ln.raw, ln.source, ln.lineno, ln, selected=prefilter.line_matches(ln.raw))
            elif prefilter.line_matches(ln.raw):
                run.feed_raw(ln.raw, ln.source, ln.lineno, ln)
        held.clear()

    for line in lines:
        read += 1
        if line.source not in sources:
            flush(full)
            sources.append(line.source)
            size, full = 0, True
        if full:
            held.append(line)
            size += len(line.raw.encode("utf-8", "replace")) + 1
            if size > FULL_READ_BYTES:
                full = False
                flush(False)
        elif prefilter.line_matches(line.raw):
            run.feed_raw(line.raw, line.source, line.lineno, line)
    flush(full)
    run.lines_read = read
    return run.conclude(sources)


# ---------------------------------------------------------------------------------------------
# Conclusions


def _line_of(ref: LineRef) -> LogLine:
    return LogLine(ref.source, ref.line, None, None, None, None, ref.text, ref.text)


def _dedupe_frames(hits: list[_Hit]) -> list[_Hit]:
    """Keep the first process's lines when every worker printed the same traceback."""
    if not hits:
        return hits
    first_proc = hits[0].line.process
    same = [h for h in hits if h.line.process == first_proc]
    return same or hits


def _is_worker(process: str | None) -> bool:
    return bool(process) and "worker" in process.lower()


def _ev(line: LogLine) -> Evidence:
    return Evidence(line.source, line.lineno, line.message, line.process, printable(line.raw) if line.raw else None)


def _fill(template: str, details: dict[str, Any]) -> str | None:
    try:
        return template.format(**details)
    except (KeyError, ValueError, IndexError, TypeError):
        return None


def _make(sig: Signature, hits: list[_Hit], details: dict[str, Any], extra: list[LogLine] | None = None) -> Finding:
    if hits and hits[0].groups:
        # Named groups of the signature's patterns: the numbers the message itself carries.
        details = {**hits[0].groups, **details}
    # The signature's own lines first (in log order), then the supporting lines.
    seen: set[tuple[str, int]] = set()
    evidence: list[Evidence] = []
    # With several files, lines of the same second sort worker-first: a worker's own error comes
    # before the engine's echo of it.
    ordered = sorted(hits, key=lambda h: (h.order[0], bool(h.order[0]) and not _is_worker(h.line.process), h.order[1]))
    primary = [h.line for h in ordered]
    for line in primary + sorted(extra or [], key=lambda ln: (ln.source, ln.lineno)):
        k = (line.source, line.lineno)
        if k in seen:
            continue
        seen.add(k)
        evidence.append(_ev(line))
    evidence = evidence[:MAX_EVIDENCE]
    meaning = _fill(sig.meaning, details) or sig.meaning.split("{")[0].strip()
    actions = [a for a in (_fill(t, details) for t in sig.actions) if a]
    return Finding(
        id=sig.id,
        severity=sig.severity,
        title=sig.title,
        meaning=meaning,
        evidence=evidence,
        details=details,
        actions=actions,
        role=sig.role,
        tier=sig.tier,
        order=min(h.order for h in hits) if hits else (),
    )


_PHASE_TO_OOM = {
    None: "load",
    "starting": "load",
    "loading_weights": "load",
    "weights_loaded": "profile",
    "profiling": "profile",
    "kv_cache": "profile",
    "capturing": "capture",
    "ready": "serving",
    "failed": "profile",
    "shutdown": "serving",
}
_OOM_PHASE_TEXT = {
    "load": "loading the weights",
    "profile": "profiling memory / allocating the KV cache",
    "capture": "capturing CUDA graphs",
    "serving": "serving requests",
}
_OOM_PHASE_ACTION = {
    "load": "The weights do not fit: free GPU memory held by other processes, add GPUs "
    "(--tensor-parallel-size, or --data-parallel-size with --enable-expert-parallel), or use a quantized checkpoint",
    "profile": "Lower the activation peak (--max-num-batched-tokens, --max-num-seqs) or leave more headroom with a "
    "lower --gpu-memory-utilization",
    "capture": "CUDA graphs did not fit: lower --gpu-memory-utilization so graphs have room, lower --max-num-seqs, "
    "or run with --enforce-eager",
    "serving": "Lower --max-num-seqs / --max-num-batched-tokens, or lower --gpu-memory-utilization",
}


def _is_dsv4(tl: StartupTimeline) -> bool:
    text = " ".join(x for x in (tl.architecture, tl.model) if x).lower()
    return "deepseekv4" in text or "deepseek-v4" in text or "deepseek_v4" in text or tl.uses_fp8_ds_mla


# The kernel of the DeepGEMM metadata fault. In the DeepGEMM vLLM vendors (vllm==0.27.1 and vllm==0.33.0
# vllm/third_party/deep_gemm/include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh:11) it is the only function
# of namespace deep_gemm::sched whose name starts "sm90_paged_mqa_lo" (the logits kernel itself is
# sm90_fp8_paged_mqa_logits, outside it), so a name a log cut short ("deep_gemm::sched::sm90_paged_mqa_lo…") is it.
_METADATA_KERNEL = "deep_gemm::sched::sm90_paged_mqa_logits_metadata"
_METADATA_KERNEL_PREFIX = "deep_gemm::sched::sm90_paged_mqa_lo"


def _is_metadata_kernel(kernel: str) -> bool:
    if _METADATA_KERNEL in kernel:
        return True
    cut = kernel.rstrip("…")
    return kernel.endswith("…") and cut.startswith(_METADATA_KERNEL_PREFIX) and _METADATA_KERNEL.startswith(cut)


def _full_capture(tl: StartupTimeline, hit: _Hit) -> bool:
    if hit.phase != "capturing":
        return False
    if hit.capture_mode:
        return "FULL" in hit.capture_mode.upper()
    return bool(tl.cudagraph_mode and "FULL" in tl.cudagraph_mode)


def _add_safe(d: dict[str, Any], a: _Analyzer, tl: StartupTimeline, fits: int) -> None:
    if a.light:
        return
    safe = safe_length_from_log(tl, fits)
    if safe.length > 0:
        d["safe_len"] = safe.length
        d["safe_length"] = safe.to_json()
    if safe.knobs:
        # Past the cliff: the setting that recovers what the margin costs, with the length it gives.
        k = safe.knobs[0]
        d["knob_action"] = (
            f"Keep more context with the same memory ({format_tokens(k.length)} becomes safe, {k.cost}): {k.flags}"
        )


def _command_parts(tl: StartupTimeline, log: str) -> dict[str, Any]:
    """What suggested commands are built from: the model and log (only when known: a command with a
    placeholder would not run) and the launch's own flags (`_…` keys stay out of the JSON details)."""
    parts: dict[str, Any] = {
        "_serve_flags": deployment.serve_flags(tl),
        "_serve_all": deployment.serve_flags(tl, drop=()),
        "_fit_flags": deployment.fit_length_flags(tl),
    }
    if tl.model:
        parts["model"] = deployment.model_arg(tl)
    if log != "<log>" and tl.available_kv_gib is not None:
        parts["log"] = shlex.quote(log)  # for `fit-length --from-log`, which needs the measured KV memory
    return parts


def _derive(sig_id: str, hits: list[_Hit], a: _Analyzer, tl: StartupTimeline, log: str) -> dict[str, Any]:
    """Numbers a finding shows, derived from the log itself."""
    d: dict[str, Any] = {"occurrences": a.occurrences(sig_id), **_command_parts(tl, log)}
    msgs = [h.line.message for h in hits]
    af = tl.autofit
    if sig_id in ("autofit_reduced", "stale_max_model_len") and af is not None:
        d.update(
            from_len=af.from_len,
            to_len=af.to_len,
            memory=af.memory_text or "memory not stated",
            memory_gib=af.memory_gib,
        )
        _add_safe(d, a, tl, af.to_len)
    if sig_id == "stale_max_model_len":
        d.update(affected=AFFECTED_STALE, fixed=FIXED_STALE, vllm_version=tl.vllm_version)
        status = stale_bug_status(tl.vllm_version)
        d["version_status"] = status
        if af is not None:
            cap = c128a_capacity(af.to_len)
            req = af.from_len // C128A_COMPRESS_RATIO
            d.update(capacity=cap, requested=req)
            # Operands inside the formula without thousands separators (a comma there reads like another
            # argument); the results, standalone numbers, with them.
            d["arithmetic"] = (
                f"capacity align_up(cdiv({af.to_len}, {C128A_COMPRESS_RATIO}), {C128A_TOPK_ALIGNMENT}) "
                f"= {format_tokens(cap)} {'<' if cap < req else '>='} requested {af.from_len} // "
                f"{C128A_COMPRESS_RATIO} = {format_tokens(req)}"
            )
        elif tl.max_concurrency_tokens:
            _add_safe(d, a, tl, tl.max_concurrency_tokens)
    if sig_id == "kv_cache_insufficient":
        text = " ".join(msgs)
        if m := re.search(r"max seq len \(([0-9]+)\)", text):
            d["max_model_len"] = int(m.group(1))
        if m := re.search(r"\(([0-9]+(?:\.[0-9]+)?) GiB KV cache is needed", text):
            d["needed_gib"] = float(m.group(1))
        if m := re.search(r"available KV cache memory \(([0-9]+(?:\.[0-9]+)?) GiB\)", text):
            d["available_gib"] = float(m.group(1))
        if m := re.search(r"estimated maximum model length is ([0-9]+)", text):
            d["estimated_max_model_len"] = int(m.group(1))
        if m := re.search(r"stored in KV cache \(([0-9]+)\)", text):
            d["kv_cache_tokens"] = int(m.group(1))
        fits = d.get("estimated_max_model_len") or d.get("kv_cache_tokens")
        if fits:
            _add_safe(d, a, tl, fits)
        if "Cannot auto-fit" in text:
            d["reason"] = "not enough memory for even a single token"
        elif "No available memory" in text:
            d["reason"] = "no memory left for the KV cache at all"
        clause = ""
        if "needed_gib" in d and "available_gib" in d:
            clause = f" ({d['needed_gib']} GiB needed, {d['available_gib']} GiB available)"
        elif "reason" in d:
            clause = f" ({d['reason']})"
        d["needed_clause"] = clause
    if sig_id == "cuda_oom":
        first = hits[0]
        phase = _PHASE_TO_OOM.get(first.phase, "profile")
        if "Failed to load model" in first.line.message:
            phase = "load"
        elif "warming up" in first.line.message:
            phase = "profile"
        if first.after_ready:
            phase = "serving"
        d.update(phase=phase, phase_text=_OOM_PHASE_TEXT[phase], phase_action=_OOM_PHASE_ACTION[phase])
        if m := re.search(r"Tried to allocate ([0-9.]+ [GM]iB)", " ".join(msgs)):
            d["tried_to_allocate"] = m.group(1)
    if sig_id == "free_memory_below_utilization":
        text = msgs[0]
        m = re.search(r"\(([0-9]+(?:\.[0-9]+)?)/([0-9]+(?:\.[0-9]+)?) GiB\) on startup is less than desired GPU memory utilization \(([0-9]+(?:\.[0-9]+)?), ([0-9]+(?:\.[0-9]+)?) GiB\)", text)
        if m:
            free, total, util, wanted = (float(x) for x in m.groups())
            d.update(free_gib=free, total_gib=total, requested_utilization=util, requested_gib=wanted)
            d["free_text"] = f"{free} GiB free of {total} GiB, {wanted} GiB requested at {util}"
            if total > 0:
                d["suggested_util"] = max(0.01, int(free / total * 100) / 100 - 0.01)
                d["suggested_util"] = round(d["suggested_util"], 2)
        else:
            d["free_text"] = "see the evidence"
    if sig_id == "worker_died":
        codes = [m.group(1) for t in msgs if (m := re.search(r"exit code: (-?[0-9]+|None)", t))]
        d["exit_codes"] = [None if c == "None" else int(c) for c in codes]
        if not codes:
            d["exit_text"] = "exit code not stated"
        elif codes[0] == "None":
            d["exit_text"] = "no exit code yet: it was still stopping"
        else:
            d["exit_text"] = f"exit code {codes[0]}"
    return d


# When an excerpt has no ready line, the frames of its errors say whether vLLM was starting or serving
# (vllm==0.32.0): the engine's loop (v1/engine/core.py:1547 run_busy_loop, :1603 _process_engine_step, :657 step,
# :698 step_with_batch_queue, :1573 _process_input_queue; v1/worker/gpu_worker.py:1302 execute_model, :1295
# sample_tokens, :1431 execute_dummy_batch) runs only once the engine is up; its start (v1/worker/gpu_worker.py:436
# init_device, :587 load_model, :634 determine_available_memory, :853 initialize_from_config, :908
# compile_or_warm_up_model; v1/worker/gpu_model_runner.py:6133 profile_run, :5508 _dummy_run, :6482 capture_model;
# v1/engine/core.py:261 _initialize_kv_caches) comes before. A start function wins: legacy V0 profiles through
# execute_model.
# The API server building its app once the engine is up (vllm==0.33.0 entrypoints/launchers/api_server/entry.py:
# 135-139, build_app, init_app_state before "Starting vLLM server on"; 0.27.1 entrypoints/openai/api_server.py:189,
# 355; openai/models/serving.py:124 init_static_loras): an error there ends a start whose engine was ready.
APP_BUILD_FUNCTIONS = frozenset({"build_app", "init_app_state", "init_static_loras"})
# What the API server runs after an engine's "init engine … took" line and before it serves: waiting for every
# engine (vllm==0.33.0 v1/engine/utils.py:1206 launch_core_engines, :1403 wait_for_engine_startup; 0.27.1 :1054,
# :1206) and building its app.
SERVER_START_FUNCTIONS = APP_BUILD_FUNCTIONS | {"launch_core_engines", "wait_for_engine_startup"}
SERVING_FUNCTIONS = frozenset({
    "run_busy_loop", "_process_engine_step", "step", "step_with_batch_queue", "_process_input_queue",
    "execute_model", "sample_tokens", "execute_dummy_batch",
})
STARTUP_FUNCTIONS = frozenset({
    "init_device", "load_model", "determine_available_memory", "initialize_from_config", "compile_or_warm_up_model",
    "profile_run", "_dummy_run", "_dummy_sampler_run", "capture_model", "_initialize_kv_caches",
    "determine_num_available_blocks", "create_engine_config", "from_engine_args", *APP_BUILD_FUNCTIONS,
})
# Compile-time code of torch.compile (not the compiled graph running): an error raised there is a compile error.
_COMPILE_FRAME_RE = re.compile(r"/torch/(?:_dynamo/|_inductor/(?!runtime/|output_code\.py))")


@dataclass(frozen=True)
class PhaseBasis:
    """What the phase of a failure rests on: the ready line, the words of an error, or nothing (the default)."""

    basis: str  # "ready_line" | "words" | "default"
    line: Evidence | None = None
    word: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"basis": self.basis, "line": self.line.to_json() if self.line else None, "word": self.word}


# The engine says itself which it was doing when it died (vllm==0.33.0 v1/engine/core.py:1584/1586, 0.27.1
# :1349/1351: "EngineCore failed to start." while it had no engine yet, "EngineCore encountered a fatal error."
# once it ran its loop; v1/engine/async_llm.py:943 "AsyncLLM output_handler failed.", the API server's
# output loop, which only runs once serving); the workers' "WorkerProc failed to start." /
# "WorkerProc initialization failed" (v1/executor/multiproc_executor.py) and the API server's "Engine core
# initialization failed" (v1/engine/utils.py) say it was starting.
_PHASE_WORDS: tuple[tuple[str, str], ...] = (
    ("EngineCore encountered a fatal error", "serving"),
    ("output_handler failed", "serving"),
    ("EngineCore failed to start", "startup"),
    ("WorkerProc failed to start", "startup"),
    ("WorkerProc initialization failed", "startup"),
    ("Engine core initialization failed", "startup"),
)


def _phase_from_words(
    records: list[ErrorRecord], origin: ErrorRecord | None, hits: list[_Hit] = ()
) -> tuple[str | None, PhaseBasis]:
    """"serving" or "startup" as the engine's own wrappers say it (the first that does), else the frames of the
    originating error (else of any error), with the line."""
    for h in sorted(hits, key=lambda h: h.order):
        for words, phase in _PHASE_WORDS:
            if words in h.line.message:
                return phase, PhaseBasis("words", _ev(h.line), words)
    for pool in ([origin] if origin is not None else [], records):
        for rec in pool:
            startup = rec.functions & STARTUP_FUNCTIONS
            serving = rec.functions & SERVING_FUNCTIONS
            if startup or serving:
                phase = "startup" if startup else "serving"
                word = sorted(startup or serving)[0]
                return phase, PhaseBasis("words", _ev(rec.line), f"in {word}")
    return None, PhaseBasis("default")


def _window(a: _Analyzer, seq: int) -> str:
    if a.after_shutdown(seq):
        return "noise"
    if a.after_ready(seq):
        return "serving"
    return "startup"


def _conclude(a: _Analyzer, sources: list[str]) -> Diagnosis:
    tl = a.tracker.timeline
    if len(sources) <= 1:
        # One source: its own line order is the order; timestamps only matter across files.
        for item in (*a.hits, *a.records):
            item.order = ("", item.seq)
    log = sources[0] if len(sources) == 1 and sources[0] not in ("-", "<stream>") else "<log>"
    hits: dict[str, dict[str, list[_Hit]]] = {"startup": {}, "serving": {}}
    noise: list[_Hit] = []
    for h in a.hits:
        sid = h.sig.id
        if sid == "autofit_reduced":
            hits["startup"].setdefault(sid, []).append(h)
            continue
        if sid == "shutdown_noise":
            if h.after_shutdown or "leaked" in h.line.message:
                noise.append(h)
            continue
        w = _window(a, h.seq)
        if w == "noise":
            noise.append(h)
        else:
            hits[w].setdefault(sid, []).append(h)
    records: dict[str, list[ErrorRecord]] = {"startup": [], "serving": [], "noise": []}
    survived: list[ErrorRecord] = []  # errors the server answered requests after: they did not take it down
    for r in a.records:
        if a.alive_seq is not None and r.seq < a.alive_seq:
            survived.append(r)
            continue
        records[_window(a, r.seq)].append(r)
    # An interrupted start (Ctrl-C, SIGTERM: KeyboardInterrupt) did not fail.
    live_startup = [r for r in records["startup"] if not r.survived and not r.type.endswith("KeyboardInterrupt")]
    # A request's error (a prompt too long, no chat template) is the server answering a request: it was up.
    request_hits = [h for hs in hits["startup"].values() for h in hs if h.sig.role == "request"]
    answered = [r for r in live_startup if any(r.spans(h.line) for h in request_hits)]
    live_startup = [r for r in live_startup if not any(r is x for x in answered)]
    # An ERROR line in words of its own names a cause once a failure is certain; it does not make one.
    failing_startup = [r for r in live_startup if not r.weak]
    dsv4 = _is_dsv4(tl)

    # Which window failed: the startup (an error ended it before ready), or the serving (after ready,
    # an error that takes the server down).
    phase: str | None = None
    basis = PhaseBasis("default")
    if not tl.ready:
        startup_sigs = [sid for sid in hits["startup"] if BY_ID[sid].role in ("cause", "symptom")
                        and BY_ID[sid].severity == "critical" and not BY_ID[sid].context]
        if startup_sigs or failing_startup:
            phase = "startup"
            # No ready line in the excerpt: the words of the errors say when it died.
            wrapper_hits = [h for sid in ("engine_core_failed", "shutdown_noise") for h in hits["startup"].get(sid, [])]
            worded, basis = _phase_from_words(live_startup, _originating(live_startup), wrapper_hits)
            phase = worded or phase
    elif any(_takes_down(a, h) for hs in hits["serving"].values() for h in hs) or any(
        r.fatal and not _is_request_error(r, hits["serving"]) for r in records["serving"]
    ):
        phase = "serving"
        basis = PhaseBasis("ready_line", _ref_ev(tl.ready_ref))
    if tl.ready and not tl.serving:
        # Ready rests on an engine's "init engine … took" line; the API server never said it serves. An error
        # raised where the server still starts (building its app, waiting for the other engines) ended the start.
        building = next((r for r in records["serving"] if r.functions & SERVER_START_FUNCTIONS and not r.weak), None)
        if building is not None:
            word = sorted(building.functions & SERVER_START_FUNCTIONS)[0]
            phase, basis = "startup", PhaseBasis("words", _ev(building.line), f"in {word}")

    findings: list[Finding] = []
    root: Finding | None = None
    # The window that failed: before the ready line (all of an excerpt without one, whatever its words say
    # of the phase), or after it.
    failed_window = None if phase is None else ("serving" if tl.ready else "startup")
    if failed_window == "startup":
        found, root = _window_findings(a, tl, log, hits["startup"], live_startup, dsv4, "startup")
        findings += found
    else:
        # Startup findings of a start that went on (or of one that did not end): context, never the cause.
        found, _ = _window_findings(a, tl, log, hits["startup"], [], dsv4, "startup")
        findings += found
        if tl.ready:
            for f in findings:
                if f.severity == "critical":
                    f.details["startup_completed_later"] = True
    if failed_window == "serving":
        found, root = _window_findings(a, tl, log, hits["serving"], records["serving"], dsv4, "serving")
        findings += found
    elif tl.ready:
        findings += _serving_warnings(a, tl, log, hits["serving"], records["serving"])
    if phase is None and survived:
        findings += _survived_warnings(a, survived, findings)
    if noise:
        findings.append(_make(BY_ID["shutdown_noise"], noise, {"count": len(noise)}))

    if dsv4 and tl.kv_cache_dtype == "auto" and not tl.uses_fp8_ds_mla and tl.available_kv_gib is not None:
        ref = tl.refs.get("engine_config") or tl.refs.get("available_kv")
        findings.append(
            _make(BY_ID["kv_cache_dtype_auto_bf16"], [], {"kv_cache_dtype": "auto"}, extra=[_line_of(ref)] if ref else [])
        )

    if root is not None and phase is not None and BY_ID[root.id].phase:
        phase = BY_ID[root.id].phase  # e.g. a port that could not be bound: the server never served
    # Without a ready line, an excerpt that ends on the auto-fit report, or shows the server answering a
    # request, shows no failure: healthy, with the warning.
    autofit_only = tl.autofit is not None and tl.last_phase == "kv_cache" and "engine_waiting" not in hits["startup"]
    up = tl.ready or bool(answered) or bool(request_hits) or autofit_only
    verdict = "failed" if phase else ("healthy" if up else "inconclusive")
    if root is not None:
        root.is_root_cause = True
    settings = _settings(a, tl)
    for f in findings:
        f.actions = [x for x in f.actions if applicable(x, settings)]

    order_rank = {"critical": 0, "warning": 1, "info": 2}
    findings.sort(key=lambda f: (not f.is_root_cause, order_rank.get(f.severity, 3), f.order or (0, 0)))

    next_command = None
    if root is not None:
        sig = BY_ID[root.id]
        if sig.next_command:
            next_command = _fill(sig.next_command, root.details)
        if root.id == "stale_max_model_len" and "safe_len" not in root.details:
            next_command = _fit_from_log(tl, log)
    elif verdict == "healthy" and tl.autofit is not None:
        next_command = _fit_from_log(tl, log)
    if next_command is not None and not applicable(next_command, settings):
        next_command = None

    pre_records = live_startup if not tl.ready else []
    checklist = _checklist(a, tl, findings, pre_records) if (dsv4 or tl.autofit is not None or tl.autofit_full_fit) else []
    return Diagnosis(
        verdict=verdict,
        findings=findings,
        root_cause=root,
        timeline=tl,
        checklist=checklist,
        next_command=next_command,
        sources=sources,
        phase=phase,
        phase_basis=basis if phase else None,
    )


def _fit_from_log(tl: StartupTimeline, log: str) -> str | None:
    """`dsv4ctl fit-length MODEL --from-log LOG` with the launch's flags, when the log names its model (the
    argument is required) and is a file."""
    if not tl.model or log == "<log>" or tl.available_kv_gib is None:
        return None
    return f"dsv4ctl fit-length {deployment.model_arg(tl)} --from-log {shlex.quote(log)}{deployment.fit_length_flags(tl)}"


def _window_findings(
    a: _Analyzer, tl: StartupTimeline, log: str, by_id: dict[str, list[_Hit]], records: list[ErrorRecord], dsv4: bool,
    window: str,
) -> tuple[list[Finding], Finding | None]:
    """The findings of one window (startup or serving) and, when it failed, its root cause."""
    by_id = {k: list(v) for k, v in by_id.items()}
    findings: list[Finding] = []

    # DeepGEMM metadata OOB: traced, or attributable to FULL capture on a DeepSeek-V4 model.
    ima = by_id.get("cuda_illegal_memory_access", [])
    nccl = by_id.get("nccl_error", [])
    nccl_cuda = [h for h in nccl if "unhandled cuda error" in h.line.message.lower() or "UnhandledCuda" in h.line.message]
    dg_hits = by_id.pop("deepgemm_metadata_oob", [])
    fault_hits = ima or nccl_cuda
    dumps = [r for r in records if r.kind == "coredump" and _is_metadata_kernel(str(r.details.get("kernel", "")))]
    if fault_hits or dumps:
        first_fault = min(fault_hits, key=lambda h: h.order) if fault_hits else None
        traced_lines = [ln for seq, ln in a.traced_deepgemm if _window(a, seq) == window]
        traced = bool(traced_lines) or bool(dumps)
        attributable = dsv4 and first_fault is not None and _full_capture(tl, first_fault)
        if traced or attributable:
            details = _derive("deepgemm_metadata_oob", fault_hits, a, tl, log)
            details["attribution"] = "traced" if traced else "attributable"
            details["masked_by_nccl"] = not ima
            if dumps:
                details["kernel"] = dumps[0].details["kernel"]
            details["capture"] = tl.capture.desc + f" {tl.capture.n}/{tl.capture.total}" if tl.capture else None
            details["vllm_version"] = tl.vllm_version
            v = parse_version(tl.vllm_version)
            if tl.deep_gemm_source == "vendored" and v is not None and v[:2] >= (0, 28):
                details["note"] = (
                    "This log shows vLLM used its vendored DeepGEMM, which is guarded from 0.28.0 on; "
                    "the fault may have another cause."
                )
            elif v is not None and v[:2] <= (0, 27):
                details["note"] = f"vLLM {tl.vllm_version} vendors an unguarded DeepGEMM (≤ 0.27.x)."
            sig = BY_ID["deepgemm_metadata_oob"]
            f = _make(sig, ([first_fault] if first_fault else []) + dg_hits, details, extra=traced_lines)
            if first_fault is not None:
                # The fault's own line first: the call sites place it, the fault is what happened.
                fault = _ev(first_fault.line)
                f.evidence = [fault] + [e for e in f.evidence if (e.source, e.line) != (fault.source, fault.line)]
            if dumps:
                # The core dump names the faulting kernel: that line holds the cause.
                kernel = _ev(dumps[0].details["kernel_line"])
                rest = [e for e in f.evidence if (e.source, e.line) != (kernel.source, kernel.line)]
                f.evidence = [kernel, *rest][:MAX_EVIDENCE]
            f.order = first_fault.order if first_fault else dumps[0].order
            findings.append(f)
            by_id.pop("cuda_illegal_memory_access", None)
    # NCCL errors when a CUDA fault exists anywhere are its symptom.
    if nccl and (ima or any(f.id == "deepgemm_metadata_oob" for f in findings)):
        f = _make(BY_ID["nccl_error"], nccl, {"symptom_of": "deepgemm_metadata_oob" if any(
            f.id == "deepgemm_metadata_oob" for f in findings) else "cuda_illegal_memory_access"})
        f.role = "symptom"
        findings.append(f)
        by_id.pop("nccl_error", None)

    for sid, sig_hits in by_id.items():
        sig = BY_ID[sid]
        if sid == "autofit_reduced":
            if tl.autofit is None:
                continue
            f = _make(sig, sig_hits[:1], _derive(sid, sig_hits, a, tl, log))
        elif sid == "stale_max_model_len":
            # The assertion itself and the reduction that made the length stale.
            extra = [r.line for r in records if _ends_in(r, "_build_c128a_metadata")][:1]
            if tl.autofit is not None and tl.autofit.ref is not None:
                extra.append(_line_of(tl.autofit.ref))
            f = _make(sig, _dedupe_frames(sig_hits), _derive(sid, sig_hits, a, tl, log), extra=extra)
        else:
            f = _make(sig, sig_hits, _derive(sid, sig_hits, a, tl, log))
        if sig.role == "request":
            f.severity = "warning"
        findings.append(f)

    causes = [f for f in findings if f.role == "cause" and f.severity == "critical"]
    symptoms = [f for f in findings if f.role == "symptom" and f.severity == "critical"]
    # The originating error no signature explains.
    cause_hits = [h for sid, hs in by_id.items() if BY_ID[sid].role == "cause" for h in hs]
    cause_hits += [h for h in fault_hits]
    origin = _originating(records)
    if origin is not None and not any(origin.spans(h.line) for h in cause_hits):
        quote = _quoting_wrapper(origin, records)
        if quote is None or not any(quote.spans(h.line) for h in cause_hits):
            f = _unrecognized(origin, quote)
            if f.id == "unrecognized_error" and (entry := _lookup(origin, quote)) is not None:
                f = _indexed(origin, quote, tl, entry)
            findings.append(f)
            causes.append(f)

    root: Finding | None = None
    if causes:
        root = min(causes, key=lambda f: (f.tier, f.order))
    elif symptoms:
        # Nothing explains it but a wrapper or a death: the deepest error statement the log holds (a worker
        # that died first, else the earliest).
        root = min(symptoms, key=lambda f: (f.id != "worker_died", f.order))
    return findings, root


def _ends_in(record: ErrorRecord, function: str) -> bool:
    origin = record.origin
    return bool(origin and origin.last_frame and origin.last_frame.function == function)


def _originating(records: list[ErrorRecord], *, survived: bool = False) -> ErrorRecord | None:
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
        return best
    if quoting:
        return min(quoting, key=lambda r: r.order)
    return min(live, key=lambda r: (r.weak, r.order)) if live else None


def _is_frontend(record: ErrorRecord) -> bool:
    """An error of the API server process, which at startup only reacts to the engine's."""
    process = record.process or ""
    return process.startswith(("APIServer", "ApiServer")) or bool(record.functions & {"run_server", "build_async_engine_client"})


def _quoting_wrapper(origin: ErrorRecord, records: list[ErrorRecord]) -> ErrorRecord | None:
    """A wrapper after an origin whose own exception line is cut off that quotes the exception
    (`Worker failed with error '…'`): what the log says of the exception."""
    if origin.complete:
        return None
    later = [r for r in records if r.quoted is not None and r is not origin and r.order >= origin.order]
    return min(later, key=lambda r: r.order) if later else None


# The error body vLLM's API answers with, as a client quotes it in its own exception: ErrorResponse(error=
# ErrorInfo(message, type, param, code)) (vllm==0.33.0 vllm/entrypoints/serve/engine/protocol.py:79-87;
# 0.27.1 vllm/entrypoints/openai/engine/protocol.py:63).
_ERROR_BODY_RE = re.compile(r'"error":\s*\{"message":\s*"((?:[^"\\]|\\.){10,})"')


def _lookup(record: ErrorRecord, quote: ErrorRecord | None) -> Any:
    """The index entry (dsv4ctl.catalogue.message_index) of the message that states this error, or None:
    the wrapper's quote of an exception whose own line is cut off, the exception's message, the `assert`
    statement of a bare AssertionError, what stands for a cut exception, the wording of a non-Python error.
    An entry whose source function is not the innermost frame the log shows for it is another message with
    the same words (SGLang's "Hidden size mismatch" is not vLLM's)."""
    from dsv4ctl.catalogue import message_index  # read at the first lookup: only a failure no signature knows pays it

    origin = record.origin
    candidates: list[tuple[str, str | None]] = []
    if quote is not None and quote.quoted:
        candidates.append((quote.quoted, None))
    if origin is not None and not record.is_wrapper:
        if origin.support is not None:
            candidates.append((origin.support.message, None))
        if origin.shown_by != "frame" and origin.message and origin.type not in ("error", "traceback"):
            candidates.append((f"{origin.type}: {origin.message}", None))
        elif origin.shown_by == "headline":
            candidates.append((origin.line.message, None))
    if record.kind not in ("python", "log_error"):
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


def _indexed(record: ErrorRecord, quote: ErrorRecord | None, tl: StartupTimeline, entry: Any) -> Finding:
    """The finding for an error no signature explains but the message index knows: its source, and the
    flags that feed the check with what this launch set them to (from `non-default args`)."""
    f = _unrecognized(record, quote)
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
        "cite": entry.cite,
        "cites": list(entry.cites()[:4]),
        "releases": list(releases),
        "release_span": f"{entry.package} {span}" if entry.package != "vllm" else f"vLLM {span}",
        "source_kind": entry.kind,
        "template": entry.template,
        "flags": list(entry.flags),
        "flags_text": ", ".join(flags),
    }
    if tl.vllm_version and entry.package == "vllm" and tl.vllm_version.split("+")[0] not in releases:
        details["note"] = (f"This log's vLLM is {tl.vllm_version}; the index holds the message for vLLM {span}, "
                           "so the line there may differ.")
    meaning = _fill(sig.meaning, details) or sig.meaning
    actions = [a for a in (_fill(t, details) for t in sig.actions) if a]
    if not entry.flags:
        actions = [a for a in actions if "{flags_text}" not in a and not a.startswith("Check the settings")]
    title = f"{details['exception']} from {entry.package}'s {entry.function}"
    return replace(f, id=sig.id, title=title, meaning=meaning, details=details, actions=actions, role=sig.role,
                   tier=sig.tier, severity=sig.severity)


def _unrecognized(record: ErrorRecord, quote: ErrorRecord | None = None) -> Finding:
    """The finding for an originating error no signature explains: `unrecognized_error`, or
    `compile_error` when its frames are torch.compile's own. `quote`: a wrapper that quotes the exception
    whose own line the log lacks."""
    origin = record.origin
    message = (quote.quoted if quote else None) or record.quoted or (origin.text if origin else record.text)
    exception = record.type
    if quote is not None and quote.quoted:
        exception = quote.quoted.split(":", 1)[0].strip() or exception
    details: dict[str, Any] = {"exception": exception, "message": message, "kind": record.kind}
    if origin is not None and origin.shown_by:
        details["shown_by"] = origin.shown_by
    if len(record.exceptions) > 1:
        details["chain"] = [e.text for e in record.exceptions]
    details.update({k: v for k, v in record.details.items() if isinstance(v, (str, int, float))})
    compile_frame = next((f for f in reversed(record.frames) if _COMPILE_FRAME_RE.search(f.file)), None)
    sig = BY_ID["compile_error"] if compile_frame is not None else BY_ID["unrecognized_error"]
    if compile_frame is not None:
        details["frame"] = f"{compile_frame.file}:{compile_frame.lineno} in {compile_frame.function}"
    # The line that states the error first (the wrapper's quote when the exception line is cut off), then
    # the rest: the assert statement of a bare AssertionError, the chain, the innermost frame.
    own = record.evidence_lines()
    first = [quote.line] if quote is not None else []
    f = _make(sig, [], details, extra=first + own)
    lead = first[0] if first else own[0]
    rest = [e for e in f.evidence if (e.source, e.line) != (lead.source, lead.lineno)]
    rest.sort(key=lambda e: (e.source, e.line))
    f.evidence = [_ev(lead)] + rest
    f.order = record.order
    return f


def _serving_warnings(
    a: _Analyzer, tl: StartupTimeline, log: str, by_id: dict[str, list[_Hit]], records: list[ErrorRecord]
) -> list[Finding]:
    """Errors while serving that left the server up: warnings."""
    findings: list[Finding] = []
    ready_line = tl.ready_ref.line if tl.ready_ref else None
    for sid, sig_hits in by_id.items():
        sig = BY_ID[sid]
        if sig.role == "note" or sig.context:
            continue
        base = _derive(sid, sig_hits, a, tl, log)
        if sig.role == "request":
            f = _make(sig, sig_hits, base)
            f.severity = "warning"
            findings.append(f)
            continue
        if sig.role == "symptom":
            continue
        details = {"classified_as": sid, "ready_line": ready_line, **{k: v for k, v in base.items() if k not in ("model", "log")}}
        f = _make(BY_ID["error_after_startup"], sig_hits, details)
        f.title = f"Error after startup completed: {sig.title}"
        findings.append(f)
    explained = [h for hs in by_id.values() for h in hs]
    unexplained = [r for r in records if not any(r.spans(h.line) for h in explained)]
    origin = _originating(unexplained)
    if origin is not None and not findings:
        details = {"classified_as": "unrecognized_error", "ready_line": ready_line, "exception": origin.type}
        extra = [origin.frames_line] if origin.frames_line else []
        f = _make(BY_ID["error_after_startup"], [], details, extra=[origin.line] + extra)
        f.evidence.sort(key=lambda e: (e.source, e.line) != (origin.line.source, origin.line.lineno))
        f.order = origin.order
        findings.append(f)
    return findings


def _is_request_error(record: ErrorRecord, by_id: dict[str, list[_Hit]]) -> bool:
    """Whether a request's error of the catalogue (a prompt too long) states this record: an offline script
    that dies of it (uncaught) still had an engine that answered."""
    return any(record.spans(h.line) for hs in by_id.values() for h in hs if h.sig.role == "request")


def _takes_down(a: _Analyzer, h: _Hit) -> bool:
    """Whether a signature's line after the ready line says the server went down: a fatal signature (of the
    wrappers, only those saying the engine died: a worker's failed RPC of another kind leaves it up), unless
    the server answered requests after it."""
    sig = h.sig
    if not sig.fatal or sig.context or (a.alive_seq is not None and h.seq < a.alive_seq):
        return False
    return sig.id != "engine_core_failed" or bool(DEATH_RE.search(h.line.message))


def _survived_warnings(a: _Analyzer, survived: list[ErrorRecord], findings: list[Finding]) -> list[Finding]:
    """The originating error of those the server answered requests after (it stayed up): a warning, named
    from the index where it knows the message; nothing when a finding already quotes that line."""
    origin = _originating(survived, survived=True)
    if origin is None or any(any(e.line == origin.line.lineno and e.source == origin.line.source for e in f.evidence)
                             for f in findings):
        return []
    details: dict[str, Any] = {"exception": origin.type, "alive_line": a.alive.lineno if a.alive else None}
    entry = _lookup(origin, None)
    if entry is not None:
        details.update(cite=entry.cite, function=entry.function, package=entry.package)
    extra = [origin.frames_line] if origin.frames_line else []
    f = _make(BY_ID["error_survived"], [], details, extra=[origin.line] + extra)
    if entry is not None:
        f.meaning += f" The message is {entry.package}'s, from {entry.function} ({entry.cite})."
    f.evidence.sort(key=lambda e: (e.source, e.line) != (origin.line.source, origin.line.lineno))
    f.order = origin.order
    return [f]


def _not_a_vllm_log(sources: list[str], lines_read: int, selected: int) -> Diagnosis:
    sig = BY_ID["not_a_vllm_log"]
    details = {"lines_read": lines_read}
    f = Finding(
        id=sig.id, severity=sig.severity, title=sig.title, meaning=_fill(sig.meaning, details) or sig.meaning,
        evidence=[], details=details, actions=list(sig.actions), role=sig.role,
    )
    return Diagnosis(
        verdict="inconclusive", findings=[f], root_cause=None, timeline=StartupTimeline(), checklist=[],
        next_command=None, sources=sources, lines_examined=selected, lines_read=lines_read,
    )


# ---------------------------------------------------------------------------------------------
# Advice that fits the deployment: an action is dropped when it repeats what the start already uses
# or walks into another known bug on its version.


def _settings(a: _Analyzer, tl: StartupTimeline) -> dict[str, Any]:
    return {
        "kv_cache_dtype": tl.kv_cache_dtype,
        "enforce_eager": tl.enforce_eager,
        "cudagraph_mode": tl.cudagraph_mode,
        "vllm_version": tl.vllm_version,
        "stale_fix_active": a.stale_fix_active,
        "dsv4": _is_dsv4(tl),
        "tensor_parallel_size": tl.tensor_parallel_size,
        # The launch's own flags that suggested commands repeat: not a recommendation.
        "carried": [flags for key, flags in _command_parts(tl, "<log>").items() if key.startswith("_") and flags],
    }


def applicable(action: str, settings: dict[str, Any]) -> bool:
    """False when `action` recommends what this start already uses, or what fails on its version."""
    for carried in sorted(settings.get("carried") or (), key=len, reverse=True):
        action = action.replace(carried, " ")
    if "--enforce-eager" in action and settings.get("enforce_eager"):
        return False
    if re.search(r"--kv-cache-dtype[ =]fp8\b", action) and str(settings.get("kv_cache_dtype") or "").startswith("fp8"):
        return False
    if '"cudagraph_mode": "PIECEWISE"' in action and (settings.get("cudagraph_mode") or "").upper() == "PIECEWISE":
        return False
    if '"cudagraph_mode": "FULL_DECODE_ONLY"' in action:
        return False  # still captures FULL decode graphs: avoids nothing a FULL capture fault is about
    if re.search(r"--max-model-len[ =](?:auto|-1)\b", action):
        # Auto-fit with a stale length trips the sparse-MLA assertion on 0.29-0.30 unless dsv4ctl's fix is active.
        if stale_bug_status(settings.get("vllm_version")) == "affected" and settings.get("dsv4", True) and not settings.get("stale_fix_active"):
            return False
    m = re.search(r"--tensor-parallel-size[ =]([0-9]+)", action)
    if m and settings.get("tensor_parallel_size") == int(m.group(1)):
        return False
    return True


def _summary(d: Diagnosis) -> str:
    tl = d.timeline
    nth = f" (the last of {len(d.starts)} starts)" if len(d.starts) > 1 else ""
    if any(f.id == "not_a_vllm_log" for f in d.findings):
        n = d.lines_read
        return f"Not a vLLM log: read {n:,} line{'s' if n != 1 else ''}, none of them from vLLM or Python."
    if d.verdict == "failed":
        what = "The server failed while serving" if d.phase == "serving" else "Startup failed"
        if d.root_cause is None:
            return f"{what}{nth}; the cause is not in the log."
        where = f" (line {d.root_cause.line})" if d.root_cause.line else ""
        if d.root_cause.id == "unrecognized_error":
            return f"{what}{nth} with an error no signature explains{where}: {_clip_text(str(d.root_cause.details.get('message') or d.root_cause.details.get('exception')), 100)}"
        return f"{what}{nth}: {d.root_cause.title}{where}."
    if d.verdict == "healthy":
        where = f" on {tl.ready_url}" if tl.ready_url else ""
        return f"Startup completed{where}{nth}."
    phase = tl.last_phase or "no vLLM startup lines"
    waiting = next((f for f in d.findings if f.id == "engine_waiting"), None)
    stalled = f"; processes were waiting on each other (line {waiting.line}): likely hung" if waiting else ""
    return f"No failure seen, but the log ends before the server was ready{nth} (last phase: {phase}){stalled}."


def _clip_text(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------------
# The stale-max_model_len checklist (six questions from the upstream analysis)

CHECKLIST_QUESTIONS = (
    "Was --max-model-len set to auto or -1?",
    'Did vLLM print "max_model_len: reduced from ... to ..."?',
    "Does the traceback end in sparse_mla.py::_build_c128a_metadata?",
    "Is the failure an AssertionError rather than a direct CUDA OOM?",
    "Does an explicit smaller --max-model-len make startup reliable?",
    "Does this vLLM lack the fix (PR #58149: ModelState.max_model_len follows auto-fit)?",
)


def _ref_ev(ref: LineRef | None) -> Evidence | None:
    return Evidence(ref.source, ref.line, ref.text) if ref else None


def _checklist(a: _Analyzer, tl: StartupTimeline, findings: list[Finding], pre_exc: list[ErrorRecord]) -> list[ChecklistItem]:
    q = CHECKLIST_QUESTIONS
    items: list[ChecklistItem] = []
    refs = tl.refs

    # 1. auto / -1
    arg = tl.max_model_len_arg
    if arg is not None and arg.lower() in ("-1", "auto"):
        items.append(ChecklistItem(q[0], "yes", _ref_ev(refs.get("max_model_len_arg")), f"max_model_len={arg}"))
    elif arg is not None:
        items.append(ChecklistItem(q[0], "no", _ref_ev(refs.get("max_model_len_arg")), f"explicit max_model_len={arg}"))
    elif tl.autofit is not None or tl.autofit_full_fit:
        ref = refs.get("autofit") or refs.get("autofit_full")
        items.append(ChecklistItem(q[0], "yes", _ref_ev(ref), "auto-fit runs only with --max-model-len auto / -1"))
    elif "nondefault_args" in refs:
        items.append(
            ChecklistItem(q[0], "no", _ref_ev(refs["nondefault_args"]), "not among the non-default args: the model's full length is used")
        )
    else:
        items.append(ChecklistItem(q[0], "not in log"))

    # 2. reduction printed
    if tl.autofit is not None:
        items.append(
            ChecklistItem(
                q[1], "yes", _ref_ev(refs.get("autofit")), f"{format_tokens(tl.autofit.from_len)} → {format_tokens(tl.autofit.to_len)}"
            )
        )
    elif tl.autofit_full_fit or tl.kv_cache_tokens is not None:
        ref = refs.get("autofit_full") or refs.get("kv_cache_size")
        items.append(ChecklistItem(q[1], "no", _ref_ev(ref), "the KV cache was sized without a reduction"))
    elif tl.available_kv_gib is not None:
        items.append(
            ChecklistItem(q[1], "no", _ref_ev(refs.get("available_kv")), "the KV-cache memory was measured and no reduction followed")
        )
    else:
        items.append(ChecklistItem(q[1], "not in log", None, "the log ends before the KV cache was sized"))

    # 3. traceback ends in _build_c128a_metadata
    ends_there = [e for e in pre_exc if _ends_in(e, "_build_c128a_metadata")]
    frames_there = [h for h in a.hits if "_build_c128a_metadata" in h.line.message and not h.after_ready]
    if ends_there:
        items.append(ChecklistItem(q[2], "yes", _ev(ends_there[0].frames_line), "the sparse-MLA C128A assertion"))
    elif frames_there:
        items.append(ChecklistItem(q[2], "yes", _ev(frames_there[0].line), "the sparse-MLA C128A metadata builder"))
    elif pre_exc:
        first = _originating(pre_exc) or pre_exc[0]
        frame = first.origin.last_frame if first.origin else None
        where = f"{Path(frame.file).name}::{frame.function}" if frame else "no frames"
        items.append(ChecklistItem(q[2], "no", _ev(first.line), f"the traceback ends in {where}"))
    else:
        items.append(ChecklistItem(q[2], "not in log", None, "no traceback before the startup ended"))

    # 4. AssertionError rather than CUDA OOM
    oom = next((f for f in findings if f.id == "cuda_oom"), None)
    asserts = [e for e in pre_exc if e.type.endswith("AssertionError")]
    if oom is not None:
        items.append(ChecklistItem(q[3], "no", oom.evidence[0] if oom.evidence else None, "a CUDA out-of-memory error"))
    elif asserts:
        items.append(ChecklistItem(q[3], "yes", _ev(asserts[0].line), "an AssertionError, no CUDA OOM"))
    elif pre_exc:
        first = _originating(pre_exc) or pre_exc[0]
        items.append(ChecklistItem(q[3], "no", _ev(first.line), f"the failure is {first.type}"))
    else:
        items.append(ChecklistItem(q[3], "not in log", None, "no error before the startup ended"))

    # 5. explicit smaller length
    safe = None
    if tl.autofit is not None:
        safe = safe_length_from_log(tl, tl.autofit.to_len).length or None
    if arg is not None and arg.lstrip("-").isdigit() and int(arg) > 0:
        ev = _ref_ev(refs.get("max_model_len_arg"))
        if tl.ready:
            items.append(ChecklistItem(q[4], "yes", _ref_ev(tl.ready_ref) or ev, f"this start used --max-model-len {arg} and completed"))
        elif any(f.is_root_cause and f.id == "stale_max_model_len" for f in findings):
            items.append(ChecklistItem(q[4], "no", ev, f"this start used --max-model-len {arg} and still failed"))
        elif (root := next((f for f in findings if f.is_root_cause), None)) is not None:
            items.append(
                ChecklistItem(q[4], "not in log", ev, f"this start used --max-model-len {arg} and failed for another reason ({root.id})")
            )
        else:
            items.append(ChecklistItem(q[4], "not in log", ev, f"this start used --max-model-len {arg} but did not finish"))
    else:
        note = "one log cannot show it; compare a start with an explicit length"
        if safe is not None:
            note += f", e.g. --max-model-len {safe}"
        items.append(ChecklistItem(q[4], "not in log", None, note))

    # 6. fix present?
    status = stale_bug_status(tl.vllm_version)
    ev = _ref_ev(refs.get("vllm_version"))
    if status == "affected":
        items.append(ChecklistItem(q[5], "yes", ev, f"vLLM {tl.vllm_version}: 0.29.0–0.30.x lack it; fixed in {FIXED_STALE}"))
    elif status == "fixed":
        items.append(ChecklistItem(q[5], "no", ev, f"vLLM {tl.vllm_version} has ModelState.max_model_len as a property (fixed in {FIXED_STALE})"))
    elif status == "not_affected":
        items.append(ChecklistItem(q[5], "no", ev, f"vLLM {tl.vllm_version} predates the assertion (added in 0.29.0)"))
    else:
        items.append(ChecklistItem(q[5], "not in log", None, "the vLLM version is not in the log"))
    if tl.vllm_version and "dev" in tl.vllm_version and items[-1].answer != "not in log":
        items[-1].note = (items[-1].note or "") + "; development build: check that commit"
    return items


__all__ = [
    "Diagnosis",
    "Finding",
    "Evidence",
    "ChecklistItem",
    "diagnose",
    "diagnose_lines",
    "safe_length_from_log",
    "c128a_capacity",
    "CHECKLIST_QUESTIONS",
]
