"""Split a log into starts: each launch of vLLM that the input holds.

One input (a file, several per-process or per-node files, stdin) may hold several starts: a
container that restarts, `cat healthy.log failed.log`, a log file appended to by every launch.
`StartSplitter.route(line)` says, line by line, which start a line belongs to. A line opens a new
start when

- it is a start marker — the version banner, `non-default args`, an engine initialising
  (`Initializing a V1 LLM engine`) — that the current start already saw from the same process role;
- a vLLM process role (`APIServer`, `EngineCore_DP0`, `Worker_TP1`, …) of the same file shows a new
  pid;
- the clock goes back in the same file (more than `CLOCK_SLACK_S`: processes writing to one file
  interleave a little).

Lines of several processes, nodes or data-parallel ranks of one launch belong to one start: the
markers are keyed by process role (every DP rank's EngineCore initialises its own engine), Ray's
`(RayWorkerWrapper pid=…, ip=…)` tags are not vLLM roles, and a marker repeated by another file
while the current start is still starting, within its time span, is another node of the same
launch. When a further file begins, its lines go to the start whose time span holds their timestamp
(per-process files of several restarts line up), else they continue the last start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dsv4ctl import re_cache
from dsv4ctl.logs.reader import LogLine
from dsv4ctl.stamps import seconds  # a line's time in seconds: one reading for every part

# vLLM's own process roles (the process tag names of v1/engine and v1/executor).
# A role names one process of a launch: a name several processes share (legacy V0's "VllmWorkerProcess", a
# bare "Worker") says nothing about which one, so a new pid under it opens no start.
_ROLE_RE = re_cache.compile(r"^(?:APIServer|ApiServer|DPCoordinator|EngineCore(?:_\w+)?|Worker_\w+|VllmWorker rank=\d+)\Z")
# The markers of a launch. Their wordings: vllm/entrypoints/utils.py (the banner "vLLM server version
# %s, serving model %s" of 0.31+ and "vLLM API server version %s" before), the logo's "version" line,
# vllm/entrypoints/utils.py "non-default args: %s", vllm/v1/engine/core.py "Initializing a V1 LLM engine".
_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("banner", re_cache.compile(r"vLLM (?:API )?server version \S|█\s+version \S")),
    ("args", re_cache.compile(r"non-default args: ")),
    ("engine", re_cache.compile(r"Initializing a V1 LLM engine")),
)
CLOCK_SLACK_S = 120
# A marker that another file repeats this long after the current start began still belongs to it.
NODE_SLACK_S = 300


def marker_of(message: str) -> str | None:
    if "version" not in message and "non-default args" not in message and "Initializing a V1" not in message:
        return None
    for kind, rx in _MARKERS:
        if rx.search(message):
            return kind
    return None


def role_of(process: str | None) -> str | None:
    return process if process and _ROLE_RE.match(process) else None


@dataclass
class _Span:
    index: int
    markers: dict[tuple[str, str | None], str] = field(default_factory=dict)  # (kind, role) -> source
    pids: dict[tuple[str, str], int] = field(default_factory=dict)  # (source, role) -> pid
    first_s: int | None = None
    last_s: int | None = None
    sources: set[str] = field(default_factory=set)

    def holds(self, t: int) -> bool:
        return self.first_s is not None and self.last_s is not None and self.first_s - CLOCK_SLACK_S <= t <= self.last_s + CLOCK_SLACK_S


class StartSplitter:
    """Says which start each line belongs to; see the module docstring."""

    def __init__(self) -> None:
        self.spans: list[_Span] = [_Span(0)]
        self.current = 0
        self._source: str | None = None
        self._source_last_s: dict[str, int] = {}
        self._new_source = False

    def route(self, line: LogLine, settled: bool) -> tuple[int, bool]:
        """(index of the start this line belongs to, whether that start is new).

        settled: whether the current start already reached an end (ready, or failed), as the
        analysis of that start knows; a marker from another file then opens a new start even within
        the time span.
        """
        if line.source != self._source:
            self._new_source = self._source is not None and line.source not in self._sources_seen()
            self._source = line.source
        t = seconds(line.timestamp)
        if self._new_source and t is not None:
            self._new_source = False
            for span in reversed(self.spans):
                if span.holds(t):
                    self.current = span.index
                    break
        span = self.spans[self.current]
        opened = False
        role = role_of(line.process)
        kind = marker_of(line.message) if line.message else None  # both read once a line, by both steps
        if self._opens(span, line, t, settled, role, kind):
            span = _Span(len(self.spans))
            self.spans.append(span)
            self.current = span.index
            opened = True
        self._note(span, line, t, role, kind)
        return span.index, opened

    def _sources_seen(self) -> set[str]:
        out: set[str] = set()
        for span in self.spans:
            out |= span.sources
        return out

    def _opens(self, span: _Span, line: LogLine, t: int | None, settled: bool, role: str | None, kind: str | None) -> bool:
        if not span.sources:
            return False
        last = self._source_last_s.get(line.source)
        if t is not None and last is not None and t < last - CLOCK_SLACK_S and line.source in span.sources:
            return True
        if role is not None and line.pid is not None:
            seen = span.pids.get((line.source, role))
            if seen is not None and seen != line.pid:
                return True
        if kind is None:
            return False
        first_source = span.markers.get((kind, role))
        if first_source is None:
            return False
        if first_source == line.source or settled:
            return True
        # Another file repeats the marker: another node of this launch while it is still starting.
        if t is None or span.first_s is None:
            return True
        return not (span.first_s - CLOCK_SLACK_S <= t <= span.first_s + NODE_SLACK_S)

    def _note(self, span: _Span, line: LogLine, t: int | None, role: str | None, kind: str | None) -> None:
        span.sources.add(line.source)
        if role is not None and line.pid is not None:
            span.pids.setdefault((line.source, role), line.pid)
        if kind is not None:
            span.markers.setdefault((kind, role), line.source)
        if t is not None:
            span.first_s = t if span.first_s is None else min(span.first_s, t)
            span.last_s = t if span.last_s is None else max(span.last_s, t)
            self._source_last_s[line.source] = t
