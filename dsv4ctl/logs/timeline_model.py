"""What a start's log says, as data: `StartupTimeline` (the fields `diagnose` prints, `fit-length --from-log`
reads and `serve` shows), the progress events and line references. `timeline.StartupTracker` fills them."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from dsv4ctl.logs.reader import LogLine

# The first release whose starts are measured by default (the extensible KV cache, vllm==0.34.0 config/vllm.py:3252-3254
# on CUDA and ROCm) and run the V2 model runner only (0.34.0 removed v1/worker/gpu_model_runner.py; v1/worker/
# gpu_worker.py:578-587 `_make_model_runner` builds the V2 runner and logs no "Using V2 Model Runner").
MEASURED_FROM = (0, 34)

# `non-default args` that turn the measured mode off without a line (vllm==0.34.0 config/vllm.py:3203-3213: sizes given;
# :3252-3263 an explicit False is kept).
_ESTIMATE_ARGS = ("kv_cache_memory_bytes", "num_gpu_blocks_override")


def release(version: str | None) -> tuple[int, int] | None:
    """A release's (major, minor) from the version a log names ("0.34.0", "v0.34.1rc1.dev5+g…")."""
    m = re.match(r"v?([0-9]+)\.([0-9]+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


PHASES = (
    "starting",
    "loading_weights",
    "weights_loaded",
    "profiling",
    "kv_cache",
    "capturing",
    "ready",
    "failed",
    "shutdown",
)


@dataclass(frozen=True)
class LineRef:
    """Where a value came from: the source, its 1-based line number and the message text."""

    source: str
    line: int
    text: str

    @classmethod
    def of(cls, line: LogLine) -> "LineRef":
        return cls(line.source, line.lineno, line.message)


@dataclass(frozen=True)
class ProgressEvent:
    """A step of the startup: `phase` is one of PHASES, `text` a short line for people."""

    phase: str
    text: str
    source: str = "-"
    line: int = 0


@dataclass
class WeightsProgress:
    """How far loading the weights got, as tqdm's last redraw of the shards bar says: shards `done` of `total`, the
    percent, the time elapsed and tqdm's estimate of the time left ("05:40"), the rate ("8.51s/it"), and the line (its
    last redraw as `text`)."""

    done: int
    total: int
    percent: int | None
    elapsed: str | None
    remaining: str | None
    rate: str | None
    source: str
    line: int
    text: str


@dataclass
class AutoFit:
    """vLLM's auto-fit of max_model_len: reduced `from_len` -> `to_len` with `memory_text` available."""

    from_len: int
    to_len: int
    memory_text: str | None  # as logged: "9.81 GiB GPU" or "9.81 GiB available for KV cache"
    memory_gib: float | None
    ref: LineRef | None = None

    def to_json(self) -> dict[str, Any]:
        return {"from": self.from_len, "to": self.to_len, "memory": self.memory_text, "memory_gib": self.memory_gib}


@dataclass
class MeasuredBlocks:
    """vLLM 0.34's measured KV cache on one worker: `blocks` (`gib`) that fit after warmup and CUDA-graph capture
    ("Memory after warmup: ...", with the memory free then and the budget requested), or committed ("Extended KV
    cache to N blocks (X GiB).")."""

    worker: str
    blocks: int
    gib: float
    free_gib: float | None = None
    requested_gib: float | None = None
    ref: LineRef | None = None


@dataclass
class CaptureProgress:
    """The latest CUDA-graph capture progress bar: `mode` is FULL / PIECEWISE, `n` of `total` graphs."""

    desc: str  # "Capturing CUDA graphs (decode, FULL)"
    mode: str | None
    n: int
    total: int
    ref: LineRef | None = None


@dataclass
class StartupTimeline:
    """Everything a startup log says about the startup. Fields are None when the log does not say.

    max_model_len: the length the engine was configured with (before auto-fit);
    max_model_len_arg: the `--max-model-len` value from `non-default args` ("-1" means auto);
    effective_max_model_len: after auto-fit (equals max_model_len when nothing was reduced);
    available_kv_gib / available_kv_line: vLLM's "Available KV cache memory: X GiB" (per worker); in vLLM 0.34's
        measured mode (sizing_mode "measured") the reservation the tentative plan used, not the KV cache's size;
    autofit: the reduction that stands (in a measured start the one after CUDA-graph capture and warmup, whose "from"
        is the tentative length); tentative_autofit: the measured mode's first fit, before capture (from == to when
        the full length fitted then);
    sizing_mode: "measured" (vLLM 0.34's extensible KV cache), "estimate" (profiling, every release before 0.34, or
        0.34 with the extensible cache off), None when the log does not say;
    measured_per_worker / extended: the blocks each worker measured after warmup, and the blocks committed;
    weights_gib / weights_seconds: "Model loading took X GiB memory and Y seconds";
    graph_capture_gib / graph_capture_seconds: "Graph capturing finished in Y secs, took X GiB";
    kv_cache_tokens / max_concurrency: "GPU KV cache size: N tokens, Maximum concurrency ... Cx";
    capture: the latest capture progress (mode, n/N); capture_modes: every mode seen, in order;
    ready / ready_url / ready_ref: the server said it is serving (or the engine finished init);
    last_phase: the phase of the latest event (one of PHASES).
    """

    vllm_version: str | None = None
    model: str | None = None
    architecture: str | None = None
    max_model_len: int | None = None
    max_model_len_arg: str | None = None
    effective_max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    enable_expert_parallel: bool | None = None
    compilation_mode: str | None = None
    cudagraph_mode: str | None = None
    enforce_eager: bool | None = None
    model_runner: str | None = None  # "V1" / "V2"
    speculative_method: str | None = None  # the launch's speculative decoding method ("mtp", "dspark", ...)
    uses_fp8_ds_mla: bool = False
    has_indexer: bool = False
    deep_gemm_source: str | None = None  # "vendored" when vLLM logged it fell back to its own copy
    # vLLM's startup plans this start saved or applied, one per worker (planning/mirror/startup_plans.py): fingerprints
    startup_plans: list[str] = field(default_factory=list)
    startup_plan_applied: bool = False  # a worker re-applied a plan (memory profiling skipped)
    weights_gib: float | None = None
    weights_seconds: float | None = None
    weights_progress: WeightsProgress | None = None
    available_kv_gib: float | None = None
    available_kv_line: str | None = None
    autofit: AutoFit | None = None
    autofit_full_fit: bool = False
    tentative_autofit: AutoFit | None = None
    autofit_final_ref: LineRef | None = None  # the measured mode's fit after warmup (a reduction or the length kept)
    sizing_mode: str | None = None
    measured_per_worker: list[MeasuredBlocks] = field(default_factory=list)
    extended: MeasuredBlocks | None = None
    remapped_blocks: tuple[int, int] | None = None  # "Remapping the KV cache from A to B blocks"
    extensible_off_reason: str | None = None  # "Disabling the extensible KV cache: <reason>"
    utilization_cap: tuple[float, float, float] | None = None  # gpu_memory_utilization, GiB it caps at, GiB withheld
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    capture: CaptureProgress | None = None
    capture_modes: list[str] = field(default_factory=list)
    graph_capture_gib: float | None = None
    graph_capture_seconds: float | None = None
    init_engine_seconds: float | None = None
    ready: bool = False
    ready_url: str | None = None
    ready_ref: LineRef | None = None
    last_phase: str | None = None
    refs: dict[str, LineRef] = field(default_factory=dict)
    # `non-default args: {...}` as vLLM printed it (vllm/entrypoints/utils.py log_non_default_args): the
    # launch's own flags by their EngineArgs/FrontendArgs names, so suggested commands can repeat them.
    serve_args: dict[str, Any] = field(default_factory=dict)

    @property
    def measured(self) -> MeasuredBlocks | None:
        """The blocks the measured mode committed ("Extended KV cache to N blocks"), else the least a worker measured
        after warmup (the engine takes the minimum over ranks, vllm==0.34.0 v1/core/kv_cache_planning.py:1881-1882)."""
        if self.extended is not None:
            return self.extended
        return min(self.measured_per_worker, key=lambda b: b.blocks, default=None)

    @property
    def sizing_mode_known(self) -> str | None:
        """How the start sized its KV cache: what its lines say, else what its release and its own flags decide
        ("estimate" before 0.34, or with sizes given or the extensible cache turned off), else None."""
        if self.sizing_mode is not None:
            return self.sizing_mode
        r = release(self.vllm_version)
        if r is None:
            return None
        args = self.serve_args or {}
        if r < MEASURED_FROM or any(args.get(k) is not None for k in _ESTIMATE_ARGS) \
                or args.get("enable_extensible_kv_cache") is False:
            return "estimate"
        return None

    @property
    def kv_memory_gib(self) -> float | None:
        """The KV cache's memory per worker as the log shows it, what a plan takes as KV memory: in the measured mode the
        blocks committed (else the least a worker measured; None before the measurement, "Available KV cache memory"
        being the tentative plan's reservation, vllm==0.34.0 v1/worker/gpu_worker.py:795-798); in the estimate mode
        "Available KV cache memory"; None in a 0.34+ start whose lines and flags do not say the mode."""
        mode = self.sizing_mode_known
        if mode == "measured":
            return self.measured.gib if self.measured is not None else None
        r = release(self.vllm_version)
        if mode is None and r is not None and r >= MEASURED_FROM:
            return self.measured.gib if self.measured is not None else None
        return self.available_kv_gib

    @property
    def serving(self) -> bool:
        """The API server said it serves (or answered a request). `ready` alone may rest on an engine's
        "init engine … took" line, after which the server still waits for its other engines and builds its app."""
        return self.ready_url is not None or "startup_complete" in self.refs or "answered" in self.refs

    @property
    def answering(self) -> bool:
        """uvicorn said its startup is complete, or a request was answered: past "Starting vLLM server on", which
        vLLM logs before uvicorn loads its config (TLS files) and binds."""
        return "startup_complete" in self.refs or "answered" in self.refs

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("autofit", "tentative_autofit"):
            fit = getattr(self, key)
            if fit is not None:
                data[key] = {**fit.to_json(), "line": fit.ref.line if fit.ref else None}
        if self.utilization_cap is not None:
            util, cap_gib, withheld_gib = self.utilization_cap
            data["utilization_cap"] = {"gpu_memory_utilization": util, "caps_at_gib": cap_gib, "withheld_gib": withheld_gib}
        data["refs"] = {k: {"source": r.source, "line": r.line} for k, r in self.refs.items()}
        return data
