"""The upgrade view's core: one launch planned under two vLLM releases (planning's `plan_fit`, once each) and read
against the tables dsv4ctl keeps per release: the fixes' needs, `vllm serve`'s flags, the message index, the
timeline's log lines, the startup-plan schema. Pure: it returns an `UpgradeView`, prints nothing."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

from dsv4ctl.errors import Dsv4ctlError, UsageError
from dsv4ctl.upgrade.fix_releases import FIX_NAMES, fix_need, launch_path
from dsv4ctl.upgrade.flags import (
    LaunchFlag,
    default_of,
    flags_diff,
    launch_flags_of_argv,
    launch_flags_of_request,
)
from dsv4ctl.upgrade.log_lines import log_lines_diff
from dsv4ctl.upgrade.messages import messages_diff
from dsv4ctl.upgrade.model import FixRow, ReleaseFit, UpgradeView

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?([.+-].*)?")
# How vLLM sizes the KV cache where the plan does not name a mode: from the memory profiled at startup.
ESTIMATE = "estimate"


def _version_key(text: str, option: str) -> tuple[int, int, int]:
    m = _VERSION.fullmatch(text.strip())
    if not m:
        raise UsageError(f"{option} {text!r}: not a vLLM version", hint=f"a release such as {option} 0.33.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def compare_releases(
    request: Any,
    to_release: str,
    *,
    plan: Callable[..., Any] | None = None,
    snapshot: Any = None,
    log_facts: Any = None,
    argv: list[str] | None = None,
    log_lines_path: str | None = None,
    option: str = "--compare",
) -> UpgradeView:
    """`request` (a planning `FitRequest`, its `vllm_version` the release compared from) under `to_release` too.

    `plan`: planning's `plan_fit` unless given (a caller's own, wrapped); `argv`: the launch's
    `vllm serve` flags when there are more than the plan's (serve); `log_lines_path`: the log-lines table (default:
    the catalogue's file)."""
    if plan is None:
        from dsv4ctl.planning import plan_fit as plan
    to_key = _version_key(to_release, option)
    if request.vllm_version and _version_key(request.vllm_version, "--vllm-version") == to_key:
        raise UsageError(f"{option} {to_release}: the same release as --vllm-version {request.vllm_version}",
                         hint=f"compare two releases: --vllm-version A {option} B")
    before_result = plan(request, snapshot=snapshot, log_facts=log_facts)
    after_result = _plan_to(plan, request, to_release, option, snapshot, log_facts)
    a, b = before_result.version.planned, after_result.version.planned
    if a == b:
        same = "the same release as" if _version_key(b, option) == to_key else f"planned as {b}, the release of"
        raise UsageError(f"{option} {to_release}: {same} the plan compared from, {before_result.version.describe()}",
                         hint=f"compare two releases: --vllm-version A {option} B")
    launch = launch_flags_of_argv(argv, a) if argv is not None else launch_flags_of_request(request)
    notes = tuple(w for w in (before_result.version.warning,) if w)
    caps = _compute_capabilities(request, snapshot, before_result)
    length_auto = request.max_model_len is None or request.max_model_len == -1
    backend = getattr(request, "attention_backend", None)
    fixes = tuple(FixRow(name, fix_need(name, a), fix_need(name, b),
                         launch_path(name, length_auto=length_auto, attention_backend=backend,
                                     compute_capabilities=caps))
                  for name in FIX_NAMES)
    given = {f.option for f in launch if f.given}
    platform = "nvidia" if caps else None
    return UpgradeView(
        model=before_result.geometry.model,
        before=_release_fit(request.vllm_version or a, before_result),
        after=_release_fit(to_release, after_result),
        fixes=fixes,
        flags=flags_diff(launch, a, b),
        messages=messages_diff(a, b, architecture=before_result.geometry.architecture, options=given,
                               platform=platform),
        log_lines=log_lines_diff(a, b, log_lines_path),
        launch=launch,
        notes=notes,
    )


def _plan_to(plan: Callable[..., Any], request: Any, to_release: str, option: str, snapshot: Any,
             log_facts: Any) -> Any:
    """The plan under the release compared to; a release the planner has not read is refused, not stood in for."""
    try:
        result = plan(dataclasses.replace(request, vllm_version=to_release), snapshot=snapshot, log_facts=log_facts)
    except UsageError as exc:
        if exc.message.startswith("--vllm-version"):
            raise UsageError(f"{option} {to_release}: {exc.message.split(': ', 1)[-1]}", hint=exc.hint) from None
        raise _on_the_compared_side(exc, option, to_release) from None
    except Dsv4ctlError as exc:
        raise _on_the_compared_side(exc, option, to_release) from None
    planned = result.version.planned
    if _version_key(planned, option)[:2] != _version_key(to_release, option)[:2]:
        raise UsageError(f"{option} {to_release}: dsv4ctl's planner has not read vLLM {to_release} (the newest it "
                         f"plans is {planned})", hint=f"compare releases up to {planned}")
    return result


def _on_the_compared_side(exc: Dsv4ctlError, option: str, to_release: str) -> Dsv4ctlError:
    """An error of the plan under the release compared to, which the release compared from planned: named as that
    side's (`option`), its hint no longer asking for the --vllm-version the operator gave (planning speaks of one
    release); other errors as they are."""
    if "--vllm-version" not in (exc.hint or ""):
        return exc
    hint = (f"vLLM {to_release} cannot be planned from these inputs: {option} another release, or drop the input its "
            "planning does not take")
    return type(exc)(f"{option} {to_release}: {exc.message}", hint=hint, exit_code=exc.exit_code)


def _sizing(result: Any) -> tuple[str, str | None, float | None]:
    """(mode, why, the --gpu-memory-utilization it resolves) as the plan's JSON names them (`sizing_mode`: the mode,
    or an object with `mode`, `why`, `gpu_memory_utilization`); a plan that names none sizes by the profiled estimate,
    with the request's utilization."""
    doc = result.to_json().get("sizing_mode")
    utilization = result.request.gpu_memory_utilization
    if isinstance(doc, dict):
        resolved = doc.get("gpu_memory_utilization")
        return str(doc.get("mode") or ESTIMATE), doc.get("why"), resolved if resolved is not None else utilization
    return (str(doc) if doc else ESTIMATE), None, utilization


def _plan_schema(release: str) -> int | None:
    """The startup-plan file schema of a release whose startup_plan.py planning has read; None: not recorded."""
    from dsv4ctl.planning import startup_plans

    m = re.match(r"([0-9]+)\.([0-9]+)\.", release)
    if not m or not any(r.startswith(m.group(0)) for r in startup_plans.RELEASES):
        return None
    (schema,) = startup_plans.schemas_of(release)
    return schema


def _release_fit(requested: str, result: Any) -> ReleaseFit:
    planned = result.version.planned
    recorded, default = default_of("--gpu-memory-utilization", planned)
    kv = result.available_kv
    mode, why, utilization = _sizing(result)
    return ReleaseFit(
        requested=requested, planned=planned, sizing_mode=mode, sizing_why=why, verdict=result.verdict,
        refusal=result.refusal, autofit_max_model_len=result.autofit_max_model_len,
        recommended_max_model_len=result.recommended_max_model_len,
        kv_cache_memory_bytes=max(result.kv_cache_memory_bytes, 0), kv_basis=kv.basis if kv is not None else None,
        gpu_memory_utilization=None if result.request.kv_cache_memory_bytes is not None else utilization,
        utilization_default=default, utilization_default_recorded=recorded,
        max_num_batched_tokens=result.max_num_batched_tokens,
        vllm_flags=tuple(result.vllm_flags) if result.fits else (), warnings=tuple(result.warnings),
        plan_schema=_plan_schema(planned),
    )


def _compute_capabilities(request: Any, snapshot: Any, result: Any) -> tuple[tuple[int, int], ...]:
    """The launch's GPUs' compute capabilities: the snapshot given, else the snapshot files, else NVML when the
    plan read it; () when no GPU is known (a plan from --kv-cache-memory alone)."""
    from dsv4ctl import gpu

    snapshots = [snapshot] if snapshot is not None else []
    if not snapshots and request.gpus:
        paths = (request.gpus,) if isinstance(request.gpus, str) else tuple(request.gpus)
        try:
            snapshots = [gpu.load_snapshot(p) for p in paths]
        except Dsv4ctlError:
            snapshots = []
    if not snapshots and result.gpus:
        try:
            snapshots = [gpu.read_snapshot()]
        except Dsv4ctlError:
            snapshots = []
    return tuple(sorted({tuple(d.compute_capability) for s in snapshots for d in s.devices
                         if getattr(d, "compute_capability", None)}))


__all__ = ["ESTIMATE", "LaunchFlag", "compare_releases"]
