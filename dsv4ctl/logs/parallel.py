"""Scan a big regular log file on several cores; same lines, same line numbers as one sequential pass.

Neither hyperscan nor `bytes.count` (the newline counting that gives line numbers) releases the GIL,
so threads would not help. A large, seekable, uncompressed file is instead cut at line boundaries into chunks of
about `CLAIM_BYTES`, which N processes (N = the usable CPUs, at most `MAX_WORKERS`: this one and N - 1 children)
claim one at a time from a shared pair of counters: this process from the front, the children from the back, all
with the same `prefilter.scan_batches`. They meet where the work is even, whichever started late or ran slow: on
the 1 GiB serving log the two halves of a fixed split finished up to 0.2 s apart (2026-12-02), and the children
may start before this process is ready (`prestart`). This process yields its chunks' lines as it scans them; a
child keeps what it selects (numbered within each chunk) and, once nothing is left to claim, sends its chunks in
order; this process numbers their lines with a running sum of the chunks' line counts and yields them after its
own, so whatever consumes the lines sees exactly what the sequential scan yields. (One process fewer than
scanners would need: on two cores no third process competes for them.)

Memory stays bounded: each process reads `prefilter.SCAN_CHUNK_BYTES` at a time; a child claims no more chunks
once it holds `HELD_BYTES` of selected lines (this process then scans the rest), and sends them in messages of at
most `BATCH_BYTES`.

Children are forked when that is safe (Linux, and only this one thread running: forking a process
with other threads can copy a held lock), which costs milliseconds and reuses the compiled hyperscan
database; otherwise they are spawned. stdin, `.gz` and files below `PARALLEL_MIN_BYTES` are scanned
sequentially: starting processes would cost more than it saves.

No scanning process outlives the scan: the parent ends its children when the scan stops for any reason
(`end_scanners` does it at once, for a caller that stops on a signal, and ends a prestarted scan nobody adopted),
a child has the default SIGTERM and SIGHUP handlers, holds neither the parent's end of any pipe nor its
stdin/stdout, and on Linux asks the kernel to kill it when its parent dies (SIGKILL of the parent included).
"""

from __future__ import annotations

import os
import signal
import stat
import sys
import threading
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from dsv4ctl import files
from dsv4ctl.errors import InputError
from dsv4ctl.logs import formats, prefilter

PARALLEL_MIN_BYTES = 64 * 1024 * 1024
MAX_WORKERS = 4
BATCH_BYTES = 4 * 1024 * 1024  # at most this much of a child's lines in one message
CLAIM_BYTES = 16 * 1024 * 1024  # the chunks processes claim: a file of N times this has N chunks (at least one each)
HELD_BYTES = 32 * 1024 * 1024  # a child claims no more chunks once it holds this much of their lines
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
    if value.isdecimal() and int(value) > 0:
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
            if files.kind_of(head) is not None or formats.sniff(head) is not None:
                return None  # compressed, UTF-16, binary, or a shipper's format: read in order (decoded, unwrapped)
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
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())}
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent(parent_pid: int) -> None:
    """In a child: signals as by default, nothing of the parent's held open, killed when the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends its children
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked child inherits the CLI's handlers
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):  # started with them blocked (_start_scanners): now they act as set above
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
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
    _EARLY.clear()
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


def _end_all(started: list) -> None:
    """End these children of this process (and forget them)."""
    for item in started:
        if item in _RUNNING:
            _RUNNING.remove(item)
        _end(*item)


def _chunks(f: BinaryIO, size: int, n: int) -> list[tuple[int, int]]:
    """The chunks `n` processes claim (`CLAIM_BYTES` each about, at least `n`); one process: the whole file."""
    return split_ranges(f, size, max(n, -(-size // CLAIM_BYTES))) if n > 1 else [(0, size)]


def _claim(claims, back: bool) -> int | None:
    """The next unclaimed chunk, from the front (this process) or the back (a child); None when none is left.
    `claims` holds [the first unclaimed chunk, one past the last]."""
    with claims.get_lock():
        first, end = claims[0], claims[1]
        if first >= end:
            return None
        if back:
            claims[1] = end - 1
            return end - 1
        claims[0] = first + 1
        return first


def _scan_range_worker(
    path: str, chunks: list[tuple[int, int]], claims, engine: str, chunk_bytes: int, conn, parent_pid: int | None = None,
    tagger=None, hold: int | None = None,
) -> None:
    """Child process: claim chunks from the back and scan each, keeping what it selects, until none is left or it
    holds `HELD_BYTES`; then send ("chunks", [its chunks, ascending]) and, for each chunk in that order,
    ("batches", [Batch...], bytes read) messages then ("done", [Batch...], lines, bytes read), bytes read: of the
    chunk. Line numbers in the batches are within the chunk. The last chunk is read to the end of the file (a log
    that grows)."""
    _die_with_parent(os.getppid() if parent_pid is None else parent_pid)
    try:
        held: list[tuple[int, list[prefilter.Batch], int, int]] = []  # (chunk, batches, lines, bytes read)
        size = 0
        with open(path, "rb") as f:
            prefilter.prepare_big_scan(engine, os.fstat(f.fileno()).st_size)  # what a forked child did not inherit
            while size < HELD_BYTES and (i := _claim(claims, back=True)) is not None:
                start, end = chunks[i]
                count: list[int] = []
                batches: list[prefilter.Batch] = []
                stream = _RangeReader(f, start, None if i == len(chunks) - 1 else end)
                for batch in prefilter.scan_batches(
                    stream, engine=engine, chunk_bytes=chunk_bytes, line_count=count, tagger=tagger, hold=hold,
                    origin=start,
                ):
                    batches.append(batch)
                    size += _batch_bytes(batch)
                held.append((i, batches, count[0], f.tell() - start))
        held.sort(key=lambda item: item[0])
        conn.send(("chunks", [item[0] for item in held]))
        for i, batches, lines, read in held:
            part: list[prefilter.Batch] = []
            part_bytes = 0
            for batch in batches:
                part.append(batch)
                part_bytes += _batch_bytes(batch)
                if part_bytes >= BATCH_BYTES:
                    conn.send(("batches", part, read))
                    part, part_bytes = [], 0
            conn.send(("done", part, lines, read))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it as an InputError
        text = str(exc) if isinstance(exc, InputError) else f"cannot read {path}: {type(exc).__name__}: {exc}"
        try:
            conn.send(("error", text))
        except OSError:
            pass
    finally:
        conn.close()


def _batch_bytes(batch: prefilter.Batch) -> int:
    """What a batch's lines take in memory, about: their text and 64 bytes each."""
    return sum(len(raw) for _, raw in batch.lines) + 64 * len(batch.lines)


def _receive(path, proc, recv) -> tuple:
    """A child's next message; its error, or its end without a word, as an InputError."""
    try:
        msg = recv.recv()
    except EOFError:
        proc.join(1)
        raise InputError(
            f"cannot read {path}: a scanning process ended unexpectedly (exit code {proc.exitcode})",
            hint=f"retry, or set {WORKERS_ENV}=1 to scan in one process",
        ) from None
    if msg[0] == "error":
        raise InputError(msg[1])
    return msg


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


def _start_scanners(ctx, path: str, chunks: list[tuple[int, int]], n: int, engine: str, chunk_bytes: int, tagger,
                    hold) -> tuple:
    """The shared claims over `chunks` and n - 1 children started on them (registered); (claims, [(process, pipe)])."""
    claims = ctx.Array("q", [0, len(chunks)])
    started = []
    for _ in range(min(n, len(chunks)) - 1):
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_scan_range_worker,
            args=(path, chunks, claims, engine, chunk_bytes, send, os.getpid(), tagger, hold),
            daemon=True,
        )
        _PARENT_ENDS.append(recv)
        # A stop signal to the process group between the fork and the child's own handlers would run the CLI's
        # handler in the child (a traceback of Stopped from multiprocessing's bootstrap): blocked until the child has
        # set its own (_die_with_parent), and here until the child is started.
        masked = hasattr(signal, "pthread_sigmask")
        before = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS) if masked else None
        try:
            proc.start()
        finally:
            if masked:
                signal.pthread_sigmask(signal.SIG_SETMASK, before)
        send.close()
        started.append((proc, recv))
        _RUNNING.append((proc, recv))
    return claims, started


# A scan `prestart` began: (path, device, inode, settings) -> (chunks, claims, children), until a scan adopts it.
_EARLY: dict = {}


def prestart(
    path: str, *, engine: str = "auto", workers: int | None = None, chunk_bytes: int = prefilter.SCAN_CHUNK_BYTES,
    tagger: prefilter.Tagger | None = None, hold: int | None = None, min_bytes: int = PARALLEL_MIN_BYTES,
) -> bool:
    """Start the children of a parallel scan of `path` now, for a later `scan_file_batches` call with the same
    settings to adopt: they claim chunks from the back while this process does other work (the process entry calls
    this before the CLI's imports), and the scan's own claims from the front make up for the head start. Only
    where the scan would be parallel and children are forked; True when it began. Children nobody adopts are ended
    by `end_scanners`, and by `multiprocessing` at exit."""
    engine = "hyperscan" if prefilter.use_hyperscan(engine) else "re"
    n = default_workers() if workers is None else max(1, workers)
    if n < 2 or not parallel_size(path, min_bytes):
        return False
    ctx = _context()
    if ctx.get_start_method() != "fork":
        return False  # a spawned child imports dsv4ctl again: little head start to gain
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            chunks = _chunks(f, st.st_size, n)
    except OSError:
        return False  # the scan itself reports it
    if len(chunks) < 2:
        return False
    # The database now, which the children inherit; numpy each child imports itself, and this process once its
    # own start-up is done (`scan_file_batches`), so that the children begin sooner.
    prefilter.prepare_big_scan(engine)
    key = (str(path), st.st_dev, st.st_ino, (engine, n, chunk_bytes, tagger, hold))
    _EARLY[key] = (chunks, *_start_scanners(ctx, str(path), chunks, n, engine, chunk_bytes, tagger, hold))
    return True


def _adopt(path: str, st: os.stat_result, settings: tuple) -> tuple | None:
    """The prestarted scan of this file with these settings, taken: (chunks, claims, children); None when there is
    none, or when the file is no longer the one it began on (shorter than its chunks: its children are ended)."""
    early = _EARLY.pop((path, st.st_dev, st.st_ino, settings), None)
    if early is None:
        return None
    if st.st_size < early[0][-1][1]:
        _end_all(early[2])
        return None
    return early


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

    progress: when given, called with the bytes of the file whose lines were yielded so far (as this process reads
    its chunks, and after each message of a child's; once at the end)."""
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
    called once, as soon as the children scan (work the caller has to do anyway: done then, the children claim
    more chunks meanwhile, instead of after the last line, when nothing else runs)."""
    engine = "hyperscan" if prefilter.use_hyperscan(engine) else "re"
    n = default_workers() if workers is None else max(1, workers)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    procs: list = []  # (process, receiving end of its pipe)
    try:
        st = os.fstat(f.fileno())
        early = _adopt(str(path), st, (engine, n, chunk_bytes, tagger, hold))
        if early is not None:  # begun by `prestart`: its chunks, and its children already scanning them
            chunks, claims, started = early
        else:
            chunks = _chunks(f, st.st_size, n)
        if len(chunks) == 1:  # one process: this one
            for batch in prefilter.scan_batches(
                _RangeReader(f, 0, None), engine=engine, chunk_bytes=chunk_bytes, line_count=line_count,
                progress=progress, tagger=tagger, hold=hold,
            ):
                yield 0, batch
            return
        prefilter.prepare_big_scan(engine, st.st_size)  # before the fork, which children inherit; else for this process
        if early is None:
            claims, started = _start_scanners(_context(), str(path), chunks, n, engine, chunk_bytes, tagger, hold)
        procs += started
        if idle is not None:  # now, while the children scan: the chunks they claim meanwhile make up for it
            idle()
            idle = None
        # This process claims chunks from the front and yields their lines as it scans them (one process fewer in
        # memory, and on two cores no third process competing for them); the children claim from the back, so the
        # two meet where the work is even, whoever started late or ran slow.
        base = 0
        while (i := _claim(claims, back=False)) is not None:
            start, end = chunks[i]
            count: list[int] = []
            report = None if progress is None else (lambda n, start=start: progress(start + n))
            for batch in prefilter.scan_batches(
                _RangeReader(f, start, None if i == len(chunks) - 1 else end), engine=engine, chunk_bytes=chunk_bytes,
                line_count=count, progress=report, tagger=tagger, hold=hold, origin=start,
            ):
                yield base, batch
            base += count[0]
        # The rest is the children's: each says which chunks it holds, then sends them in order.
        owner: dict[int, tuple] = {}
        for item in procs:
            msg = _receive(path, *item)
            for i in msg[1]:
                owner[i] = item
        first = claims[0]
        if sorted(owner) != list(range(first, len(chunks))):
            raise InputError(f"cannot read {path}: the scanning processes lost track of its parts",
                             hint=f"retry, or set {WORKERS_ENV}=1 to scan in one process")
        for i in range(first, len(chunks)):
            start = chunks[i][0]
            while True:
                msg = _receive(path, *owner[i])
                for batch in msg[1]:
                    yield base, batch
                if progress is not None:
                    progress(start + msg[-1])
                if msg[0] == "done":
                    base += msg[2]
                    break
        for proc, _recv in procs:
            proc.join()
        if line_count is not None:
            line_count.append(base)
    finally:
        f.close()
        _end_all(procs)
