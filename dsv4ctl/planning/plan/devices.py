"""The GPUs a plan runs on and what each holds: the devices a snapshot offers for TP x PP x DP, the memory
predicted per GPU (requested budget - weights - overhead), and the limiting GPU's KV memory term by term."""

from __future__ import annotations

import dataclasses
from typing import Any

from dsv4ctl.errors import GpuUnavailableError, InputError
from dsv4ctl.logs.facts import LogCalibration
from dsv4ctl.planning.checkpoint.geometry import Dsv4Geometry
from dsv4ctl.planning.plan.memory import (
    NON_KV_OVERHEAD_SPREAD_BYTES,
    TRANSIENT_PEAK_SHARE,
    UNIFIED_MEMORY_SPREAD_BYTES,
    GpuMemoryPrediction,
    KvMemoryEstimate,
    KvTerm,
    check_startup_memory,
    combine_terms,
    measured_budget,
    weights_per_rank,
)
from dsv4ctl.planning.mirror.measured import SizingMode, sizing_margin
from dsv4ctl.planning.plan.request import FitRequest
from dsv4ctl.units import GiB, format_gib

def select_devices(snapshot: Any, request: FitRequest):
    devices = list(snapshot.devices)
    if not devices:
        raise GpuUnavailableError("no GPUs in the snapshot", hint="take the snapshot on the GPU box: dsv4ctl gpus --save snapshot.json")
    whole = [d for d in devices if not d.is_mig]
    if not whole:
        raise GpuUnavailableError(
            "only MIG instances are visible: fit-length plans whole GPUs",
            hint="give the KV memory directly with --kv-cache-memory, or expose whole GPUs via CUDA_VISIBLE_DEVICES",
        )
    need = request.tensor_parallel_size * request.pipeline_parallel_size * request.data_parallel_size
    if len(whole) < need:
        raise GpuUnavailableError(
            f"TP×PP×DP = {need} GPUs needed, {len(whole)} visible",
            hint="lower --tensor-parallel-size/--pipeline-parallel-size/--data-parallel-size, or give one --gpus snapshot "
            "per node of a launch that spans several",
        )
    if not getattr(snapshot, "hosts", ()):  # several nodes pooled keep their node order (`pool_nodes`)
        whole.sort(key=lambda d: d.cuda_index)
    return whole[:need]


def pool_nodes(snapshots: list[Any], labels: list[str], request: FitRequest) -> Any | None:
    """One node's snapshot each, when the launch spans them: TP x PP x DP GPUs, the same number on every node (as
    vLLM's multi-node modes place them: ranks node by node, a pipeline stage or a data-parallel replica per node
    when it fills one), pooled in node order with each GPU's node; None when every node holds the whole launch
    (then each node runs it and the tightest binds). Raises when the nodes cannot hold it."""
    import dataclasses

    need = request.tensor_parallel_size * request.pipeline_parallel_size * request.data_parallel_size
    whole = [[d for d in snap.devices if not d.is_mig] for snap in snapshots]
    if all(len(gpus) >= need for gpus in whole):
        return None
    nodes = len(snapshots)
    per_node, rest = divmod(need, nodes)
    short = [(label, len(gpus)) for label, gpus in zip(labels, whole) if len(gpus) < per_node]
    if rest or short or not per_node:
        seen = ", ".join(f"{label}: {len(gpus)}" for label, gpus in zip(labels, whole))
        raise GpuUnavailableError(
            f"TP×PP×DP = {need} GPUs over {nodes} nodes does not split evenly into whole GPUs per node ({seen})"
            if rest or not per_node else
            f"TP×PP×DP = {need} GPUs over {nodes} nodes needs {per_node} per node; {short[0][0]} shows {short[0][1]}",
            hint="give one snapshot per node of the launch (dsv4ctl gpus --save on each), or sizes that fill them",
        )
    devices, hosts = [], []
    for label, gpus in zip(labels, whole):
        chosen = sorted(gpus, key=lambda d: d.cuda_index)[:per_node]
        devices += chosen
        hosts += [label] * len(chosen)
    first = snapshots[0]
    return dataclasses.replace(first, devices=tuple(devices), hosts=tuple(hosts), hostname=", ".join(dict.fromkeys(labels)),
                               notes=tuple(n for snap in snapshots for n in snap.notes))


def predict_memory(
    devices: list[Any], geometry: Dsv4Geometry, request: FitRequest, overhead: int, weights_override: int | None,
    hosts: tuple[str, ...] = (), sizing: SizingMode | None = None,
) -> tuple[list[GpuMemoryPrediction], list[str]]:
    """Each GPU's KV memory: the utilization budget (in vLLM 0.34's measured mode capped by the memory free at start
    less its sizing margin; no startup refusal there) less the weights and the overhead."""
    notes: list[str] = []
    measured_mode = sizing is not None and sizing.measured
    tp, pp = request.tensor_parallel_size, request.pipeline_parallel_size
    predictions = []
    if weights_override is None and geometry.weights is None:
        raise InputError(
            f"cannot predict KV memory for {geometry.model}: the weight size per GPU is unknown",
            hint="pass the checkpoint directory (its safetensors headers give the size), --weights-memory SIZE, "
            "--from-log startup.log, or --kv-cache-memory SIZE",
        )
    hosts = list(hosts or ())
    engram = _engram_gpu_bytes(geometry, request)
    for rank, dev in enumerate(devices):
        pp_rank = (rank // tp) % pp
        if weights_override is not None:
            weights = weights_override
        else:
            weights = weights_per_rank(
                geometry.weights,
                tensor_parallel_size=tp,
                pipeline_parallel_size=pp,
                data_parallel_size=request.data_parallel_size,
                enable_expert_parallel=request.enable_expert_parallel,
                pp_rank=pp_rank,
                load_mtp=request.num_speculative_tokens > 0,
            )
        # The rank's Engram shard: its TP rank, and with embedding_across_dp its DP replica's place among the shards.
        tables = engram[((rank // (tp * pp)) * tp + rank % tp) % len(engram)] if engram else 0
        start = check_startup_memory(dev, request.gpu_memory_utilization)
        budget = start.requested_bytes
        if measured_mode:
            budget = measured_budget(start.requested_bytes, start.cuda_free_at_start, int(overhead * TRANSIENT_PEAK_SHARE))
            start = dataclasses.replace(start, refusal=None)
        if start.refusal and dev.processes:
            held = ", ".join(f"pid {p.pid}{f' ({p.name})' if getattr(p, 'name', None) else ''} "
                             f"{format_gib(p.used_bytes)}" for p in dev.processes[:4] if p.used_bytes)
            if held:
                notes.append(f"{(hosts[rank] + ' ') if rank < len(hosts) else ''}cuda:{dev.cuda_index}'s memory is held by other processes ({held}): ending them frees it")
        predictions.append(
            GpuMemoryPrediction(
                cuda_index=dev.cuda_index,
                name=dev.name,
                pp_rank=pp_rank,
                total_bytes=dev.total_bytes,
                cuda_total_bytes=dev.cuda_total_bytes,
                free_bytes=dev.free_bytes,
                cuda_free_at_start=start.cuda_free_at_start,
                requested_bytes=start.requested_bytes,
                weights_bytes=weights,
                overhead_bytes=overhead,
                available_kv_bytes=budget - weights - tables - overhead,
                refusal=start.refusal,
                node=hosts[rank] if rank < len(hosts) else None,
                engram_bytes=tables,
            )
        )
    if any(d.is_unified_memory for d in devices):
        notes.append(
            "unified-memory GPU: free memory swings with the host's page cache; consider --margin 25%"
        )
    return predictions, notes


def _engram_gpu_bytes(geometry: Dsv4Geometry, request: FitRequest) -> tuple[int, ...]:
    """DeepSeek-V4.1 with --engram-config cpu_offload false: each shard's Engram tables in GPU memory (empty
    otherwise)."""
    if geometry.v41 is None:
        return ()
    from dsv4ctl.planning.plan.engram import gpu_table_bytes, parse_engram_config

    return gpu_table_bytes(geometry.v41, parse_engram_config(request.engram_config),
                           tensor_parallel_size=request.tensor_parallel_size,
                           data_parallel_size=request.data_parallel_size)


def kv_estimate(
    request: FitRequest, source: str, kv_memory: int, log_cal: LogCalibration | None, gpu: GpuMemoryPrediction | None,
    devices: Any, calibration_log: str | None = None, sizing: SizingMode | None = None,
) -> KvMemoryEstimate:
    """The limiting GPU's available KV memory as vLLM's worker computes it, term by term, with basis and range."""
    measured_mode = sizing is not None and sizing.measured
    if source == "log" and measured_mode and log_cal is not None and log_cal.measured_kv_blocks is not None:
        term = KvTerm("kv_cache_memory", kv_memory, kv_memory, kv_memory, "measured",
                      f"{log_cal.path}: the {log_cal.measured_kv_blocks:,} KV cache blocks vLLM committed after CUDA-graph "
                      "capture and warm-up (blocks x the block stride)")
        return KvMemoryEstimate(kv_memory, kv_memory, kv_memory, "measured", (term,))
    if source == "given":
        term = KvTerm("kv_cache_memory", kv_memory, kv_memory, kv_memory, "exact", "--kv-cache-memory(-bytes)")
        return KvMemoryEstimate(kv_memory, kv_memory, kv_memory, "exact", (term,))
    if source == "override":
        term = KvTerm("kv_cache_memory", kv_memory, kv_memory, kv_memory, "exact",
                      f"--num-gpu-blocks-override {request.num_gpu_blocks_override:,} x the block stride")
        return KvMemoryEstimate(kv_memory, kv_memory, kv_memory, "exact", (term,))
    if source == "startup_plan":
        # vLLM's own figure, as its plan file holds it (bytes, not rounded): what the next start re-applies.
        term = KvTerm("kv_cache_memory", kv_memory, kv_memory, kv_memory, "measured",
                      f"vLLM's startup plans ({calibration_log}): the KV memory it sized and re-applies")
        return KvMemoryEstimate(kv_memory, kv_memory, kv_memory, "measured", (term,))
    if source == "log" and measured_mode and log_cal is not None and log_cal.measured_kv_blocks is None:
        # A log of a release before 0.34 (planning/plan/inputs.py `estimate_from_earlier_release`): its profile-run
        # estimate, not what the measured mode commits; no range is known.
        term = KvTerm("kv_cache_memory", kv_memory, kv_memory, kv_memory, "estimated",
                      f"{log_cal.path}: \"Available KV cache memory\" of a vLLM {log_cal.vllm_version} start (its "
                      "profile-run estimate), not measured after warm-up as this release does")
        return KvMemoryEstimate(kv_memory, kv_memory, kv_memory, "estimated", (term,),
                                "the log of a start of this release makes it exact")
    if source in ("log", "calibrated") or gpu is None:
        half = GiB // 200  # vLLM logs the figure rounded to 0.01 GiB
        basis = "calibrated" if source == "calibrated" else "measured"
        where = calibration_log if source == "calibrated" else (log_cal.path if log_cal is not None else "the startup log")
        term = KvTerm("kv_cache_memory", kv_memory, kv_memory - half, kv_memory + half - 1, basis,
                      f"{where}: \"Available KV cache memory\" (rounded to 0.01 GiB)")
        return KvMemoryEstimate(kv_memory, term.low, term.high, basis, (term,),
                                "--kv-cache-memory-bytes with the logged figure makes it exact")
    req = gpu.requested_bytes
    requested = KvTerm(
        "requested", req, req, req, "measured",
        f"ceil(CUDA total {format_gib(gpu.cuda_total_bytes)} x --gpu-memory-utilization {request.gpu_memory_utilization:g}), "
        f"{(gpu.node + ' ') if gpu.node else ''}cuda:{gpu.cuda_index} {gpu.name} ({_source_of(request.gpus)})",
    )
    if measured_mode:
        requested = _measured_budget_term(request, gpu)
    weights = _weights_term(request, gpu.weights_bytes)
    o = gpu.overhead_bytes
    if request.non_kv_overhead_bytes is not None:
        overhead = KvTerm("non_kv_overhead", o, o, o, "exact", "--overhead")
    else:
        overhead = KvTerm(
            "non_kv_overhead", o, max(0, o - NON_KV_OVERHEAD_SPREAD_BYTES), o + NON_KV_OVERHEAD_SPREAD_BYTES, "estimated",
            "activation peak, non-torch memory and the CUDA-graph estimate: 6 GiB +/- 4 GiB "
            "(vllm#54677: the same launch needed ~4 GiB/GPU more on 0.28.0 than on 0.26.0)",
        )
    subtracted = [weights, overhead]
    if gpu.engram_bytes:
        e = gpu.engram_bytes
        subtracted.insert(1, KvTerm(
            "engram_tables", e, e, e, "checkpoint",
            "this rank's share of DeepSeek-V4.1's Engram tables, in GPU memory with --engram-config cpu_offload false "
            "(config.json engram_*, sharded as models/deepseek_v41/common/engram.py ParallelEngramEmbedding)"))
    if devices and any(getattr(d, "is_unified_memory", False) for d in devices):
        u = UNIFIED_MEMORY_SPREAD_BYTES
        subtracted.append(KvTerm("unified_memory_swing", 0, -u, u, "estimated",
                                 "unified memory follows host memory (upstream report: 9.81 vs 12.3 GiB on two starts)"))
    return combine_terms(
        requested, subtracted,
        "--from-log LOG (a startup's measured KV memory), --overhead SIZE or --kv-cache-memory SIZE narrows it",
    )


def _measured_budget_term(request: FitRequest, gpu: GpuMemoryPrediction) -> KvTerm:
    """vLLM 0.34's measured mode: min(the utilization budget, free at start - max(1 GiB, 0.75 x the transient peak)),
    the peak estimated within the overhead (none of it to all of its high end) until a log measures it."""
    o = gpu.overhead_bytes
    high_o = o if request.non_kv_overhead_bytes is not None else o + NON_KV_OVERHEAD_SPREAD_BYTES
    peak = int(o * TRANSIENT_PEAK_SHARE)
    req, free = gpu.requested_bytes, gpu.cuda_free_at_start
    value = measured_budget(req, free, peak)
    low, high = measured_budget(req, free, high_o), measured_budget(req, free, 0)
    return KvTerm(
        "measured_budget", value, low, high, "estimated" if low != high else "measured",
        f"min(ceil(CUDA total {format_gib(gpu.cuda_total_bytes)} x --gpu-memory-utilization "
        f"{request.gpu_memory_utilization:g}), free at start {format_gib(free)} - max(1 GiB, 0.75 x transient peak)), "
        f"the peak estimated at {format_gib(peak)} (0-{format_gib(high_o)}; sizing margin "
        f"{format_gib(sizing_margin(peak))}), {(gpu.node + ' ') if gpu.node else ''}cuda:{gpu.cuda_index} {gpu.name} "
        f"({_source_of(request.gpus)}): vLLM measures it after CUDA-graph capture and warm-up",
    )


def _source_of(gpus: Any) -> str:
    if not gpus:
        return "NVML"
    return "snapshot " + (", ".join(gpus) if isinstance(gpus, (tuple, list)) else str(gpus))


def _weights_term(request: FitRequest, w: int) -> KvTerm:
    """One GPU's weights: given per GPU (exact), the whole checkpoint's size split as vLLM loads it, or the
    checkpoint's own headers."""
    if request.weights_bytes_per_rank is not None:
        return KvTerm("weights", w, w, w, "exact", "--weights-memory")
    if request.checkpoint_bytes is not None:
        ep_split = request.enable_expert_parallel and request.data_parallel_size > 1
        if not ep_split:
            return KvTerm("weights", w, w, w, "checkpoint",
                          "--checkpoint-size, split over TP x PP (every tensor is sharded; norms replicated, ~0.01%)")
        # Expert parallelism splits the routed experts over TP x DP too; without the headers their share is unknown:
        # from all of it (the value) down to every tensor being an expert (the low end).
        low = request.checkpoint_bytes // (request.tensor_parallel_size * request.data_parallel_size
                                           * request.pipeline_parallel_size)
        return KvTerm("weights", w, low, w, "estimated",
                      "--checkpoint-size split over TP x PP; expert parallelism splits the experts further (share unknown "
                      "without the headers: the checkpoint dir or the hub id narrows it)")
    return KvTerm("weights", w, w, w, "checkpoint", "the checkpoint's safetensors headers, split by TP/PP/EP")
