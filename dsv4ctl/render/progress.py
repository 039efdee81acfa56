"""A bytes-read progress bar on stderr while a long input is read (`dsv4ctl diagnose` of a big log).

Shown only for inputs over `SHOW_ABOVE_BYTES` when stderr is a terminal and stdout is not a pipe or a
socket (so never in `dsv4ctl diagnose LOG --json | jq`, never under a supervisor that pipes both); the
bar is erased when the read ends, leaving the report as it would be without it.

The bar is refreshed by the reader's own progress calls, never by a background thread: the parallel scan
forks its scanning processes only while a single thread runs (see `dsv4ctl.logs.parallel`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
from typing import Callable, Iterable, Iterator, TextIO

SHOW_ABOVE_BYTES = 50_000_000  # 50 MB
REFRESH_SECONDS = 0.1


def input_bytes(paths: Iterable[str]) -> int | None:
    """The size of the inputs as stored (a .gz: compressed), or None when one of them has no known size
    (stdin that is a pipe, a file that cannot be stat'ed: it is reported by the read itself)."""
    total = 0
    for p in paths:
        try:
            st = os.fstat(sys.stdin.fileno()) if p == "-" else os.stat(p)
        except (OSError, ValueError, AttributeError):
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        total += st.st_size
    return total


def _is_pipe(stream: TextIO) -> bool:
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test runner's buffer): treat as a pipe
        return True
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _is_terminal(stream: TextIO) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False


def show_progress(total: int | None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> bool:
    """Whether a progress bar belongs on stderr for an input of `total` bytes."""
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    if total is None or total <= SHOW_ABOVE_BYTES:
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    return _is_terminal(stderr) and not _is_pipe(stdout)


@contextlib.contextmanager
def read_progress(total: int | None, label: str) -> Iterator[Callable[[int], None] | None]:
    """A callback taking the bytes read so far that draws a bar on stderr, or None when no bar is shown."""
    if not show_progress(total):
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    from dsv4ctl.render import err_console

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err_console(),
        transient=True,
        auto_refresh=False,  # no refresh thread
        redirect_stdout=False,
        redirect_stderr=False,
    )
    with bar:
        task = bar.add_task(label, total=total)
        shown = [0.0]

        def update(done: int) -> None:
            bar.update(task, completed=min(done, total or done))
            now = time.monotonic()
            if now - shown[0] >= REFRESH_SECONDS:
                shown[0] = now
                bar.refresh()

        yield update
