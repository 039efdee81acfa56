"""The files dsv4ctl opens for the operator, in one place: every file it writes, and how a log is told from its
first bytes.

Writing. Every file dsv4ctl writes goes through here: a bundle (`collect -o`), an SVG (`diagnose --svg`), a GPU
snapshot (`gpus --save`), serve's log (`--log-file`), the caches and the calibration records. An `OSError` becomes
one `OutputError` that names the path, says why in words (no such directory, a directory, permission denied, a
read-only file system, no space left) and carries the caller's hint (`choose another -o`). A file is written whole
or not at all (`open_whole`, `write_whole`: a temporary file beside it, renamed over it once complete, removed on
any failure or interrupt); a device or a FIFO (`/dev/stdout`, a named pipe) is written in place. A directory is
made only where the caller asks for it (`make_parents`: its own default places, never a path the operator typed).

Reading. A log may reach dsv4ctl compressed or re-encoded; `decoded(stream, name)` tells it from the first bytes,
whatever the file is called, and gives the log's text as bytes: gzip, xz and bzip2 (the standard library's
`gzip`, `lzma`, `bz2`), a zip archive of one file (`zipfile`), UTF-16 with or without its byte-order mark (a
PowerShell `>` redirect writes UTF-16LE with one) and UTF-32 with one, read as UTF-8. A truncated compressed file
gives what it holds; damaged data is an `InputError`. What cannot be read is an `InputError` that says what the
file is and how to read it: zstd (the `zstandard` package is not one of dsv4ctl's dependencies), lz4, 7-Zip, a
zip of several files, a tar archive, or any other binary file ("a binary file, not a log"). `kind_of(head)` says
which from a file's first bytes without opening anything: the big-file parallel scan (`logs.parallel`) takes a
file whose kind is None (plain text) only.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from dsv4ctl.errors import InputError, OutputError

# -------------------------------------------------------------------------------------------------- writing


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


# -------------------------------------------------------------------------------------------------- reading

READ_HINT = "pass the log itself: a text file (gzip, xz, bzip2, a zip of one file and UTF-16 are read as they are)"


def kind_of(head: bytes) -> str | None:
    """What a file is from its first bytes: None for text (a log as it is), else "gzip", "xz", "bzip2", "zstd",
    "lz4", "7z", "zip", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "tar" or "binary" (a NUL byte among the
    first 8 KiB, as grep tells a binary file, runs of NULs left out)."""
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:3] == b"BZh" and head[3:4] in b"123456789" and head[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return "bzip2"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    if head[:4] == b"\x04\x22\x4d\x18":
        return "lz4"
    if head[:6] == b"7z\xbc\xaf\x27\x1c":
        return "7z"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff") and _wide(head[4:], 4, head[:1] == b"\xff"):
        return "utf-32"
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") and _wide(head[2:], 2, head[:1] == b"\xff"):
        return "utf-16"
    if head[257:262] == b"ustar":
        return "tar"
    return _utf16_without_bom(head) or ("binary" if b"\x00" in _HOLES.sub(b"", head[: 1 << 16])[:8192] else None)


# A run of NULs in a text file is a hole, not binary data: the start a `copytruncate` left, the blocks a crash left
# unwritten. A binary file has NULs between its other bytes too (an ELF or PNG header, any packed number).
_HOLES = re.compile(rb"\x00{64,}")


def _wide(text: bytes, width: int, little: bool) -> bool:
    """Whether the bytes after a UTF-16/32 byte-order mark read as such: a log's characters are mostly ASCII, so
    at least half of them have a zero high byte (b"\\xff\\xfe ERROR" is Latin-1 or broken UTF-8, not UTF-16)."""
    sample = text[: min(len(text), 4096) // width * width]
    if len(sample) < 4 * width:
        return True
    high = sample[width - 1::width] if little else sample[0::width]
    return high.count(0) >= len(high) // 2


def _utf16_without_bom(head: bytes) -> str | None:
    """UTF-16 text without a byte-order mark: every other byte zero (the high byte of ASCII text)."""
    sample = head[: min(len(head), 4096) // 2 * 2]
    if len(sample) < 16:
        return None
    even, odd = sample[0::2], sample[1::2]
    half = len(sample) // 2
    for zeros, other, name in ((odd, even, "utf-16-le"), (even, odd, "utf-16-be")):
        if zeros.count(0) >= 0.9 * half and other.count(0) <= 0.1 * half:
            return name
    return None


# The encoding each text kind is read with (the BOM, where there is one, tells the byte order).
_ENCODINGS = {"utf-16": "utf-16", "utf-16-le": "utf-16-le", "utf-16-be": "utf-16-be", "utf-32": "utf-32"}
_NAMES = {"gzip": "gzip", "xz": "xz", "bzip2": "bzip2", "zstd": "zstd", "zip": "zip", "utf-16": "UTF-16",
          "utf-16-le": "UTF-16", "utf-16-be": "UTF-16", "utf-32": "UTF-32"}


class _Decoding(io.RawIOBase):
    """The text inside a compressed or re-encoded stream, as UTF-8 bytes. A truncated compressed stream ends where
    its data does; damaged data is an `InputError`."""

    def __init__(self, read: Callable[[int], bytes], close: Callable[[], None], name: str, kind: str,
                 encoding: str | None = None) -> None:
        super().__init__()
        self._read, self._close, self._name, self._kind = read, close, name, kind
        self.name = name
        self._decoder = None
        if encoding is not None:
            import codecs

            self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._pending = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def _more(self) -> bytes:
        """The next bytes of text; b"" once the source has ended."""
        while not self._eof:
            try:
                data = self._read(1 << 20)
            except EOFError:  # a compressed file cut short: what it held is read
                data = b""
            except OSError as exc:
                if exc.errno is not None:
                    raise InputError(f"cannot read {self._name}: {exc.strerror or exc}") from None
                raise self._damaged(exc) from None
            except Exception as exc:  # noqa: BLE001 - lzma.LZMAError, zlib.error, zipfile.BadZipFile: damaged data
                raise self._damaged(exc) from None
            self._eof = not data
            if self._decoder is None:
                return data
            text = self._decoder.decode(data, final=self._eof).encode("utf-8", "replace")
            if text:
                return text
        return b""

    def _damaged(self, exc: BaseException) -> InputError:
        what = _NAMES.get(self._kind, self._kind)
        return InputError(f"cannot read {self._name}: it starts like {what} but its data is damaged ({exc})",
                          hint="decompress it with its own tool to see how much is left, and pass that")

    def readinto(self, buffer: Any) -> int:
        if not self._pending:
            self._pending = self._more()
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                self._close()
            finally:
                super().close()


class Decoded(io.BufferedReader):
    """A log's text from a compressed or re-encoded file: `kind` says what it was, `position()` how much of the file
    itself has been read (the unit of its size on disk, for progress)."""

    kind: str = ""
    position: Callable[[], int] = staticmethod(lambda: 0)


def _position_of(stream: Any) -> Callable[[], int]:
    def position() -> int:
        try:
            return int(stream.tell())
        except (OSError, ValueError, AttributeError):  # a pipe: unknown
            return 0

    return position


def _refuse(kind: str, name: str) -> InputError:
    piped = name == "-"
    shown = "stdin" if piped else name
    if kind in ("zstd", "lz4"):
        tool = "zstd" if kind == "zstd" else "lz4"
        if piped:
            return InputError(f"stdin is {kind}-compressed: decompress it on the way in",
                              hint=f"... | {tool} -dc | dsv4ctl diagnose -")
        return InputError(f"{name} is {kind}-compressed: run {tool} -d {name}",
                          hint=f"then pass the file it writes, or: {tool} -dc {name} | dsv4ctl diagnose -")
    if kind == "7z":
        return InputError(f"{shown} is a 7-Zip archive, not a log", hint="extract it (7z x) and pass the logs")
    if kind == "tar":
        return InputError(f"{shown} is a tar archive, not a log",
                          hint="extract it and pass the logs (a `dsv4ctl collect` bundle is read when named .tar, .tar.gz or .tgz)")
    return InputError(f"{shown} is a binary file, not a log", hint=READ_HINT)


def _unzip(stream: BinaryIO, name: str, position: Callable[[], int]) -> Decoded:
    """The one file of a zip archive (the archive must be seekable: a file, not a pipe)."""
    import zipfile

    seekable = getattr(stream, "seekable", lambda: False)
    if name == "-" or not seekable():
        raise InputError(f"{'stdin' if name == '-' else name} is a zip archive, which is read from a file, not a pipe",
                         hint="pass the .zip file itself, or unzip it and pass the log")
    try:
        archive = zipfile.ZipFile(stream)  # type: ignore[arg-type]
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.errno not in (None, errno.ESPIPE):
            raise InputError(f"cannot read {name}: {exc.strerror or exc}") from None
        raise InputError(f"{name} is a zip archive that cannot be read here ({exc})",
                         hint=f"unzip {name} and pass the log") from None
    files = [info for info in archive.infolist() if not info.is_dir()]
    if len(files) != 1:
        archive.close()
        listed = ", ".join(i.filename for i in files[:3]) + (", …" if len(files) > 3 else "")
        raise InputError(f"{name} is a zip archive of {len(files)} files{': ' + listed if files else ''}",
                         hint=f"unzip {name} and pass its logs (several logs of one launch are read together)")
    member = archive.open(files[0])
    return _buffered(member.read1, _closing(member, archive, stream), f"{name}:{files[0].filename}", "zip", position)


def _buffered(read: Callable[[int], bytes], close: Callable[[], None], name: str, kind: str,
              position: Callable[[], int], encoding: str | None = None) -> Decoded:
    out = Decoded(_Decoding(read, close, name, kind, encoding), 1 << 16)
    out.kind = kind
    out.position = position  # type: ignore[method-assign]
    return out


def _peek(stream: BinaryIO, n: int = 1 << 16) -> bytes:
    try:
        return stream.peek(n)  # type: ignore[attr-defined]
    except (OSError, ValueError, EOFError):
        return b""


def decoded(stream: BinaryIO, name: str) -> BinaryIO:
    """The log's text in `stream` (peekable: a `BufferedReader`), told from its first bytes: `stream` itself when it
    is text, else a `Decoded` stream of what is inside (at most two layers: a gzip of UTF-16 text). Raises
    `InputError` for what cannot be read (see the module's doc)."""
    position = _position_of(stream)
    for _layer in range(3):
        kind = kind_of(_peek(stream))
        if kind is None:
            return stream
        if kind in ("gzip", "xz", "bzip2"):
            inner = _decompressor(kind, stream)
            stream = _buffered(inner.read1, _closing(inner, stream), name, kind, position)
        elif kind == "zip":
            stream = _unzip(stream, name, position)
        elif kind in _ENCODINGS:
            read = stream.read1 if hasattr(stream, "read1") else stream.read  # type: ignore[attr-defined]
            return _buffered(read, stream.close, name, kind, position, _ENCODINGS[kind])
        else:
            raise _refuse(kind, name)
    return stream


def _decompressor(kind: str, stream: BinaryIO) -> Any:
    if kind == "gzip":
        import gzip

        return gzip.GzipFile(fileobj=stream, mode="rb")
    if kind == "xz":
        import lzma

        return lzma.LZMAFile(stream, mode="rb")
    import bz2

    return bz2.BZ2File(stream, mode="rb")


def _closing(*streams: Any) -> Callable[[], None]:
    """Close each of `streams`, innermost first (a decompressor leaves the file it reads open)."""
    def close() -> None:
        for s in streams:
            with contextlib.suppress(OSError, ValueError):
                s.close()

    return close


def position_of(stream: Any) -> Callable[[], int] | None:
    """How much of the file behind a `Decoded` stream has been read; None for a stream read as it is."""
    return stream.position if isinstance(stream, Decoded) else None
