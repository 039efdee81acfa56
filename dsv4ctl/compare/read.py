"""One side of `diff`: the start a spec names, read from its log.

The log is diagnosed as `dsv4ctl diagnose` does (`advice.diagnose`: every start, the last one judged). The start
asked for is then read line by line once more: its phases with their first line and time (`StartupTracker`, the
timeline's own rules), the environment variables its lines show, each process's `dsv4ctl fixes:` line and the
versions `vllm collect-env` prints. A start other than the last is diagnosed on its own lines (`diagnose_lines`), so
its findings and advice are its own.
"""

from __future__ import annotations

import io
from typing import Any, Iterator

from dsv4ctl import re_cache
from dsv4ctl.advice import diagnose, diagnose_lines
from dsv4ctl.compare.model import PhaseMark, Seen, StartRead
from dsv4ctl.compare.spec import StartSpec, resolve
from dsv4ctl.diagnosis.model import Diagnosis
from dsv4ctl.errors import InputError
from dsv4ctl.logs.reader import LogLine, iter_log_lines
from dsv4ctl.logs.timeline import StartupTracker
from dsv4ctl.stamps import line_time, seconds

# vllm==0.32.0 vllm/utils/system_utils.py:35 "Overwriting environment variable %s from '%s' to '%s'".
_ENV_OVERWRITE = re_cache.compile(r"Overwriting environment variable (\w+) from '.*' to '(.*)'")
# A variable set where the log shows it: a shell's, Docker's or Kubernetes' `NAME=value` echoed into the log (the
# shell's own syntax; the prefixes of the packages a vLLM launch reads its settings from).
_ENV_ASSIGN = re_cache.compile(r"(?<![\w.-])((?:VLLM|NCCL|CUDA|PYTORCH|TORCH|HF|OMP|NVIDIA|DSV4CTL|UCX|GLOO|RAY)_[A-Z0-9_]+)"
                               r"=(\"[^\"]*\"|'[^']*'|[^\s,;'\"]+)")
# `vllm collect-env` (vllm==0.32.0 vllm/collect_env.py:832 "PyTorch version : {torch_version}", :834 "CUDA used to
# build PyTorch : {cuda_compiled_version}", :995 "CUDA runtime version : …", :998 "Nvidia driver version : …").
_RUNTIME = {
    "torch": re_cache.compile(r"^PyTorch version\s*: (\S+)"),
    "CUDA (torch build)": re_cache.compile(r"^CUDA used to build PyTorch\s*: (\S+)"),
    "CUDA runtime": re_cache.compile(r"^CUDA runtime version\s*: (\S.*)$"),
    "NVIDIA driver": re_cache.compile(r"^Nvidia driver version\s*: (\S+)"),
}
# dsv4ctl/fixes/base.py LOG_PREFIX, the line each vLLM process logs through the fixes plugin.
_FIXES = "dsv4ctl fixes:"


def read_start(spec: StartSpec, label: str, data: bytes | None = None) -> StartRead:
    """The start `spec` names (`data`: stdin's bytes, for `-`), diagnosed and read line by line."""
    source: Any = spec.path if data is None else data
    whole = diagnose([_opened(source)])
    if any(f.id == "not_a_vllm_log" for f in whole.findings):
        raise InputError(f"{spec.text}: {whole.summary}", hint="diff compares two vLLM logs (or two starts of one)")
    starts = whole.starts
    count = max(len(starts), 1)
    index = resolve(spec, count)
    lo = starts[index].first.line if starts and starts[index].first else 1
    after = starts[index + 1].first if index + 1 < len(starts) else None
    hi = after.line - 1 if after is not None else None
    scan = _Scan()
    kept: list[LogLine] = []
    for line in _lines(source, lo, hi):
        scan.feed(line)
        if hi is not None:
            kept.append(line)
    d = whole if hi is None else diagnose_lines(kept)
    name = spec.path if data is None else "-"
    last = hi if hi is not None else (starts[index].last.line if starts and starts[index].last else None)
    return StartRead(label, spec.text, name, index + 1, count, lo, last, d, scan.phases(d), scan.env, scan.fixes,
                     scan.runtime)


def _opened(source: str | bytes) -> Any:
    """A path as it is; stdin's bytes as a fresh stream named `-` for each pass (a pass closes what it read)."""
    if isinstance(source, str):
        return source
    stream = io.BytesIO(source)
    stream.name = "-"
    return stream


def _lines(source: str | bytes, lo: int, hi: int | None) -> Iterator[LogLine]:
    for line in iter_log_lines(_opened(source)):
        if line.lineno < lo:
            continue
        if hi is not None and line.lineno > hi:
            break
        yield line


class _Scan:
    """What one start's lines show besides its diagnosis: phases with times, environment, fixes, versions."""

    def __init__(self) -> None:
        self.tracker = StartupTracker()
        self.marks: dict[str, PhaseMark] = {}
        self.env: dict[str, Seen] = {}
        self.fixes: list[Seen] = []
        self.runtime: dict[str, Seen] = {}
        self._time: str | None = None

    def feed(self, line: LogLine) -> None:
        self._time = line.timestamp or line_time(line.raw) or self._time
        for event in self.tracker.feed(line):
            if event.phase not in self.marks:
                self.marks[event.phase] = PhaseMark(event.phase, line.lineno, self._time, seconds(self._time))
        msg = line.message
        if "=" in msg or "environment variable" in msg:
            self._env(line)
        if _FIXES in msg:
            text = msg[msg.index(_FIXES) + len(_FIXES):].strip()
            if all(f.value != text for f in self.fixes):
                self.fixes.append(Seen(text, line.source, line.lineno))
        if " : " in msg or ": " in msg:
            for name, rx in _RUNTIME.items():
                if name not in self.runtime and (m := rx.search(msg.strip())):
                    self.runtime[name] = Seen(m.group(1).strip(), line.source, line.lineno)

    def _env(self, line: LogLine) -> None:
        msg = line.message
        if m := _ENV_OVERWRITE.search(msg):
            self.env[m.group(1)] = Seen(m.group(2), line.source, line.lineno)
            return
        for m in _ENV_ASSIGN.finditer(msg):
            self.env.setdefault(m.group(1), Seen(m.group(2).strip("'\""), line.source, line.lineno))

    def phases(self, d: Diagnosis) -> list[PhaseMark]:
        """The phases in the order the start reached them, each with the seconds until the next began; a failure the
        diagnosis found where no line said the start failed is placed at its root cause's line (no time of its own)."""
        rc = d.root_cause
        if d.verdict == "failed" and "failed" not in self.marks and rc is not None and rc.line:
            self.marks["failed"] = PhaseMark("failed", rc.line, None, None)
        marks = sorted(self.marks.values(), key=lambda m: m.line)
        out = []
        for mark, nxt in zip(marks, [*marks[1:], None]):
            span = None
            if nxt is not None and mark.seconds is not None and nxt.seconds is not None:
                span = nxt.seconds - mark.seconds
            out.append(PhaseMark(mark.phase, mark.line, mark.time, mark.seconds, span))
        return out
