"""What a member's log says about who it is: read from its head and its tail only, so a group costs one
diagnosis per log and a few MiB more, whatever the logs' sizes.

The texts, from vllm==0.32.0:
- the record prefix `(EngineCore_DP1 pid=4242) INFO 12-01 10:00:00 [file.py:N] …`: the process tag
  vllm/logging_utils/formatter.py:107 with the engine's name `EngineCore_DP{rank}` (vllm/v1/engine/utils.py:284),
  the time `%m-%d %H:%M:%S` (vllm/logger.py:33);
- `DP group leader: node_rank=…, node_rank_within_dp=…, master_addr=…` (vllm/v1/executor/multiproc_executor.py:154);
- `dsv4ctl fixes: …`, the line dsv4ctl's plugin logs in every vLLM process (dsv4ctl/fixes/__init__.py LOG_PREFIX).
A line may carry a time of its own before them: RFC 3339 from `kubectl logs --timestamps` or `docker logs -t`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

HEAD_BYTES = 8 << 20
TAIL_BYTES = 1 << 20

_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}:\d{2}:\d{2})")
_VLLM_TIME = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d{2}-\d{2} \d{2}:\d{2}:\d{2})")
_DP_TAG = re.compile(r"\(EngineCore_DP(\d+) pid=\d+\)")
_DP_LEADER = re.compile(r"DP group leader: node_rank=(\d+), node_rank_within_dp=(\d+), master_addr=(\S+?),")
_FIXES = re.compile(r"dsv4ctl fixes: (.*)$")
# vllm/entrypoints/cli/serve.py:239 (a headless node) and the engine's version
# (vllm/v1/engine/core.py: "Initializing a V1 LLM engine (v%s) with config").
_HEADLESS = "data parallel engine(s) in headless mode"
_ENGINE_VERSION = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)")


def line_time(raw: str) -> str | None:
    """A line's time as `MM-DD HH:MM:SS` (a leading RFC 3339 stamp first, else vLLM's record time)."""
    m = _RFC3339.match(raw)
    if m:
        return f"{m.group(2)}-{m.group(3)} {m.group(4)}"
    m = _VLLM_TIME.search(raw, 0, 400)
    return m.group(1) if m else None


@dataclass
class Identity:
    first_time: str | None = None
    last_time: str | None = None
    dp_tags: set[int] = field(default_factory=set)
    dp_leader: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    headless: bool = False
    vllm_version: str | None = None
    times: dict[int, str] = field(default_factory=dict)  # line number -> the time at or before it (head, tail)

    def time_at(self, line: int | None) -> str | None:
        """The time of the line, or of the last timed line before it that the scan saw."""
        if line is None or not self.times:
            return None
        if line in self.times:
            return self.times[line]
        earlier = [n for n in self.times if n <= line]
        return self.times[max(earlier)] if earlier else None


def scan(path: str, total_lines: int | None) -> Identity:
    """The identity lines of the first HEAD_BYTES and the times of the last TAIL_BYTES of a log file."""
    ident = Identity()
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(HEAD_BYTES)
        cut = head.rfind(b"\n") + 1 if len(head) == HEAD_BYTES else len(head)
        _read(ident, head[:cut].decode("utf-8", "replace").splitlines(), 1, identity=True)
        head_lines = head[:cut].count(b"\n")
        if size > cut and total_lines:
            f.seek(max(size - TAIL_BYTES, cut))
            tail = f.read()
            if size - TAIL_BYTES > cut:
                tail = tail[tail.find(b"\n") + 1:]
            lines = tail.decode("utf-8", "replace").splitlines()
            _read(ident, lines, max(total_lines - len(lines) + 1, head_lines + 1), identity=False)
    return ident


def _read(ident: Identity, lines: list[str], first: int, identity: bool) -> None:
    for n, raw in enumerate(lines, start=first):
        t = line_time(raw)
        if t:
            ident.times[n] = t
            ident.first_time = ident.first_time or t
            ident.last_time = t
        if "EngineCore_DP" in raw:
            for m in _DP_TAG.finditer(raw, 0, 80):
                ident.dp_tags.add(int(m.group(1)))
        if identity and "dsv4ctl fixes:" in raw:
            m = _FIXES.search(raw)
            if m and m.group(1) not in ident.fixes:
                ident.fixes.append(m.group(1))
        if identity and _HEADLESS in raw:
            ident.headless = True
        if identity and ident.vllm_version is None and "Initializing a V1 LLM engine" in raw:
            m = _ENGINE_VERSION.search(raw)
            ident.vllm_version = m.group(1) if m else None
        if identity and "DP group leader:" in raw:
            m = _DP_LEADER.search(raw)
            if m:
                ident.dp_leader.append(m.group(0))
