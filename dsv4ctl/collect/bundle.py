"""The bundle: one `.tar.gz` with every gathered log (secrets redacted) and `manifest.json`.

Logs are streamed in line by line: each line is redacted (dsv4ctl.redaction, the rule `doctor` uses), its
time read (an RFC 3339 stamp that `kubectl logs --timestamps` / `docker logs --timestamps` put first, else the
line's own time in any format dsv4ctl reads, `dsv4ctl.stamps`: vLLM's record, c10's and glog's, Ray's C++
records) for the entry's time range, and written to a spool file; a log over
`max_bytes` keeps its first quarter and its end (where a failure is), with one line saying how much was
left out between. Each log enters the archive as soon as it is read, and the manifest is written last in a
`finally`, so an interrupted or failing gather keeps everything read up to then.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import signal
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from dsv4ctl import stamps
from dsv4ctl.collect.model import LogEntry
from dsv4ctl.collect.names import BUNDLE_SUFFIXES, MANIFEST
from dsv4ctl.errors import InputError, OutputError
from dsv4ctl.files import TEMP_HINT, cannot_write, temporary_directory
from dsv4ctl.redaction import NAME_END, SECRET_STARTS, SECRET_WORDS, redact_line

# The stamp `kubectl logs --timestamps` / `docker logs --timestamps` put first, kept as written (it has the year).
_RFC3339 = re.compile(rb"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s")
_CHUNK = 1 << 20
_MAX_LINE = 4 << 20  # the most of one line held in memory before it is written on
# The redaction rule's words (dsv4ctl.redaction): a line without any of them holds no secret.
# One pattern per word (a literal first: re's fast search), the next character none that continues a name.
_NOT_NAME = rb"(?![a-z0-9_.\-])"  # redaction.NAME_END as a class
_SPOT_RES = tuple(re.compile(re.escape(w.encode()) + _NOT_NAME) for w in SECRET_WORDS) + tuple(
    re.compile(re.escape(w.encode())) for w in SECRET_STARTS)


def secret_spots(lower: bytes) -> list[int]:
    """Where in a lower-cased block a line may hold a secret: each secret word that ends its name, each text
    that starts a secret value."""
    return sorted(m.start() for rx in _SPOT_RES for m in rx.finditer(lower))


def _first_time(lines) -> str | None:
    """The first line's own time: an RFC 3339 stamp first on the line as written, else any other format's
    (`dsv4ctl.stamps`: c10's, glog's, Ray's C++ records, vLLM's record) as `MM-DD HH:MM:SS`."""
    for raw in lines:
        if stamp := _RFC3339.match(raw):
            return stamp.group(1).decode("ascii", "replace")
        if stamp := stamps.line_time_of_bytes(raw):
            return stamp
    return None


class _Spool:
    """A log's bytes as kept: the head, then a rolling tail of two segments (bounded disk, in a temporary directory:
    a write that fails there is an `OutputError` naming it, not a log that stopped)."""

    def __init__(self, directory: str, max_bytes: int) -> None:
        self.head_limit = max(max_bytes // 4, 1)
        self.tail_limit = max(max_bytes - self.head_limit, 1)
        self._dir = directory
        try:
            self.head = tempfile.TemporaryFile(dir=directory)
        except OSError as exc:
            raise self._cannot(exc) from None
        self.head_size = 0
        self.head_closed = False
        self.segments: list[tuple[IO[bytes], int]] = []
        self.dropped = 0

    def write(self, data: bytes) -> None:
        """Whole lines: those that fit go to the head, the rest to the tail."""
        try:
            self._write(data)
        except OSError as exc:
            raise self._cannot(exc) from None

    def flush(self) -> None:
        """Everything on the disk, before it is read back: a full disk shows here, not inside the archive."""
        try:
            for f in (self.head, *(f for f, _ in self.segments)):
                f.flush()
        except OSError as exc:
            raise self._cannot(exc) from None

    def _cannot(self, exc: OSError) -> OutputError:
        return cannot_write(f"a temporary file in {self._dir}", exc, hint=TEMP_HINT)

    def _write(self, data: bytes) -> None:
        if not self.segments and not self.head_closed:
            room = self.head_limit - self.head_size
            cut = len(data) if len(data) <= room else data.rfind(b"\n", 0, room) + 1
            if cut:
                self.head.write(data[:cut])
                self.head_size += cut
                data = data[cut:]
            if not data:
                return
            self.head_closed = True
        if not self.segments or self.segments[-1][1] >= self.tail_limit:
            if len(self.segments) == 2:
                old, size = self.segments.pop(0)
                self.dropped += size
                old.close()
            self.segments.append((tempfile.TemporaryFile(dir=self._dir), 0))
        f, size = self.segments[-1]
        f.write(data)
        self.segments[-1] = (f, size + len(data))

    def parts(self) -> list[tuple[IO[bytes], int, int]]:
        """(file, offset, length) to read, in order: the head, then the last `tail_limit` bytes."""
        out = [(self.head, 0, self.head_size)]
        tail_total = sum(s for _, s in self.segments)
        skip = max(tail_total - self.tail_limit, 0)
        self.dropped += skip
        for f, size in self.segments:
            cut = min(skip, size)
            skip -= cut
            if size - cut:
                out.append((f, cut, size - cut))
        if self.dropped and len(out) > 1:  # the kept end starts at a line's start
            f, offset, length = out[1]
            f.seek(offset)
            newline = f.read(min(length, 1 << 20)).find(b"\n")
            if newline >= 0:
                self.dropped += newline + 1
                out[1] = (f, offset + newline + 1, length - newline - 1)
        return out

    def close(self) -> None:
        for f in (self.head, *(f for f, _ in self.segments)):
            with contextlib.suppress(OSError):  # a write that failed is reported already
                f.close()


class _Parts(io.RawIOBase):
    """The spool's parts (and a marker between head and tail) read as one stream."""

    def __init__(self, parts: list[tuple[IO[bytes], int, int]], marker: bytes) -> None:
        self._items: list[tuple[IO[bytes] | None, int, int]] = [parts[0]]
        if marker:
            self._items.append((None, 0, len(marker)))
        self._items += parts[1:]
        self._marker = marker
        self._i, self._done = 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._i < len(self._items):
            f, offset, length = self._items[self._i]
            left = length - self._done
            if left <= 0:
                self._i, self._done = self._i + 1, 0
                continue
            n = min(len(buffer), left)
            if f is None:
                data = self._marker[self._done:self._done + n]
            else:
                f.seek(offset + self._done)
                data = f.read(n)
            if not data:
                raise OSError("the spooled log shrank while it was archived")
            buffer[: len(data)] = data
            self._done += len(data)
            return len(data)
        return 0


class BundleWriter:
    """Writes the bundle into `out` as it goes (a stream: nothing is sought back to); `close(manifest)` adds the
    manifest and ends the archive. gzip-compressed, or a plain tar with `compressed=False`: reading it back then
    costs no decompression (benchmarks/group_bench.py measures both). Each member is written whole: a Ctrl-C while
    one is written takes effect once it is (a torn member would make the rest of the archive unreadable)."""

    def __init__(self, out: IO[bytes], *, compressed: bool = True) -> None:
        self._gz = gzip.GzipFile(fileobj=out, mode="wb") if compressed else None  # type: ignore[arg-type]
        self._tar = tarfile.open(fileobj=self._gz or out, mode="w|")  # noqa: SIM115 - closed in close()
        self._tmp = temporary_directory("dsv4ctl-collect-")
        self._names: set[str] = set()
        self.logs: list[LogEntry] = []  # the logs in the archive, in order (an interrupted one included)

    def unique(self, name: str) -> str:
        base, n = name, 1
        while name in self._names:
            n += 1
            stem, dot, ext = base.rpartition(".")
            name = f"{stem}.{n}.{ext}" if dot else f"{base}.{n}"
        self._names.add(name)
        return name

    def add_log(self, entry: LogEntry, chunks: Iterable[bytes], max_bytes: int) -> LogEntry:
        """Stream a log into the bundle under `entry.path`, redacted and bounded; fills the entry's figures.
        An error while reading keeps what was read and is recorded in `entry.error` (then re-raised only
        for an interrupt)."""
        entry.path = self.unique(entry.path)
        spool = _Spool(self._tmp.name, max_bytes)
        pending = b""
        failed = False  # the spool itself could not be written (a full disk): the bundle is given up
        try:
            try:
                for chunk in chunks:
                    pending = self._lines(entry, spool, pending + chunk)
                    if len(pending) > _MAX_LINE:  # a line without end (binary, one huge record): kept in pieces
                        spool.write(self._redact(entry, pending, secret_spots(pending.lower())))
                        pending = b""
            except KeyboardInterrupt:
                entry.error = "interrupted: read in part"
                raise
            except OutputError:
                failed = True
                raise
            except (OSError, ValueError) as exc:
                entry.error = f"read stopped: {exc}"
            except InputError as exc:  # damaged compressed data: what came before it is kept
                entry.error = f"read stopped: {exc.message}"
            finally:
                if not failed:
                    if pending:
                        self._lines(entry, spool, pending + b"\n")
                    self._archive(entry, spool)
        finally:
            spool.close()
        return entry

    def _lines(self, entry: LogEntry, spool: _Spool, data: bytes) -> bytes:
        """The complete lines of `data` into the spool (redacted), counted and timed; returns the rest.
        Whole blocks at a time: only the lines that hold one of the redaction rule's words are decoded."""
        cut = data.rfind(b"\n") + 1
        if not cut:
            return data
        block = data[:cut]
        entry.lines += block.count(b"\n")
        lines = None
        if entry.first_time is None:
            lines = block.split(b"\n")
            entry.first_time = _first_time(lines[:2000])
        stamp = _first_time(reversed((lines or block[-(256 << 10):].split(b"\n"))[-2000:]))
        entry.last_time = stamp or entry.last_time
        spots = secret_spots(block.lower())
        if spots:
            block = self._redact(entry, block, spots)
        spool.write(block)
        return data[cut:]

    @staticmethod
    def _redact(entry: LogEntry, block: bytes, spots: list[int]) -> bytes:
        """The lines at `spots` through the redaction rule; the rest of the block as it is."""
        out, pos = [], 0
        for spot in spots:
            if spot < pos:
                continue
            start = block.rfind(b"\n", 0, spot) + 1
            end = block.find(b"\n", spot) + 1 or len(block)
            line = block[start:end].decode("utf-8", "surrogateescape")
            redacted, n = redact_line(line)
            out.append(block[pos:start])
            if n:
                entry.redactions += n
                out.append(redacted.encode("utf-8", "surrogateescape"))
            else:
                out.append(block[start:end])
            pos = end
        out.append(block[pos:])
        return b"".join(out)

    def _archive(self, entry: LogEntry, spool: _Spool) -> None:
        spool.flush()
        parts = spool.parts()
        marker = b""
        if spool.dropped:
            entry.truncated = True
            marker = (f"[dsv4ctl collect: {spool.dropped:,} bytes left out here (over --max-log-bytes); "
                      "the start and the end are kept]\n").encode()
        size = sum(n for _, _, n in parts) + len(marker)
        entry.bytes = size
        info = tarfile.TarInfo(entry.path)
        info.size, info.mtime, info.mode = size, int(time.time()), 0o644
        with _whole():
            self._tar.addfile(info, io.BufferedReader(_Parts(parts, marker), _CHUNK))
            self.logs.append(entry)

    def add_bytes(self, name: str, data: bytes) -> str:
        name = self.unique(name)
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        with _whole():
            self._tar.addfile(info, io.BytesIO(data))
        return name

    def close(self, manifest: dict[str, Any]) -> None:
        try:
            data = json.dumps(manifest, indent=2).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            with _whole():
                self._tar.addfile(info, io.BytesIO(data))
                self._tar.close()
                if self._gz is not None:
                    self._gz.close()
        finally:
            self._tmp.cleanup()

    def abandon(self) -> None:
        """Stop here: the archive's file is being thrown away (its end is written into it, or not, quietly)."""
        try:
            for part in (self._tar, self._gz):
                with contextlib.suppress(Exception):
                    if part is not None:
                        part.close()
        finally:
            self._tmp.cleanup()


@contextlib.contextmanager
def _whole() -> Iterator[None]:
    """Ctrl-C held back while the block runs (in the main thread), then raised: what the block writes is whole."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and previous is signal.default_int_handler:
        raise KeyboardInterrupt
    if caught and callable(previous):
        previous(signal.SIGINT, None)


def read_chunks(stream: IO[bytes], size: int = _CHUNK) -> Iterator[bytes]:
    """The stream's bytes as they come: a pipe's (kubectl, docker, a FIFO) as soon as it has some, so that an
    interrupt keeps what arrived."""
    read = getattr(stream, "read1", stream.read)
    while True:
        block = read(size)
        if not block:
            return
        yield block


# -- reading a bundle back (diagnose BUNDLE) ---------------------------------------------------------------


# A bundle's members start with these (collect writes the logs first and the manifest last).
BUNDLE_PREFIXES = ("logs/", "k8s/", "docker/")


def is_bundle(path: str | os.PathLike[str]) -> bool:
    """A .tar.gz, .tgz or .tar whose first member is one collect writes (read from the archive's start only)."""
    p = Path(path)
    if not p.name.endswith(BUNDLE_SUFFIXES) or not p.is_file():
        return False
    try:
        with tarfile.open(p, "r|*") as tar:
            first = next(iter(tar), None)
    except (tarfile.TarError, OSError, EOFError):
        return False
    return first is not None and (first.name == MANIFEST or first.name.startswith(BUNDLE_PREFIXES))


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    with tarfile.open(path) as tar:
        member = tar.extractfile(MANIFEST)
        if member is None:
            raise ValueError("no manifest.json")
        return json.loads(member.read())
