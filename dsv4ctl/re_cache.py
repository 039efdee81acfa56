"""Compiled regular expressions kept between runs, so that a short `diagnose` does not spend its time in `re`.

Python compiles a pattern in two steps: `re._parser` and `re._compiler` (pure Python) turn it into a list of
opcodes, and `_sre.compile` (C) makes the pattern object from that list. The first step is what costs: the
catalogue, the prefilter and the readers compile some 370 patterns on the way to a verdict, 45 ms of a
100 KB log's 0.35 s on the machine the benchmarks ran on (benchmarks/startup_bench.py). `compile` keeps
the first step's output in `dsv4ctl.cache_dir` and, on the next run, hands it straight to `_sre.compile`.

The result is the pattern `re.compile` returns: `_sre.compile` checks the opcodes (an invalid list is
refused), and a pattern object compares equal to another only with the same text, flags and opcodes, which
the tests assert for every pattern kept. The file is keyed by the interpreter's version and `_sre`'s
MAGIC (the opcodes change between releases), carries its key and a CRC of its contents, and is written whole
(temporary file, then rename) by the process that loaded it, at exit, when it compiled something new.
Anything unexpected (no such private API, another format, a damaged or unreadable file, an unwritable
directory) only means the pattern is compiled by `re`, as if there were no cache.

`kept` does the same for a pure function of patterns (the literal text a pattern requires, which the
prefilter and the signature index derive from `re`'s parse of every catalogue pattern): its results are
keyed by the function, a CRC of the source file that defines it (an edited file is a new key) and its
arguments.

Only patterns written in dsv4ctl's code belong here, never text from a log: the file holds at most
`MAX_ENTRIES`, the entries the last run used first when there would be more.
"""

from __future__ import annotations

import atexit
import marshal
import os
import re
import sys
import zlib
from array import array
from pathlib import Path
from typing import Callable, TypeVar

from dsv4ctl.cache_dir import cache_dir, write_file

try:
    import _sre
    from re import _compiler, _parser

    _PRIVATE = callable(getattr(_compiler, "_code", None)) and callable(getattr(_parser, "parse", None))
    _TYPECODE = {2: "H", 4: "I", 8: "Q"}[_sre.CODESIZE]  # the opcodes kept as bytes: array's unsigned of that size
except (ImportError, KeyError):  # another interpreter: re.compile alone
    _PRIVATE = False

FORMAT = 1
MAX_ENTRIES = 1024
# Entries: (pattern, flags) -> (the pattern's final flags, opcodes as bytes, number of groups, groupindex, indexgroup).
_kept: dict | None = None
_used: set = set()
_new = 0
_owner = 0  # the pid that loaded the file: only it writes it back
_at_exit = False  # `save` registered to run at exit
F = TypeVar("F", bound=Callable)


def _identity() -> str:
    """What the opcodes depend on: the interpreter's build and `_sre`'s format (and this file's)."""
    return "\0".join((sys.version, sys.implementation.cache_tag or "", str(_sre.MAGIC), str(_sre.CODESIZE), str(FORMAT)))


def cache_file() -> Path | None:
    """This interpreter's file under dsv4ctl's cache directory (None without one)."""
    base = cache_dir()
    if base is None or not _PRIVATE:
        return None
    return base / f"regex-{zlib.crc32(_identity().encode()):08x}.marshal"


def _load() -> dict:
    global _kept, _owner
    if _kept is None:
        _kept, _owner = {}, os.getpid()
        path = cache_file()
        if path is not None:
            try:
                data = path.read_bytes()
                if int.from_bytes(data[:4], "little") == zlib.crc32(memoryview(data)[4:]):
                    identity, kept = marshal.loads(memoryview(data)[4:])
                    if identity == _identity() and isinstance(kept, dict):
                        _kept = kept
            except (OSError, ValueError, EOFError, TypeError):
                pass
    return _kept


def compile(pattern: str | bytes, flags: int | re.RegexFlag = 0) -> re.Pattern:  # noqa: A001 - re's own name
    """`re.compile(pattern, flags)`, from the kept opcodes when this interpreter compiled it before."""
    flags = int(flags)
    if not _PRIVATE or flags & re.DEBUG:
        return re.compile(pattern, flags)
    kept = _load()
    key = (pattern, flags)
    entry = kept.get(key)
    if entry is not None:
        try:
            final, code, groups, groupindex, indexgroup = entry
            ops = array(_TYPECODE)
            ops.frombytes(code)
            rx = _sre.compile(pattern, final, ops.tolist(), groups, dict(groupindex), tuple(indexgroup))
        except Exception:  # noqa: BLE001 - a wrong entry: compile it afresh (and keep the new one)
            del kept[key]
        else:
            _used.add(key)
            return rx
    return _compile_and_keep(pattern, flags, key, kept)


def _compile_and_keep(pattern: str | bytes, flags: int, key: tuple, kept: dict) -> re.Pattern:
    """re._compiler.compile's steps, keeping what `_sre.compile` takes (re.compile's own errors are raised)."""
    try:
        parsed = _parser.parse(pattern, flags)
        code = _compiler._code(parsed, flags)
        groupindex = dict(parsed.state.groupdict)
        indexgroup = [None] * parsed.state.groups
        for name, index in groupindex.items():
            indexgroup[index] = name
        final = flags | parsed.state.flags
        rx = _sre.compile(pattern, final, code, parsed.state.groups - 1, groupindex, tuple(indexgroup))
    except re.error:
        raise
    except Exception:  # noqa: BLE001 - the private steps are not what this interpreter has: re alone
        return re.compile(pattern, flags)
    _keep(kept, key, (final, array(_TYPECODE, code).tobytes(), parsed.state.groups - 1, groupindex, tuple(indexgroup)))
    return rx


def _keep(kept: dict, key: tuple, value: object) -> None:
    global _new, _at_exit
    kept[key] = value
    _used.add(key)
    if not _at_exit:
        atexit.register(save)
        _at_exit = True
    _new += 1


def kept(fn: F) -> F:
    """`fn` (pure, its arguments and result strings, numbers and tuples of them), its results kept between
    runs beside the patterns. Without the cache, or when `fn`'s source cannot be read, `fn` itself."""
    name = f"{fn.__module__}.{fn.__qualname__}"
    source: list[int | None] = []

    def wrapper(*args):
        if not _PRIVATE:
            return fn(*args)
        if not source:
            try:
                source.append(zlib.crc32(Path(fn.__code__.co_filename).read_bytes()))
            except OSError:
                source.append(None)
        if source[0] is None:
            return fn(*args)
        store = _load()
        key = ("kept", name, source[0], args)
        if key in store:
            _used.add(key)
            return store[key]
        value = fn(*args)
        try:
            marshal.dumps(value)
        except ValueError:
            return value
        _keep(store, key, value)
        return value

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    wrapper.__doc__ = fn.__doc__
    return wrapper  # type: ignore[return-value]


def forget() -> None:
    """Forget what this process loaded and compiled (unsaved entries too): the next `compile` reads the file
    again, from the cache directory the environment names then."""
    global _kept, _new, _owner
    _kept, _new, _owner = None, 0, 0
    _used.clear()


def save() -> None:
    """Write the kept patterns back when this process compiled new ones (a forked child never writes)."""
    global _new
    if not _new or _kept is None or os.getpid() != _owner:
        return
    path = cache_file()
    if path is None:
        return
    kept = _kept
    if len(kept) > MAX_ENTRIES:  # this run's entries first, then the others while there is room
        order = [k for k in kept if k in _used] + [k for k in kept if k not in _used]
        kept = {k: kept[k] for k in order[:MAX_ENTRIES]}
    try:
        payload = marshal.dumps((_identity(), kept))
    except ValueError:  # not marshal's kind of value (`kept` keeps none such): nothing to write
        return
    if write_file(path, zlib.crc32(payload).to_bytes(4, "little") + payload):
        _new = 0
