"""Reconstruct a vLLM startup timeline from log lines, incrementally.

`StartupTracker.feed(line)` returns the progress events that line produced (usually none), and `.timeline` holds
everything reconstructed so far in a plain `StartupTimeline` dataclass. `serve` drives a live progress line with it;
`fit-length --from-log` reads the memory fields; `diagnose` prints it. Every regex here contains one of the prefilter
keywords (`dsv4ctl.logs.prefilter`), so the tracker sees the same lines whether it is fed the whole log or only
prefiltered lines. Formats are vLLM's own (0.27-0.34; see docs/diagnose.md for the list and where each comes from).
"""

from __future__ import annotations

import re

from dsv4ctl import re_cache
from dsv4ctl.logs import timeline_sizing
from dsv4ctl.logs.reader import LogLine, strip_ansi
from dsv4ctl.logs.timeline_launch import read_engine_config, read_nondefault
from dsv4ctl.logs.timeline_model import (
    PHASES,
    AutoFit,
    CaptureProgress,
    LineRef,
    ProgressEvent,
    StartupTimeline,
    WeightsProgress,
)
from dsv4ctl.units import format_tokens

__all__ = ["PHASES", "AutoFit", "CaptureProgress", "LineRef", "ProgressEvent", "StartupTimeline", "StartupTracker"]


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _gib_in(text: str) -> float | None:
    m = re.search(r"([0-9]+(?:\.[0-9]+)?)\s*GiB", text)
    return float(m.group(1)) if m else None


# A server answering: uvicorn's access line (uvicorn==0.54.0 uvicorn/config.py:94) and vLLM's throughput line (vllm==0.33.0
# v1/metrics/loggers.py:283, 0.27.1 :263; V0's vllm==0.6.3 engine/metrics.py:346). `status` is the access line's.
ANSWERED_RE = re_cache.compile(r'- "[A-Z]+ \S* HTTP/[0-9.]+" (?P<status>[0-9]{3})\b|Engine [0-9]+: Avg prompt throughput: '
                               r'|^Avg prompt throughput: [0-9.]+ tokens/s, Avg generation throughput: [0-9.]+ tokens/s, Running: ')

# Line rules. Each regex contains a prefilter keyword literally (tests check the tracker gives the
# same timeline on the whole log and on prefiltered lines).
_RE = {
    # The model runs to the end of the line: a local path may hold spaces.
    "banner": re_cache.compile(r"vLLM server version (\S+?),? serving model (\S(?:.*\S)?)"),
    "logo_version": re_cache.compile(r"█\s+version (\S+)"),
    # Releases before the "serving model" banner (vllm==0.6.3 vllm/entrypoints/openai/api_server.py:528).
    "api_banner": re_cache.compile(r"vLLM API server version (\S+)"),
    "logo_model": re_cache.compile(r"█\s+model   (\S(?:.*\S)?)"),
    "engine": re_cache.compile(r"Initializing a V1 LLM engine \(v([^)]+)\) with config: (.*)"),
    "nondefault": re_cache.compile(r"non-default args: (.*)"),
    "max_len": re_cache.compile(r"Using max model len ([0-9]+)"),
    "arch": re_cache.compile(r"Resolved architecture: (\S+)"),
    "start_load": re_cache.compile(r"Starting to load model (\S(?:.*?\S)?)(?:\.\.\.)?\s*$"),
    # tqdm's bar (vllm==0.32.0 model_executor/model_loader/weight_utils.py "Loading safetensors checkpoint shards"),
    # the last redraw of the line: "13% Completed | 6/46 [00:51<05:40, 8.51s/it]".
    "shards": re_cache.compile(r"Loading safetensors checkpoint shards:?\s*(?:([0-9]+)% Completed \| )?([0-9]+)/([0-9]+)"
                               r"(?: \[([0-9:]+)<([0-9:?]+),? ?([^\]]*)\])?"),
    "load_weights": re_cache.compile(r"Loading weights took ([0-9]+(?:\.[0-9]+)?) seconds"),
    "model_loading": re_cache.compile(r"Model loading took ([0-9]+(?:\.[0-9]+)?) GiB(?: memory)? and ([0-9]+(?:\.[0-9]+)?) seconds"),
    "profiling": re_cache.compile(
        r"Memory profiling takes|Starting torch\.compile|Dynamo bytecode transform time|Compiling a graph for compile range"
        r"|Initial profiling/warmup run took|Profiling CUDA graph memory|Estimated CUDA graph memory"
    ),
    "available_kv": re_cache.compile(r"Available KV cache memory: (-?[0-9]+(?:\.[0-9]+)?) GiB"),
    "kv_size": re_cache.compile(r"KV cache size: ([0-9,]+) tokens"),
    "concurrency": re_cache.compile(r"Maximum concurrency for ([0-9,]+) tokens per request: ([0-9]+(?:\.[0-9]+)?)x"),
    "capture": re_cache.compile(
        r"(Capturing [A-Za-z -]*CUDA graphs)(?: \(([^)]*)\))?:?\s*(?:[0-9]+%)?\s*\|[^|]*\|\s*([0-9]+)/([0-9]+)"
    ),
    "capture_bare": re_cache.compile(r"(Capturing [A-Za-z -]*CUDA graphs)(?: \(([^)]*)\))?"),
    "graph_done": re_cache.compile(r"Graph capturing finished in ([0-9]+(?:\.[0-9]+)?) secs, took ([0-9]+(?:\.[0-9]+)?) GiB"),
    "init_engine": re_cache.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9]+(?:\.[0-9]+)?) s"),
    "server_on": re_cache.compile(r"Starting vLLM (?:API )?server (?:[0-9]+ )?on (\S+)"),
    "startup_complete": re_cache.compile(r"Application startup complete"),
    # Excerpts read in full show these; the prefilter selects neither (a long log's ready line comes first).
    "answered": ANSWERED_RE,
    "v2_runner": re_cache.compile(r"Using V2 Model Runner"),
    "v1_runner": re_cache.compile(r"Model Runner V2 (?:does not yet support|requires).*using the V1 model runner"),
    "fp8_ds_mla": re_cache.compile(r"fp8_ds_mla KV cache format"),
    # vLLM's startup plans (vllm==0.33.0 vllm/v1/worker/startup_plan.py:189 "Saved startup plan to %s", :153
    # "Applying persisted startup plan (fingerprint %s): kv_cache_memory_bytes=%d …"; the same file in 0.26-0.33).
    "plan_saved": re_cache.compile(r"Saved startup plan to \S*startup_plan_([0-9a-f]{16})\.json"),
    "plan_applied": re_cache.compile(r"Applying persisted startup plan \(fingerprint ([0-9a-f]{16})\)"),
    "indexer": re_cache.compile(r"indexer cache for Lightning Indexer"),
    "vendored_dg": re_cache.compile(r"deep_gemm not found in site-packages, trying vendored"),
    "failed": re_cache.compile(
        r"EngineCore failed to start|WorkerProc initialization failed|WorkerProc failed to start"
        r"|Engine core initialization failed|died unexpectedly|EngineCore encountered a fatal error"
    ),
    "traceback": re_cache.compile(r"^Traceback \(most recent call last\)"),
    # Shutdown asked for from outside (SIGTERM, Ctrl-C, the server stopping). vLLM >= 0.32 also logs
    # "[shutdown] Executor: ..." lines while it tears down after a failure: those are not markers.
    "shutdown": re_cache.compile(
        r"^\[shutdown\] (?:API server: shutdown triggered|.*received signal)"
        r"|^Shutting down$|Waiting for application shutdown|Finished server process|^KeyboardInterrupt"
    ),
}


def line_patterns() -> dict[str, re.Pattern[str]]:
    """Every vLLM line the startup timeline reads, by key: its own and the KV sizing lines (`timeline_sizing.RE`).
    What `scripts/add_release.py` looks up in each release's source (catalogue/vllm_log_lines.json)."""
    return {**_RE, **timeline_sizing.RE}

class StartupTracker:
    """Feed log lines in order; get progress events back and a growing `timeline`."""

    def __init__(self) -> None:
        self.timeline = StartupTimeline()
        self._last_capture_key: tuple[str, int, int] | None = None
        self._model_rank = 0  # how the model was read: 1 a banner's text, 2 the engine config's repr, 3 the args' dict

    # -- helpers ---------------------------------------------------------------------------
    def _ref(self, key: str, line: LogLine, overwrite: bool = True) -> LineRef:
        ref = LineRef.of(line)
        if overwrite or key not in self.timeline.refs:
            self.timeline.refs[key] = ref
        return ref

    def _model(self, value: str, rank: int) -> bool:
        """Take the model from the most faithful source seen: `non-default args` and the engine config quote it as
        Python values (a path with spaces whole), a banner's or logo's text only runs to the end of its line."""
        if not value or rank <= self._model_rank:
            return False
        self.timeline.model = value
        self._model_rank = rank
        return True

    def _event(self, phase: str, text: str, line: LogLine) -> ProgressEvent:
        tl = self.timeline
        # After the startup completed only failure and shutdown move the phase.
        if not (tl.last_phase in ("ready", "shutdown") and phase not in ("failed", "shutdown")):
            tl.last_phase = phase
        return ProgressEvent(phase, text, line.source, line.lineno)

    # -- the rules --------------------------------------------------------------------------
    def feed(self, line: LogLine) -> list[ProgressEvent]:
        """The events this line marks, the timeline updated. A rule runs only on a line holding its words (most
        lines hold none): this runs on every line a start shows."""
        msg = line.message
        if not msg:
            return []
        tl = self.timeline
        events: list[ProgressEvent] = []
        R = _RE
        if "version" in msg or "  model   " in msg:
            self._identity(msg, line, events)
        if "Initializing a V1 LLM engine" in msg or "non-default args" in msg:
            self._launch(msg, line, events)
        if tl.model_runner is None and tl.vllm_version is not None and ("version" in msg or "V1 LLM engine" in msg):
            # vLLM 0.34 removed the V1 runner and its "Using V2 Model Runner" line: a 0.34 start is V2 without it.
            tl.model_runner = timeline_sizing.runner_of_release(tl.vllm_version)
        if "Using max model len" in msg or "Resolved architecture" in msg:
            self._model_config(msg, line, events)
        if "oad" in msg:
            self._weights(msg, line, events)
        if tl.last_phase in (None, "starting", "loading_weights", "weights_loaded") and R["profiling"].search(msg):
            events.append(self._event("profiling", "Profiling memory and compiling", line))
        if "KV cache" in msg or "max_model_len" in msg or "Maximum concurrency" in msg or "max-model-len" in msg:
            self._kv_cache(msg, line, events)
        if "apturing" in msg or "apturing" in line.raw:
            self._graphs(msg, line, events)
        if ("init engine" in msg or "Starting vLLM" in msg or "Application startup" in msg or "HTTP/" in msg
                or "Avg prompt throughput" in msg):
            self._ready(msg, line, events)
        if "Model Runner" in msg or "fp8_ds_mla" in msg or "Lightning Indexer" in msg or "deep_gemm" in msg:
            self._backend(msg, line, events)
        if "startup plan" in msg:
            self._startup_plan(msg, line)
        if ("fail" in msg or "died" in msg or "fatal" in msg) and R["failed"].search(msg):
            events.append(self._event("failed", _short(msg), line))
        elif msg.startswith("Traceback") and not tl.ready and R["traceback"].search(msg):
            if tl.last_phase != "failed":
                events.append(self._event("failed", "Traceback (startup failing)", line))
        if ("hut" in msg or "Finished server" in msg or "KeyboardInterrupt" in msg) and R["shutdown"].search(msg):
            if tl.last_phase != "shutdown":
                events.append(self._event("shutdown", "Shutting down", line))
        return events

    def _identity(self, msg: str, line: LogLine, events: list[ProgressEvent]) -> None:
        """The release and the model: the banner, the logo."""
        tl = self.timeline
        R = _RE
        if "version" in msg:
            m = R["banner"].search(msg)
            if m:
                tl.vllm_version = tl.vllm_version or m.group(1)
                self._model(m.group(2), 1)
                self._ref("vllm_version", line, overwrite=False)
            else:
                m = R["logo_version"].search(msg) or R["api_banner"].search(msg)
                if m and tl.vllm_version is None:
                    tl.vllm_version = m.group(1)
                    self._ref("vllm_version", line, overwrite=False)
        if "  model   " in msg:
            m = R["logo_model"].search(msg)
            if m and self._model(m.group(1), 1):
                self._ref("model", line, overwrite=False)

    def _launch(self, msg: str, line: LogLine, events: list[ProgressEvent]) -> None:
        """The engine's config line and the launch's non-default args."""
        tl = self.timeline
        R = _RE
        if "Initializing a V1 LLM engine" in msg:
            m = R["engine"].search(msg)
            if m:
                read_engine_config(tl, m.group(1), m.group(2), line, self._model)
                if tl.last_phase is None:
                    events.append(self._event("starting", f"Starting vLLM {tl.vllm_version or ''}".strip(), line))
        if "non-default args" in msg:
            m = R["nondefault"].search(msg)
            if m:
                read_nondefault(tl, m.group(1), line, self._model)
                if tl.last_phase is None:
                    events.append(self._event("starting", "Starting vLLM", line))

    def _model_config(self, msg: str, line: LogLine, events: list[ProgressEvent]) -> None:
        """The model's length and architecture as vLLM resolved them."""
        tl = self.timeline
        R = _RE
        if "Using max model len" in msg:
            m = R["max_len"].search(msg)
            if m:
                tl.max_model_len = int(m.group(1))
                self._ref("max_model_len", line)
        if "Resolved architecture" in msg:
            m = R["arch"].search(msg)
            if m:
                tl.architecture = m.group(1)
                self._ref("architecture", line)

    def _weights(self, msg: str, line: LogLine, events: list[ProgressEvent]) -> None:
        """Loading the weights: the start, the shards, the time and size."""
        tl = self.timeline
        R = _RE
        if "Starting to load model" in msg:
            m = R["start_load"].search(msg)
            if m:
                self._model(m.group(1), 1)
            events.append(self._event("loading_weights", "Loading weights", line))
        if "Loading safetensors checkpoint shards" in msg:
            at = msg.rfind("Loading safetensors checkpoint shards")
            m = R["shards"].search(msg, at)
            if m:
                percent, done, total, elapsed, remaining, rate = m.groups()
                tl.weights_progress = WeightsProgress(
                    int(done), int(total), int(percent) if percent else None, elapsed, remaining if remaining != "?" else None,
                    rate.strip() if rate and "?" not in rate else None, line.source, line.lineno, msg[at:m.end()])
                events.append(self._event("loading_weights", f"Loading weights {done}/{total} shards", line))
        if "Loading weights took" in msg:
            m = R["load_weights"].search(msg)
            if m and tl.weights_seconds is None:
                tl.weights_seconds = float(m.group(1))
        if "Model loading took" in msg:
            m = R["model_loading"].search(msg)
            if m:
                tl.weights_gib = float(m.group(1))
                tl.weights_seconds = float(m.group(2))
                self._ref("weights", line)
                events.append(
                    self._event("weights_loaded", f"Weights loaded: {tl.weights_gib:.2f} GiB in {tl.weights_seconds:.1f} s", line)
                )

    def _kv_cache(self, msg: str, line: LogLine, events: list[ProgressEvent]) -> None:
        """The KV cache: the memory vLLM measured (or, in vLLM 0.34's measured mode, reserved), auto-fit's length and the
        measured blocks (`timeline_sizing`), the size and concurrency."""
        tl = self.timeline
        R = _RE
        if "Available KV cache memory" in msg:
            m = R["available_kv"].search(msg)
            if m:
                tl.available_kv_gib = float(m.group(1))
                tl.available_kv_line = msg
                self._ref("available_kv", line)
                reserved = "" if tl.sizing_mode_known == "estimate" or tl.kv_memory_gib is not None else (
                    " (reserved for the tentative plan; the KV cache is measured after CUDA graph capture)")
                events.append(self._event("kv_cache", f"Available KV cache memory: {m.group(1)} GiB{reserved}", line))
        if timeline_sizing.wants(msg):
            timeline_sizing.read_sizing(tl, msg, line, self._ref, self._event, events)
        if "KV cache size" in msg:
            m = R["kv_size"].search(msg)
            if m:
                tl.kv_cache_tokens = _int(m.group(1))
                self._ref("kv_cache_size", line)
        if "Maximum concurrency" in msg:
            m = R["concurrency"].search(msg)
            if m:
                tl.max_concurrency_tokens = _int(m.group(1))
                tl.max_concurrency = float(m.group(2))
                if tl.effective_max_model_len is None:
                    tl.effective_max_model_len = tl.max_concurrency_tokens
                self._ref("max_concurrency", line)
                size = f"{format_tokens(tl.kv_cache_tokens)} tokens, " if tl.kv_cache_tokens is not None else ""
                events.append(
                    self._event(
                        "kv_cache",
                        f"KV cache: {size}{tl.max_concurrency:.2f}x at {format_tokens(tl.max_concurrency_tokens)} tokens",
                        line,
                    )
                )

    def _graphs(self, msg: str, line: LogLine, events: list[ProgressEvent]) -> None:
        """CUDA-graph capture: its progress and what it took."""
        tl = self.timeline
        R = _RE
        if "CUDA graphs" in msg and "Capturing" in msg:
            ev = self._capture(msg, line)
            if ev is not None:
                events.append(ev)
        elif "Capturing" in line.raw and "CUDA graphs" in line.raw:
            # A tqdm bar left without a newline, with a log record appended to it (stdout and stderr
            # share the terminal): the bar is in the raw line, not in the parsed message.
            segments = [s for s in strip_ansi(line.raw).split("\r") if "Capturing" in s]
            if segments:
                ev = self._capture(segments[-1], line)
                if ev is not None:
                    events.append(ev)
        if "Graph capturing finished" in msg:
            m = R["graph_done"].search(msg)
            if m:
                tl.graph_capture_seconds = float(m.group(1))
                tl.graph_capture_gib = float(m.group(2))
                self._ref("graph_capture", line)
                events.append(self._event("capturing", f"CUDA graphs captured: {tl.graph_capture_gib:.2f} GiB in {m.group(1)} s", line))

    def _ready(self, msg: str, line: LogLine, events: list[ProgressEvent]) -> None:
        """Ready: the engine's init line, the server's own lines, a request answered."""
        tl = self.timeline
        R = _RE
        if "init engine (profile" in msg:
            m = R["init_engine"].search(msg)
            if m:
                tl.init_engine_seconds = float(m.group(1))
                self._ref("init_engine", line)
                if not tl.ready:
                    tl.ready = True
                    tl.ready_ref = LineRef.of(line)
                    events.append(self._event("ready", f"Engine ready ({tl.init_engine_seconds:.0f} s init)", line))
        if "Starting vLLM" in msg and " on " in msg:
            m = R["server_on"].search(msg)
            if m:
                tl.ready_url = m.group(1)
                first = not tl.ready or (tl.ready_ref is not None and "Starting vLLM" not in tl.ready_ref.text)
                tl.ready = True
                tl.ready_ref = LineRef.of(line)
                self._ref("ready", line)
                if first:
                    events.append(self._event("ready", f"Ready on {tl.ready_url}", line))
        if "Application startup complete" in msg:
            self._ref("startup_complete", line)
            if not tl.ready:
                tl.ready = True
                tl.ready_ref = LineRef.of(line)
                events.append(self._event("ready", "Ready", line))
        if ('HTTP/' in msg or "Avg prompt throughput" in msg) and not tl.serving and R["answered"].search(msg):
            # The server answered a request: it was up (an excerpt may hold no ready line). Kept only where no
            # ready line said so (the prefilter selects no access line: a long log has its ready line).
            self._ref("answered", line)
            if not tl.ready:
                tl.ready = True
                tl.ready_ref = LineRef.of(line)
                events.append(self._event("ready", "Serving requests", line))

    def _startup_plan(self, msg: str, line: LogLine) -> None:
        """A worker saved or re-applied vLLM's startup plan: its fingerprint names the plan's file."""
        tl = self.timeline
        m = _RE["plan_saved"].search(msg) or _RE["plan_applied"].search(msg)
        if m is None:
            return
        if m.group(1) not in tl.startup_plans:
            tl.startup_plans.append(m.group(1))
        if msg.startswith("Applying"):
            tl.startup_plan_applied = True
        self._ref("startup_plan", line, overwrite=False)

    def _backend(self, msg: str, line: LogLine, events: list[ProgressEvent]) -> None:
        """Which runner, KV layout and kernels this start used."""
        tl = self.timeline
        R = _RE
        if "Model Runner" in msg:
            if R["v2_runner"].search(msg):
                tl.model_runner = "V2"
            elif R["v1_runner"].search(msg):
                tl.model_runner = "V1"
        if "fp8_ds_mla" in msg and R["fp8_ds_mla"].search(msg):
            tl.uses_fp8_ds_mla = True
        if "indexer cache for Lightning Indexer" in msg:
            tl.has_indexer = True
            self._ref("indexer", line, overwrite=False)
        if "deep_gemm not found in site-packages" in msg:
            tl.deep_gemm_source = "vendored"
            self._ref("deep_gemm_source", line, overwrite=False)


    def _capture(self, msg: str, line: LogLine) -> ProgressEvent | None:
        tl = self.timeline
        m = _RE["capture"].search(msg)
        if m:
            desc_base, paren, n, total = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
        else:
            m = _RE["capture_bare"].search(msg)
            if not m:
                return None
            desc_base, paren, n, total = m.group(1), m.group(2), 0, 0
        mode = paren.split(",")[-1].strip() if paren else None
        desc = f"{desc_base} ({paren})" if paren else desc_base
        key = (desc, n, total)
        if tl.capture is not None and total == 0 and tl.capture.desc == desc:
            return None
        tl.capture = CaptureProgress(desc=desc, mode=mode, n=n, total=total, ref=self._ref("capture", line))
        if mode and (not tl.capture_modes or tl.capture_modes[-1] != mode) and len(tl.capture_modes) < 16:
            tl.capture_modes.append(mode)
        if key == self._last_capture_key:
            return None
        self._last_capture_key = key
        text = f"{desc} {n}/{total}" if total else desc
        return self._event("capturing", text, line)


def _short(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
