"""Streaming reader for vLLM logs: files, `-` (stdin), compressed files (gzip, xz, bzip2, zip), UTF-16, open binary
streams.

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

A file a shipper wrote (JSON records, Docker's json-file, CRI, Loki/Grafana/Datadog exports) is told from its
first bytes by `open_source` and read as the lines it wraps (`dsv4ctl.logs.formats`).
"""

from __future__ import annotations

import io
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, Union

from dsv4ctl import files, re_cache, stamps
from dsv4ctl.catalogue.signature_index import plain
from dsv4ctl.errors import InputError
from dsv4ctl.logs import formats

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
    indent: the spaces before the message once the prefixes are off (a traceback's frame lines have 2,
        their source lines 4 or more).
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
    indent: int = 0


_ANSI_RE = re_cache.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]")
# Colour codes whose ESC byte a copy-paste dropped ("[33m(raylet)[0m"): SGR sequences only.
_SGR_BARE_RE = re_cache.compile(r"\[[0-9]{1,3}(?:;[0-9]{1,3})*m")
# Buildkite's timestamp marker, an APC sequence before each line ("\x1b_bk;t=1700000000000\x07").
_BUILDKITE_RE = re_cache.compile(r"\x1b?_bk;t=[0-9]+\x07?")
_LEVELS = r"DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL"
# The process tag: (EngineCore_DP0 pid=1234), (RayWorkerWrapper pid=1234, ip=10.0.0.2), (pid=1234) and,
# before the Worker_TP names, (VllmWorker rank=0 pid=1234) (vllm==0.9.2 vllm/v1/executor/multiproc_executor.py:346,
# prefix format vllm/executor/multiproc_worker_utils.py:266); the rank stays part of the name. A pasted pid may
# be elided ("pid=...").
_PROC_TAG = r"\((?:([A-Za-z_][\w.:-]*(?:\s+rank=\d+)?)\s+)?pid=(\d+|\.\.\.)(?:,\s*ip=[^)\s]*)?\)"
_PROC_AT_END_RE = re_cache.compile(_PROC_TAG + "$")
# vLLM's format since 0.7 puts the location in brackets ("[kv_cache_utils.py:2477]"); older releases
# wrote it without the opening one (vllm==0.6.3 vllm/logger.py:19:
# _FORMAT = "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s"). Pastes elide the time ("...").
_RECORD = (
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
    r"(?:(?P<ts>\d{2}-\d{2}\s+\d{2}:\d{2}:\d{2}|\.\.\.)(?:[.,]\d+)?\s+|(?=\[))"
    r"\[?(?P<fileinfo>[^\]\s\[]+:\d+|[^\]\s]+(?=\]))\]\s?"
)
_RECORD_RE = re_cache.compile("^" + _RECORD)
# Same record with an arbitrary VLLM_LOGGING_PREFIX (or a foreign wrapper) in front.
_RECORD_SEARCH_RE = re_cache.compile(r"(?:^|\s|\))" + _RECORD)
_RAY_REPEAT_RE = re_cache.compile(r"\s*\[repeated \d+x across cluster\]\s*$")

# The wrappers around a line, peeled from its start one layer at a time (see `parse_line`). Each is
# (name, regex); named groups carry what the layer says (process, pid, level, timestamp, fileinfo).
_MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_LAYERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # RFC 3339 / ISO 8601 (docker logs -t, kubectl --timestamps, GitHub Actions, CI systems), optionally the
    # CRI log format's stream and tag (/var/log/containers: "<time> stdout F <line>").
    ("timestamp", re_cache.compile(
        r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?: ?(?:Z|UTC|[+-]\d{2}:?\d{2}))?(?:\s+(?:stdout|stderr) [FP])?\s+")),
    # The same in brackets, with SGLang's rank names ("[2025-08-05 09:34:54 TP0] "), and a time of day alone
    # ("[19:25:48.404432] " before the CUDA driver's "coredump:" lines).
    ("timestamp", re_cache.compile(
        r"^\[\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?: ?(?:Z|UTC|[+-]\d{2}:?\d{2}))?(?: [A-Z]{2,4}\d+)*\]\s*")),
    ("timestamp", re_cache.compile(r"^\[\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\]\s*")),
    # The kernel log: dmesg's seconds since boot ("[ 1234.567890] ") and dmesg -T's time ("[Tue Dec  9 07:33:01 2026] ").
    ("timestamp", re_cache.compile(r"^\[\s*\d+\.\d{6}\]\s*")),
    ("timestamp", re_cache.compile(r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) " + _MONTHS + r" [ 0-9]\d \d{2}:\d{2}:\d{2} \d{4}\]\s*")),
    # journald / syslog: "Dec 01 13:42:51 host vllm[1234]: ", and the host and unit after an ISO time.
    ("journald", re_cache.compile(r"^" + _MONTHS + r" [ 0-9]\d \d{2}:\d{2}:\d{2} \S+ [^\s:\[]+(?:\[\d+\])?: ")),
    # kubectl logs --prefix: "[pod/vllm-0/vllm] "
    ("kubectl", re_cache.compile(r"^\[(?:pod|deployment|statefulset|job|daemonset|replicaset|node)/[^\]\s]+\]\s")),
    # torch.distributed's rank prefix: "[rank0]:", torchrun's "[default0]:"
    ("rank", re_cache.compile(r"^\[(?:rank|default)\d+\]:\s?")),
    # c10's logging (torch==2.13.0 c10/util/Logging.cpp, glog-like): "[E822 16:31:16.131931664 ProcessGroupNCCL.cpp:632] "
    ("glog", re_cache.compile(
        r"^\[(?P<glevel>[IWEF])(?P<gdate>\d{3,4}) (?P<gtime>\d{2}:\d{2}:\d{2})(?:\.\d+)?(?: +\d+)? (?P<gfile>[\w.+-]+:\d+)\]\s?")),
    # glog itself: "E1201 12:00:00.123456  1234 file.cc:12] ", and torch.distributed's Python logger in its
    # format, a path for the file ("W1103 14:20:11.402000 48190 site-packages/torch/distributed/run.py:982] ")
    ("glog", re_cache.compile(
        r"^(?P<glevel>[IWEF])(?P<gdate>\d{4}) (?P<gtime>\d{2}:\d{2}:\d{2})\.\d+ +\d+ (?P<gfile>[\w./+-]+:\d+)\]\s?")),
    # Ray's C++ components: "[2025-04-16 11:52:45,123 E 858 901] (raylet) node_manager.cc:123: "
    ("glog", re_cache.compile(
        r"^\[\d{4}-(?P<gmonth>\d{2})-(?P<gday>\d{2}) (?P<gtime>\d{2}:\d{2}:\d{2})[,.]\d+ (?P<glevel>[IWEFD]) \d+ \d+\]\s(?:\((?P<gproc>\w+)\)\s)?"
        r"(?P<gfile>[\w.+-]+:\d+):\s?")),
    # vLLM's (and Ray's) process tag
    ("process", re_cache.compile("^" + _PROC_TAG + r"\s?")),
    # Ray's own processes: "(raylet) ", "(raylet, ip=10.0.0.2) ", "(autoscaler +2s) "
    ("ray", re_cache.compile(
        r"^\((?P<rproc>raylet|gcs_server|autoscaler|monitor|dashboard|dashboard_agent|log_monitor|runtime_env_agent)"
        r"(?:[, ][^)]*)?\)\s?")),
    # The CUDA driver's core dump (CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1): "coredump: "
    ("coredump", re_cache.compile(r"^coredump:\s?")),
    # docker compose: "vllm-1  | ", "vllm_1 | "; the service name has no spaces or parentheses.
    ("compose", re_cache.compile(r"^[A-Za-z0-9][\w.-]{0,62}\s*\|\s?")),
    # A reply's quote ("> ") and Slurm's task label (srun --label: "0: "), outside everything else.
    ("quote", re_cache.compile(r"^>+ ?")),
    ("srun", re_cache.compile(r"^[0-9]{1,4}: ")),
    # An exception group's traceback (CPython 3.11 traceback.py: each nested exception's lines behind "| ").
    ("group", re_cache.compile(r"^ *\| ")),
    # Python's logging formats: "<time> - INFO - file.py:12 - " (after the time), "ERROR:root:"
    ("pylog", re_cache.compile(r"^-\s+(?P<plevel>" + _LEVELS + r")\s+-\s+(?:(?P<pfile>[\w.+-]+:\d+)\s+-\s+)?")),
)
_OUTER = ("timestamp", "journald", "compose", "quote", "srun", "kubectl", "group")
_OUTER_ONLY = ("compose", "quote", "srun", "group")  # peeled only before any tag (see `parse_line`)
# Every layer in one alternation, in `_LAYERS`' order (named groups made plain, each layer one named group): one
# `match` tells the first layer that matches, where trying them one by one took 20 calls on a line none matches.
_ANY_LAYER_RE = re_cache.compile("|".join(
    f"(?P<L{k}>{plain(rx.pattern)})" for k, (_name, rx) in enumerate(_LAYERS)))
# After an ISO time, journald's short-iso format goes on with the host and the unit with its pid.
_SYSLOG_TAIL_RE = re_cache.compile(r"^\S+ [^\s:\[]+\[\d+\]: ")
_PYLOG_BASIC_RE = re_cache.compile(r"^(?P<level>" + _LEVELS + r"):[\w.]+:")
# uvicorn's default format: "INFO:     Application startup complete."
_UVICORN_RE = re_cache.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
_GLOG_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL", "D": "DEBUG"}


def strip_ansi(text: str) -> str:
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    return text


def printable(raw: str) -> str:
    """The line as it stands in the log, as a terminal shows it: its escape sequences and CR-separated
    redraws (all but the last) removed, everything else kept (colour codes whose ESC a copy-paste lost
    too: they are text of the line)."""
    text = strip_ansi(raw)
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    if text.endswith("^M"):
        text = text[:-2]  # a carriage return a copy rendered as text (an editor's or a terminal's "^M")
    return text.rstrip("\n")


def clean(raw: str) -> str:
    """The line as it shows: colour codes (with or without their ESC byte) and Buildkite markers removed,
    and of CR-separated redraws the last (CRLF, vLLM's multi-line records, tqdm)."""
    text = raw
    if "_bk;t=" in text:
        text = _BUILDKITE_RE.sub("", text)
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    if "m" in text and "[" in text and _SGR_BARE_RE.search(text):
        text = _SGR_BARE_RE.sub("", text)
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    if text.endswith("^M"):
        text = text[:-2]  # a carriage return a copy rendered as text (an editor's or a terminal's "^M")
    return text.rstrip("\n")


def _json_record(text: str) -> tuple[str, str | None, str | None, str | None] | None:
    """A log record a JSON formatter wrote (`VLLM_LOGGING_CONFIG_PATH` with python-json-logger and the like), on a
    line of a file that is not all such records (`formats` unwraps those): (message, level, process, fileinfo)
    from its usual keys (`formats.record_fields`), or None when the line is not such an object. A traceback in a
    field of its own gives its last line to the message."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    fields = formats.record_fields(obj) if isinstance(obj, dict) else None
    if fields is None:
        return None
    message, level, process, fileinfo, _clock, _pid, trace = fields
    if trace:
        message = f"{message} | {trace.strip().splitlines()[-1]}"
    return message, level, process, fileinfo


def parse_line(raw: str, source: str = "-", lineno: int = 0) -> LogLine:
    """Parse one raw line (without its newline) into a `LogLine`. Never raises.

    Kept whole: it runs on every line read (a 1 GiB log: millions); one call per layer would cost more than
    the peeling itself.

    The wrappers around a line are peeled from its start one layer at a time, in any order and
    nesting (`_LAYERS`): timestamps (RFC 3339, bracketed, time of day, CRI), journald, kubectl's
    --prefix, docker compose, torch's rank prefix, c10/glog and Ray's C++ records, vLLM's and Ray's
    process tags, the core dump's "coredump:". Then vLLM's own record (`LEVEL MM-DD HH:MM:SS
    [file.py:N]`, also behind an unknown prefix), uvicorn's and Python logging's formats."""
    text = clean(raw)
    process: str | None = None
    pid: int | None = None
    level: str | None = None
    fileinfo: str | None = None
    timestamp: str | None = None
    if text.startswith("{") and text.rstrip().endswith("}") and '"' in text:
        record = _json_record(text)
        if record is not None:
            message, level, process, fileinfo = record
            line = parse_line(message, source, lineno)  # the message may carry vLLM's own prefix
            return LogLine(source, lineno, line.process or process, line.pid, line.level or level,
                           line.fileinfo or fileinfo, line.message, raw, line.timestamp, line.indent)

    peeled: list[str] = []
    while text and len(peeled) < 10:
        first = _ANY_LAYER_RE.match(text)
        for name, rx in _LAYERS[int(first.lastgroup[1:]) if first is not None else len(_LAYERS):]:
            m = rx.match(text)
            if m is None:
                continue
            # docker compose's service name, a quote and Slurm's label come first (before any tag): "a | b" or
            # "0: x" inside a message is text.
            if name in _OUTER_ONLY and (text.startswith("(") or any(p not in _OUTER for p in peeled)):
                continue
            gd = m.groupdict()
            if name == "process":
                if process is None or m.group(1):
                    process = m.group(1) or process
                    pid = int(m.group(2)) if m.group(2).isdecimal() else pid
            elif name == "ray":
                process = process or gd["rproc"]
            elif name == "coredump":
                process = process or "coredump"
            elif name == "glog":
                level = level or _GLOG_LEVELS.get(gd["glevel"])
                fileinfo = fileinfo or gd["gfile"]
                if timestamp is None and (date := gd.get("gdate") or (gd.get("gmonth") or "") + (gd.get("gday") or "")):
                    timestamp = stamps.clock(date[:-2], date[-2:], gd["gtime"])  # the record's own time, MMDD
                process = process or gd.get("gproc")
            elif name == "pylog":
                level = level or ("WARNING" if gd["plevel"] == "WARN" else gd["plevel"])
                fileinfo = fileinfo or gd["pfile"]
            text = text[m.end():]
            if name == "timestamp" and (t := _SYSLOG_TAIL_RE.match(text)) is not None:
                text = text[t.end():]
            peeled.append(name)
            break
        else:
            break
        if level is not None:
            break  # a record format was peeled: the message starts here
    m = _RECORD_RE.match(text) if level is None else None
    if m is None and level is None and ("[" in text or "]" in text) and any(
        lv in text for lv in ("INFO", "WARN", "ERROR", "DEBUG", "CRITICAL")
    ):
        m = _RECORD_SEARCH_RE.search(text)
        if m is not None and m.start() > 200:
            m = None
        if m is not None:
            # A VLLM_LOGGING_PREFIX may itself precede the process tag.
            head = text[: m.start()].rstrip()
            pm = _PROC_AT_END_RE.search(head)
            if pm and process is None:
                process = pm.group(1)
                pid = int(pm.group(2)) if pm.group(2).isdecimal() else None
    if m is not None:
        level = m.group("level")
        if level == "WARN":
            level = "WARNING"
        ts = m.group("ts")
        timestamp = None if ts in (None, "...") else re.sub(r"\s+", " ", ts)
        fileinfo = m.group("fileinfo")
        text = text[m.end():]
    elif level is None:
        um = _UVICORN_RE.match(text) or _PYLOG_BASIC_RE.match(text)
        if um:
            level = um.group("level")
            text = text[um.end():]
    if "repeated" in text:
        text = _RAY_REPEAT_RE.sub("", text)
    stripped = text.strip()
    indent = len(text) - len(text.lstrip(" \t")) if stripped else 0
    return LogLine(
        source=source,
        lineno=lineno,
        process=process,
        pid=pid,
        level=level,
        fileinfo=fileinfo,
        message=stripped,
        raw=raw,
        timestamp=timestamp,
        indent=indent,
    )


# ---------------------------------------------------------------------------------------------
# Sources


def source_name(source: Source) -> str:
    if isinstance(source, (str, Path)):
        return "-" if str(source) == "-" else str(source)
    name = getattr(source, "name", None)
    return str(name) if isinstance(name, str) and name else "<stream>"


def _directory_hint(path: Path) -> str:
    """What to run for a directory of logs: its files passed to diagnose, or bundled by collect."""
    import shlex

    quoted = shlex.quote(str(path))
    try:
        logs = sorted(p.name for p in path.iterdir() if p.is_file() and p.suffix in (".log", ".txt", ".gz"))
    except OSError:
        logs = []
    if logs:
        suffix = Path(logs[0]).suffix
        count = sum(1 for name in logs if name.endswith(suffix))
        return (f"pass its logs: `dsv4ctl diagnose {quoted}/*{suffix}` ({count} file{'s' if count != 1 else ''} like "
                f"{logs[0]} there), or bundle the directory: `dsv4ctl collect {quoted}`")
    return f"pass the log file itself, or bundle the directory's files: `dsv4ctl collect {quoted}`"


def open_source(source: Source) -> BinaryIO:
    """Open a path, `-` or a binary stream for reading: compressed and UTF-16/32 files are told from their first
    bytes and read as the text inside (`dsv4ctl.files.decoded`)."""
    if isinstance(source, (str, Path)):
        if str(source) == "-":
            raw: BinaryIO = sys.stdin.buffer
        else:
            path = Path(source)
            try:
                if path.is_dir():
                    raise InputError(f"{path} is a directory, not a log file", hint=_directory_hint(path))
                raw = open(path, "rb", buffering=formats.SNIFF_BYTES)  # noqa: SIM115 - closed by the caller
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
    buffered: BinaryIO = raw if hasattr(raw, "peek") else io.BufferedReader(raw, formats.SNIFF_BYTES)  # type: ignore[arg-type]
    # Compressed (gzip, xz, bzip2, a zip of one file) or UTF-16/32 text is read as the text inside, whatever the
    # name; a binary file or an archive is refused (dsv4ctl.files).
    try:
        stream = files.decoded(buffered, source_name(source))
    except InputError:
        if isinstance(source, (str, Path)) and str(source) != "-":
            buffered.close()
        raise
    # A shipper's format (JSON records, Docker's json-file, CRI, exports) is read as the lines it wraps.
    try:
        first = stream.peek(formats.SNIFF_BYTES)  # type: ignore[attr-defined]
    except (OSError, ValueError, EOFError):
        first = b""
    fmt = formats.sniff(first) if first else None
    if fmt is not None:
        return formats.Unwrapped(fmt, b"", _Reader(stream).read, source_name(source), stream.close)  # type: ignore[return-value]
    return stream


class _Reader:
    """read(n) of a stream, as many bytes as it has up to n (a pipe's or a decompressor's reads come in parts)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream

    def read(self, n: int) -> bytes:
        try:
            return self.stream.read(n)
        except InputError:
            raise
        except OSError as exc:
            raise InputError(f"cannot read {source_name(self.stream)}: {exc.strerror or exc}") from None


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
