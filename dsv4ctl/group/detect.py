"""Whether `diagnose`'s inputs are a deployment: a `dsv4ctl collect` bundle, or the logs of two or more separate
launches. Cheap on purpose: every `diagnose` asks, and a plain log never loads the bundle reader (tarfile)."""

from __future__ import annotations

import os
import re

from dsv4ctl.collect.names import BUNDLE_SUFFIXES

# A launch's own first lines: vLLM's `non-default args` (api_utils.py) or a headless node's engine line.
_LAUNCH = re.compile(rb"non-default args: \{|data parallel engine\(s\) in headless mode")


def _is_bundle(path: str) -> bool:
    if not path.endswith(BUNDLE_SUFFIXES):
        return False
    from dsv4ctl.collect.bundle import is_bundle

    return is_bundle(path)


def distinct(paths: list[str]) -> list[str]:
    """The inputs in their order, each file once: the same file given twice (by another name, or a link to it)
    is one log. A path that cannot be read stays, for its own error."""
    seen: set[object] = set()
    out: list[str] = []
    for p in paths:
        key: object = p
        if p != "-":
            try:
                st = os.stat(p)
                key = (st.st_dev, st.st_ino)
            except OSError:
                pass
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def is_group(paths: list[str]) -> bool:
    """A bundle, or two or more logs of separate launches (each with its own `non-default args` line)."""
    paths = distinct(paths)
    if len(paths) == 1:
        return _is_bundle(paths[0])
    if any(_is_bundle(p) for p in paths):
        return True
    launches = 0
    for p in paths:
        if p == "-" or not os.path.isfile(p):
            return False
        head = _head(p, 4 << 20)
        if head is None:
            return False  # unreadable, binary: diagnose says what it is
        if _LAUNCH.search(head):
            launches += 1
    return launches >= 2


def _head(path: str, n: int) -> bytes | None:
    """The first `n` bytes of a log's text (a compressed or UTF-16 log's, decoded); None when it cannot be read."""
    from dsv4ctl.errors import InputError
    from dsv4ctl.files import decoded

    try:
        with open(path, "rb") as f:
            stream = decoded(f, path)  # type: ignore[arg-type]
            return stream.read(n)
    except (OSError, InputError):
        return None
