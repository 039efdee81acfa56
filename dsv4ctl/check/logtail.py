"""A server's log read by `check --log` and `watch --log`: what compiles now (`LogCompiles`: the tail, then what is
appended, through `compiles.CompileTracker`), and diagnose's reading of the tail when a server turns wedged or dead.

A line's time is its own stamp (`stamps`: vLLM's record, torch's glog lines), else the last stamped line's; the
clock is the stamps' (seconds into the year, no year and no zone: vLLM writes this host's local time), and now is
this host's local time on it. So a log from another host's zone reads as long or short compiles: check on the
host that runs the server."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from dsv4ctl import stamps
from dsv4ctl.check.compiles import Busy, CompileTracker, bounds_from
from dsv4ctl.errors import InputError

TAIL_BYTES = 4 << 20  # the last 4 MiB: minutes of a busy server's log, the hang's messages among them


def diagnose_tail(path: str, max_bytes: int = TAIL_BYTES) -> Any:
    """`advice.diagnose_lines` over the last `max_bytes` of `path` (line numbers are the file's own)."""
    from dsv4ctl.advice import diagnose_lines

    return diagnose_lines(_tail_lines(path, max_bytes))


def _tail_lines(path: str, max_bytes: int) -> Iterator[Any]:
    from dsv4ctl.logs.reader import parse_line

    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            start = max(0, size - max_bytes)
            lineno = _count_lines(f, start)
            f.seek(start)
            data = f.read(max_bytes)
    except OSError as exc:
        raise InputError(f"cannot read the log {path}: {exc.strerror or exc}") from None
    if start > 0:  # the first line is cut: drop it
        cut = data.find(b"\n")
        data = data[cut + 1:] if cut >= 0 else b""
        lineno += 1
    for raw in data.decode("utf-8", errors="replace").splitlines():
        lineno += 1
        yield parse_line(raw, path, lineno)


def _count_lines(f: Any, end: int) -> int:
    count, pos = 0, 0
    while pos < end:
        chunk = f.read(min(1 << 20, end - pos))
        if not chunk:
            break
        count += chunk.count(b"\n")
        pos += len(chunk)
    return count


class LogCompiles:
    """What the engine compiles, from its log: the last `max_bytes` at the first `read`, then what was appended."""

    def __init__(self, path: str, max_bytes: int = TAIL_BYTES, environ: Any = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.tracker = CompileTracker(bounds=bounds_from(os.environ if environ is None else environ))
        self._offset: int | None = None
        self._partial = b""
        self._last_time: float | None = None

    def read(self, now: float | None = None) -> Busy | None:
        """Feed what the log gained since the last read; the compile running now, or None. Raises InputError when
        the log cannot be read."""
        now = local_now() if now is None else now
        try:
            size = os.path.getsize(self.path)
            if self._offset is None or size < self._offset:  # first read, or the log was truncated or replaced
                self._offset, self._partial = max(0, size - self.max_bytes), b""
                first = self._offset > 0
            else:
                first = False
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read(size - self._offset)
        except OSError as exc:
            raise InputError(f"cannot read the log {self.path}: {exc.strerror or exc}") from None
        self._offset += len(data)
        data = self._partial + data
        if first:  # the first line is cut
            cut = data.find(b"\n")
            data = data[cut + 1:] if cut >= 0 else b""
        *lines, self._partial = data.split(b"\n")
        for raw in lines:
            text = raw.decode("utf-8", errors="replace")
            for piece in text.split("\r"):  # tqdm's bars redraw with a carriage return
                self._feed(piece, now)
        return self.tracker.state(now)

    def _feed(self, text: str, now: float) -> None:
        seconds = stamps.seconds(stamps.line_time(text))
        if seconds is not None:
            self._last_time = float(seconds)
        self.tracker.feed(text, self._last_time if self._last_time is not None else now)

    def progressed(self, seconds_ago: float) -> None:
        """The engine moved in a window begun `seconds_ago`."""
        now = local_now()
        self.tracker.progressed(now, since=now - seconds_ago)


def local_now() -> float:
    """This host's local time on the stamps' clock (seconds into the year)."""
    value = stamps.seconds(time.strftime("%m-%d %H:%M:%S"))
    assert value is not None
    return float(value) + time.time() % 1
