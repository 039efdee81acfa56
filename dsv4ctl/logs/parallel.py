"""Scan a big regular log file on several cores; same lines, same line numbers as one sequential pass.

Neither hyperscan nor `bytes.count` (the newline counting that gives line numbers) releases the GIL,
so threads would not help. A large, seekable, uncompressed file is instead cut at line boundaries into
N byte ranges (N = the usable CPUs, at most `MAX_WORKERS`): this process scans the first range itself and one
child process scans each other range, with the same `prefilter.scan_batches`. A child sends back only the
interesting lines (numbered within its range) and its range's line count; this process turns them into
absolute line numbers with a running sum and yields every line in file order, so whatever consumes the lines
sees exactly what the sequential scan yields. (One process fewer than ranges: on two cores no third process
competes for them. A first range of 0.7 times the others, for the analysis this process also does, was measured
no faster on the 1 GiB serving log, 2026-12-02.)

Memory stays bounded: each process reads `prefilter.SCAN_CHUNK_BYTES` at a time, and a child whose
range is full of interesting lines sends them in batches of at most `BATCH_BYTES`; the pipe then blocks
it until the parent reaches its range. A child also says how far it has read every
`CHILD_PROGRESS_BYTES`, for a progress display.

Children are forked when that is safe (Linux, and only this one thread running: forking a process
with other threads can copy a held lock), which costs milliseconds and reuses the compiled hyperscan
database; otherwise they are spawned. stdin, `.gz` and files below `PARALLEL_MIN_BYTES` are scanned
sequentially: starting processes would cost more than it saves.

No scanning process outlives the scan: the parent ends its children when the scan stops for any reason
(`end_scanners` does it at once, for a caller that stops on a signal), a child has the default SIGTERM and
SIGHUP handlers, holds neither the parent's end of any pipe nor its stdin/stdout, and on Linux asks the
kernel to kill it when its parent dies (SIGKILL of the parent included).
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from dsv4ctl.errors import InputError
from dsv4ctl.logs import formats, prefilter

PARALLEL_MIN_BYTES = 64 * 1024 * 1024
MAX_WORKERS = 4
BATCH_BYTES = 4 * 1024 * 1024
CHILD_PROGRESS_BYTES = 64 * 1024 * 1024  # few enough messages for a pipe never to fill with them
_BOUNDARY_READ = 64 * 1024
# Overrides the number of scanning processes (1: always sequential).
WORKERS_ENV = "DSV4CTL_DIAGNOSE_WORKERS"


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers() -> int:
    """`DSV4CTL_DIAGNOSE_WORKERS` when set to a positive integer, else min(usable CPUs, MAX_WORKERS)."""
    value = os.environ.get(WORKERS_ENV, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return max(1, min(usable_cpus(), MAX_WORKERS))


def parallel_size(path: str | Path, min_bytes: int = PARALLEL_MIN_BYTES) -> int | None:
    """The file's size when it should be scanned in parallel (a regular, uncompressed file of at
    least `min_bytes`), else None."""
    if str(path) == "-":
        return None
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size < max(min_bytes, 1):
            return None
        with open(path, "rb") as f:
            head = f.read(formats.SNIFF_BYTES)
            if head[:2] == b"\x1f\x8b" or formats.sniff(head) is not None:
                return None  # compressed, or a shipper's format: read in order, unwrapped
    except OSError:
        return None  # the sequential path reports it
    return st.st_size


def split_ranges(f: BinaryIO, size: int, parts: int) -> list[tuple[int, int]]:
    """Cut `[0, size)` into at most `parts` non-empty ranges, each starting at the beginning of a line."""
    bounds = [0]
    for i in range(1, parts):
        target = max(size * i // parts, bounds[-1])
        pos = target
        f.seek(pos)
        while True:
            block = f.read(_BOUNDARY_READ)
            if not block:
                pos = size
                break
            nl = block.find(b"\n")
            if nl != -1:
                pos += nl + 1
                break
            pos += len(block)
        pos = min(pos, size)
        if pos > bounds[-1] and pos < size:
            bounds.append(pos)
    bounds.append(size)
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


class _RangeReader:
    """A read-only binary stream over `[start, end)` of a file (`end=None`: to the end of the file)."""

    def __init__(self, f: BinaryIO, start: int, end: int | None) -> None:
        self.f = f
        self.left = None if end is None else end - start
        self.name = getattr(f, "name", "<stream>")
        f.seek(start)

    def read(self, n: int = -1) -> bytes:
        if self.left is None:
            return self.f.read(n)
        if self.left <= 0:
            return b""
        data = self.f.read(self.left if n is None or n < 0 else min(n, self.left))
        self.left -= len(data)
        return data


# The parent's ends of the pipes of the children started so far: a forked child inherits them and closes
# them at once, so a child blocked on a full pipe gets EPIPE instead of waiting forever once its reader is
# gone (a spawned child re-imports this module and finds the list empty).
_PARENT_ENDS: list = []
# Children of scans in progress in this process (see `end_scanners`).
_RUNNING: list = []
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent_pid: int) -> None:
    """In a child: signals as by default, nothing of the parent's held open, killed when the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends its children
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked child inherits the CLI's handlers
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    for conn in _PARENT_ENDS:
        conn.close()
    _PARENT_ENDS.clear()
    try:  # a child never reads stdin nor writes stdout; holding them would keep the caller's pipe open
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before the request above took effect
        os._exit(1)


def end_scanners() -> None:
    """End every scanning child of this process now (a caller stopping on a signal; idempotent)."""
    while _RUNNING:
        proc, recv = _RUNNING.pop()
        _end(proc, recv)


def _end(proc, recv) -> None:
    recv.close()
    if recv in _PARENT_ENDS:
        _PARENT_ENDS.remove(recv)
    if proc.is_alive():
        proc.terminate()
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()


def _scan_range_worker(
    path: str, start: int, end: int | None, engine: str, chunk_bytes: int, conn, parent_pid: int | None = None,
    tagger=None, hold: int | None = None,
) -> None:
    """Child process: scan one range, send ("batches", [Batch...], bytes read) messages and ("progress", [],
    bytes read) now and then, then ("done", [Batch...], lines, bytes read); bytes read: of the range, so far.
    Line numbers in the batches are within the range."""
    _die_with_parent(os.getppid() if parent_pid is None else parent_pid)
    try:
        count: list[int] = []
        batches: list[prefilter.Batch] = []
        size = 0
        read = [0, 0]  # bytes read, bytes read when the last message went

        def progress(n: int) -> None:
            read[0] = n
            if n - read[1] >= CHILD_PROGRESS_BYTES:
                read[1] = n
                conn.send(("progress", [], n))

        with open(path, "rb") as f:
            stream = _RangeReader(f, start, end)
            for batch in prefilter.scan_batches(
                stream, engine=engine, chunk_bytes=chunk_bytes, line_count=count, progress=progress, tagger=tagger,
                hold=hold, origin=start,
            ):
                batches.append(batch)
                size += sum(len(raw) for _, raw in batch.lines) + 64 * len(batch.lines)
                if size >= BATCH_BYTES:
                    conn.send(("batches", batches, read[0]))
                    read[1] = read[0]
                    batches = []
                    size = 0
        conn.send(("done", batches, count[0], read[0]))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it as an InputError
        text = str(exc) if isinstance(exc, InputError) else f"cannot read {path}: {type(exc).__name__}: {exc}"
        try:
            conn.send(("error", text))
        except OSError:
            pass
    finally:
        conn.close()


def rereader(path: str | Path, engine: str, tagger: prefilter.Tagger | None):
    """`reread(base, gap)` for the gaps of `scan_file_batches`: the batches of the lines a child left out,
    scanned again from the file, with the base that numbers them as in the file."""

    def reread(base: int, gap: prefilter.Gap) -> Iterator[tuple[int, prefilter.Batch]]:
        with open(path, "rb") as f:
            stream = _RangeReader(f, gap.start, gap.end)
            for batch in prefilter.scan_batches(stream, engine=engine, tagger=tagger):
                yield base + gap.lineno - 1, batch

    return reread


def _context():
    """fork when it is safe and cheap (Linux, one thread), spawn otherwise."""
    import multiprocessing  # here: diagnose of a small log need not import it

    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def scan_file_parallel(
    path: str | Path,
    *,
    engine: str = "auto",
    workers: int | None = None,
    chunk_bytes: int = prefilter.SCAN_CHUNK_BYTES,
    line_count: list[int] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, str]]:
    """Yield `(lineno, raw_line)` for every interesting line of a regular file, in order, scanning
    its parts in `workers` processes (this one included). Same output as `prefilter.scan_source`.

    line_count: when given, the number of lines in the file is appended to it at the end (as by `scan_source`).

    progress: when given, called with the bytes of the file whose lines were yielded so far (after each
    message of a child: a batch of lines, or every `CHILD_PROGRESS_BYTES` read; once at the end)."""
    for base, batch in scan_file_batches(
        path, engine=engine, workers=workers, chunk_bytes=chunk_bytes, line_count=line_count, progress=progress
    ):
        for lineno, raw in batch.lines:
            yield base + lineno, raw


def scan_file_batches(
    path: str | Path,
    *,
    engine: str = "auto",
    workers: int | None = None,
    chunk_bytes: int = prefilter.SCAN_CHUNK_BYTES,
    line_count: list[int] | None = None,
    progress: Callable[[int], None] | None = None,
    tagger: prefilter.Tagger | None = None,
    hold: int | None = None,
    idle: Callable[[], None] | None = None,
) -> Iterator[tuple[int, prefilter.Batch]]:
    """`scan_file_parallel`'s lines as `(base, Batch)`: a batch's line numbers plus `base` are the file's;
    with a `tagger`, every process tags the lines it scanned (see `prefilter.scan_batches`), and with `hold`
    each leaves long runs of lines that cannot wake a quietly serving start out of its batches (`Gap`s, at
    file offsets: the consumer reads them again with `rereader` where it needs them). `idle`, when given, is
    called once, the first time this process would wait for a child's lines (work the caller has to do anyway,
    done while the child still scans: on the 1 GiB serving log it waited up to 0.2 s)."""
    engine = "hyperscan" if prefilter.use_hyperscan(engine) else "re"
    n = default_workers() if workers is None else max(1, workers)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    procs: list = []  # (process, receiving end of its pipe)
    try:
        size = os.fstat(f.fileno()).st_size
        ranges = split_ranges(f, size, n) if n > 1 else [(0, size)]
        if len(ranges) > 1:
            prefilter.prepare_big_scan(engine, size)  # once, here: forked children inherit it
        ctx = _context() if len(ranges) > 1 else None
        if len(ranges) == 1:  # one process: this one
            for batch in prefilter.scan_batches(
                _RangeReader(f, 0, None), engine=engine, chunk_bytes=chunk_bytes, line_count=line_count,
                progress=progress, tagger=tagger, hold=hold,
            ):
                yield 0, batch
            return
        # This process scans the first range itself (while the children scan the others): one process fewer
        # in memory, and on two cores no third process competing for them.
        for i, (start, end) in enumerate(ranges):
            if i == 0:
                continue
            last = i == len(ranges) - 1
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_scan_range_worker,
                args=(str(path), start, None if last else end, engine, chunk_bytes, send, os.getpid(), tagger, hold),
                daemon=True,
            )
            _PARENT_ENDS.append(recv)
            proc.start()
            send.close()
            procs.append((proc, recv))
            _RUNNING.append((proc, recv))
        # A log that grows while it is read is read to its end, as the sequential scan does, by the
        # process with the last range.
        first: list[int] = []
        for batch in prefilter.scan_batches(
            _RangeReader(f, 0, ranges[0][1]), engine=engine, chunk_bytes=chunk_bytes, line_count=first,
            progress=progress, tagger=tagger, hold=hold,
        ):
            yield 0, batch
        base = first[0]
        reported = -1
        for (proc, recv), (start, _end_of_range) in zip(procs, ranges[1:]):
            while True:
                if idle is not None and not recv.poll():  # type: ignore[attr-defined]
                    idle()
                    idle = None
                try:
                    msg = recv.recv()  # type: ignore[attr-defined]
                except EOFError:
                    proc.join(1)
                    raise InputError(
                        f"cannot read {path}: a scanning process ended unexpectedly (exit code {proc.exitcode})",
                        hint=f"retry, or set {WORKERS_ENV}=1 to scan in one process",
                    ) from None
                if msg[0] == "error":
                    raise InputError(msg[1])
                for batch in msg[1]:
                    yield base, batch
                if progress is not None and start + msg[-1] > reported:
                    reported = start + msg[-1]
                    progress(reported)
                if msg[0] == "done":
                    base += msg[2]
                    break
            proc.join()
        if line_count is not None:
            line_count.append(base)
    finally:
        f.close()
        for item in procs:
            if item in _RUNNING:
                _RUNNING.remove(item)
            _end(*item)
