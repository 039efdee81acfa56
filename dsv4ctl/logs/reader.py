"""Streaming reader for vLLM logs: files, `-` (stdin), `.gz`, open binary streams.

Memory stays bounded whatever the log size: input is read in fixed-size chunks that end on a
newline, and a line longer than `MAX_LINE_BYTES` is truncated (the rest of it is skipped, the line
still counts as one line). Bytes are decoded with errors='replace', so invalid UTF-8 never raises.

`parse_line` understands the prefixes vLLM 0.27-0.33 logs carry:

- the process tag, both as a stream prefix (<= 0.30 wraps stdout/stderr, so tracebacks and tqdm
  bars carry it too) and inside the log format (>= 0.31): `(EngineCore_DP0 pid=1234) `;
- Ray's tag `(RayWorkerWrapper pid=1234, ip=10.0.0.2) ` and its `[repeated 3x across cluster]`;
- docker-compose's `service-1  | ` and a leading RFC 3339 timestamp (`docker logs -t`, kubectl);
- the vLLM format `LEVEL MM-DD HH:MM:SS [file.py:123] message` (with any `VLLM_LOGGING_PREFIX`);
- ANSI colour codes, CR/LF line ends and tqdm's carriage-return redraws (the last redraw wins).
"""

from __future__ import annotations

import gzip
import io
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Union

from dsv4ctl.errors import InputError

MAX_LINE_BYTES = 64 * 1024
CHUNK_BYTES = 8 * 1024 * 1024

Source = Union[str, Path, BinaryIO]


@dataclass(frozen=True)
class LogLine:
    """One physical line of a log, with vLLM's prefixes parsed off.

    source: the file name (or "-" for stdin, "<stream>" for other streams).
    lineno: 1-based line number within that source.
    process: the vLLM process tag, e.g. "EngineCore_DP0", "Worker_TP1", "APIServer" (None if absent).
    pid: the pid from the process tag (None if absent).
    level: "INFO", "WARNING", "ERROR", "DEBUG", "CRITICAL" when the line is a vLLM log record.
    timestamp: "MM-DD HH:MM:SS" from the vLLM log record (None if absent).
    fileinfo: "kv_cache_utils.py:2477" from the log record (None if absent).
    message: the text with prefixes, ANSI codes and CR stripped.
    raw: the line as read (decoded, without its newline).
    """

    source: str
    lineno: int
    process: str | None
    pid: int | None
    level: str | None
    fileinfo: str | None
    message: str
    raw: str
    timestamp: str | None = None


_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]")
_ISO_TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s+")
# docker compose: "vllm-1  | ", "vllm_1 | "; the service name has no spaces or parentheses.
_COMPOSE_RE = re.compile(r"^[A-Za-z0-9][\w.-]{0,62}\s*\|\s?")
# (EngineCore_DP0 pid=1234)  (RayWorkerWrapper pid=1234, ip=10.0.0.2)  (pid=1234)  and, before the
# Worker_TP names, (VllmWorker rank=0 pid=1234) (vllm==0.9.2 vllm/v1/executor/multiproc_executor.py:346,
# prefix format vllm/executor/multiproc_worker_utils.py:266); the rank stays part of the name.
_PROC_TAG = r"\((?:([A-Za-z_][\w.:-]*(?:\s+rank=\d+)?)\s+)?pid=(\d+)(?:,\s*ip=[^)\s]*)?\)"
_PROC_RE = re.compile("^" + _PROC_TAG + r"\s?")
# The same tag at the end of a VLLM_LOGGING_PREFIX that precedes the record.
_PROC_AT_END_RE = re.compile(_PROC_TAG + "$")
# vLLM's format since 0.7 puts the location in brackets ("[kv_cache_utils.py:2477]"); older releases
# wrote it without the opening one (vllm==0.6.3 vllm/logger.py:19:
# _FORMAT = "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s").
_RECORD = (
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
    r"(?P<ts>\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2})(?:[.,]\d+)?\s+"
    r"\[?(?P<fileinfo>[^\]\s\[]+:\d+|[^\]\s]+(?=\]))\]\s?"
)
_RECORD_RE = re.compile("^" + _RECORD)
# Same record with an arbitrary VLLM_LOGGING_PREFIX (or a foreign wrapper) in front.
_RECORD_SEARCH_RE = re.compile(r"(?:^|\s|\))" + _RECORD)
_RAY_REPEAT_RE = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# uvicorn's default format: "INFO:     Application startup complete."
_UVICORN_RE = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text) if "\x1b" in text else text


def parse_line(raw: str, source: str = "-", lineno: int = 0) -> LogLine:
    """Parse one raw line (without its newline) into a `LogLine`. Never raises."""
    text = raw
    if "\x1b" in text:
        text = strip_ansi(text)
    if "\r" in text:
        # CRLF, vLLM's multi-line records ("\r\n" + prefix) and tqdm redraws: keep the last segment.
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    text = text.rstrip("\n")
    process: str | None = None
    pid: int | None = None
    level: str | None = None
    fileinfo: str | None = None
    timestamp: str | None = None

    m = _ISO_TS_RE.match(text)
    if m:
        text = text[m.end():]
    m = _COMPOSE_RE.match(text)
    if m and not text.startswith("(") and "|" in text[: m.end()]:
        text = text[m.end():]
        m = _ISO_TS_RE.match(text)
        if m:
            text = text[m.end():]
    # Up to two process tags: a stream prefix (<= 0.30) may wrap a record that carries its own.
    for _ in range(2):
        m = _PROC_RE.match(text)
        if not m:
            break
        if process is None or m.group(1):
            process = m.group(1) or process
            pid = int(m.group(2))
        text = text[m.end():]
    m = _RECORD_RE.match(text)
    if m is None and ("[" in text) and any(lv in text for lv in ("INFO", "WARN", "ERROR", "DEBUG", "CRITICAL")):
        m = _RECORD_SEARCH_RE.search(text)
        if m is not None and m.start() > 200:
            m = None
        if m is not None:
            # A VLLM_LOGGING_PREFIX may itself precede the process tag.
            head = text[: m.start()].rstrip()
            pm = _PROC_AT_END_RE.search(head)
            if pm and process is None:
                process = pm.group(1)
                pid = int(pm.group(2))
    if m is not None:
        level = m.group("level")
        if level == "WARN":
            level = "WARNING"
        timestamp = re.sub(r"\s+", " ", m.group("ts"))
        fileinfo = m.group("fileinfo")
        text = text[m.end():]
    else:
        um = _UVICORN_RE.match(text)
        if um:
            level = um.group("level")
            text = text[um.end():]
    if "repeated" in text:
        text = _RAY_REPEAT_RE.sub("", text)
    return LogLine(
        source=source,
        lineno=lineno,
        process=process,
        pid=pid,
        level=level,
        fileinfo=fileinfo,
        message=text.strip(),
        raw=raw,
        timestamp=timestamp,
    )


# ---------------------------------------------------------------------------------------------
# Sources


def source_name(source: Source) -> str:
    if isinstance(source, (str, Path)):
        return "-" if str(source) == "-" else str(source)
    name = getattr(source, "name", None)
    return str(name) if isinstance(name, str) and name else "<stream>"


def open_source(source: Source) -> BinaryIO:
    """Open a path, `-` or a binary stream for reading; gzip is detected by its magic bytes."""
    if isinstance(source, (str, Path)):
        if str(source) == "-":
            raw: BinaryIO = sys.stdin.buffer
        else:
            path = Path(source)
            try:
                if path.is_dir():
                    raise InputError(f"{path} is a directory, not a log file", hint="pass the log file itself")
                raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
            except InputError:
                raise
            except FileNotFoundError:
                raise InputError(f"no such log file: {path}", hint="check the path, or pass - to read stdin") from None
            except OSError as exc:
                raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    else:
        raw = source
        if isinstance(raw, io.TextIOBase):
            raw = raw.buffer  # type: ignore[attr-defined]
    buffered: BinaryIO = raw if hasattr(raw, "peek") else io.BufferedReader(raw)  # type: ignore[arg-type]
    try:
        head = buffered.peek(2)[:2]  # type: ignore[attr-defined]
    except (OSError, ValueError):
        head = b""
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[return-value]
    return buffered


class _Reader:
    """read(n) that returns what a truncated .gz still had instead of raising EOFError."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        # Only gzip needs read1 (read(n) of a truncated .gz raises before returning what it had).
        self.read1 = getattr(stream, "read1", None) if isinstance(stream, gzip.GzipFile) else None
        self.done = False

    def read(self, n: int) -> bytes:
        if self.done:
            return b""
        parts: list[bytes] = []
        size = 0
        try:
            if self.read1 is None:
                return self.stream.read(n)
            while size < n:
                block = self.read1(n - size)
                if not block:
                    self.done = True
                    break
                parts.append(block)
                size += len(block)
        except EOFError:
            self.done = True  # a truncated .gz: keep what was readable
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise InputError(
                f"cannot read {source_name(self.stream)}: it starts like gzip but is not valid gzip ({exc})",
                hint="decompress it first, or pass the uncompressed log",
            ) from None
        except OSError as exc:
            raise InputError(f"cannot read {source_name(self.stream)}: {exc}") from None
        return b"".join(parts)


def iter_spans(
    stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES, max_line: int = MAX_LINE_BYTES
) -> Iterator[tuple[bytes, int, int]]:
    """Yield `(buffer, start, end)`: `buffer[start:end]` holds whole lines (the very last may lack its newline).

    Spans point into the bytes just read, so a big log is scanned without copying it. A line split
    across two reads is yielded on its own; a line that does not fit in one read is cut to its first
    `max_line` bytes and the rest of it is dropped, so memory stays below two reads plus one line.
    Lines that fit in a read are passed whole; consumers cap them at `MAX_LINE_BYTES`.
    """
    carry = b""
    skipping = False  # inside an over-long line whose head is in `carry`
    reader = _Reader(stream)
    while True:
        data = reader.read(chunk_bytes)
        if not data:
            if carry:
                yield carry, 0, len(carry)
            return
        start = 0
        if carry or skipping:
            nl = data.find(b"\n")
            if nl == -1:
                if not skipping:
                    carry += data
                    if len(carry) > max_line:
                        carry = carry[:max_line]
                        skipping = True
                continue
            line = carry + b"\n" if skipping else carry + data[: nl + 1]
            yield line, 0, len(line)
            carry = b""
            skipping = False
            start = nl + 1
        last = data.rfind(b"\n", start)
        if last == -1:
            carry = data[start:]
        else:
            if last + 1 > start:
                yield data, start, last + 1
            carry = data[last + 1:]
        if len(carry) > max_line:
            carry = carry[:max_line]
            skipping = True


def iter_chunks(stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES, max_line: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The spans of `iter_spans` as byte strings (each ends with a newline, the last one may not)."""
    for data, start, end in iter_spans(stream, chunk_bytes, max_line):
        yield data if (start == 0 and end == len(data)) else data[start:end]


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def iter_log_lines(sources: Iterable[Source] | Source, chunk_bytes: int = CHUNK_BYTES) -> Iterator[LogLine]:
    """Every line of every source, parsed, in order. Bounded memory; never raises on content."""
    for source in source_list(sources):
        name = source_name(source)
        stream = open_source(source)
        try:
            lineno = 0
            for chunk in iter_chunks(stream, chunk_bytes):
                lines = chunk.split(b"\n")
                if chunk.endswith(b"\n"):
                    lines.pop()
                for raw in lines:
                    lineno += 1
                    yield parse_line(decode(raw[:MAX_LINE_BYTES]), name, lineno)
        finally:
            close_source(source, stream)


def source_list(sources: Iterable[Source] | Source) -> list[Source]:
    """One source or several, as a list."""
    if isinstance(sources, (str, Path)) or hasattr(sources, "read"):
        return [sources]  # type: ignore[list-item]
    return list(sources)  # type: ignore[arg-type]


def close_source(source: Source, stream: BinaryIO) -> None:
    """Close a stream `open_source` opened for a path; leave stdin and caller-owned streams open."""
    if isinstance(source, (str, Path)) and str(source) != "-":
        try:
            stream.close()
        except OSError:
            pass
