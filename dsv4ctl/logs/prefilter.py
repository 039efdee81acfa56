"""Select the few interesting lines of a big log quickly, in one pass, with bounded memory.

A vLLM log that ran for days is mostly request and metrics lines. `diagnose` only needs the lines
that contain one of `PATTERNS` (startup milestones, errors, traceback frames, signature keywords).
`scan_source` finds them chunk by chunk:

- with hyperscan installed (optional extra `fast`), a compiled multi-pattern database scans each
  chunk at memory speed;
- otherwise one alternation of the same patterns with Python's `re` does the same job, slower.

Line numbers need every newline counted; `count_newlines` does it with numpy when installed (also in
the `fast` extra), `bytes.count` otherwise. `dsv4ctl.logs.parallel` runs `scan_source` over parts of a
big file in several processes.

Either engine only proposes candidate lines, and a line is selected when its decoded, length-capped
text matches `line_matches` (the same `re` alternation): when the engine's first match in the line ends
within the cap that is certain (the patterns are ASCII or whole UTF-8 characters and never cross a
newline) and the line is not searched again; otherwise `line_matches` decides. So both engines select
exactly the same lines. `diagnose_lines` applies `line_matches` too, so a caller that feeds every line
gets the same diagnosis as the fast path.

Finding the lines of the candidates costs Python work per candidate; when a span holds many (a log
where a quarter of the lines are engine errors), numpy finds all of them at once (`_dense_lines`).

The patterns are written in the subset that Python `re`, hyperscan and POSIX ERE (`grep -E`) read
the same way, so the benchmark can hand the very same list to `grep -c -E`.

Kept whole: the scan is one profile-tuned loop over shared state (the compiled database or alternation,
numpy's availability, the dense/sparse switch, the chunk cursor and its gaps); split across modules, the
hot loop would reach through module globals, and the tests that pin its equivalence patch them here.
"""

from __future__ import annotations

import re
from typing import BinaryIO, Callable, Iterator, NamedTuple, Protocol

from dsv4ctl import files, hs_cache, re_cache
from dsv4ctl.cache_dir import CACHE_DIR_ENV
from dsv4ctl.catalogue.signature_index import required_literals
from dsv4ctl.logs.reader import MAX_LINE_BYTES, decode, iter_spans

# The scan reads 2 MiB at a time: hyperscan, the newline count and the line lookups then pass over data
# still in the CPU's cache (on a 100 MiB serving log: 0.054 s with 2 MiB reads, 0.060-0.089 s with 8 MiB).
SCAN_CHUNK_BYTES = 2 << 20

# Keep each entry a literal or a simple class-based regex that cannot cross a newline. Entries start
# with an upper-case letter, `_`, `-`, `(` or `[` where possible: the `re` fallback skips positions whose
# first character cannot start any entry, and lower-case letters are most of a log. A keyword may be a
# fragment of the message it stands for ("_paged_mqa_logits_metadata"); lines logged at ERROR level or
# carrying an exception name ("...Error") are selected by those entries.
PATTERNS: tuple[str, ...] = (
    # errors, tracebacks, exception lines
    "ERROR",
    "CRITICAL",
    "Error",
    "Exception",
    "Traceback",
    "KeyboardInterrupt",
    'File "',
    "Assertion error",
    "CUDA error",
    "CUDA out of memory",
    "CUDA driver",
    "NVIDIA driver",
    "NCCL",
    "DeepGEMM",
    "_gemm not found",
    "_paged_mqa_logits_metadata",
    "IndexerMetadataBuilder",
    "_build_c128a_metadata",
    "_topk_width",
    "xt_n",
    "Unsupported architecture",
    "No valid attention backend",
    "To serve at least one request",
    "stored in KV cache",
    "No available memory for the cache blocks",
    # wrappers and deaths, which an excerpt may hold without vLLM's ERROR prefix (records.py WRAPPER_RE)
    "WorkerProc",
    "EngineCore failed",
    "EngineCore encountered",
    "Engine core initialization",
    "hit an exception",
    "output_handler failed",
    "died unexpectedly",
    "The actor is dead",
    "The actor died",
    "Failed to load model",
    "BackendCompilerFailed",
    "Address already in use",
    "_tracker",
    # startup milestones (the platform line: printed before the banner, the first line of a start)
    "Automatically detected platform",
    "LLM server version",
    "API server version",
    "█",
    "Initializing a V1 LLM engine",
    "-default args",
    "Using max model len",
    "Resolved architecture",
    "Starting to load model",
    "Loading safetensors checkpoint shards",
    "Loading weights took",
    "Model loading took",
    "Memory profiling takes",
    "Starting torch\\.compile",
    "Dynamo bytecode transform time",
    "Compiling a graph for compile range",
    "Initial profiling/warmup run took",
    "Profiling CUDA graph memory",
    "Estimated CUDA graph memory",
    "Available KV cache memory",
    "_model_len: ",
    # vLLM 0.34's auto-fit that stands and its measured KV cache (logs/timeline_sizing.py cites each format string)
    "-max-model-len auto reduced",
    "Memory after warmup: ",
    "Extended KV cache to ",
    "Remapping the KV cache",
    "Disabling the extensible KV cache",
    "Extensible KV cache off",
    "_utilization=[0-9.]+ caps this instance",
    "KV cache size",
    "Maximum concurrency",
    "Capturing [A-Za-z -]*CUDA graphs",
    "Graph capturing finished",
    "\\(profile, create kv cache",
    "Starting vLLM server on",
    "Starting vLLM API server",
    "Application startup complete",
    "Using V2 Model Runner",
    "Model Runner V2",
    "_ds_mla",
    "Lightning Indexer",
    "Saved startup plan",
    "persisted startup plan",
    # shutdown
    "\\[shutdown\\]",
    "Shutting down",
    "Waiting for application shutdown",
    "Finished server process",
    # records (dsv4ctl/logs/records.py): chained tracebacks and errors that are not Python's
    "above exception",
    "Cuda error",
    "Check failed",
    "terminate called",
    "CUDBG_EXCEPTION",
    "coredump: +#",
    "CUDA Exception",
    "exception was triggered",
    "Watchdog caught",
    "\\[Errno ",
    "Killed",
    "Fatal Python error",
    "Segmentation fault",
    "Aborted \\(core",
    "Bus error",
    "dsv4ctl fixes:",
    "shared memory broadcast block",
    # exception classes whose names hold no "Error" (an untagged traceback's last line), and classes of an
    # exceptions module ("torch._dynamo.exc.Unsupported", "triton.runtime.errors.OutOfResources")
    "OutOfResources",
    "SystemExit",
    "StopIteration",
    "\\.exc\\.[A-Z]",
    "\\.errors?\\.[A-Z]",
    # what is left of a traceback in an excerpt (records.py): a bare AssertionError's `assert` statement, the
    # short frame form ("sparse_mla.py:262 in _build_c128a_metadata"), C/C++ assertions, a program's "FATAL:"
    "  assert ",
    "\\.py:[0-9]+ in ",
    "Assertion `",
    "FATAL",
    "Fatal error",
    # catalogue: vllm
    # pydantic prints a ValueError raised in vLLM's config classes as "  Value error, <message> [type=value_error…"
    "Value error, ",
    # pydantic's error of one field (records.py DETAIL_RE), argparse's error exit, an HTTP error body a client
    # printed (records.py GENERIC "usage", "http_error")
    " \\[type=[a-z_]+",
    ": error: ",
    '"message": "',
    '"message":"',
    # the kernel's and the container runtime's OOM kills (dmesg; kubectl describe / get)
    "OOMKilled",
    # other accelerators and crashes (grammars.py GENERIC "npu", "hip", "cpp", "crash"): torch_npu's checks and
    # error codes, CANN's codes, the CANN runtime's failed calls, HIP errors, libstdc++'s what(), the kernel's
    # segfault report and register dump
    "function error: ",
    "ERR0[0-9]{4} ",
    "E[0-9A-Z][0-9]{4}\\)?: ",
    "ErrCode=[0-9]",
    "failed: [125]0[0-9]{4}",
    "HIP error",
    "hipError",
    "what\\(\\): ",
    "segfault at ",
    " ip:[0-9a-f]+ sp:",
    "RIP: [0-9a-f]{4}:",
    "The Inner error is reported as above",
    # catalogue: ecosystem
    # Ray's raylet (memory monitor), huggingface_hub's message lines inside a traceback, its disk warning
    "Workers \\(tasks / actors\\) killed",
    "running low on memory",
    "Cannot access gated repo",
    "Repository Not Found",
    "Invalid credentials in Authorization",
    "Revision Not Found",
    "403 Forbidden: ",
    "Make sure your token has",
    "429 Too Many Requests",
    "Not enough free disk space",
)

def _ere(literal: str) -> str:
    """A literal as an entry read the same by Python re, hyperscan and grep -E."""
    return "".join("\\" + ch if ch in ".[]()*+?{}|^$\\" else ch for ch in literal)


def _signature_keywords(hand: tuple[str, ...]) -> tuple[str, ...]:
    """A keyword for every catalogue pattern no hand-written entry covers: the pattern's literal text, so a
    signature's line is selected whatever wraps it, or when it is pasted alone without its exception name."""
    from dsv4ctl.catalogue.signatures import CATALOGUE  # noqa: PLC0415 - the catalogue imports nothing from here

    hand_re = re_cache.compile(_factored(hand), re.ASCII)
    out: list[str] = []
    for sig in CATALOGUE:
        for pattern in sig.patterns:
            for runs in required_literals(pattern):
                if any(hand_re.search(run) for run in runs):
                    continue  # a hand-written keyword is in every line it matches
                # Its longest literal text; a few letters ("assert ") would select lines of every log.
                if runs and len(runs[0]) >= MIN_KEYWORD and _ere(runs[0]) not in out:
                    out.append(_ere(runs[0]))
    return tuple(out)


MIN_KEYWORD = 10


def _factored(patterns: tuple[str, ...]) -> str:
    """The same alternation, grouped by first character: `re` then tests one branch per group."""
    groups: dict[str, list[str]] = {}
    for p in patterns:
        head = p[:2] if p.startswith("\\") else p[0]
        groups.setdefault(head, []).append(p[len(head):])
    parts = []
    for head, tails in groups.items():
        lead = head if head.startswith("\\") else re.escape(head)
        parts.append(lead + "(?:" + "|".join(tails) + ")")
    return "|".join(parts)


PATTERNS = PATTERNS + _signature_keywords(PATTERNS)
_STR_RE = re_cache.compile(_factored(PATTERNS), re.ASCII)
_BYTES_RE: re.Pattern[bytes] | None = None  # the same for raw reads: compiled by the first scan without hyperscan


def _bytes_re() -> re.Pattern[bytes]:
    global _BYTES_RE
    if _BYTES_RE is None:
        _BYTES_RE = re_cache.compile(_factored(PATTERNS).encode("utf-8"))
    return _BYTES_RE


def line_matches(raw: str) -> bool:
    """Whether a (decoded, capped) raw line is one diagnose looks at."""
    return _STR_RE.search(raw) is not None


def hyperscan_available() -> bool:
    """hyperscan is installed and compiles our patterns (any failure means: use `re`; it is not retried)."""
    global _HS_DB
    if _HS_DB is False:
        return False
    try:
        _hyperscan_db()
    except Exception:  # noqa: BLE001 - an import or compile problem means "not available"
        _HS_DB = False
        return False
    return True


def use_hyperscan(engine: str) -> bool:
    """Whether `engine` ("hyperscan", "re" or "auto") means the hyperscan prefilter."""
    return engine == "hyperscan" or (engine == "auto" and hyperscan_available())


_HS_DB = None  # the compiled database; False once it could not be had
# "auto" scans with `re` until a stream shows it holds this much: importing hyperscan and compiling the
# database (40-110 ms here) costs more than `re` spends on a smaller log.
_HS_MIN_BYTES = 1 << 20


# Where the compiled database is kept between runs (compiling it took 40-110 ms, loading it 0.1 ms): dsv4ctl's cache
# directory (`dsv4ctl.hs_cache`, keyed by hyperscan's version, the CPU and the patterns).
CACHE_ENV = CACHE_DIR_ENV


def _hyperscan_db():
    global _HS_DB
    if not _HS_DB:
        import hyperscan

        # A loaded file that does not find what it should is compiled afresh and replaced.
        _HS_DB = hs_cache.database(hyperscan, "prefilter", [p.encode("utf-8") for p in PATTERNS], 0, works=_works)
    return _HS_DB


def _works(db) -> bool:
    hits: list[int] = []
    try:
        db.scan(b"x Traceback y\n", match_event_handler=lambda i, *_: hits.append(i))
    except Exception:  # noqa: BLE001
        return False
    return hits == [PATTERNS.index("Traceback")]


_NUMPY_MIN_BYTES = 8 << 10  # spans from this size are counted with numpy (bytes.count is faster below)
_NUMPY_MIN_BUFFER = 1 << 20  # ... in buffers from this size: a small log never imports numpy
_NUMPY_BLOCK = 2 << 20  # keeps numpy's temporary boolean array small
# Importing numpy (0.13 s here) only pays once a process has a lot to count: bytes.count takes 0.32 s per
# GiB, numpy 0.12. Until then (and always when numpy is not installed) bytes.count counts, unless numpy
# was imported already (for `_dense_lines`).
_NUMPY_AFTER_BYTES = 768 << 20
_np = None  # numpy, once imported; False when it is not installed
_counted_plain = 0  # bytes this process counted with bytes.count


def count_newlines(data: bytes, start: int, end: int) -> int:
    """`data.count(b"\\n", start, end)`, with numpy (vectorised, about 3x faster) for spans of 8 KiB or more of
    a big buffer, once numpy is imported or this process has counted `_NUMPY_AFTER_BYTES` without it.

    Line numbers need every newline counted, and `bytes.count` of one byte is a scalar loop: on a big log it
    was about 40 % of the scan. Between the lines a serving log's request-time tracebacks select, the spans
    are tens of KiB, so the span threshold is low; a buffer under 1 MiB (a small log, read whole) is always
    counted with `bytes.count`.
    """
    global _counted_plain
    np = _np
    if not np and end - start >= _NUMPY_MIN_BYTES and len(data) >= _NUMPY_MIN_BUFFER and _counted_plain >= _NUMPY_AFTER_BYTES:
        np = _import_numpy()
    if not np:
        _counted_plain += end - start
        return data.count(b"\n", start, end)
    if end - start < _NUMPY_MIN_BYTES or len(data) < _NUMPY_MIN_BUFFER:
        return data.count(b"\n", start, end)
    total = 0
    for s in range(start, end, _NUMPY_BLOCK):
        block = np.frombuffer(data, dtype=np.uint8, count=min(_NUMPY_BLOCK, end - s), offset=s)
        total += int(np.count_nonzero(block == 10))
    return total


def _import_numpy():
    global _np
    if _np is None:
        try:
            import numpy

            _np = numpy
        except ImportError:
            _np = False
    return _np


# A file this big scanned in parallel imports numpy before the scanners fork: each of them then counts its
# range's newlines with numpy from the first read (0.07 s per GiB instead of bytes.count's 0.3 s; the
# import, about 0.08 s, is paid once for all of them).
NUMPY_EARLY_BYTES = 256 << 20


def prepare_big_scan(engine: str, size: int = 0) -> None:
    """Compile (or load) the hyperscan database now, before forking scanners that share it, and import numpy
    for a file of `NUMPY_EARLY_BYTES` or more; below that each process imports numpy when it pays there
    (`count_newlines`, `_dense_lines`)."""
    if use_hyperscan(engine):
        _hyperscan_db()
    if size >= NUMPY_EARLY_BYTES:
        _import_numpy()
        keep_freed_memory()


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP_BYTES = 256 << 20
_kept_freed = False


def keep_freed_memory() -> None:
    """Let glibc's malloc keep the memory of freed reads for the next ones (this process, and the scanners it
    forks), instead of handing it back to the kernel and faulting it in again: every read is a new bytes object
    of `SCAN_CHUNK_BYTES`, and numpy's arrays over it are as big. On the 1 GiB serving log a scanning child took
    35,000 minor page faults and 0.13-0.17 s of system time without this, 4,000 and 0.04-0.08 s with it, at the
    same peak resident memory (62 MB; 2026-12-02, this repository's benchmark machine). Reads of up to 32 MiB
    then come from the heap, and up to 256 MiB free at its top stays there. Elsewhere than glibc: nothing."""
    global _kept_freed
    if _kept_freed:
        return
    _kept_freed = True
    try:
        import ctypes

        libc = ctypes.CDLL(None)
    except OSError:
        return
    # glibc's own function: another libc's mallopt, if it has one, may take other numbers
    if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt"):
        libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES)


def _candidates_hyperscan(data: bytes, start: int, end: int) -> list[int]:
    """End offsets (into `data`) of every pattern match in data[start:end]."""
    ends: list[int] = []
    append = ends.append

    def on_match(_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
        append(to + start)

    view = memoryview(data)[start:end]
    _hyperscan_db().scan(view, match_event_handler=on_match)
    ends.sort()
    return ends


PROGRESS_BYTES = 4 << 20  # a progress callback hears of every read once this much more was read


class _CountingReader:
    """A binary stream that counts the bytes read through it."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.name = getattr(stream, "name", None)
        self.bytes_read = 0

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.bytes_read += len(data)
        return data


def _with_position(stream: BinaryIO) -> tuple[BinaryIO, Callable[[], int]]:
    """The stream to read and a function giving the bytes of the source read so far (for a compressed file: of
    the file itself, the unit of its size on disk)."""
    inner = stream.source if isinstance(stream, Rejoined) else stream
    position = files.position_of(inner)
    if position is not None:
        return stream, position
    counting = _CountingReader(stream)
    return counting, lambda: counting.bytes_read  # type: ignore[return-value]


class SourceOffsets:
    """One progress callback over several sources read one after another: each source's reports (bytes
    of that source read so far) become bytes of all the sources read so far."""

    def __init__(self, progress: Callable[[int], None] | None) -> None:
        self.progress = progress
        self.done = 0
        self.last = 0

    def next_source(self) -> Callable[[int], None] | None:
        """The callback for the next source (None when nobody listens)."""
        if self.progress is None:
            return None
        self.done += self.last
        self.last = 0
        return self._report

    def _report(self, n: int) -> None:
        self.last = n
        self.progress(self.done + n)  # type: ignore[misc]


# A span with at least one candidate per this many bytes has its lines found with numpy (`_dense_lines`),
# once numpy is imported or this process has met `_DENSE_AFTER_LINES` such candidates (importing numpy,
# 0.13 s, pays after some 20,000 lines: a serving log's startup at the top is not worth it).
_DENSE_BYTES = 8 << 10
_DENSE_AFTER_LINES = 20_000
_dense_seen = 0


def _sparse_lines(data: bytes, s0: int, e0: int, ends: list[int] | None, lineno_base: int):
    """Yield `(lineno, raw)` for the selected lines of the span data[s0:e0], one candidate at a time (from
    hyperscan's match ends `ends`, or from `re` when None); returns the newlines counted in the span.

    A line whose first match ends within its first `MAX_LINE_BYTES` holds the match once decoded and capped
    (the patterns are ASCII or whole UTF-8 characters and cannot cross a newline), so it is not searched
    again; only a match beyond the cap needs `line_matches` on the capped line."""
    positions = iter(ends) if ends is not None else None
    counted_to = s0
    counted = 0  # newlines in data[s0:counted_to]
    line_end = -1
    search_from = s0
    bytes_re = _bytes_re() if positions is None else None
    while True:
        if positions is not None:
            pos = next(positions, None)
            if pos is None:
                break
            if pos <= line_end:
                continue
            inside = max(pos - 1, s0)
        else:
            m = bytes_re.search(data, search_from, e0)
            if m is None:
                break
            inside = m.start()
            pos = m.end()
        start = data.rfind(b"\n", s0, inside) + 1 or s0
        if start < s0:
            start = s0
        end = data.find(b"\n", inside, e0)
        if end == -1:
            end = e0
        line_end = end
        search_from = end + 1
        counted += count_newlines(data, counted_to, start)
        counted_to = start
        raw = decode(data[start:min(end, start + MAX_LINE_BYTES)])
        if pos - start <= MAX_LINE_BYTES or line_matches(raw):
            yield lineno_base + counted + 1, raw
        if search_from >= e0:
            break
    return counted + count_newlines(data, counted_to, e0)


def _dense_numpy(candidates: int):
    """numpy for a dense span of `candidates` candidates, or False while it does not pay (see `_DENSE_BYTES`)."""
    global _dense_seen
    if _np is None and _dense_seen >= _DENSE_AFTER_LINES:
        return _import_numpy()
    if not _np:
        _dense_seen += candidates
        return False
    return _np


def _dense_lines(np, data: bytes, s0: int, e0: int, ends: list[int]):
    """The selected lines of data[s0:e0] from hyperscan's (sorted) match ends, found with numpy: arrays of
    each line's index in the span, start, end (capped at MAX_LINE_BYTES) and whether it is sure (its first
    match ends within the capped line, see `_sparse_lines`), and the newlines in the span."""
    buf = np.frombuffer(data, dtype=np.uint8, count=e0 - s0, offset=s0)
    nl = np.flatnonzero(buf == 10)
    bounds = np.concatenate((np.array([-1], dtype=nl.dtype), nl, np.array([e0 - s0], dtype=nl.dtype)))
    match_ends = np.asarray(ends, dtype=np.int64) - s0
    inside = np.maximum(match_ends - 1, 0)  # the match's last byte: never a newline
    line_of = np.searchsorted(nl, inside)  # newlines before it = its line's index in the span
    ks, first = np.unique(line_of, return_index=True)  # first: the line's first (earliest-ending) match
    starts = bounds[ks] + 1
    sure = (match_ends[first] - starts) <= MAX_LINE_BYTES
    capped = np.minimum(bounds[ks + 1], starts + MAX_LINE_BYTES)
    return ks, starts + s0, capped + s0, sure, len(nl)


class Gap(NamedTuple):
    """Selected lines a scanner left out of a batch (see `scan_batches`' `hold`): `count` lines, the first
    numbered `lineno`, the bytes `[start, end)` of the source (its offsets from `origin`) hold them all, they
    stood before the batch's line `pos`, and `kinds` counts those of a kind other than 0, `(kind, count)`."""

    pos: int
    count: int
    lineno: int
    start: int
    end: int
    kinds: tuple[tuple[int, int], ...] = ()


class Batch(NamedTuple):
    """The selected lines of one read: `lines` as `(lineno, raw)`; with a tagger, `kinds` (the tagger's kind of
    each line, 0 for most), `marks` (the indices of the lines whose kind is not 0, in order) and `gaps`
    (runs of lines left out)."""

    lines: list[tuple[int, str]]
    kinds: list[int] | None = None
    marks: list[int] | None = None
    gaps: list[Gap] | None = None


class Tagger(Protocol):
    """Sorts selected lines into kinds (0 for nothing to see) exactly as `sort(raw)` does, one line at a time or
    for all the selected lines of a span at once (`sort_span`, given numpy arrays of their start and end
    offsets; it returns a numpy array). A line of kind `ALERT` ends a run a scanner may leave out (see
    `scan_batches`)."""

    ALERT: int

    def sort(self, raw: str) -> int: ...

    def sort_span(self, data: bytes, s0: int, e0: int, starts, ends): ...


def _dense_batch(
    np, data: bytes, s0: int, e0: int, ks, starts, ends, lineno_base: int, offset: int,
    tagger: Tagger | None, hold: int | None, hard: int = 2,
) -> Batch:
    """The batch of a dense span's selected lines (numpy arrays: index in the span, start, end), tagged and,
    with `hold`, with its long runs between lines of kind `hard` left out but for their last `hold` lines (see
    `scan_batches`; the other kinds in a gap are counted). Only the lines kept are decoded."""
    if tagger is None:
        return Batch([(lineno_base + k + 1, decode(data[a:b])) for k, a, b in zip(ks.tolist(), starts.tolist(), ends.tolist())])
    kinds = tagger.sort_span(data, s0, e0, starts, ends)
    marks = np.flatnonzero(kinds).tolist()
    n = len(ks)
    if hold is None:
        keep = None
        gaps: list[Gap] = []
    else:
        pieces = []
        gaps = []
        kept = 0
        i = 0
        for j in [m for m in marks if kinds[m] == hard] + [n]:
            if j - i > hold:  # a run between hard marks: its last `hold` lines, a gap for the rest
                last_end = int(ends[j - hold - 1])
                nl = data.find(b"\n", last_end, e0)  # the last line's own end (its text may be capped)
                counts: dict[int, int] = {}
                for m in marks:
                    if i <= m < j - hold:
                        counts[int(kinds[m])] = counts.get(int(kinds[m]), 0) + 1
                gaps.append(Gap(kept, j - hold - i, lineno_base + int(ks[i]) + 1, offset + int(starts[i]) - s0,
                                offset + (e0 if nl == -1 else nl + 1) - s0, tuple(sorted(counts.items()))))
                i = j - hold
            stop = min(j + 1, n)
            pieces.append(np.arange(i, stop))
            kept += stop - i
            i = j + 1
        keep = np.concatenate(pieces) if pieces else np.arange(0)
        ks, starts, ends, kinds = ks[keep], starts[keep], ends[keep], kinds[keep]
    lines = [(lineno_base + k + 1, decode(data[a:b])) for k, a, b in zip(ks.tolist(), starts.tolist(), ends.tolist())]
    kind_list = kinds.tolist()
    return Batch(lines, kind_list, np.flatnonzero(kinds).tolist(), gaps or None)


def split_lines(data: bytes) -> list[tuple[int, str]]:
    """`(lineno, raw)` for every line of `data` as the scan reads them (decoded, capped at MAX_LINE_BYTES; a
    last line without its newline counts)."""
    parts = data.split(b"\n")
    if data.endswith(b"\n"):
        parts.pop()
    return [(n, decode(raw[:MAX_LINE_BYTES])) for n, raw in enumerate(parts, 1)] if data else []


def reader_of(stream: BinaryIO):
    """A reader of `stream` whose read errors are `InputError`s."""
    from dsv4ctl.logs.reader import _Reader  # noqa: PLC0415 - the reader's own guard for streams

    return _Reader(stream)


class Rejoined:
    """`head` (bytes already read) followed by the rest of `stream`, as one stream to scan."""

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self.head = head
        self.source = stream  # for the progress of a compressed file: its position in the file
        self.stream = reader_of(stream)
        self.name = getattr(stream, "name", None)

    def read(self, n: int = -1) -> bytes:
        if self.head:
            if n < 0 or n >= len(self.head):
                out, self.head = self.head, b""
                return out if n < 0 else out + self.stream.read(n - len(out)) if n > len(out) else out
            out, self.head = self.head[:n], self.head[n:]
            return out
        return self.stream.read(n)


def scan_source(
    stream: BinaryIO,
    *,
    engine: str = "auto",
    chunk_bytes: int = SCAN_CHUNK_BYTES,
    line_count: list[int] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, str]]:
    """Yield `(lineno, raw_line)` for every interesting line of one binary stream, in order.

    engine: "hyperscan", "re", or "auto" (hyperscan when installed, from the first read of at least 1 MiB or
    once the stream has given 1 MiB: a small log is scanned with `re`; the lines are the same either way).
    line_count: when given, the number of lines in the stream is appended to it once the stream is
    exhausted (a last line without a newline counts).
    progress: when given, called with the bytes of the stream read so far (a .gz: compressed bytes) once
    the lines of those bytes were yielded, at most every `PROGRESS_BYTES`, and once at the end.
    """
    for batch in scan_batches(stream, engine=engine, chunk_bytes=chunk_bytes, line_count=line_count, progress=progress):
        yield from batch.lines


def scan_batches(
    stream: BinaryIO,
    *,
    engine: str = "auto",
    chunk_bytes: int = SCAN_CHUNK_BYTES,
    line_count: list[int] | None = None,
    progress: Callable[[int], None] | None = None,
    tagger: Tagger | None = None,
    hold: int | None = None,
    origin: int = 0,
) -> Iterator[Batch]:
    """`scan_source`'s lines, a `Batch` per read (empty reads give none). With a `tagger`, each batch also
    says each line's kind: a span with many selected lines is tagged at once (`Tagger.sort_span`), so a
    consumer can pass over runs of lines of kind 0 without a Python step per line. With `hold` too, a run of
    more than `hold` such lines keeps only its last `hold` lines (what a quietly serving start holds) and a
    `Gap` in place of the rest, which is never decoded: the consumer that needs those lines after all reads
    them again from the source (`origin`: the source offset of the stream's first byte)."""
    use_hs = engine == "hyperscan" or (engine == "auto" and bool(_HS_DB))
    undecided = engine == "auto" and not use_hs
    seen = 0
    position = None
    if progress is not None:
        stream, position = _with_position(stream)
        reported = 0
    lineno_base = 0  # lines before the current span
    offset = origin  # the source offset of the current span's first byte
    for data, s0, e0 in iter_spans(stream, chunk_bytes):
        if undecided:
            seen += e0 - s0
            if len(data) >= _HS_MIN_BYTES or seen >= _HS_MIN_BYTES:
                use_hs = hyperscan_available()
                undecided = False
        ends = _candidates_hyperscan(data, s0, e0) if use_hs else None
        np = _dense_numpy(len(ends)) if ends and len(ends) * _DENSE_BYTES > e0 - s0 else False
        batch: Batch | None = None
        if np is not False:  # many lines selected: find them with numpy instead of one by one
            ks, starts, line_ends, sure, counted = _dense_lines(np, data, s0, e0, ends)
            if not sure.all():  # a first match beyond the cap: the capped line decides (rare)
                ok = [bool(s) or line_matches(decode(data[a:b])) for s, a, b in zip(sure, starts.tolist(), line_ends.tolist())]
                ks, starts, line_ends = ks[ok], starts[ok], line_ends[ok]
            if len(ks):
                batch = _dense_batch(np, data, s0, e0, ks, starts, line_ends, lineno_base, offset, tagger, hold,
                                     getattr(tagger, "ALERT", 2))
        else:
            gen = _sparse_lines(data, s0, e0, ends, lineno_base)
            lines: list[tuple[int, str]] = []
            while True:
                try:
                    lines.append(next(gen))
                except StopIteration as stop:
                    counted = stop.value
                    break
            if lines:
                kinds = [tagger.sort(raw) for _, raw in lines] if tagger is not None else None
                marks = [i for i, kind in enumerate(kinds) if kind] if kinds is not None else None
                batch = Batch(lines, kinds, marks)
        if batch is not None:
            yield batch
        lineno_base += counted
        offset += e0 - s0
        if data[e0 - 1:e0] != b"\n":
            lineno_base += 1
        if position is not None and position() - reported >= PROGRESS_BYTES:
            reported = position()
            progress(reported)  # type: ignore[misc]
    if line_count is not None:
        line_count.append(lineno_base)
    if position is not None:
        progress(position())  # type: ignore[misc]
