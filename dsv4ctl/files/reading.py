"""A log told from its first bytes (see `dsv4ctl.files`): compressed and re-encoded logs read as their text, what
cannot be read (zstd, lz4, archives, binary files) refused with what it is."""

from __future__ import annotations

import contextlib
import errno
import io
import re
from collections.abc import Callable
from typing import Any, BinaryIO

from dsv4ctl.errors import InputError

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


_CUT_SHORT: list[tuple[str, str]] = []  # (name, kind) of each compressed input whose data ended early, in this process


def cut_short() -> list[tuple[str, str]]:
    """The compressed inputs read so far whose data ended before its end mark (name, the compression's name): a file
    cut short, read as far as it goes."""
    return [(name, _NAMES.get(kind, kind)) for name, kind in _CUT_SHORT]


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
            except EOFError:  # a compressed file cut short: what it held is read, and the cut is kept for the caller
                data = b""
                if (self._name, self._kind) not in _CUT_SHORT:
                    _CUT_SHORT.append((self._name, self._kind))
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
