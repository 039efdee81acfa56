"""A generated data file of the catalogue, read once at first use: the message index, the table of vLLM's flags, the
startup lines each release prints.

A missing or corrupt file never fails a command: it only turns that data off (`get()` is None) and says why
(`error`), with how long the read took (`seconds`).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class LazyData(Generic[T]):
    """`read(path)` of the packaged file (or `env`'s path, or the one `reset` names), done at the first `get()`."""

    def __init__(self, default: Path, read: Callable[[Path], T], env: str | None = None) -> None:
        self._default, self._read, self._env = default, read, env
        self._lock = threading.Lock()
        self.reset()

    def reset(self, path: str | os.PathLike | None = None) -> None:
        """Forget what was read; the next `get()` reads `path` (default: the packaged file)."""
        with self._lock:
            self._path = Path(path) if path is not None else None
            self._value: T | None = None
            self._loaded = False
            self.error: str | None = None
            self.seconds: float | None = None

    @property
    def loaded(self) -> bool:
        """Whether the file was read (successfully or not) since the last reset."""
        return self._loaded

    def get(self) -> T | None:
        if self._loaded:
            return self._value
        with self._lock:
            if not self._loaded:
                t0 = time.perf_counter()
                path = self._path or Path((os.environ.get(self._env, "") if self._env else "") or self._default)
                try:
                    self._value = self._read(path)
                except Exception as e:  # noqa: BLE001 - a missing/corrupt file only disables the data
                    self._value = None
                    self.error = f"{type(e).__name__}: {e}"
                self.seconds = time.perf_counter() - t0
                self._loaded = True
        return self._value
