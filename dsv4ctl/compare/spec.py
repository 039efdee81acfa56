"""Which start a `diff` argument names: `LOG` (its last start), `LOG#N` (the Nth, 1-based as diagnose's starts table
numbers them), `LOG#-1` (the last; -2 the one before), `-` (stdin). A file whose own name ends in `#N` is that file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dsv4ctl.errors import UsageError

_NUMBERED = re.compile(r"^(?P<path>.+)#(?P<n>[^#]*)$")


@dataclass(frozen=True)
class StartSpec:
    """`text` as given; `path` the log (`-` for stdin); `number` the start (None: the last; negative: from the end)."""

    text: str
    path: str
    number: int | None


def parse_spec(text: str) -> StartSpec:
    """`LOG`, `LOG#N`, `LOG#-N` or `-`; a start number that is not a whole number other than 0 is a usage error."""
    m = _NUMBERED.match(text)
    if m is None or Path(text).exists():
        return StartSpec(text, text, None)
    path, n = m.group("path"), m.group("n")
    if not re.fullmatch(r"-?[0-9]+", n):
        raise UsageError(f"{text}: the start after # is a number",
                         hint=f"{path}#1 is its first start, {path}#-1 its last (diagnose {path} lists them)")
    if int(n) == 0:
        raise UsageError(f"{text}: starts are numbered from 1", hint=f"{path}#1 is its first start, {path}#-1 its last")
    return StartSpec(text, path, int(n))


def parse_pair(good: str, bad: str) -> tuple[StartSpec, StartSpec]:
    """Both arguments; stdin may be read once only."""
    pair = parse_spec(good), parse_spec(bad)
    if pair[0].path == "-" and pair[1].path == "-":
        raise UsageError("stdin (-) can be read once: give it for one side only",
                         hint="save one start to a file: dsv4ctl diff good.log - < bad.log")
    return pair


def resolve(spec: StartSpec, count: int) -> int:
    """The 0-based index of the start `spec` names in a log of `count` starts; a number past them is a usage error
    naming how many the log holds."""
    if spec.number is None:
        return count - 1
    index = spec.number - 1 if spec.number > 0 else count + spec.number
    if not 0 <= index < count:
        if count == 1:
            raise UsageError(f"{spec.text}: {spec.path} holds 1 start", hint=f"give {spec.path} (or {spec.path}#1)")
        raise UsageError(f"{spec.text}: {spec.path} holds {count} starts",
                         hint=f"give {spec.path}#1 to {spec.path}#{count} (or #-1 for the last); "
                              f"dsv4ctl diagnose {spec.path} lists them")
    return index
