"""Is the engine compiling? The engine's own log lines, read as they come, say when a compile or a capture
began and ended: `busy`, not `wedged`, while one runs within its grace.

Pure: `CompileTracker.feed(line, now)` takes each line with the time it was read (or its own stamp);
`state(now)` says what compiles, since when, and whether it is still within its grace. The texts are the
packages' own, each pattern citing where it is printed (`Pattern.sources`: package, release, file:line and the
literal text there; `tests/unit/test_check_compiles.py` reads each citation in the installed or downloaded
sources). A compile ends with its matching "done/took" line, or when the engine is seen making progress after
it began (vLLM's periodic throughput line with tokens moving, which covers the last VLLM_LOG_STATS_INTERVAL, or
`progressed(now, since)` from a caller whose window, begun at `since`, saw the counters move).

The grace per cause is bounded by vLLM's own time-outs (`Bounds`): while serving, a step the engine does not
finish within `VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS` (300 s in every release 0.27.1-0.34.0, vllm/envs.py) fails
the multiprocess executor's `collective_rpc` (vllm/v1/executor/multiproc_executor.py:349 in 0.32.0); during a
start, `VLLM_ENGINE_READY_TIMEOUT_S` (600 s, vllm/envs.py) bounds the wait for the engine's ready message
(vllm/v1/engine/core_client.py:740 in 0.32.0). Past its grace a compile no longer excuses a stall.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

TORCH_COMPILE = "torch.compile/Inductor"
TRITON_JIT = "Triton JIT"
DEEPGEMM_JIT = "DeepGEMM JIT"
CUDA_GRAPHS = "CUDA-graph capture"
JIT_MONITOR = "vLLM JIT monitor"
COMPILER_PROCESS = "a compiler process"  # seen running under a vLLM process (serve only): what it builds for is unknown

# Seconds each cause may stall the engine before it counts as wedged (docs/check.md says why each).
GRACE_S: Mapping[str, float] = {
    TORCH_COMPILE: 300.0,  # a piecewise graph per compile range; vLLM's whole-model compile takes minutes cold
    TRITON_JIT: 120.0,  # one kernel is seconds; a first prefill compiles several (vllm#41530)
    DEEPGEMM_JIT: 120.0,  # 8 cubins in 14 s on B200, 34 s on CI (tokenspeed PR #398): x3 and more
    CUDA_GRAPHS: 300.0,  # every batch size of every mode, at start
    JIT_MONITOR: 120.0,  # vLLM's monitor names a kernel compiled during inference: Triton's, CuTeDSL's, TileLang's
    COMPILER_PROCESS: 300.0,  # nvcc/ptxas for a JIT, g++ for Inductor's C++ on CPU: one of a series, as torch.compile
}
COMPILER_GAP_S = 10.0  # no compiler process seen for this long: the series ended (a compile's own steps between runs)
# Process names of compilers a JIT runs (nvcc and what it runs; Triton's ptxas; Inductor's C++ compiler on CPU).
COMPILERS = frozenset({"nvcc", "cicc", "ptxas", "cudafe++", "nvlink", "fatbinary", "g++", "gcc", "c++", "cc",
                       "cc1", "cc1plus", "clang", "clang++", "ld"})

EXECUTE_MODEL_TIMEOUT_S = 300.0  # VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, vllm/envs.py default, 0.27.1-0.34.0
STATS_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL, vllm/envs.py default (0.32.0: envs.py:868): what one stats line spans
ENGINE_READY_TIMEOUT_S = 600.0  # VLLM_ENGINE_READY_TIMEOUT_S, vllm/envs.py default, 0.27.1-0.34.0

START, END, STEP = "start", "end", "step"  # a compile begins (or goes on), ends, or a progress bar moved


@dataclass(frozen=True)
class Bounds:
    """vLLM's own time-outs: the outer bound of every grace. `source` says where the numbers came from."""

    execute_model_s: float = EXECUTE_MODEL_TIMEOUT_S
    engine_ready_s: float = ENGINE_READY_TIMEOUT_S
    stats_interval_s: float = STATS_INTERVAL_S
    source: str = "vLLM's defaults (vllm/envs.py)"


def bounds_from(environ: Mapping[str, str]) -> Bounds:
    """The bounds in an environment vLLM reads (serve's own process: vLLM runs in it); vLLM's defaults where unset
    or unreadable (vLLM's envs.py parses them with int())."""
    values, said = {}, []
    for key, name, default in (("execute_model_s", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", EXECUTE_MODEL_TIMEOUT_S),
                               ("engine_ready_s", "VLLM_ENGINE_READY_TIMEOUT_S", ENGINE_READY_TIMEOUT_S)):
        try:
            values[key] = float(int(environ[name]))
            said.append(f"{name}={environ[name]}")
        except (KeyError, ValueError):
            values[key] = default
    try:
        interval = float(environ.get("VLLM_LOG_STATS_INTERVAL", STATS_INTERVAL_S))
        values["stats_interval_s"] = interval if interval > 0 else STATS_INTERVAL_S  # vLLM's own fallback
    except ValueError:
        pass
    source = "the environment (" + ", ".join(said) + "), else vLLM's defaults" if said else Bounds.source
    return Bounds(source=source, **values)


@dataclass(frozen=True)
class Source:
    """Where a text is printed: package, release, file (relative to the package's root), line, the literal there."""

    package: str
    version: str
    path: str
    line: int
    literal: str

    def __str__(self) -> str:
        return f"{self.package} {self.version} {self.path}:{self.line}"


@dataclass(frozen=True)
class Pattern:
    cause: str
    kind: str  # START, END or STEP
    regex: re.Pattern[str]
    sources: tuple[Source, ...]


def _v(version: str, path: str, line: int, literal: str) -> Source:
    return Source("vllm", version, path, line, literal)


def _t(path: str, line: int, literal: str) -> Source:
    return Source("torch", "2.13.0", path, line, literal)


_MONITOR = "vllm/compilation/monitor.py"
_TAG = r"(?:\[(?P<what>(?![\w./-]+\.py:\d+\])[^\]]+)\] )?"  # vLLM's compile tag ("[backbone] "), not the record's [file.py:N]
_BACKENDS = "vllm/compilation/backends.py"
PATTERNS: tuple[Pattern, ...] = (
    # vLLM's torch.compile of the model (its `monitor_torch_compile`, `VllmBackend`)
    Pattern(TORCH_COMPILE, START, re.compile(_TAG + r"Starting torch\.compile\b"),
            (_v("0.32.0", _MONITOR, 40, "Starting torch.compile"), _v("0.34.0", _MONITOR, 40, "Starting torch.compile"))),
    Pattern(TORCH_COMPILE, START, re.compile(_TAG + r"Dynamo bytecode transform time: [\d.]+ s"),
            (_v("0.27.1", _BACKENDS, 1156, "Dynamo bytecode transform time"),
             _v("0.32.0", _BACKENDS, 1167, "Dynamo bytecode transform time"),
             _v("0.34.0", _BACKENDS, 1168, "Dynamo bytecode transform time"))),
    Pattern(TORCH_COMPILE, STEP, re.compile(r"Compiling a graph for compile range (?P<what>.+?) takes [\d.]+ s"),
            (_v("0.27.1", _BACKENDS, 394, "Compiling a graph for compile range"),
             _v("0.32.0", _BACKENDS, 399, "Compiling a graph for compile range"),
             _v("0.34.0", _BACKENDS, 422, "Compiling a graph for compile range"))),
    Pattern(TORCH_COMPILE, END, re.compile(r"torch\.compile took [\d.]+ s in total"),
            (_v("0.27.1", _MONITOR, 20, "torch.compile took %.2f s in total"),
             _v("0.32.0", _MONITOR, 20, "torch.compile took %.2f s in total"),
             _v("0.34.0", _MONITOR, 20, "torch.compile took %.2f s in total"))),
    Pattern(TORCH_COMPILE, END, re.compile(r"torch\.compile and initial profiling/warmup run together took [\d.]+ s"),
            (_v("0.32.0", "vllm/compilation/decorators.py", 707, "torch.compile and initial profiling/warmup "),)),
    # torch's own step log (TORCH_LOGS=dynamo,inductor; torch/_logging/_internal.py prefixes "Step N: ")
    Pattern(TORCH_COMPILE, START, re.compile(r"Step 1: torchdynamo start tracing (?P<what>\S+ \S+)"),
            (_t("torch/_dynamo/symbolic_convert.py", 5337, "torchdynamo start tracing"),)),
    Pattern(TORCH_COMPILE, START, re.compile(r"Step 2: calling compiler function (?P<what>\S+)"),
            (_t("torch/_dynamo/output_graph.py", 3116, "calling compiler function"),)),
    Pattern(TORCH_COMPILE, START, re.compile(r"Step 3: torchinductor compiling (?P<what>\w+ graph \d+)"),
            (_t("torch/_inductor/compile_fx.py", 1304, "torchinductor compiling "),)),
    Pattern(TORCH_COMPILE, END, re.compile(r"Step 2: done compiler function \S+"),
            (_t("torch/_dynamo/output_graph.py", 3120, "done compiler function"),)),
    # CUDA-graph capture: tqdm's bar (its description), then vLLM's summary
    Pattern(CUDA_GRAPHS, STEP, re.compile(r"Capturing CUDA graphs(?: \((?P<what>[^)]*\)?)\))?(?P<bar>:\s+\d+%\|.*)?"),
            (_v("0.32.0", "vllm/v1/worker/gpu_model_runner.py", 6657, 'desc="Capturing CUDA graphs ({}, {})"'),
             _v("0.32.0", "vllm/v1/worker/gpu/cudagraph_utils.py", 422, 'progress_bar_desc: str = "Capturing CUDA graphs"'),
             _v("0.34.0", "vllm/v1/worker/gpu/cudagraph_utils.py", 459, 'progress_bar_desc: str = "Capturing CUDA graphs"'))),
    Pattern(CUDA_GRAPHS, END, re.compile(r"Graph capturing finished in \d+ secs"),
            (_v("0.32.0", "vllm/v1/worker/gpu_model_runner.py", 6582, "Graph capturing finished in"),
             _v("0.32.0", "vllm/v1/worker/gpu/model_runner.py", 1128, "Graph capturing finished in"),
             _v("0.34.0", "vllm/v1/worker/gpu/model_runner.py", 1217, "Graph capturing finished in"))),
    # DeepGEMM: vLLM's warm-up bar; the vendored DeepGEMM's JIT (its _C_extension's strings, printed with its
    # DG_JIT_PRINT_COMPILER_COMMAND / DG_JIT_PRINT_LOAD_TIME)
    Pattern(DEEPGEMM_JIT, STEP, re.compile(r"DeepGEMM warmup(?P<bar>:\s+\d+%\|.*)?"),
            (_v("0.32.0", "vllm/model_executor/warmup/deep_gemm_warmup.py", 369, 'desc="DeepGEMM warmup"'),
             _v("0.34.0", "vllm/model_executor/warmup/deep_gemm_warmup.py", 523, 'desc="DeepGEMM warmup"'))),
    Pattern(DEEPGEMM_JIT, START, re.compile(r"Running command: (?=.*\bnvcc\b)(?:.*\s-o\s+(?P<what>\S+))?"),
            (Source("vllm", "0.34.0", "vllm/third_party/deep_gemm/_C_extension.abi3.so", 0, "Running command: %s"),)),
    Pattern(DEEPGEMM_JIT, END, re.compile(r"Load time \((?P<what>[^)]*)\): [\d.]+ ms"),
            (Source("vllm", "0.34.0", "vllm/third_party/deep_gemm/_C_extension.abi3.so", 0, "Load time ({}): {:.2f} ms"),)),
    # vLLM's JIT monitor (after warm-up: a kernel compiled during inference). Triton's hook runs after the compile,
    # CuTeDSL's and TileLang's before it: each is a compile in a series, ended by progress.
    Pattern(JIT_MONITOR, START, re.compile(
        r"(?P<backend>Triton|CuTeDSL|TileLang) (?:kernel )?JIT compilation during inference: (?P<what>[^\s.(]+)"),
        (_v("0.27.1", "vllm/utils/jit_monitor.py", 121, "during inference: %s%s"),
         _v("0.32.0", "vllm/utils/jit_monitor.py", 126, "during inference: %s%s"),
         _v("0.34.0", "vllm/utils/jit_monitor.py", 129, "during inference: %s%s"))),
    # Triton's autotuner (TRITON_PRINT_AUTOTUNING, which vLLM's JIT monitor turns on): a benchmark just ended
    Pattern(TRITON_JIT, START, re.compile(r"Triton autotuning for function (?P<what>\w+)"),
            (Source("triton", "3.9.0", "triton/runtime/autotuner.py", 286, "Triton autotuning for function"),)),
)

# vLLM's periodic statistics line: tokens moved since the last one means the engine steps again.
PROGRESS = re.compile(r"Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, Avg generation throughput: (?P<gen>[\d.]+) tokens/s")
PROGRESS_SOURCES = (_v("0.32.0", "vllm/v1/metrics/loggers.py", 284, "Avg generation throughput: %.1f tokens/s"),
                    _v("0.34.0", "vllm/v1/metrics/loggers.py", 284, "Avg generation throughput: %.1f tokens/s"))
_WORDS = ("torch.compile", "torchdynamo", "torchinductor", "compiler function", "Dynamo bytecode", "compile range",
          "CUDA graphs", "Graph capturing", "DeepGEMM", "Running command", "Load time", "during inference",
          "Triton autotuning", "Avg prompt throughput")
OWN_LINES = "dsv4ctl serve: "  # serve's own lines (the watchdog's quote the compile's line): never a compile
_BAR_DONE = re.compile(r"100%\|.*?\| *(?P<n>\d+)/(?P=n)\b")


@dataclass(frozen=True)
class Busy:
    """The engine compiles: what (as the line names it; empty when it names nothing), for how long, its grace
    (the cause's, bounded by vLLM's time-out) and the line that says so."""

    cause: str
    what: str
    since_s: float
    grace_s: float
    evidence: str
    source: str  # where the matched text is printed
    bound: str = ""  # which of vLLM's time-outs bounds the grace, when it does

    @property
    def overdue(self) -> bool:
        return self.since_s > self.grace_s

    def describe(self) -> str:
        what = f" ({self.what})" if self.what else ""
        return f"{self.cause}{what} for {self.since_s:.0f} s"

    def sentence(self) -> str:
        within = "past" if self.overdue else "within"
        bound = f", {self.bound}" if self.bound else ""
        return (f"the engine compiles: {self.describe()}, {within} its grace of {self.grace_s:g} s{bound} "
                f"(the log: {_clip(self.evidence)!r})")

    def to_json(self) -> dict[str, object]:
        return {"cause": self.cause, "what": self.what, "since_s": round(self.since_s, 1), "grace_s": self.grace_s,
                "overdue": self.overdue, "evidence": self.evidence, "source": self.source, "bound": self.bound}


@dataclass
class _Open:
    started: float
    what: str
    evidence: str
    source: str
    seen: float = 0.0  # a compiler process: when it was last seen running


@dataclass
class CompileTracker:
    """Compiles and captures the engine's lines say are running. `serving`: the server answers (its engine
    started), so vLLM's execute-model time-out bounds a grace; before that, its engine-ready time-out."""

    bounds: Bounds = field(default_factory=Bounds)
    graces: Mapping[str, float] = field(default_factory=lambda: dict(GRACE_S))
    serving: bool = True
    _open: dict[str, _Open] = field(default_factory=dict)

    def feed(self, line: str, now: float) -> str | None:
        """One line of the engine's output, read at `now` (seconds, any clock the caller keeps). Returns the cause
        it started, went on with or ended, or None."""
        if not any(word in line for word in _WORDS) or OWN_LINES in line:
            return None
        progress = PROGRESS.search(line)
        if progress is not None:  # tokens moved at some time in the interval the line covers
            if float(progress["prompt"]) > 0 or float(progress["gen"]) > 0:
                self.progressed(now, since=now - self.bounds.stats_interval_s)
            return None
        for pattern in PATTERNS:
            found = pattern.regex.search(line)
            if found is None:
                continue
            what = _what(found)
            kind = pattern.kind
            if kind == STEP:
                kind = END if _BAR_DONE.search(line) else START
                if pattern.cause == TORCH_COMPILE:  # one range compiled; the next may follow: still compiling
                    kind = START
            if kind == END:
                self._open.pop(pattern.cause, None)
            else:
                self._begin(pattern.cause, what, line.strip(), str(pattern.sources[-1]), now)
            return pattern.cause
        return None

    def _begin(self, cause: str, what: str, evidence: str, source: str, now: float) -> None:
        known = self._open.get(cause)
        if known is None:
            self._open[cause] = _Open(now, what, evidence, source)
        else:  # the same compile goes on: its start stays, what it compiles now is the latest line's
            known.what, known.evidence, known.source = what or known.what, evidence, source

    def progressed(self, now: float, since: float | None = None) -> None:
        """The engine was seen stepping (its counters moved) at some time from `since` (default: `now`) to `now`:
        a compile begun before `since` has ended; one begun later may have begun after the step."""
        since = now if since is None else since
        for cause in [cause for cause, entry in self._open.items() if entry.started < since]:
            del self._open[cause]

    def saw_compilers(self, found: list[tuple[int, str, str]], now: float) -> None:
        """Compiler processes running under vLLM's processes now (pid, name, command line), from the process table:
        one of a series begins or goes on; none seen for COMPILER_GAP_S ends the series."""
        known = self._open.get(COMPILER_PROCESS)
        if not found:
            if known is not None and now - known.seen > COMPILER_GAP_S:
                del self._open[COMPILER_PROCESS]
            return
        pid, name, command = found[0]
        target = re.search(r"\s-o\s+(\S+)", command)
        what = f"{name} {target[1].rsplit('/', 1)[-1]}" if target else name
        self._begin(COMPILER_PROCESS, what, _clip(f"pid {pid}: {command}", 300), "the process table (psutil)", now)
        self._open[COMPILER_PROCESS].seen = now

    def state(self, now: float) -> Busy | None:
        """The compile running longest, or None."""
        if not self._open:
            return None
        cause, entry = min(self._open.items(), key=lambda item: item[1].started)
        grace, bound = self.grace(cause)
        return Busy(cause=cause, what=entry.what, since_s=max(0.0, now - entry.started), grace_s=grace,
                    evidence=entry.evidence, source=entry.source, bound=bound)

    def grace(self, cause: str) -> tuple[float, str]:
        own = self.graces.get(cause, min(self.graces.values()))
        if self.serving:
            name, limit = "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", self.bounds.execute_model_s
        else:
            name, limit = "VLLM_ENGINE_READY_TIMEOUT_S", self.bounds.engine_ready_s
        if limit < own:
            return limit, f"bounded by {name}={limit:g} s ({self.bounds.source})"
        return own, ""


def _what(found: re.Match[str]) -> str:
    groups = found.groupdict()
    what = (groups.get("what") or "").strip()
    if groups.get("backend"):
        what = f"{groups['backend']} {what}".strip()
    return what


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
