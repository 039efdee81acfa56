"""A crash loop read at the cost of its distinct starts: a start that repeats the one before it line for line is
given that start's conclusion, and where a start begins.

A start is compared with the start before it as its lines arrive (`Replay`): each line's key is the line less what
differs from one launch to the next of the same failure: its position in the start, its process and level, the log
record's place and its message, its pid only as which of the start's processes it is (`line_key`; the clock and the
pids themselves are left out: a conclusion never rests on them). A start whose every line matches, and that has as
many, concluded to what the one before it concluded; at the first line that differs the start is analysed in full
from its first line. Only a start that never served quietly is compared (one that did held lines without analysing
them, which a comparison cannot repeat), and one of at most `PRINT_MAX_LINES` analysed lines.

Where a start begins: vLLM's banner is the marker that opens a start, but the lines printed just before it belong to
the same launch: the rest of the logo's record (same process, pid, time and source line) and the platform line
(vllm/platforms/__init__.py "Automatically detected platform %s.") of the process that prints the banner
(`preamble_length`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dsv4ctl.diagnosis.model import StartSummary
from dsv4ctl.logs.reader import LogLine

PRINT_MAX_LINES = 4096

_PLATFORM = "Automatically detected platform"


def preamble_length(recent: Sequence[LogLine], marker: LogLine) -> int:
    """How many of the last lines before `marker` (the line that opened a start) belong to the start it opens."""
    head = (marker.process, marker.pid, marker.level, marker.timestamp, marker.fileinfo)
    n = 0
    for line in reversed(recent):
        if line.source != marker.source:
            break
        same_record = marker.level is not None and (line.process, line.pid, line.level, line.timestamp, line.fileinfo) == head
        platform = _PLATFORM in line.message and line.process in (None, marker.process)
        if not (same_record or platform):
            break
        n += 1
    return n


@dataclass
class StartPrint:
    """What one start leaves for the next to be compared with: the keys of the lines it analysed, and its conclusion."""

    keys: list[tuple] = field(default_factory=list)
    first_lineno: int = 0
    pids: dict[tuple, int] = field(default_factory=dict)
    summary: StartSummary | None = None
    log_lines: int = 0
    evidence_seen: bool = False
    held: bool = False  # it served quietly, lines held unread

    def key(self, line: LogLine) -> tuple:
        """`line` as a start's line: its place in the start, which process, the record's level and place, the message."""
        if not self.keys:
            self.first_lineno = line.lineno
        pid = self.pids.setdefault((line.process, line.pid), len(self.pids)) if line.pid is not None else None
        return (line.lineno - self.first_lineno, line.process, pid, line.level, line.fileinfo, line.message)

    def add(self, line: LogLine) -> None:
        if len(self.keys) <= PRINT_MAX_LINES:
            self.keys.append(self.key(line))

    @property
    def usable(self) -> bool:
        return 0 < len(self.keys) <= PRINT_MAX_LINES and not self.held


class Replay:
    """A start read against the print of the start before it: its lines kept (with their sequence numbers) while each
    matches, for an analyzer to read them all at the first that does not."""

    def __init__(self, index: int, before: StartPrint, first: LogLine | None) -> None:
        self.index = index  # the start's index (the splitter's)
        self.before = before
        self.mine = StartPrint()
        self.lines: list[tuple[LogLine, int]] = []
        self.first = first  # the start's first line, when lines before its marker belong to it

    def take(self, line: LogLine, seq: int) -> bool:
        """Keep `line` if it is the line the start before had at this place; False when it is not (or one too many)."""
        i = len(self.lines)
        if i >= len(self.before.keys) or self.mine.key(line) != self.before.keys[i]:
            return False
        self.mine.keys.append(self.before.keys[i])
        self.lines.append((line, seq))
        return True

    @property
    def complete(self) -> bool:
        return len(self.lines) == len(self.before.keys)
