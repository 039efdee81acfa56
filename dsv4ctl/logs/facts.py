"""The figures a startup log showed that planning takes as data (`LogCalibration`): the measured KV memory, the
weights and graph sizes, auto-fit's lengths, the release and the launch's own flags. `from_timeline` reads them
off a `StartupTimeline`; planning never reads a log itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.logs.deployment import launch_args
from dsv4ctl.logs.timeline_model import MEASURED_FROM, release
from dsv4ctl.units import GiB

@dataclass(frozen=True)
class LogCalibration:
    """What a previous startup log says (the lines fit-length reads)."""

    path: str
    available_kv_bytes: int | None
    weights_bytes: int | None
    graph_bytes: int | None
    autofit_from: int | None
    autofit_to: int | None
    max_model_len: int | None
    vllm_version: str | None = None  # the version the log's banner names
    serve_args: dict[str, Any] = field(default_factory=dict)
    startup_plans: tuple[str, ...] = ()  # fingerprints of the vLLM startup plans this start saved or applied  # the log's `non-default args`
    predicted_from_log: int | None = None  # our auto-fit for the logged memory, to compare with autofit_to
    predicted_range: tuple[int, int] | None = None  # auto-fit across the log's 0.01 GiB rounding interval
    model: str | None = None  # the model the log's launch named (its non-default args or engine config)
    # vLLM 0.34+'s measured ("extensible") KV cache: the mode the log shows ("measured" | "estimate" | None when
    # neither its lines nor its release and flags say), the blocks it committed after warm-up and capture ("Extended
    # KV cache to N blocks", else the least "Memory after warmup ... N KV cache blocks" of its workers) with their
    # bytes (as vLLM rounds them: 0.01 GiB), and the length the tentative auto-fit picked before the measurement (the
    # final fit's upper bound). In the measured mode autofit_from/autofit_to are the fit after warm-up (its "from"
    # the tentative length, as vLLM logs it) and available_kv_bytes is None: "Available KV cache memory" is then the
    # tentative plan's reservation, not KV memory.
    sizing_mode: str | None = None
    measured_kv_blocks: int | None = None
    measured_kv_bytes: int | None = None
    tentative_autofit_to: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "available_kv_cache_memory_bytes": self.available_kv_bytes,
            "model_loading_bytes": self.weights_bytes,
            "graph_capture_bytes": self.graph_bytes,
            "logged_autofit_from": self.autofit_from,
            "logged_autofit_to": self.autofit_to,
            "logged_max_model_len": self.max_model_len,
            "vllm_version": self.vllm_version,
            "model": self.model,
            "predicted_autofit_for_logged_memory": self.predicted_from_log,
            "predicted_autofit_range": list(self.predicted_range) if self.predicted_range else None,
            "sizing_mode": self.sizing_mode,
            "measured_kv_blocks": self.measured_kv_blocks,
            "measured_kv_bytes": self.measured_kv_bytes,
            "tentative_autofit_to": self.tentative_autofit_to,
        }


def from_timeline(timeline: Any, path: str | None) -> LogCalibration:
    """The fit-relevant figures of a `dsv4ctl.logs.timeline.StartupTimeline` (GiB as vLLM rounds them)."""
    if isinstance(timeline, LogCalibration):
        return timeline

    def gib_bytes(value: Any) -> int | None:
        return None if value is None else int(round(float(value) * GiB))

    autofit = getattr(timeline, "autofit", None)
    max_len = getattr(timeline, "max_model_len", None)
    if autofit is not None:
        logged_from, logged_to = autofit.from_len, autofit.to_len
    elif getattr(timeline, "autofit_full_fit", False):
        logged_from = logged_to = max_len
    else:
        logged_from = logged_to = None
    mode = getattr(timeline, "sizing_mode_known", None)
    available = gib_bytes(getattr(timeline, "available_kv_gib", None))
    r = release(getattr(timeline, "vllm_version", None))
    if mode == "measured" or (mode is None and r is not None and r >= MEASURED_FROM):
        # vLLM 0.34's measured mode logs "Available KV cache memory" for the reservation of its tentative plan, not for
        # the KV cache (vllm==0.34.0 v1/worker/gpu_worker.py:795-798; the size is measured after capture): no plan
        # takes it as the KV memory. A 0.34 log whose lines do not say the mode is read the same way (measured is the
        # default on CUDA and ROCm, config/vllm.py:3252-3254).
        available = None
    measured = getattr(timeline, "measured", None)
    tentative = getattr(timeline, "tentative_autofit", None)
    return LogCalibration(
        path=path or "<timeline>",
        available_kv_bytes=available,
        weights_bytes=gib_bytes(getattr(timeline, "weights_gib", None)),
        graph_bytes=gib_bytes(getattr(timeline, "graph_capture_gib", None)),
        autofit_from=logged_from,
        autofit_to=logged_to,
        max_model_len=getattr(timeline, "effective_max_model_len", None) or max_len,
        vllm_version=getattr(timeline, "vllm_version", None),
        serve_args=launch_args(timeline),
        startup_plans=tuple(getattr(timeline, "startup_plans", ()) or ()),
        model=getattr(timeline, "model", None),
        sizing_mode=mode,
        measured_kv_blocks=measured.blocks if measured is not None else None,
        measured_kv_bytes=gib_bytes(measured.gib) if measured is not None else None,
        tentative_autofit_to=tentative.to_len if tentative is not None else None,
    )
