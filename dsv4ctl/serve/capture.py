"""File-descriptor-level capture of everything this process and its children write.

vLLM starts EngineCore and worker processes that inherit file descriptors 1 and 2, so a Python-level
redirect of `sys.stdout` would miss most of the log. `FdTee` points fds 1 and 2 at pipes before vLLM
starts; one reader thread per stream copies every byte, in arrival order, to the log file (flushed
per chunk, fsynced on stop) and echoes it to the original terminal, and hands each complete line to
a callback (the progress tracker). The original stdout/stderr stay reachable through
`terminal_fd(1)` / `terminal_fd(2)` for dsv4ctl's own talk.

The log file receives whole lines per stream (a line is never split by the other stream's output),
so it is what `dsv4ctl diagnose` reads best. Lines end at `\\n` or `\\r` (tqdm redraws its bars
with `\\r`), so a progress bar's updates reach the callback as they happen.
"""

from __future__ import annotations

import os
import select
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from dsv4ctl.files import open_log, why_not_written

# (stream fd, raw bytes) -> None. Echoes a chunk to the terminal; the default writes it unchanged.
EchoFn = Callable[[int, bytes], None]
# (decoded line without its terminator, stream fd, terminator) -> None
LineFn = Callable[[str, int, str], None]

_READ_SIZE = 65536
_POLL_S = 0.2


class FdTee:
    """Tee fds 1 and 2 (and every child that inherits them) into a log file and the terminal."""

    def __init__(
        self,
        log_path: Path,
        *,
        on_line: LineFn | None = None,
        echo: EchoFn | None = None,
        fds: tuple[int, ...] = (1, 2),
        append: bool = False,
        make_dirs: bool = True,
        hint: str | None = None,
    ) -> None:
        self.log_path = Path(log_path)
        self._on_line = on_line
        self._echo = echo
        self._fds = fds
        self._append = append
        self._make_dirs = make_dirs
        self._hint = hint
        self.log_error: OSError | None = None  # the log could not be written from `bytes_logged` on
        self._last_words: list[str] = []
        self._saved: dict[int, int] = {}
        self._readers: dict[int, int] = {}
        self._threads: list[threading.Thread] = []
        self._log = None
        self._log_lock = threading.Lock()
        self._log_pending: dict[int, bytes] = {}
        self._term_lock = threading.Lock()
        self._abandon = threading.Event()
        self._started = False
        self._stopped = False
        self.bytes_logged = 0
        self.callback_error: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FdTee:
        """Open the log and redirect the fds. On failure everything done so far is undone (fds given
        back, pipes and log closed) before the error propagates: a log that cannot be opened is an `OutputError`
        (dsv4ctl.files), its directory made only with `make_dirs`."""
        self._log = open_log(self.log_path, append=self._append, hint=self._hint, make_parents=self._make_dirs)
        self._started = True
        try:
            flush_python_streams()
            for fd in self._fds:
                self._saved[fd] = os.dup(fd)  # non-inheritable: children never see the real terminal
                read_end, write_end = os.pipe()
                self._readers[fd] = read_end
                os.dup2(write_end, fd)  # inheritable copy at fd 1 / 2
                os.close(write_end)
            for fd in self._fds:
                thread = threading.Thread(target=self._pump, args=(fd,), name=f"dsv4ctl-tee-{fd}", daemon=True)
                thread.start()
                self._threads.append(thread)
        except BaseException:
            self.stop()
            self.close_terminal()
            raise
        return self

    def stop(self, drain_timeout_s: float = 5.0) -> None:
        """Give fds 1 and 2 back, drain what is still in the pipes, then flush, fsync and close the log.

        Safe to call more than once and from a `finally`. Readers end when every writer (this process
        and its children) has closed the pipe; a writer that outlives `drain_timeout_s` is abandoned.
        `terminal_fd()` stays usable until `close_terminal()`.
        """
        if not self._started or self._stopped:
            return
        self._stopped = True
        try:
            flush_python_streams()
            for fd, saved in self._saved.items():
                os.dup2(saved, fd)  # our write ends at fd 1 / 2 close here
            deadline_each = max(drain_timeout_s, 0.0) / max(len(self._threads), 1)
            for thread in self._threads:
                thread.join(deadline_each)
            if any(t.is_alive() for t in self._threads):
                self._abandon.set()
                for thread in self._threads:
                    thread.join(2 * _POLL_S + 1.0)
        finally:
            for read_end in self._readers.values():
                _close_quietly(read_end)
            for text in self._last_words:
                self._log_write(-1, text.encode("utf-8", "replace"), final=True)
            if self._log is not None:
                with self._log_lock:
                    try:
                        os.fsync(self._log.fileno())
                    except OSError:
                        pass
                    self._log.close()

    def close_terminal(self) -> None:
        """Close the saved copies of the original fds (after whoever draws on them is done)."""
        for saved in self._saved.values():
            _close_quietly(saved)
        self._saved.clear()

    def __enter__(self) -> FdTee:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.close_terminal()

    # -- terminal access for dsv4ctl's own output ----------------------------------------------------

    def terminal_fd(self, fd: int) -> int:
        """The original fd behind `fd` (1 or 2) while capturing; `fd` itself otherwise."""
        return self._saved.get(fd, fd)

    def write_terminal(self, fd: int, data: bytes) -> None:
        """Write to the original terminal without entering the log, serialised with the echo."""
        with self._term_lock:
            write_all(self.terminal_fd(fd), data)

    # -- reader threads --------------------------------------------------------------------------------

    def _pump(self, fd: int) -> None:
        read_end = self._readers[fd]
        pending = b""
        while True:
            try:
                ready, _, _ = select.select([read_end], [], [], _POLL_S)
            except (OSError, ValueError):
                break
            if not ready:
                if self._abandon.is_set():
                    break
                continue
            try:
                chunk = os.read(read_end, _READ_SIZE)
            except OSError:
                break
            if not chunk:
                break
            self._consume(fd, chunk)
            pending = self._split_lines(fd, pending + chunk)
        self._log_write(fd, b"", final=True)
        if pending:
            self._emit_line(fd, pending, "")

    def _log_write(self, fd: int, chunk: bytes, final: bool = False) -> None:
        """Append whole lines only, so stdout and stderr never interleave inside one log line; a
        stream's unterminated tail is held until its line ends or the stream closes."""
        data = self._log_pending.get(fd, b"") + chunk
        if final:
            complete, rest = data, b""
        else:
            cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
            complete, rest = data[:cut], data[cut:]
        self._log_pending[fd] = rest
        if not complete:
            return
        failed = None
        with self._log_lock:
            if self._log is not None and not self._log.closed and self.log_error is None:
                view = memoryview(complete)
                try:
                    while view:
                        n = self._log.write(view)  # unbuffered: in the file (page cache) once written
                        self.bytes_logged += n
                        view = view[n:]
                except OSError as exc:  # a full disk: the terminal still gets everything
                    failed = self.log_error = exc
        if failed is not None:
            note = (f"dsv4ctl serve: cannot write {self.log_path}: {why_not_written(self.log_path, failed)}; "
                    "vLLM's output goes on to the terminal only\n")
            self.write_terminal(2, note.encode("utf-8", "replace"))

    def last_words(self, text: str) -> None:
        """A line of dsv4ctl's own for the log only (the terminal gets it otherwise), written by `stop` after
        everything the streams still hold."""
        self._last_words.append(text)

    def _consume(self, fd: int, chunk: bytes) -> None:
        self._log_write(fd, chunk)
        try:
            with self._term_lock:
                if self._echo is not None:
                    self._echo(fd, chunk)
                else:
                    write_all(self._saved[fd], chunk)
        except Exception as exc:  # noqa: BLE001 - a broken terminal must not stop the log
            self.callback_error = exc
            self._echo = _discard

    def _split_lines(self, fd: int, data: bytes) -> bytes:
        start = 0
        for index, byte in enumerate(data):
            if byte in (0x0A, 0x0D):
                if index > start:  # empty lines (and the \n of \r\n) carry nothing to parse
                    self._emit_line(fd, data[start:index], chr(byte))
                start = index + 1
        return data[start:]

    def _emit_line(self, fd: int, raw: bytes, terminator: str) -> None:
        if self._on_line is None:
            return
        try:
            self._on_line(raw.decode("utf-8", errors="replace"), fd, terminator)
        except Exception as exc:  # noqa: BLE001 - progress is best effort, the log is not
            self.callback_error = exc
            self._on_line = None


def _discard(fd: int, data: bytes) -> None:
    return None


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        view = view[written:]


def flush_python_streams() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
