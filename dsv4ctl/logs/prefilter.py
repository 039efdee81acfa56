"""Select the few interesting lines of a big log quickly, in one pass, with bounded memory.

A vLLM log that ran for days is mostly request and metrics lines. `diagnose` only needs the lines
that contain one of `PATTERNS` (startup milestones, errors, traceback frames, signature keywords).
`scan_source` finds them chunk by chunk:

- with hyperscan installed (optional extra `fast`), a compiled multi-pattern database scans each
  chunk at memory speed;
- otherwise one alternation of the same patterns with Python's `re` does the same job, slower.

Either engine only proposes candidate lines: every candidate is confirmed with `line_matches` (the
same `re` alternation over the decoded, length-capped line) before it is used, so both engines select
exactly the same lines. `diagnose_lines` applies `line_matches` too, so a caller that feeds every line
gets the same diagnosis as the fast path.

The patterns are written in the subset that Python `re`, hyperscan and POSIX ERE (`grep -E`) read
the same way, so the benchmark can hand the very same list to `grep -c -E`.
"""

from __future__ import annotations

import re
from typing import BinaryIO, Iterator

from dsv4ctl.logs.reader import MAX_LINE_BYTES, CHUNK_BYTES, decode, iter_chunks

# Keep each entry a literal or a simple class-based regex that cannot cross a newline.
PATTERNS: tuple[str, ...] = (
    # errors, tracebacks, exception lines
    "ERROR",
    "CRITICAL",
    "Error",
    "Exception",
    "Traceback",
    "KeyboardInterrupt",
    "Assertion error",
    '", line [0-9]',
    "active_topk_width",
    "[Oo]ut of [Mm]emory",
    "illegal memory access",
    "cudaErrorIllegalAddress",
    "NCCL",
    "unhandled cuda error",
    "get_paged_mqa_logits_metadata",
    "IndexerMetadataBuilder",
    "_build_c128a_metadata",
    "DeepGEMM",
    "deep_gemm",
    "Unsupported architecture",
    "next_n",
    "No valid attention backend",
    "only supports fp8",
    "weights missing from checkpoint",
    "To serve at least one request",
    "No available memory for the cache blocks",
    "stored in KV cache",
    "estimated maximum model length",
    "not enough GPU memory",
    "less than desired GPU memory utilization",
    "died unexpectedly",
    "failed to start",
    "initialization failed",
    "fatal error",
    "hit an exception",
    "output_handler failed",
    "EngineDead",
    "BackendCompilerFailed",
    "torch\\._inductor",
    "torch\\._dynamo",
    "Address already in use",
    "driver on your system is too old",
    "driver version is insufficient",
    "leaked shared_memory",
    "nanobind: leaked",
    # startup milestones
    "vLLM server version",
    "  version ",
    "  model   ",
    "Initializing a V1 LLM engine",
    "non-default args",
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
    "max_model_len: ",
    "KV cache size",
    "Maximum concurrency",
    "Capturing [A-Za-z -]*CUDA graphs",
    "Graph capturing finished",
    "init engine \\(profile",
    "Starting vLLM server on",
    "Starting vLLM API server",
    "Application startup complete",
    "Using V2 Model Runner",
    "Model Runner V2",
    "fp8_ds_mla",
    "indexer cache for Lightning Indexer",
    # shutdown
    "\\[shutdown\\]",
    "Shutting down",
    "Waiting for application shutdown",
    "Finished server process",
)

_STR_RE = re.compile("|".join(f"(?:{p})" for p in PATTERNS), re.ASCII)
_BYTES_RE = re.compile("|".join(f"(?:{p})" for p in PATTERNS).encode("utf-8"))


def line_matches(raw: str) -> bool:
    """Whether a (decoded, capped) raw line is one diagnose looks at."""
    return _STR_RE.search(raw) is not None


def hyperscan_available() -> bool:
    try:
        import hyperscan  # noqa: F401
    except Exception:  # noqa: BLE001 - any import problem means "not available"
        return False
    return True


_HS_DB = None


def _hyperscan_db():
    global _HS_DB
    if _HS_DB is None:
        import hyperscan

        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        exprs = [p.encode("utf-8") for p in PATTERNS]
        db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=[0] * len(exprs))
        _HS_DB = db
    return _HS_DB


def _candidates_hyperscan(chunk: bytes) -> list[int]:
    ends: list[int] = []
    append = ends.append

    def on_match(_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
        append(end)

    _hyperscan_db().scan(chunk, match_event_handler=on_match)
    ends.sort()
    return ends


def scan_source(
    stream: BinaryIO,
    *,
    engine: str = "auto",
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[tuple[int, str]]:
    """Yield `(lineno, raw_line)` for every interesting line of one binary stream, in order.

    engine: "hyperscan", "re", or "auto" (hyperscan when installed).
    """
    use_hs = engine == "hyperscan" or (engine == "auto" and hyperscan_available())
    lineno_base = 0  # lines before the current chunk
    for chunk in iter_chunks(stream, chunk_bytes):
        n = len(chunk)
        counted_to = 0
        counted = 0  # newlines in chunk[:counted_to]
        if use_hs:
            ends = _candidates_hyperscan(chunk)
            positions = iter(ends)
        else:
            positions = None
        line_end = -1
        search_from = 0
        while True:
            if positions is not None:
                pos = next(positions, None)
                if pos is None:
                    break
                if pos <= line_end:
                    continue
                inside = max(pos - 1, 0)
            else:
                m = _BYTES_RE.search(chunk, search_from)
                if m is None:
                    break
                inside = m.start()
            start = chunk.rfind(b"\n", 0, inside) + 1
            end = chunk.find(b"\n", inside)
            if end == -1:
                end = n
            line_end = end
            search_from = end + 1
            counted += chunk.count(b"\n", counted_to, start)
            counted_to = start
            raw = decode(chunk[start:end][:MAX_LINE_BYTES])
            if line_matches(raw):
                yield lineno_base + counted + 1, raw
            if search_from >= n:
                break
        lineno_base += chunk.count(b"\n")
        if not chunk.endswith(b"\n"):
            lineno_base += 1
