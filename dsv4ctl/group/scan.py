"""What a member's log says about who it is: read from its head and its tail only, so a group costs one
diagnosis per log and a few MiB more, whatever the logs' sizes.

The texts, from vllm==0.32.0:
- the record prefix `(EngineCore_DP1 pid=4242) INFO 12-01 10:00:00 [file.py:N] …`: the process tag
  vllm/logging_utils/formatter.py:107 with the engine's name `EngineCore_DP{rank}` (vllm/v1/engine/utils.py:284),
  the time `%m-%d %H:%M:%S` (vllm/logger.py:33);
- `DP group leader: node_rank=…, node_rank_within_dp=…, master_addr=…` (vllm/v1/executor/multiproc_executor.py:154);
- `dsv4ctl fixes: …`, the line dsv4ctl's plugin logs in every vLLM process (dsv4ctl/fixes/__init__.py LOG_PREFIX).
A line's time is its own, in whichever format it carries one (`dsv4ctl.stamps`: RFC 3339 from `kubectl logs
--timestamps` or `docker logs -t`, c10's and glog's records, Ray's C++ records, vLLM's record); a line without one
takes the time of the last timed line before it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from dsv4ctl import stamps

HEAD_BYTES = 1 << 20
TAIL_BYTES = 512 << 10

_DP_TAG = re.compile(r"\(EngineCore_DP(\d+) pid=\d+\)")
_DP_LEADER = re.compile(r"DP group leader: node_rank=(\d+), node_rank_within_dp=(\d+), master_addr=(\S+?),")
_FIXES = re.compile(r"dsv4ctl fixes: (.*)$")
# vllm/entrypoints/cli/serve.py:239 (a headless node) and the engine's version
# (vllm/v1/engine/core.py: "Initializing a V1 LLM engine (v%s) with config").
_HEADLESS = "data parallel engine(s) in headless mode"
# ... in headless mode, with head node address tcp://HOST:PORT. (the head's --data-parallel-address and RPC port)
_HEAD_ADDRESS = re.compile(r"in headless mode, with head node address (?:tcp://)?(\[[^\]\s]+\]|[^\s:\[]+):(\d+)")
# Ray's prefix on a worker's output, with the address of the node it runs on (docs/multi-node.md, Recipe 2).
_RAY_WORKER = re.compile(r"\(RayWorkerWrapper pid=\d+, ip=")
_ENGINE_VERSION = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)")


def line_time(raw: str) -> str | None:
    """A line's own time as `MM-DD HH:MM:SS`, in any format dsv4ctl reads (`dsv4ctl.stamps`)."""
    return stamps.line_time(raw)


def _first_timed(lines: Iterable[str]) -> str | None:
    for line in lines:
        if (t := stamps.line_time(line)) is not None:
            return t
    return None


_FIXES_LINE = re.compile(r"dsv4ctl fixes: (.*)")
_DP_TAGS = re.compile(r"\(EngineCore_DP(\d+) pid=")


@dataclass
class Identity:
    first_time: str | None = None
    last_time: str | None = None
    dp_tags: set[int] = field(default_factory=set)
    dp_leader: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    headless: bool = False
    vllm_version: str | None = None
    head_address: tuple[str, str] | None = None  # the data-parallel head a headless node joins (host, RPC port)
    ray_workers: bool = False  # Ray workers' lines (a Ray worker node's log, or the driver's with them)
    # the text read (head, tail), split into lines only when a line's time is asked for
    head_text: str = field(default="", repr=False)
    tail_text: str = field(default="", repr=False)
    tail_first: int = 0
    _lines: dict[str, list[str]] = field(default_factory=dict, repr=False)

    def _split(self, which: str) -> list[str]:
        if which not in self._lines:
            # split as the reader numbers lines: at "\n" only (a tqdm bar's CR redraws are one line)
            self._lines[which] = (self.head_text if which == "head" else self.tail_text).split("\n")
        return self._lines[which]

    def time_at(self, line: int | None) -> str | None:
        """The time of the line, or of the closest timed line before it that the scan read."""
        if line is None or line < 1:
            return None
        head = self._split("head")
        tail = self._split("tail") if self.tail_text else []
        for lines, first in ((tail, self.tail_first), (head, 1)):
            if first <= line < first + len(lines):
                for i in range(line - first, max(line - first - 2000, -1), -1):
                    t = line_time(lines[i])
                    if t:
                        return t
                break
        return None


def scan(path: str, total_lines: int | None) -> Identity:
    """The identity lines of the first HEAD_BYTES, the first and last times, and the text kept for
    `time_at` (the head and the last TAIL_BYTES)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(HEAD_BYTES)
        tail = b""
        if size > len(head):
            f.seek(max(size - TAIL_BYTES, len(head)))
            tail = f.read()
    return from_parts(head, tail, size, total_lines)


def from_parts(head: bytes, tail: bytes, size: int, total_lines: int | None) -> Identity:
    """`scan` of a log's first bytes and its last ones (`tail` starts where `head` ends or later)."""
    ident = Identity()
    cut = head.rfind(b"\n") + 1 if size > len(head) else len(head)
    text = ident.head_text = head[:cut].decode("utf-8", "replace")
    ident.first_time = _first_timed(ident._split("head"))
    ident.dp_tags.update(int(x) for x in _DP_TAGS.findall(text))
    for fixes in _FIXES_LINE.findall(text):
        if fixes not in ident.fixes:
            ident.fixes.append(fixes)
    ident.headless = _HEADLESS in text
    m = _HEAD_ADDRESS.search(text)
    ident.head_address = (m.group(1).strip("[]"), m.group(2)) if m else None
    ident.ray_workers = _RAY_WORKER.search(text) is not None
    m = _ENGINE_VERSION.search(text)
    ident.vllm_version = m.group(1) if m else None
    ident.dp_leader = [m.group(0) for m in _DP_LEADER.finditer(text)]
    if tail and total_lines:
        if size - len(tail) > len(head):  # a cut through a line: from the next one on
            tail = tail[tail.find(b"\n") + 1:]
        else:
            tail = head[cut:] + tail
        ident.tail_text = tail.decode("utf-8", "replace")
        ident.tail_first = max(total_lines - ident.tail_text.count("\n") + 1, text.count("\n") + 1)
        ident.dp_tags.update(int(x) for x in _DP_TAGS.findall(ident.tail_text[-(64 << 10):]))
    ident.last_time = _first_timed(reversed((ident.tail_text or text)[-(64 << 10):].split("\n"))) or ident.first_time
    return ident
