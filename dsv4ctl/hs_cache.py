"""Compiled hyperscan databases kept between runs: the prefilter's, the signature index's and the serving sorter's.

Compiling one costs 40-110 ms; every scanning process of a big log needed two or three, each its own after the
fork. `database(...)` loads the database from `dsv4ctl.cache_dir` when this hyperscan on this CPU compiled the
same expressions with the same flags before (a file per key: hyperscan's version, the machine and its CPU
flags, the mode, the flags and the expressions), and compiles and saves it otherwise. hyperscan checks a loaded
database itself (its magic, version, platform and a CRC of its bytecode); a file it refuses, an unreadable or
unwritable directory only cost the compile. A compile error is raised as hyperscan raises it: the caller decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from dsv4ctl.cache_dir import cache_dir, write_file


def cpu_flags() -> str:
    """The CPU's feature line (/proc/cpuinfo): a database is compiled for the features of the CPU it is compiled on."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return ""


def cache_path(hyperscan: Any, name: str, exprs: Sequence[bytes], flags: Sequence[int], mode: int) -> Path | None:
    """The file of this database under dsv4ctl's cache directory (None without one)."""
    base = cache_dir()
    if base is None:
        return None
    import hashlib
    import platform

    key = hashlib.sha256()
    for part in (hyperscan.__version__, platform.machine(), cpu_flags(), str(mode), ",".join(map(str, flags))):
        key.update(part.encode() + b"\0")
    for expr in exprs:
        key.update(expr + b"\0")
    return base / f"{name}-{key.hexdigest()[:24]}.hsdb"


def database(hyperscan: Any, name: str, exprs: Sequence[bytes], flags: int | Sequence[int], mode: int | None = None,
             works: Callable[[Any], bool] | None = None):
    """A block-mode (or `mode`) database of `exprs` (ids 0..n-1) with `flags` (one for all, or one each), from the
    cache when it holds it (and `works(db)`, when given, says it finds what it should); compiled and kept otherwise,
    in place of a file that did not do."""
    mode = hyperscan.HS_MODE_BLOCK if mode is None else mode
    each = [flags] * len(exprs) if isinstance(flags, int) else list(flags)
    path = cache_path(hyperscan, name, exprs, each, mode)
    if path is not None:
        try:
            db = hyperscan.loadb(path.read_bytes(), mode)
            db.scratch = hyperscan.Scratch(db)
            if works is None or works(db):
                return db
        except Exception:  # noqa: BLE001 - missing, unreadable or refused: compile it
            pass
    db = hyperscan.Database(mode=mode)
    db.compile(expressions=list(exprs), ids=list(range(len(exprs))), elements=len(exprs), flags=each)
    if path is not None:
        try:
            write_file(path, hyperscan.dumpb(db))
        except Exception:  # noqa: BLE001 - hyperscan could not serialize it: only slower next time
            pass
    return db
