"""The length decision `serve` makes before vLLM starts.

Rules (docs/serve.md explains them for operators):

* Not a DeepSeek-V4 model (or its config cannot be read here): dsv4ctl has no planner for it, so the
  flags pass through unchanged and vLLM decides (including its own auto-fit for `auto`/`-1`).
* DeepSeek-V4, length `auto`/`-1` or not given: dsv4ctl plans the fit for this node and these flags
  (`dsv4ctl.planning.plan_fit`) and passes an explicit `--max-model-len` with the planned length, so
  vLLM never has to shrink the length after building its state (the stale-length crash). With
  `--keep-auto` the flags pass through and vLLM auto-fits; the planned value is still shown.
* DeepSeek-V4, explicit length: checked against the plan; when vLLM would refuse it (the KV cache
  for one request does not fit, or free memory is below the requested utilization), serve refuses
  early with exit code 6 and the largest length that fits.
* No NVIDIA GPU here (NVML unavailable, e.g. the CPU build): the GPU-memory parts of the plan are
  skipped; with `--kv-cache-memory-bytes` the KV budget is known without a GPU and the plan still runs.

Pure: reads the model's config and (through `snapshot_reader`) the GPU snapshot; never prints.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.errors import Dsv4ctlError, ExitCode, GpuUnavailableError, InputError
from dsv4ctl.serve.flags import set_max_model_len

# Actions
PASS_THROUGH = "pass-through"  # flags unchanged, vLLM decides
SET_LENGTH = "set-length"  # we pass --max-model-len <planned>
KEEP_AUTO = "keep-auto"  # user asked vLLM to auto-fit; flags unchanged
EXPLICIT_OK = "explicit-ok"  # the user's explicit length fits the plan
REFUSE = "refuse"  # vLLM would refuse: stop before starting it

AUTO = -1  # vLLM's parser turns `auto` and `-1` into -1


@dataclass
class PreflightDecision:
    model: str
    requested_max_model_len: int | None  # None: not given; -1: auto
    action: str
    max_model_len: int | None  # the explicit value serve passes (SET_LENGTH), else None
    reason: str
    flags: list[str]  # the vLLM flags to launch with
    notes: list[str] = field(default_factory=list)
    plan: dict[str, Any] | None = None  # FitResult.to_json() when a plan was made
    refusal: Dsv4ctlError | None = None

    @property
    def requested_text(self) -> str:
        if self.requested_max_model_len is None:
            return "not given (the model's full length)"
        if self.requested_max_model_len == AUTO:
            return "auto"
        return str(self.requested_max_model_len)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "requested_max_model_len": self.requested_max_model_len,
            "action": self.action,
            "max_model_len": self.max_model_len,
            "reason": self.reason,
            "notes": list(self.notes),
            "plan": self.plan,
            "vllm_argv": ["vllm", "serve", *self.flags],
        }


SnapshotReader = Callable[[], Any]


def _default_snapshot_reader() -> Any:
    from dsv4ctl.gpu import read_snapshot

    return read_snapshot()


def decide(
    namespace: argparse.Namespace,
    flags: list[str],
    *,
    keep_auto: bool = False,
    snapshot_reader: SnapshotReader | None = None,
) -> PreflightDecision:
    """Decide the `--max-model-len` to launch with, from vLLM's parsed flags and this node."""
    model = str(getattr(namespace, "model", None) or "")
    requested = getattr(namespace, "max_model_len", None)

    def passthrough(reason: str, notes: list[str] | None = None, action: str = PASS_THROUGH) -> PreflightDecision:
        return PreflightDecision(model, requested, action, None, reason, list(flags), notes or [])

    try:
        from dsv4ctl.planning.geometry import load_geometry

        geometry = load_geometry(model)
    except InputError as exc:
        return passthrough(f"no DeepSeek-V4 plan ({exc.message}): --max-model-len passes through unchanged")

    notes: list[str] = []
    snapshot = None
    kv_bytes = getattr(namespace, "kv_cache_memory_bytes", None)
    try:
        snapshot = (snapshot_reader or _default_snapshot_reader)()
    except GpuUnavailableError as exc:
        notes.append(f"no NVIDIA GPU readable here ({exc.message}): GPU-memory checks skipped")
        if kv_bytes is None:
            return passthrough(
                "cannot plan without GPU memory figures or --kv-cache-memory-bytes: "
                "--max-model-len passes through unchanged",
                notes,
            )

    try:
        from dsv4ctl.planning.fit import plan_fit

        request = fit_request_from(namespace, geometry)
        result = plan_fit(request, snapshot=snapshot)
    except Dsv4ctlError as exc:
        if exc.exit_code == ExitCode.DOES_NOT_FIT:
            decision = PreflightDecision(model, requested, REFUSE, None, exc.message, list(flags), notes)
            decision.refusal = exc
            return decision
        return passthrough(f"could not plan ({exc.message}): --max-model-len passes through unchanged", notes)

    plan = result.to_json() if hasattr(result, "to_json") else None
    notes.extend(str(w) for w in (getattr(result, "warnings", None) or []))
    verdict_refusal = _refusal_from_result(result)
    if verdict_refusal is not None:
        decision = PreflightDecision(model, requested, REFUSE, None, verdict_refusal.message, list(flags), notes, plan)
        decision.refusal = verdict_refusal
        return decision

    recommended = int(result.recommended_max_model_len)
    if requested is None or requested == AUTO:
        if keep_auto:
            will_shrink = bool(getattr(result, "will_shrink", False))
            autofit = getattr(result, "autofit_max_model_len", None)
            reason = (
                f"--keep-auto: vLLM auto-fits the length itself (planned {recommended:,}"
                + (f"; vLLM will shrink it to about {int(autofit):,} after building its state" if will_shrink and autofit else "")
                + ")"
            )
            return PreflightDecision(model, requested, KEEP_AUTO, None, reason, list(flags), notes, plan)
        reason = (
            f"length {'auto' if requested == AUTO else 'not given'}: passing the planned --max-model-len "
            f"{recommended:,} so vLLM never shrinks it after start-up"
        )
        return PreflightDecision(
            model, requested, SET_LENGTH, recommended, reason, set_max_model_len(flags, recommended), notes, plan
        )
    if requested > recommended:
        err = Dsv4ctlError(
            f"--max-model-len {requested:,} does not fit: the plan for this node allows at most {recommended:,}",
            hint=f"pass --max-model-len {recommended} (or auto), or free memory / raise --gpu-memory-utilization",
            exit_code=ExitCode.DOES_NOT_FIT,
        )
        decision = PreflightDecision(model, requested, REFUSE, None, err.message, list(flags), notes, plan)
        decision.refusal = err
        return decision
    return PreflightDecision(
        model, requested, EXPLICIT_OK, None, f"--max-model-len {requested:,} fits (the plan allows up to {recommended:,})",
        list(flags), notes, plan,
    )


def _refusal_from_result(result: Any) -> Dsv4ctlError | None:
    """A FitResult that carries a does-not-fit verdict instead of raising it."""
    verdict = getattr(result, "verdict", None)
    fits = getattr(result, "fits", None)
    if fits is False or (isinstance(verdict, str) and verdict.replace("_", "-").lower() in ("does-not-fit", "refuse")):
        message = getattr(result, "message", None) or "vLLM would refuse these settings on this node"
        return Dsv4ctlError(str(message), exit_code=ExitCode.DOES_NOT_FIT)
    if getattr(result, "recommended_max_model_len", None) in (None, 0):
        return Dsv4ctlError("not even one token of KV cache fits on this node", exit_code=ExitCode.DOES_NOT_FIT)
    return None


def fit_request_from(namespace: argparse.Namespace, geometry: Any) -> Any:
    """A planning `FitRequest` from vLLM's parsed serve flags (the field names are vLLM's)."""
    import dataclasses

    from dsv4ctl.planning.fit import FitRequest

    names = {f.name for f in dataclasses.fields(FitRequest)}
    values: dict[str, Any] = {}
    for name in names:
        if name in ("geometry", "model"):
            continue
        if hasattr(namespace, name):
            value = getattr(namespace, name)
            if value is not None:
                values[name] = value
    spec = getattr(namespace, "speculative_config", None)
    if "num_speculative_tokens" in names and isinstance(spec, dict) and spec.get("num_speculative_tokens"):
        values["num_speculative_tokens"] = int(spec["num_speculative_tokens"])
    if "geometry" in names:
        values["geometry"] = geometry
    if "model" in names:
        values["model"] = getattr(namespace, "model", None)
    return FitRequest(**values)
