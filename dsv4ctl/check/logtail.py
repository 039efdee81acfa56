"""diagnose's reading of a server log's tail, for `watch --log` when a server turns wedged or dead."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

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
