"""`fit-length`: predict vLLM's KV auto-fit for DeepSeek-V4 and recommend a safe explicit --max-model-len.

`plan_fit(request, snapshot=None, log_facts=None, geometry=None) -> FitResult` never prints and never exits. When
vLLM would refuse the settings it *returns* a result whose `fits` is False and whose `refusal` holds vLLM's own
error text (the CLI maps it to exit code 6); it raises `Dsv4ctlError` only for bad inputs.

The steps, each a function: resolve the request (`inputs.resolve`: the log's figures and flags, the release
whose planner to mirror, the GPUs, the KV layout and layers) -> schedule (`inputs.scheduling`: vLLM's batch
defaults) -> the KV memory per worker (`inputs.worker_memory`: given, measured in a log, calibrated, or
predicted term by term) -> plan the lengths (`_plan_lengths`: auto-fit, an explicit length, the estimate's
range, the safe length) -> the log's own auto-fit checked -> the verdict and its warnings -> the result.
A log is read by the caller (`dsv4ctl.advice.read_log_facts`): planning takes its figures as data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from dsv4ctl.errors import Dsv4ctlError, ExitCode
from dsv4ctl.logs.facts import LogCalibration
from dsv4ctl.planning.checkpoint.geometry import Dsv4Geometry
from dsv4ctl.planning.checkpoint.load import load_geometry
from dsv4ctl.planning.mirror.kv_planner import KvPlan, blocks_per_request, version_key
from dsv4ctl.planning.mirror.layers import worker_layer_sets
from dsv4ctl.planning.mirror.versions import choose_vllm_version
from dsv4ctl.planning.mirror.refusals import RefusalTexts
from dsv4ctl.planning.mirror.plans import Planner, autofit_len, full_context_bytes
from dsv4ctl.planning.plan.devices import kv_estimate
from dsv4ctl.planning.plan.flags import LOG_FIELDS, log_only_flags, vllm_flags
from dsv4ctl.planning.plan.inputs import Inputs, Scheduling, WorkerMemory, resolve, scheduling, sizing_plan, worker_memory
from dsv4ctl.planning.plan.memory import KvMemoryEstimate
from dsv4ctl.planning.plan.request import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    FitRequest,
    Margin,
    as_margin,
    parse_margin,
    parse_max_model_len,
    parse_speculative_config,
    speculative_tokens,
    validate,
)
from dsv4ctl.planning.plan.result import THINK_MAX_CONTEXT, FitResult, WhatIfRow
from dsv4ctl.planning.plan.safe_length import SafeLength, safe_length
from dsv4ctl.planning.plan.split import check_split
from dsv4ctl.planning.plan.what_if import what_if_rows
from dsv4ctl.units import GiB, format_gib, format_tokens

# Releases that crash in CUDA-graph capture after auto-fit shrank the length (stale max_model_len; fixed in 0.31).
STALE_LENGTH_RELEASES = ("0.29.0", "0.30.0")


@dataclass
class _Lengths:
    """What the planner answers for this memory: auto-fit, vLLM's refusal if any, the KV memory's estimate and
    range, and the safe length."""

    auto_plan: KvPlan
    autofit: int
    explicit: int | None
    explicit_spare: int | None  # the KV memory an explicit length leaves unused (the limiting worker's)
    kv_memory: int
    refusal: str | None
    available_kv: KvMemoryEstimate
    autofit_range: tuple[int, int] | None
    safe: SafeLength


def plan_fit(
    request: FitRequest, snapshot: Any = None, log_facts: Any = None, geometry: Dsv4Geometry | None = None
) -> FitResult:
    """Mirror vLLM's startup decisions for `request` and recommend an explicit --max-model-len.

    `log_facts`: the figures of a previous startup log (`LogCalibration`, or a `StartupTimeline` to read them
    from); `geometry`: `load_geometry(request.model)` when the caller has read it already."""
    validate(request)
    if geometry is None:
        geometry = load_geometry(request.model)
    if snapshot is None and isinstance(request.gpus, (tuple, list)):
        if len(request.gpus) > 1:
            from dsv4ctl.gpu import load_snapshot
            from dsv4ctl.planning.plan.devices import pool_nodes

            paths = tuple(request.gpus)
            snapshots = [load_snapshot(p) for p in paths]
            labels = _node_labels(paths, snapshots)
            snapshot = pool_nodes(snapshots, labels, request)
            if snapshot is None:  # every node holds the whole launch: each runs it, the tightest binds
                return _plan_nodes(request, paths, log_facts, geometry)
            result = plan_fit(request, snapshot=snapshot, log_facts=log_facts, geometry=geometry)
            per_node = len(snapshot.devices) // len(paths)
            note = (f"planned over {len(paths)} nodes ({', '.join(labels)}), {per_node} GPUs each, ranks node by node "
                    "(a pipeline stage or a data-parallel replica per node where one fills it); the command is the "
                    "launch's flags: start it on every node in vLLM's multi-node mode (docs/multi-node.md)")
            return replace(result, notes=(*result.notes, note))
        else:
            request = replace(request, gpus=request.gpus[0] if request.gpus else None)
    result, inputs = _plan_one(request, snapshot, log_facts, geometry)
    if not result.fits:
        # Nothing fits as asked: what would, each change planned on the same GPUs and log figures.
        from dsv4ctl.planning.plan.alternatives import what_would_fit

        def plan(changed: FitRequest) -> FitResult:
            validate(changed)
            return _plan_one(changed, inputs.snapshot, log_facts, geometry)[0]

        result = replace(result, alternatives=what_would_fit(inputs.request, result, plan))
    return result


def checkpoint_refusal(
    geometry: Dsv4Geometry, tensor_parallel_size: int, enable_expert_parallel: bool, vllm_version: str | None = None
) -> Dsv4ctlError | None:
    """What vLLM refuses of this checkpoint at these parallel sizes before any memory matters (heads, attention
    output groups on 0.34+, and FP8 blocks the TP cannot split), as the error to raise (exit 6); None when nothing is
    refused. fit-length, serve's dry run and serve's preflight all ask it, with or without memory figures.
    `vllm_version`: the release that runs (None: as fit-length would choose it, the installed one, else the newest)."""
    try:
        planned = choose_vllm_version(vllm_version).planned
    except Dsv4ctlError:
        planned = None
    split = check_split(geometry.extra, tensor_parallel_size, enable_expert_parallel,
                        version_key(planned) if planned else None)
    if split is None:
        return None
    return Dsv4ctlError(split.message, hint=split.hint, exit_code=ExitCode.DOES_NOT_FIT)


def _plan_one(request: FitRequest, snapshot: Any, log_facts: Any, geometry: Dsv4Geometry) -> tuple[FitResult, Inputs]:
    refusal = checkpoint_refusal(geometry, request.tensor_parallel_size, bool(request.enable_expert_parallel),
                                 request.vllm_version)
    if refusal is None:
        from dsv4ctl.planning.plan.v41 import engram_config_refusal, missing_model_refusal, v41_refusal

        try:
            planned = choose_vllm_version(request.vllm_version).planned
        except Dsv4ctlError:
            planned = None
        refusal = (missing_model_refusal(geometry, planned) or engram_config_refusal(geometry, request.engram_config, planned)
                   or v41_refusal(geometry, request))
    if refusal is not None:  # vLLM would refuse the checkpoint itself: no memory plan means anything
        raise refusal
    inputs = resolve(request, snapshot, log_facts, geometry)
    sched = scheduling(inputs)
    tp, pp = inputs.request.tensor_parallel_size, inputs.request.pipeline_parallel_size
    stage_layers = worker_layer_sets(inputs.specs, geometry, pp)
    # Worker order: rank = pp_rank * tp + tp_rank.
    planner = Planner(inputs.specs, [stage_layers[rank // tp] for rank in range(tp * pp)], inputs.version.rules)
    strides = [w.bytes_per_block for w in planner([1 << 40] * (tp * pp), length=1, auto=False, tokens_in_flight=1).workers]
    memory = worker_memory(inputs, sched, strides)
    positive = [max(m, 0) for m in memory.per_worker]
    lengths = _plan_lengths(inputs, sched, memory, planner, positive)
    model_max = geometry.model_max_model_len
    log_cal = _check_log_autofit(inputs, memory.source, planner, positive, lengths.autofit, model_max, sched.in_flight)
    logged = log_cal.autofit_to if log_cal is not None and memory.source == "log" else None
    verdict, why = _decide(lengths, model_max, logged)
    _length_warnings(inputs, verdict, lengths.safe.length, lengths.autofit, model_max, lengths.explicit)
    result = _result(inputs, sched, memory, planner, positive, lengths, log_cal, verdict, why)
    if geometry.v41 is not None:  # DeepSeek-V4.1: its block size, and the Engram tables' host memory
        from dsv4ctl.planning.plan.v41 import with_engram_host

        block = max(s.block_size for s in inputs.specs.values() if s.kind == "full")
        result = with_engram_host(replace(result, block_size=block), inputs.request, geometry, inputs.snapshot)
    return result, inputs


def _decide(lengths: _Lengths, model_max: int, logged: int | None = None) -> tuple[str, str]:
    """The one decision of a plan, and why: refused (vLLM's own refusal), no length survives the margin (vLLM would
    start, but nothing safe can be recommended), the length asked for fits, or auto-fit fits the full context or
    shrinks it. Every line fit-length prints, every figure of its JSON and its exit code follow from it."""
    if lengths.refusal is not None:
        return "does_not_fit", f"vLLM would refuse: {lengths.refusal}"
    safe = lengths.safe
    if lengths.explicit is not None:
        spare, asked = lengths.explicit_spare, format_tokens(lengths.explicit)
        if spare is None:
            return "fits", f"--max-model-len {asked} fits"
        thin = (f", less than the margin of {format_gib(safe.margin_bytes)}: a start with a little less KV memory "
                "refuses it" if spare < safe.margin_bytes else "")
        return "fits", f"--max-model-len {asked} fits, with {format_gib(spare)} of KV memory to spare{thin}"
    if safe.length <= 0:
        return "does_not_fit", safe.line()
    if lengths.autofit >= model_max:
        return "fits", f"the full context fits: recommended --max-model-len {format_tokens(safe.length)}"
    shrunk = (f"--max-model-len auto shrank the context to {format_tokens(logged)} in the log" if logged else
              f"--max-model-len auto would shrink the context to {format_tokens(lengths.autofit)}")
    return "shrinks", f"{shrunk}: recommended --max-model-len {format_tokens(safe.length)}"


def _plan_lengths(
    inputs: Inputs, sched: Scheduling, memory: WorkerMemory, planner: Planner, positive: list[int]
) -> _Lengths:
    """Auto-fit with this memory, the refusal, the KV memory's range and basis, and the safe length (computed from
    the low end of the range)."""
    request, geometry = inputs.request, inputs.geometry
    model_max = geometry.model_max_model_len
    explicit = None if request.is_auto else request.max_model_len
    texts, bound = sizing_plan(inputs, memory.source)
    auto_plan = planner(positive, length=bound, auto=True, tokens_in_flight=sched.in_flight, texts=texts)
    autofit = autofit_len(auto_plan)
    kv_memory = memory.per_worker[auto_plan.limiting_pp_rank]
    refusal = _refusal(memory.refusal, planner, positive, explicit, auto_plan, geometry, sched.in_flight, texts)
    available_kv = kv_estimate(
        request, memory.source, kv_memory, inputs.log_cal,
        memory.replica[auto_plan.limiting_pp_rank] if memory.replica else None, inputs.devices,
        memory.calibration.log if memory.calibration is not None else None, inputs.sizing,
    )
    below = max(0, available_kv.value - available_kv.low)
    autofit_range = _autofit_range(planner, memory.per_worker, available_kv, model_max, sched.in_flight)
    if available_kv.basis == "estimated":
        inputs.notes.append(_estimate_note(available_kv, autofit_range))
    # Recommendation: the one safe-length rule (auto-fit again with the margin off every worker), from the low end.
    # In 0.34's measured mode an explicit length is first checked against the reservation, which the log's tentative
    # auto-fit measured: nothing above it is recommended (`bound`, else the model's maximum).
    safe = safe_length(
        lambda cut, tokens: planner.autofit([max(m - cut - below, 0) for m in positive], bound, tokens),
        kv_memory_bytes=kv_memory, model_max=bound, max_num_batched_tokens=sched.max_num_batched_tokens,
        async_scheduling=sched.async_on, pipeline_parallel_size=request.pipeline_parallel_size,
        margin=as_margin(request.margin),
    )
    if below:  # planned from the low end of the KV memory's range, not its figure: say so beside the figure
        safe = replace(safe, ceiling_basis=f" at the low end of the KV memory's range ({format_gib(max(available_kv.low, 0))})")
    spare = None
    if explicit is not None and refusal is None:
        spare = min(m for m in positive) - full_context_bytes(auto_plan, explicit)
    return _Lengths(auto_plan, autofit, explicit, spare, kv_memory, refusal, available_kv, autofit_range, safe)


def _result(
    inputs: Inputs, sched: Scheduling, memory: WorkerMemory, planner: Planner, positive: list[int],
    lengths: _Lengths, log_cal: LogCalibration | None, verdict: str, why: str,
) -> FitResult:
    request, geometry, safe, autofit = inputs.request, inputs.geometry, lengths.safe, lengths.autofit
    model_max = geometry.model_max_model_len
    auto_plan = lengths.auto_plan
    # The length the command carries: the one asked for where it fits, else the safe one (no command otherwise).
    flags = vllm_flags(request, lengths.explicit if lengths.explicit is not None else max(safe.length, 0),
                       sched.max_num_batched_tokens, sched.async_on, inputs.sizing)
    if log_cal is not None and request.inherit_from_log:
        flags += log_only_flags(log_cal)
    limiting = auto_plan.workers[auto_plan.limiting_pp_rank]
    return FitResult(
        geometry=geometry,
        request=request,
        verdict=verdict,
        why=why,
        refusal=lengths.refusal,
        model_max_model_len=model_max,
        autofit_max_model_len=autofit,
        will_shrink=autofit < model_max,
        shrink_tokens=max(0, model_max - autofit),
        requested_max_model_len=lengths.explicit,
        requested_spare_bytes=lengths.explicit_spare,
        recommended_max_model_len=max(safe.length, 0) if lengths.refusal is None else 0,
        kv_cache_memory_bytes=lengths.kv_memory,
        kv_cache_memory_source=memory.source,
        margin_bytes=safe.margin_bytes,
        bytes_per_block=max(w.bytes_per_block for w in auto_plan.workers),
        blocks_per_request=blocks_per_request(limiting.groups, max(autofit, 1), sched.in_flight),
        num_blocks=min(w.num_blocks for w in auto_plan.workers),  # vLLM gives every worker the smallest count
        full_context_kv_memory_bytes=full_context_bytes(auto_plan, model_max),
        max_num_batched_tokens=sched.max_num_batched_tokens,
        max_num_batched_tokens_source=sched.source,
        max_num_seqs=sched.max_num_seqs,
        async_scheduling=sched.async_on,
        max_in_flight_tokens=sched.in_flight,
        layout=inputs.layout,
        num_kv_cache_groups=len(auto_plan.global_groups),
        num_kv_layers=len(inputs.specs),
        gpus=tuple(memory.predictions),
        log=log_cal,
        what_if=tuple(what_if_rows(planner, positive, sched.max_num_batched_tokens, sched.async_on, model_max,
                                   request.pipeline_parallel_size)),
        warnings=tuple(inputs.warnings),
        notes=tuple(inputs.notes),
        vllm_flags=tuple(flags),
        safe_length=safe,
        version=inputs.version,
        available_kv=lengths.available_kv,
        autofit_range=lengths.autofit_range,
        visible_gpus=inputs.visible_gpus,
        sizing=inputs.sizing,
    )


def _refusal(
    refusal: str | None, planner: Planner, positive: list[int], explicit: int | None, auto_plan: KvPlan,
    geometry: Dsv4Geometry, in_flight: int, texts: RefusalTexts | None = None,
) -> str | None:
    """vLLM's own error text when it would refuse: the memory's, else an explicit length's, else auto-fit's."""
    model_max = geometry.model_max_model_len
    if explicit is not None:
        if explicit > model_max:
            return refusal or (
                f"User-specified max_model_len ({explicit}) is greater than the derived max_model_len "
                f"({geometry.max_len_key}={model_max} in model's config.json)."
            )
        explicit_plan = planner(positive, length=explicit, auto=False, tokens_in_flight=in_flight, texts=texts)
        return refusal or explicit_plan.error
    if auto_plan.error:
        return refusal or auto_plan.error
    return refusal


def _autofit_range(
    planner: Planner, per_worker: list[int], available_kv: KvMemoryEstimate, model_max: int, in_flight: int
) -> tuple[int, int] | None:
    """Auto-fit at the low and high ends of the KV memory's range (None when the figure is exact). Each end moves
    the workers' own figures, a shortfall included: a worker 26 GiB short is still short at the 4 GiB high end."""
    below = max(0, available_kv.value - available_kv.low)
    above = max(0, available_kv.high - available_kv.value)
    if not (below or above):
        return None
    return (
        planner.autofit([max(m - below, 0) for m in per_worker], model_max, in_flight),
        planner.autofit([max(m + above, 0) for m in per_worker], model_max, in_flight),
    )


def _estimate_note(kv: KvMemoryEstimate, autofit_range: tuple[int, int] | None) -> str:
    """What the estimated KV memory's range means, in sizes and lengths people read: a shortfall is said as one
    (never a negative size), a range runs low to high, and an auto-fit of 0 is `none`."""
    def fit(n: int) -> str:
        return format_tokens(n) if n > 0 else "none"

    low, high = kv.low, kv.high
    lengths = autofit_range or (0, 0)
    if high <= 0:
        short = (format_gib(-high), format_gib(-low)) if low < high else (format_gib(-high),) * 2
        shortfall = short[0] if short[0] == short[1] else f"{short[0]}–{short[1]}"
        what = ("the weights, the Engram tables and the overhead" if any(t.name == "engram_tables" for t in kv.terms)
                else "the weights and the overhead")
        return (f"KV memory per GPU: none, by an estimate: {what} exceed the budget by "
                f"{shortfall} (the overhead estimate is {format_gib(kv.width)} wide), so vLLM would refuse at every "
                f"point of it; {kv.narrow}")
    value = format_gib(kv.value) if kv.value > 0 else "none"
    span = (f"auto-fit {fit(lengths[0])}–{fit(lengths[1])}" if lengths[0] != lengths[1]
            else f"auto-fit {fit(lengths[0])}")
    return (f"KV memory per GPU {value} is an estimate: {format_gib(max(low, 0))}–{format_gib(high)} "
            f"({format_gib(kv.width)} wide, {span}); the recommendation uses the low end; {kv.narrow}")


def _check_log_autofit(
    inputs: Inputs, source: str, planner: Planner, positive: list[int], autofit: int, model_max: int, in_flight: int
) -> LogCalibration | None:
    """The log's figures with this plan's auto-fit for its logged memory; a warning when the log's own auto-fit
    lies outside it (vLLM logs the memory rounded to 0.01 GiB: the run had something in [x - 0.005, x + 0.005))."""
    log_cal = inputs.log_cal
    if log_cal is None or source != "log":
        return log_cal
    if inputs.sizing is not None and inputs.sizing.measured:  # the committed blocks: exact, no rounding to widen
        log_cal = replace(log_cal, predicted_from_log=autofit, predicted_range=(autofit, autofit))
        if log_cal.autofit_to is not None and log_cal.autofit_to != autofit:
            inputs.warnings.append(
                f"the log's final auto-fit ({format_tokens(log_cal.autofit_to)}) differs from the plan for its "
                f"{log_cal.measured_kv_blocks:,} committed blocks ({format_tokens(autofit)}): check that the flags match "
                "that run (--max-num-batched-tokens, async scheduling, --kv-cache-dtype, MTP) and its vLLM version")
        return log_cal
    if log_cal.available_kv_bytes is None:
        return log_cal
    half = GiB // 200
    low = planner.autofit([max(m - half, 0) for m in positive], model_max, in_flight)
    high = planner.autofit([m + half - 1 for m in positive], model_max, in_flight)
    log_cal = replace(log_cal, predicted_from_log=autofit, predicted_range=(low, high))
    if log_cal.autofit_to is not None and not (low <= log_cal.autofit_to <= high):
        inputs.warnings.append(
            f"the log's auto-fit ({format_tokens(log_cal.autofit_to)}) is outside the prediction for its logged "
            f"memory ({format_tokens(low)}-{format_tokens(high)}): check that the flags match that run "
            "(--max-num-batched-tokens, async scheduling, --kv-cache-dtype, MTP) and its vLLM version"
        )
    return log_cal


def _length_warnings(
    inputs: Inputs, verdict: str, recommended: int, autofit: int, model_max: int, explicit: int | None
) -> None:
    """What the lengths mean for the operator: Think Max's context, and auto-fit's shrink on this release."""
    warnings, notes, version = inputs.warnings, inputs.notes, inputs.version
    if verdict != "does_not_fit" and 0 < recommended < THINK_MAX_CONTEXT:
        warnings.append(
            f"recommended length {format_tokens(recommended)} is below {format_tokens(THINK_MAX_CONTEXT)} tokens, "
            "the context DeepSeek-V4's \"Think Max\" reasoning mode needs"
        )
    if autofit < model_max and explicit is None and verdict != "does_not_fit":
        if version.planned in STALE_LENGTH_RELEASES:
            warnings.append(
                f"--max-model-len auto would shrink the context from {format_tokens(model_max)} to {format_tokens(autofit)}; "
                f"vLLM {version.planned} then crashes in CUDA-graph capture (stale max_model_len) unless dsv4ctl's fix is "
                "active (dsv4ctl serve, or DSV4CTL_FIXES=all); else pass the recommended explicit length"
            )
        else:
            notes.append(
                f"--max-model-len auto would shrink the context from {format_tokens(model_max)} to {format_tokens(autofit)}; "
                + ("--num-gpu-blocks-override fixes the cache, so it is the same at every start"
                   if inputs.request.num_gpu_blocks_override is not None else
                   "the shrunk length moves with the memory vLLM measures at each start")
            )


def safe_length_for_log(
    model: str,
    available_kv_bytes: int,
    **vllm_args: Any,
) -> SafeLength | None:
    """The safe length for exactly `available_kv_bytes` of KV memory per GPU (a library entry point;
    `diagnose` goes through fit-length's `--from-log` path, which also takes the log's rounding into account).

    `vllm_args` are the run's EngineArgs names as the log shows them (max_num_batched_tokens,
    async_scheduling, tensor_parallel_size, pipeline_parallel_size, kv_cache_dtype,
    num_speculative_tokens, ...). None when the model is not a DeepSeek-V4 dsv4ctl can plan.
    """
    fields = set(FitRequest.__dataclass_fields__)
    known = {k: v for k, v in vllm_args.items() if k in fields and v is not None}
    try:
        result = plan_fit(FitRequest(model=model, kv_cache_memory_bytes=int(available_kv_bytes), **known))
    except Dsv4ctlError:
        return None
    return result.safe_length


def _node_labels(paths: tuple[str, ...], snapshots: list[Any]) -> list[str]:
    """Each node's name: its snapshot's hostname, else the file's (when hostnames repeat, the files')."""
    hosts = [getattr(s, "hostname", None) or "" for s in snapshots]
    if all(hosts) and len(set(hosts)) == len(hosts):
        return hosts
    from pathlib import Path

    return [Path(p).name for p in paths]


def _plan_nodes(request: FitRequest, paths: tuple[str, ...], log_facts: Any, geometry: Dsv4Geometry) -> FitResult:
    """Several nodes (a snapshot each): plan every node, answer with the tightest one and name its GPU.

    vLLM gives every worker of an engine the smallest block count, so the node that fits the least binds;
    a refusal on any node binds first."""
    from dsv4ctl.gpu import load_snapshot

    results = []
    for path in paths:
        snap = load_snapshot(path)
        result = plan_fit(replace(request, gpus=path), snapshot=snap, log_facts=log_facts, geometry=geometry)
        results.append((path, snap, result))

    def tightness(item: tuple[str, Any, FitResult]) -> tuple:
        _, _, r = item
        return (r.fits, r.autofit_max_model_len, r.kv_cache_memory_bytes)

    path, snap, tightest = min(results, key=tightness)
    nodes = []
    for p, sn, r in results:
        gpu = r.tightest_gpu
        nodes.append({
            "snapshot": p, "hostname": getattr(sn, "hostname", None), "fits": r.fits,
            "autofit_max_model_len": r.autofit_max_model_len, "kv_cache_memory_bytes": r.kv_cache_memory_bytes,
            "tightest_gpu": {"cuda_index": gpu.cuda_index, "name": gpu.name} if gpu else None,
            "binding": p == path,
        })
    gpu = tightest.tightest_gpu
    where = f"cuda:{gpu.cuda_index} ({gpu.name}) of {path}" if gpu else path
    host = getattr(snap, "hostname", None)
    note = (
        f"{len(paths)} nodes planned; the tightest is {where}{f' on {host}' if host else ''}: "
        f"{format_gib(tightest.kv_cache_memory_bytes)} KV per GPU, auto-fit {format_tokens(tightest.autofit_max_model_len)}"
    )
    return replace(tightest, nodes=tuple(nodes), notes=(*tightest.notes, note))


__all__ = [
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "checkpoint_refusal",
    "LOG_FIELDS",
    "THINK_MAX_CONTEXT",
    "FitRequest",
    "FitResult",
    "LogCalibration",
    "Margin",
    "SafeLength",
    "WhatIfRow",
    "parse_margin",
    "parse_max_model_len",
    "parse_speculative_config",
    "plan_fit",
    "safe_length_for_log",
    "speculative_tokens",
]
