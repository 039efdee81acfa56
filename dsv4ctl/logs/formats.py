"""Log files as the shippers write them, turned back into the lines the program printed (`unwrap`).

A file's format is told from its first bytes (`sniff`), never from a flag or its name; what is not one of
these is read as plain text (and so is any line of these files that is not of the file's format):

- JSON records, one per line or pretty-printed over several (a JSON formatter behind
  `VLLM_LOGGING_CONFIG_PATH`: python-json-logger's `message`, `levelname`, `name`, `filename`, `lineno`,
  `processName`, `process`, `asctime`, `exc_info`, `stack_info`; also `msg`/`event`, `level`/`severity`,
  `logger`, `timestamp`/`time`): each becomes vLLM's own record line, `LEVEL MM-DD HH:MM:SS [file.py:N]
  message`, and a traceback in `exc_info`/`exc_text`/`exception`/`stack_info` (a string, or a list of
  lines) follows it line by line with the same prefix, as vLLM's NewLineFormatter prints a traceback;
- Docker's `json-file` driver (`{"log":"…\\n","stream":"stderr","time":"…"}`, a line over 16 KiB split
  into entries whose `log` does not end in a newline, joined here), as `docker logs -t` prints it;
- Kubernetes' CRI format (`<RFC 3339 time> stderr F <line>`), a line the runtime split into `P` parts
  joined before its `F` part;
- exports: Loki's query_range answer (`data.result[].values[[<ns>, <line>]]`, each stream's lines merged
  by time), Grafana's "Download logs" as JSON (rows of `line`, `timestamp`, `date`) and as text (`<time>\\t<line>`,
  plain already), Datadog's log list (`data[].attributes` or `logs[].content`: `message`, `timestamp`) and
  its CSV export (a header naming a `message` column and a `date`/`timestamp` one).
  Exports list the newest line first: their lines are put back in time order.

A JSON record or export line becomes `<ISO time> <line>` where a time is given (the reader peels it as it
peels `docker logs -t`). Line numbers are those of the unwrapped text. Standard library only.
"""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from dsv4ctl import re_cache
from dsv4ctl.errors import InputError

SNIFF_BYTES = 64 * 1024  # the head a format is told from
MAX_DOCUMENT_BYTES = 512 << 20  # a whole-document export (Loki, Datadog, pretty-printed records) is parsed in memory

_LEVELS = {"DEBUG": "DEBUG", "INFO": "INFO", "WARNING": "WARNING", "WARN": "WARNING", "ERROR": "ERROR",
           "CRITICAL": "CRITICAL", "FATAL": "CRITICAL", "EXCEPTION": "ERROR", "ERR": "ERROR"}
_ISO_DATE = re_cache.compile(r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}:\d{2}:\d{2})")
_CRI = re_cache.compile(r"^(\S+) (stdout|stderr) ([PF]) ?(.*)$", re.DOTALL)
# Grafana's text download: "<time>\t<line>" rows after meta lines ("Common labels: {…}", "Line limit: …")
_TIMED = re_cache.compile(r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\t(.*)$")
_MESSAGE_KEYS = ("message", "msg", "event")
_TRACE_KEYS = ("exc_info", "exc_text", "exception", "stack_info", "stack_trace", "traceback")


# ------------------------------------------------------------------------------------------------- records
def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        # a traceback as a list: traceback.format_exception's chunks (each ends in "\n") or one line each
        return "".join(value) if any(v.endswith("\n") for v in value) else "\n".join(value)
    return None


def _clock(value: Any) -> str | None:
    """vLLM's `MM-DD HH:MM:SS` from an ISO time or logging's asctime ("2026-01-21 08:28:33,853")."""
    if isinstance(value, str) and (m := _ISO_DATE.search(value)) is not None:
        return f"{m.group(2)}-{m.group(3)} {m.group(4)}"
    if isinstance(value, (int, float)) and value > 1e9:  # epoch seconds (or ms, ns)
        while value > 1e11:
            value /= 1000
        return datetime.fromtimestamp(value, timezone.utc).strftime("%m-%d %H:%M:%S")
    return None


def record_fields(obj: dict) -> tuple[str, str | None, str | None, str | None, str | None, int | None, str | None] | None:
    """(message, level, process name, fileinfo, clock, pid, traceback) of a log record a JSON formatter wrote,
    or None when `obj` has no message."""
    message = next((obj[k] for k in _MESSAGE_KEYS if isinstance(obj.get(k), str)), None)
    if message is None:
        return None
    level = next((str(obj[k]).upper() for k in ("levelname", "level", "severity", "log.level")
                  if isinstance(obj.get(k), str)), None)
    level = _LEVELS.get(level) if level else None
    process = obj.get("processName") if isinstance(obj.get("processName"), str) else None
    pid = obj.get("process") if isinstance(obj.get("process"), int) else None
    where = obj.get("filename"), obj.get("lineno")
    if isinstance(where[0], str) and isinstance(where[1], int):
        fileinfo: str | None = f"{where[0]}:{where[1]}"
    else:
        fileinfo = next((obj[k] for k in ("name", "logger", "logger_name") if isinstance(obj.get(k), str) and obj[k]), None)
        fileinfo = fileinfo.replace(" ", "_").replace("]", ")") if fileinfo else None
    clock = next((c for k in ("asctime", "timestamp", "time", "@timestamp", "created") if (c := _clock(obj.get(k)))), None)
    trace = next((t.rstrip("\n") for k in _TRACE_KEYS if (t := _text(obj.get(k))) and t.strip()), None)
    return message, level, process, fileinfo, clock, pid, trace


def record_lines(obj: dict) -> list[str] | None:
    """The lines vLLM's own format would have printed for this JSON record (see the module docstring)."""
    fields = record_fields(obj)
    if fields is None:
        return None
    message, level, process, fileinfo, clock, pid, trace = fields
    prefix = f"({process} pid={pid}) " if process and pid is not None else ""
    if level is not None and fileinfo is not None:
        prefix += f"{level} {clock} [{fileinfo}] " if clock else f"{level} [{fileinfo}] "
    elif level is not None:
        prefix += f"{level}:     "  # the level alone, as uvicorn's format gives it
    lines = message.split("\n")
    if trace:
        lines += trace.split("\n")
    return [prefix + ln.rstrip("\r") for ln in lines]


# --------------------------------------------------------------------------------------- entries with a time
def _ns(value: Any) -> int | None:
    """Nanoseconds since the epoch of an export's time (exact: lines a nanosecond apart keep their order):
    nanoseconds as a string (Loki, Grafana), epoch seconds/ms/µs/ns, ISO strings (Datadog, Grafana's `date`)."""
    if isinstance(value, str) and value.isdecimal():
        value = int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        scale = 10**9
        while value * scale > 10**20 and scale > 1:  # ms, µs or ns already
            scale //= 1000
        return int(value * scale)
    if isinstance(value, str):
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if t.tzinfo is None:
            t = t.replace(tzinfo=timezone.utc)
        return int(t.timestamp()) * 10**9 + t.microsecond * 1000
    return None


def _iso(nanos: int | None) -> str:
    if nanos is None:
        return ""
    t = datetime.fromtimestamp(nanos // 10**9, timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos % 10**9:09d}Z "


def _entry(obj: dict) -> tuple[int | None, str] | None:
    """(time, text) of one exported log entry: Grafana's row, Datadog's event (v2 `attributes`, v1 `content`)."""
    if isinstance(obj.get("line"), str):
        return _ns(obj.get("timestamp")) or _ns(obj.get("date")), obj["line"]
    for key in ("attributes", "content"):
        inner = obj.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return _ns(inner.get("timestamp")) or _ns(obj.get("timestamp")), inner["message"]
    return None


def _document_entries(doc: Any) -> list[tuple[int | None, str]] | None:
    """Every entry of an export document in time order, or None when `doc` is not an export."""
    entries: list[tuple[int | None, str]] = []
    if isinstance(doc, dict) and isinstance(doc.get("data"), dict) and isinstance(doc["data"].get("result"), list):
        doc = doc["data"]["result"]  # Loki's query_range answer
    elif isinstance(doc, dict) and isinstance(doc.get("data"), list):
        doc = doc["data"]  # Datadog's v2 list
    elif isinstance(doc, dict) and isinstance(doc.get("logs"), list):
        doc = doc["logs"]  # Datadog's v1 list
    items = doc if isinstance(doc, list) else [doc]
    streams = 0
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("values"), list):  # a Loki stream
            streams += 1
            for pair in item["values"]:
                if isinstance(pair, list) and len(pair) >= 2 and isinstance(pair[1], str):
                    entries.append((_ns(pair[0]), pair[1]))
        elif isinstance(item, dict) and (e := _entry(item)) is not None:
            entries.append(e)
        else:
            return None
    if not entries and not streams:
        return None
    return _in_order(entries)


def _entry_lines(entries: list[tuple[int | None, str]]) -> Iterator[str]:
    for t, text in entries:
        lines = text.rstrip("\n").split("\n")
        yield _iso(t) + lines[0].rstrip("\r")  # the continuation lines keep their indentation, without the time
        for ln in lines[1:]:
            yield ln.rstrip("\r")


# ---------------------------------------------------------------------------------------------- detection
def _first_lines(head: bytes, n: int = 20) -> list[str]:
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    lines = text.split("\n")
    if len(lines) > 1:
        lines = lines[:-1]  # the last one may be cut (a head is rarely the whole file)
    return [ln.rstrip("\r") for ln in lines if ln.strip()][:n]


def _json_line(line: str) -> Any:
    s = line.strip()
    if not (s.startswith("{") and s.endswith("}")):
        return None
    try:
        return json.loads(s)
    except ValueError:
        return None


def _known_object(obj: Any) -> bool:
    return isinstance(obj, dict) and (
        record_fields(obj) is not None or _docker(obj) is not None or _entry(obj) is not None
        or _document_entries(obj) is not None)


def sniff(head: bytes) -> str | None:
    """The format of a file from its first bytes: "json-lines", "json-document", "cri", "csv", "timed-text", or None
    (plain)."""
    stripped = head.decode("utf-8", errors="replace").lstrip("\ufeff").lstrip()
    lines = _first_lines(head)
    if stripped[:1] in ("{", "["):
        objs = [_json_line(ln) for ln in lines]
        if any(_known_object(o) for o in objs):
            return "json-lines"
        first = stripped.split("\n", 1)[0].strip()
        # pretty-printed ("{" or "[" alone on the first line), or one document longer than the head
        if first in ("{", "[") or (first.startswith(('{"', "[{", "[ {", '[\n')) and (not objs or objs[0] is None)):
            return "json-document"
    if lines and sum(bool(_CRI.match(ln)) for ln in lines) >= max(1, len(lines) // 2) and any(
            (m := _CRI.match(ln)) and m.group(3) == "P" for ln in lines):
        return "cri"
    if lines and "," in lines[0] and _csv_columns(lines[0]) is not None:
        return "csv"
    timed = [bool(_TIMED.match(ln)) for ln in lines]
    if sum(timed) >= 2 and sum(timed) >= len(lines) // 2:
        return "timed-text"
    return None


def _csv_columns(header: str) -> tuple[int, int | None] | None:
    """(message column, time column) of a Datadog CSV export's header, or None."""
    try:
        names = [c.strip().lower() for c in next(csv.reader([header]))]
    except (csv.Error, StopIteration):
        return None
    msg = next((i for i, c in enumerate(names) if c in ("message", "content")), None)
    if msg is None or len(names) < 2:
        return None
    return msg, next((i for i, c in enumerate(names) if c in ("date", "timestamp", "time", "@timestamp")), None)


# ---------------------------------------------------------------------------------------------- unwrapping
def _docker(obj: dict) -> tuple[str, str] | None:
    """(time, text) of a json-file entry."""
    if isinstance(obj.get("log"), str) and ("stream" in obj or "time" in obj):
        return (obj["time"] if isinstance(obj.get("time"), str) else ""), obj["log"]
    return None


def _json_lines(lines: Iterator[str]) -> Iterator[str]:
    """JSON lines (records, json-file entries, export rows), each line unwrapped; other lines as they are."""
    def parsed(line: str) -> Any:
        obj = _json_line(line) if line[:1] in ("{", " ") else None
        return obj if _known_object(obj) else line  # an object of no known shape stays the text it was

    return _unwrap_items(parsed(line) for line in lines)


def _unwrap_items(items: Iterator[Any]) -> Iterator[str]:
    """Lines of text as they are, JSON objects unwrapped (a json-file entry, a record, an export row or answer);
    json-file entries split by Docker joined again."""
    partial: list[str] = []
    stamp = ""
    for obj in items:
        if isinstance(obj, dict) and (d := _docker(obj)) is not None:
            if not partial:
                stamp = d[0]
            partial.append(d[1])
            if d[1].endswith("\n"):
                text = "".join(partial).rstrip("\n").rstrip("\r")
                partial = []
                yield f"{stamp} {text}" if stamp else text
            continue
        if partial:
            yield (f"{stamp} " if stamp else "") + "".join(partial)
            partial = []
        if isinstance(obj, str):
            yield from obj.split("\n")
            continue
        out = record_lines(obj) if isinstance(obj, dict) else None
        if out is None and isinstance(obj, dict) and (e := _entry(obj)) is not None:
            out = list(_entry_lines([e]))
        if out is None and (entries := _document_entries(obj)) is not None:
            out = list(_entry_lines(entries))  # an export's answer (on one line: curl's output)
        if out is None and isinstance(obj, list):
            yield from _unwrap_items(iter(obj))  # an array of records
            continue
        yield from out if out is not None else [json.dumps(obj, ensure_ascii=False)]
    if partial:
        yield (f"{stamp} " if stamp else "") + "".join(partial)


def _cri(lines: Iterator[str]) -> Iterator[str]:
    parts: list[str] = []
    stamp = stream = ""
    for line in lines:
        m = _CRI.match(line)
        if m is None:
            yield line
            continue
        if not parts:
            stamp, stream = m.group(1), m.group(2)
        parts.append(m.group(4))
        if m.group(3) == "F":
            yield f"{stamp} {stream} F {''.join(parts)}"
            parts = []
    if parts:
        yield f"{stamp} {stream} F {''.join(parts)}"


def _document(text: str) -> Iterator[str]:
    """A whole JSON document (an export, or pretty-printed records one after another)."""
    decoder = json.JSONDecoder()
    docs: list[Any] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            break
        try:
            doc, i = decoder.raw_decode(text, i)
        except ValueError:
            # what does not parse is kept as text (lines printed outside the logger), up to the next record; a record cut
            # short at the end of a paste is read as far as it goes
            nxt = text.find("\n{", i)
            if nxt < 0 and text[i] == "{" and (cut := _cut_short(text[i:])) is not None:
                docs.append(cut)
                break
            nxt = n if nxt < 0 else nxt + 1
            docs.append(text[i:nxt].rstrip("\n"))
            i = nxt
            continue
        docs.append(doc)
    if not any(isinstance(d, list) or _known_object(d) for d in docs):
        yield from text.split("\n")  # JSON of no shape of ours (an error body a client printed): the text as it is
        return
    yield from _unwrap_items(iter(docs))


def _cut_short(text: str) -> dict | None:
    """A JSON record a paste cut off before its end, read as far as it goes: the open string, lists and objects closed
    where the text stops (a dangling key or comma dropped). None when that is not a record of a shape this reads."""
    stack: list[str] = []
    in_string = escaped = False
    for c in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_string = True
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]" and stack:
            stack.pop()
    tail = text + ('"' if in_string else "")
    tail = tail.rstrip().rstrip(",")
    if tail.endswith(":"):
        tail += " null"
    try:
        obj = json.loads(tail + "".join(reversed(stack)))
    except ValueError:
        return None
    return obj if isinstance(obj, dict) and record_fields(obj) is not None else None


def _timed_text(text: str) -> Iterator[str]:
    """Rows of `<time>\t<line>` (Grafana's text download) in time order; the lines before them (its meta lines)
    and lines without a time (a row's continuation) as they are, after their row."""
    head: list[str] = []
    rows: list[tuple[int | None, str]] = []
    for ln in text.split("\n"):
        m = _TIMED.match(ln)
        if m is not None:
            rows.append((_ns(m.group(1).replace(",", ".")), m.group(2)))
        elif rows:
            rows[-1] = (rows[-1][0], rows[-1][1] + "\n" + ln)
        elif ln.strip():
            head.append(ln)
    yield from head
    yield from _entry_lines(_in_order(rows))


def _in_order(entries: list[tuple[int | None, str]]) -> list[tuple[int | None, str]]:
    """An export's entries oldest first (exports list the newest first), lines of one time in their order."""
    if len(entries) > 1 and entries[0][0] is not None and entries[-1][0] is not None and entries[0][0] > entries[-1][0]:
        entries.reverse()
    if all(t is not None for t, _ in entries):
        entries.sort(key=lambda e: e[0])
    return entries


def _csv(text: str) -> Iterator[str]:
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    cols = _csv_columns(",".join(f'"{c}"' for c in header)) if header else None
    if cols is None:
        yield from text.split("\n")
        return
    msg, when = cols
    entries = [(_ns(row[when]) if when is not None and when < len(row) else None, row[msg])
               for row in rows if msg < len(row)]
    yield from _entry_lines(_in_order(entries))


class Unwrapped:
    """A binary stream of the unwrapped text: `head` and then what `read(n)` still gives, in `fmt`."""

    def __init__(self, fmt: str, head: bytes, read: Callable[[int], bytes], name: str | None = None,
                 close: Callable[[], None] | None = None) -> None:
        self.fmt = fmt
        self.name = name
        self._head = head
        self._read = read
        self._close = close
        self._buf = b""
        self._lines = self._generate()

    def _raw_lines(self) -> Iterator[str]:
        carry = b""
        data = self._head
        self._head = b""
        while True:
            if not data:
                data = self._read(1 << 20)
                if not data:
                    break
            data = carry + data
            parts = data.split(b"\n")
            carry = parts.pop()
            for p in parts:
                yield p.decode("utf-8", errors="replace").rstrip("\r")
            data = b""
        if carry:
            yield carry.decode("utf-8", errors="replace").rstrip("\r")

    def _generate(self) -> Iterator[str]:
        if self.fmt == "json-lines":
            return _json_lines(self._raw_lines())
        if self.fmt == "cri":
            return _cri(self._raw_lines())
        data = [self._head]
        self._head = b""
        size = len(data[0])
        while block := self._read(1 << 20):
            data.append(block)
            size += len(block)
            if size > MAX_DOCUMENT_BYTES:
                raise InputError(f"cannot read {self.name or 'the input'}: a {self.fmt} export over "
                                 f"{MAX_DOCUMENT_BYTES >> 20} MiB is parsed whole", hint="export fewer lines, or as JSON lines")
        text = b"".join(data).decode("utf-8", errors="replace").lstrip("\ufeff")
        if self.fmt == "csv":
            return _csv(text)
        return _timed_text(text) if self.fmt == "timed-text" else _document(text)

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self._buf) < n:
            chunk = list(_take(self._lines, 4096))
            if not chunk:
                break
            self._buf += ("\n".join(chunk) + "\n").encode("utf-8")
        if n < 0:
            out, self._buf = self._buf, b""
        else:
            out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def close(self) -> None:
        self._lines = iter(())
        if self._close is not None:
            self._close()


def _take(it: Iterator[str], n: int) -> Iterator[str]:
    for _ in range(n):
        try:
            yield next(it)
        except StopIteration:
            return
