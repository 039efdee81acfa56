"""Every file dsv4ctl writes (see `dsv4ctl.files`): whole or not at all, an `OSError` one `OutputError` naming the
path and why, a directory made only for dsv4ctl's own default places."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from dsv4ctl.errors import OutputError


def _non_directory_above(path: Path) -> Path | None:
    """The nearest existing path above `path` that is not a directory (a file where a directory is needed)."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def why_not_written(path: str | os.PathLike[str], exc: OSError) -> str:
    """Why `path` could not be written, in words (the operating system's own where nothing more is known)."""
    p = Path(path)
    code = exc.errno
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return "no space left on the device" if code == errno.ENOSPC else "disk quota exceeded"
    if code == errno.EISDIR:
        return "it is a directory"
    if code in (errno.ENOTDIR, errno.ENOENT):
        blocker = _non_directory_above(p)
        if blocker is not None:
            return f"{blocker} is a file, not a directory"
        if not p.parent.exists():
            return f"no such directory: {p.parent}"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if code == errno.EROFS:
        return "read-only file system"
    return (exc.strerror or str(exc)).rstrip(".")


def cannot_write(path: str | os.PathLike[str], exc: OSError, hint: str | None) -> OutputError:
    """The one error for a file that cannot be written: `cannot write PATH: why`, with the caller's hint."""
    return OutputError(f"cannot write {path}: {why_not_written(path, exc)}", hint=hint)


def check_target(path: str | os.PathLike[str], *, hint: str | None, make_parents: bool = False) -> bool:
    """Whether `path` can be written, asked before the work that fills it: `OutputError` when it cannot be (a
    directory, no such directory, a path under a file); True when it is written in place (a device, a FIFO)."""
    return _target(Path(path), hint, make_parents)[1]


def _target(path: Path, hint: str | None, make_parents: bool) -> tuple[Path, bool]:
    """Where to write `path` (a link's target) and whether in place (a device, a FIFO); refused before anything is
    written: a directory, a missing directory (unless `make_parents`), a path under a file."""
    try:
        st = path.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise cannot_write(path, exc, hint) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"cannot write {path}: it is a directory", hint=hint)
    if st is not None and not stat.S_ISREG(st.st_mode):
        return path, True  # a device, a FIFO, /dev/stdout: written in place, through any link
    final = path.resolve() if path.is_symlink() else path  # a link stays a link: its target is replaced
    parent = final.parent
    if make_parents:
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise cannot_write(path, exc, hint) from None
    elif not parent.is_dir():
        raise cannot_write(path, FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT)), hint)
    return final, False


class Checked(io.RawIOBase):
    """A file being written whose write, flush and close raise `OutputError` (the path and why) for an `OSError`."""

    def __init__(self, raw: BinaryIO, shown: str, hint: str | None) -> None:
        super().__init__()
        self._raw = raw
        self._shown = shown
        self._hint = hint
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            n = self._raw.write(data)
        except OSError as exc:
            raise cannot_write(self._shown, exc, self._hint) from None
        n = len(data) if n is None else n
        self.written += n
        return n

    def flush(self) -> None:
        if self._raw.closed:
            return
        try:
            self._raw.flush()
        except OSError as exc:
            raise cannot_write(self._shown, exc, self._hint) from None

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
            self._raw.close()
        except OSError as exc:
            raise cannot_write(self._shown, exc, self._hint) from None
        finally:
            self.discard()

    def discard(self) -> None:
        """Close without a word (the write already failed or was given up)."""
        with contextlib.suppress(OSError, ValueError):
            self._raw.close()
        with contextlib.suppress(OSError, ValueError):
            super().close()


def _temporary_beside(final: Path) -> tuple[Path, BinaryIO]:
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)  # the umask applies
    return tmp, os.fdopen(fd, "wb")


@contextlib.contextmanager
def open_whole(path: str | os.PathLike[str], *, hint: str | None, make_parents: bool = False,
               durable: bool = True) -> Iterator[Checked]:
    """`path` opened to be written whole: what the block writes lands in a temporary file beside it, renamed over
    `path` when the block ends (on the disk first, with `durable`: a crash after leaves the whole file, not an empty
    one); an exception or an interrupt in the block leaves `path` as it was. A device or a FIFO is written in place.
    Every `OSError` of the file is an `OutputError` naming `path`."""
    shown = str(path)
    final, in_place = _target(Path(path), hint, make_parents)
    tmp: Path | None = None
    try:
        if in_place:
            raw: BinaryIO = open(final, "wb")  # noqa: SIM115 - closed below
        else:
            tmp, raw = _temporary_beside(final)
    except OSError as exc:
        raise cannot_write(shown, exc, hint) from None
    out = Checked(raw, shown, hint)
    try:
        yield out
        out.flush()
        if tmp is not None:
            try:
                if durable:
                    os.fsync(out.fileno())
                if final.exists():
                    os.chmod(tmp, stat.S_IMODE(final.stat().st_mode))
            except OSError as exc:
                raise cannot_write(shown, exc, hint) from None
        out.close()
        if tmp is not None:
            try:
                os.replace(tmp, final)
            except OSError as exc:
                raise cannot_write(shown, exc, hint) from None
            tmp = None
    finally:
        out.discard()
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


def write_whole(path: str | os.PathLike[str], data: bytes, *, hint: str | None, make_parents: bool = False,
                durable: bool = True) -> None:
    """`data` into `path`, whole or not at all (`open_whole`)."""
    with open_whole(path, hint=hint, make_parents=make_parents, durable=durable) as out:
        out.write(data)


def open_log(path: str | os.PathLike[str], *, append: bool, hint: str | None, make_parents: bool = False) -> BinaryIO:
    """A log dsv4ctl writes as it goes (serve's `--log-file`), unbuffered, in place: each write is in the file once
    made. Refused (`OutputError`) as `open_whole` refuses."""
    final, _in_place = _target(Path(path), hint, make_parents)
    try:
        return open(final, "ab" if append else "wb", buffering=0)  # noqa: SIM115 - the caller closes it
    except OSError as exc:
        raise cannot_write(path, exc, hint) from None


def append_line(path: str | os.PathLike[str], data: bytes, *, hint: str | None, make_parents: bool = False) -> None:
    """`data` (one record and its newline) appended to `path` in one write: records of several processes never
    interleave."""
    final, _in_place = _target(Path(path), hint, make_parents)
    try:
        fd = os.open(final, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise cannot_write(path, exc, hint) from None


# A temporary file or directory that cannot be written (collect's spool, the hub's and the probe's scratch).
TEMP_HINT = "free space in the temporary directory, or point TMPDIR at one with room"


def temporary_directory(prefix: str) -> Any:
    """A `tempfile.TemporaryDirectory` (use it with `with`, or keep it and `cleanup()`); one that cannot be made
    is an `OutputError` naming where, with `TEMP_HINT`."""
    import tempfile

    try:
        return tempfile.TemporaryDirectory(prefix=prefix)
    except OSError as exc:
        raise cannot_write(Path(tempfile.gettempdir()) / f"{prefix}…", exc, TEMP_HINT) from None
