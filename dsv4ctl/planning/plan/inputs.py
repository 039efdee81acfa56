"""A fit-length request resolved for planning: the log's figures and flags, the vLLM release whose planner is
mirrored, the GPUs, the KV layout and layers (`resolve`); vLLM's scheduling defaults for them (`scheduling`);
and the KV memory every worker has (`worker_memory`: given, measured in a log, calibrated on this host, or
predicted per GPU)."""

from __future__ import annotations

import shlex

from dataclasses import dataclass, field, replace
from typing import Any

from dsv4ctl.errors import Dsv4ctlError, ExitCode, InputError, UsageError
from dsv4ctl.logs.facts import LogCalibration, from_timeline
from dsv4ctl.planning.checkpoint.geometry import CheckpointWeights, Dsv4Geometry
from dsv4ctl.planning.mirror.kv_planner import max_concurrent_batches
from dsv4ctl.planning.mirror.kv_specs import KvLayoutChoice, LayerKvSpec, resolve_kv_layout
from dsv4ctl.planning.mirror.layers import build_specs
from dsv4ctl.planning.mirror.refusals import RefusalTexts, refusal_texts
from dsv4ctl.planning.mirror.measured import FIRST_MEASURED_RELEASE, MEASURED, SizingMode, blocks_within, has_measured_mode, sizing_mode
from dsv4ctl.planning.mirror.startup_plans import cache_root, measured
from dsv4ctl.planning.mirror.versions import VersionChoice, choose_vllm_version
from dsv4ctl.planning.plan.devices import predict_memory, select_devices
from dsv4ctl.planning.plan.flags import inherit_log_flags
from dsv4ctl.planning.plan.memory import DEFAULT_NON_KV_OVERHEAD_BYTES, GpuMemoryPrediction, check_startup_memory
from dsv4ctl.planning.plan.request import FitRequest, default_batch_limits
from dsv4ctl.units import GiB, format_gib, format_tokens


@dataclass
class Inputs:
    """The request resolved: the log's figures, the release whose planner is mirrored, the GPUs, the layers."""

    request: FitRequest
    geometry: Dsv4Geometry
    log_cal: LogCalibration | None
    version: VersionChoice
    devices: list[Any] | None
    layout: KvLayoutChoice
    specs: dict[str, LayerKvSpec]
    need_prediction: bool
    sizing: SizingMode | None = None  # how the launch's vLLM sizes its KV cache (0.34+: measured or estimate)
    snapshot: Any = None  # the GPUs read (a snapshot file or NVML), for plans of other settings on the same box
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def visible_gpus(self) -> int | None:
        """Whole GPUs the snapshot shows (None without one)."""
        if self.snapshot is None:
            return None
        return sum(1 for d in self.snapshot.devices if not d.is_mig)


@dataclass
class Scheduling:
    max_num_batched_tokens: int
    source: str
    max_num_seqs: int
    async_on: bool
    in_flight: int


@dataclass
class WorkerMemory:
    """The KV memory of every worker of the binding replica, where it came from, and any refusal so far."""

    source: str  # "given" | "log" | "calibrated" | "predicted" | "startup_plan" | "override"
    per_worker: list[int]
    predictions: list[GpuMemoryPrediction]  # every GPU's (predicted memory only)
    replica: list[GpuMemoryPrediction]  # the binding replica's GPUs (predicted memory only)
    refusal: str | None
    calibration: Any = None
    plan_files: list[str] = field(default_factory=list)  # vLLM's startup plans the figure was read from


def resolve(request: FitRequest, snapshot: Any, log_facts: Any, geometry: Dsv4Geometry) -> Inputs:
    """The log's figures and flags, the release, the GPUs (needed to predict memory, or to pick vLLM's default
    max_num_batched_tokens), the KV layout and the layers."""
    notes: list[str] = []
    warnings: list[str] = []
    if log_facts is not None:
        log_cal: LogCalibration | None = from_timeline(log_facts, request.from_log)
    elif request.from_log:
        raise InputError(f"{request.from_log}: the log was not read", hint="read it with dsv4ctl.advice.read_log_facts")
    else:
        log_cal = None
    if log_cal is not None and log_cal.model:
        _same_model_as_the_log(request.model, log_cal, geometry, warnings)
    if log_cal is not None and request.inherit_from_log:
        request, taken = inherit_log_flags(request, log_cal)
        notes.extend(taken)
    version = choose_vllm_version(request.vllm_version, log_cal.vllm_version if log_cal is not None else None)
    if version.warning:
        warnings.append(version.warning)
    sizing = _sizing(request, version.planned, log_cal)
    request = replace(request, gpu_memory_utilization=sizing.utilization)
    if estimate_from_earlier_release(log_cal, sizing):  # that start's auto-fit is not the measured mode's
        log_cal = replace(log_cal, autofit_from=None, autofit_to=None)  # type: ignore[arg-type]
    fixed = request.kv_cache_memory_bytes is not None or request.num_gpu_blocks_override is not None
    if log_cal is not None and not fixed and _log_kv(log_cal, sizing) is None:
        if sizing.measured:
            raise InputError(
                f"{log_cal.path}: no measured KV cache size (\"Extended KV cache to N blocks\" or \"Memory after "
                "warmup: ... N KV cache blocks\"): in vLLM's measured mode \"Available KV cache memory\" is only the "
                "reservation before CUDA-graph capture",
                hint="use the log of a start that got past warm-up, or give --kv-cache-memory",
            )
        if log_cal.sizing_mode == "measured":
            raise InputError(
                f"{log_cal.path}: a start with vLLM {log_cal.vllm_version or '0.34+'}'s measured KV cache: its "
                f"memory is the blocks committed after warm-up, which vLLM {version.planned}'s planning does not take",
                hint=f"plan as the log's release: add --vllm-version {log_cal.vllm_version or '0.34.0'}",
            )
        raise InputError(
            f"{log_cal.path}: no \"Available KV cache memory\" line",
            hint="use the log of a startup that got past memory profiling, or give --kv-cache-memory",
        )
    need_prediction = not fixed and (log_cal is None or _log_kv(log_cal, sizing) is None)
    if snapshot is None and request.gpus:
        from dsv4ctl.gpu import load_snapshot

        snapshot = load_snapshot(request.gpus)
    if snapshot is None and need_prediction:
        from dsv4ctl.gpu import read_snapshot

        snapshot = read_snapshot()
    devices = select_devices(snapshot, request) if snapshot is not None else None
    compute_major = devices[0].compute_capability[0] if devices else None
    if geometry.v41 is not None:
        from dsv4ctl.planning.plan.v41 import v41_layout_and_specs

        layout, specs = v41_layout_and_specs(request, geometry, compute_major, notes)
    else:
        layout = resolve_kv_layout(request.kv_cache_dtype, request.attention_backend, compute_major)
        specs = build_specs(geometry, layout, num_speculative_tokens=request.num_speculative_tokens, block_size=request.block_size)
    return Inputs(request, geometry, log_cal, version, devices, layout, specs, need_prediction, sizing, snapshot, notes,
                  warnings)


def _sizing(request: FitRequest, version: str, log_cal: LogCalibration | None) -> SizingMode:
    """How the launch's vLLM sizes its KV cache: from its flags; a log of that release that shows the mode wins (vLLM
    turns the measured mode off at start when device virtual memory is unusable). vLLM's refusal of the measured mode
    asked for where it cannot run is raised (exit 6)."""
    if "enable_extensible_kv_cache" in request.explicit and not has_measured_mode(version):
        # The flag is 0.34's (the catalogue's flags table: vllm_flags.first_release('--enable-extensible-kv-cache')):
        # an earlier release's parser rejects it, so no command with it can be printed for that release.
        first = ".".join(map(str, FIRST_MEASURED_RELEASE))
        spelled = "--enable-extensible-kv-cache" if request.enable_extensible_kv_cache else "--no-enable-extensible-kv-cache"
        raise UsageError(f"{spelled} is a flag of vLLM {first} and later: vLLM {version}'s `vllm serve` rejects it",
                         hint=f"drop {spelled} (vLLM {version} sizes the KV cache from its profile-run estimate only), "
                              f"or plan --vllm-version {first}")
    fixed = request.kv_cache_memory_bytes
    if fixed is None and log_cal is not None and request.inherit_from_log:
        fixed = log_cal.serve_args.get("kv_cache_memory_bytes")  # the log's start had a fixed budget: its estimate path
    flags = dict(gpu_memory_utilization=request.gpu_memory_utilization, kv_cache_memory_bytes=fixed,
                 num_gpu_blocks_override=request.num_gpu_blocks_override,
                 enable_extensible_kv_cache=request.enable_extensible_kv_cache, enable_elastic_ep=request.enable_elastic_ep)
    mode = sizing_mode(version, **flags)
    if mode.refusal:
        raise Dsv4ctlError(f"vLLM {version} would refuse this: {mode.refusal}",
                           hint="drop --enable-extensible-kv-cache, or the flag it cannot run with",
                           exit_code=ExitCode.DOES_NOT_FIT)
    # Only a start of a release with both modes (0.34+, or one whose lines show the measured mode) shows which one a
    # launch gets: an earlier release's log is "estimate" because that release had no other, and says nothing of 0.34.
    logged = log_cal.sizing_mode if log_cal is not None and not _log_before_modes(log_cal) else None
    if (logged and has_measured_mode(version) and logged != mode.mode and request.kv_cache_memory_bytes is None
            and request.num_gpu_blocks_override is None):  # sizes the operator fixes turn the mode off, as in vLLM
        forced = sizing_mode(version, **{**flags, "enable_extensible_kv_cache": logged == MEASURED})
        return replace(forced, why=f"{log_cal.path} shows the {logged} mode")  # type: ignore[union-attr]
    return mode


def _log_before_modes(log_cal: LogCalibration) -> bool:
    """The log is of a release before 0.34, which sized the KV cache from its profile-run estimate only."""
    version = log_cal.vllm_version
    try:
        return bool(version) and not has_measured_mode(version)
    except ValueError:  # a version text the planner cannot read: the log's own lines decide
        return False


def _log_kv(log_cal: LogCalibration, sizing: SizingMode) -> int | None:
    """The log's figure that is the KV cache's size: the committed blocks in the measured mode (their bytes come from
    the plan's block stride), else "Available KV cache memory". A measured plan from a log of a release before 0.34
    takes its "Available KV cache memory" as an estimate only (`estimate_from_earlier_release`)."""
    if sizing.measured:
        if log_cal.measured_kv_blocks is None and _log_before_modes(log_cal):
            return log_cal.available_kv_bytes
        return log_cal.measured_kv_blocks
    return log_cal.available_kv_bytes


def estimate_from_earlier_release(log_cal: LogCalibration | None, sizing: SizingMode | None) -> bool:
    """A measured (0.34+) plan whose KV memory is an earlier release's "Available KV cache memory": the profile-run
    estimate at that start's utilization, not what the measured mode commits after warm-up (at 1.0 by default)."""
    return (log_cal is not None and sizing is not None and sizing.measured and log_cal.measured_kv_blocks is None
            and log_cal.available_kv_bytes is not None and _log_before_modes(log_cal))


def _same_model_as_the_log(model: str, log_cal: LogCalibration, geometry: Dsv4Geometry, warnings: list[str]) -> None:
    """A log of another model calibrates nothing: refused when the log's model is one dsv4ctl can read here (a preset,
    a local checkpoint) and its shape differs from the planned one's; said as a check when the name differs and the
    log's model cannot be read here (a path of another machine)."""
    from pathlib import Path

    from dsv4ctl.planning.checkpoint.geometry import builtin_model_ids
    from dsv4ctl.planning.checkpoint.load import load_geometry

    logged = str(log_cal.model)
    if logged == model or Path(logged).name.lower() == Path(model).name.lower():
        return
    readable = logged in builtin_model_ids() or Path(logged).exists()
    other = load_geometry(logged) if readable else None
    shape = lambda g: (g.architecture, g.num_hidden_layers, g.compress_ratios, g.head_dim)  # noqa: E731
    if other is not None and shape(other) != shape(geometry):
        raise UsageError(
            f"--from-log {log_cal.path} is a start of {logged} ({other.num_hidden_layers} layers), not of {model} "
            f"({geometry.num_hidden_layers} layers): its memory figures do not describe this model",
            hint=f"plan the log's model: dsv4ctl fit-length {shlex.quote(logged)} --from-log {shlex.quote(log_cal.path)}",
        )
    if other is None:
        warnings.append(f"the log is a start of {logged}, this plan is of {model}: check that they are the same "
                        "checkpoint, or its memory figures describe another model")


def scheduling(inputs: Inputs) -> Scheduling:
    """max_num_batched_tokens, max_num_seqs and async scheduling as vLLM defaults them for these GPUs."""
    request, devices = inputs.request, inputs.devices
    batched_dp_moe = False  # needs --all2all-backend deepep_low_latency/nixl_ep, which fit-length does not take
    dev_total = devices[0].total_bytes if devices else None
    dev_name = devices[0].name if devices else ""
    default_mnbt, default_seqs, why = default_batch_limits(dev_total, dev_name, batched_dp_moe=batched_dp_moe)
    explicit = None if request.is_auto else request.max_model_len
    length_for_defaults = explicit if explicit is not None else inputs.geometry.model_max_model_len
    max_num_seqs = request.max_num_seqs or default_seqs
    if request.max_num_batched_tokens is not None:
        mnbt, source = request.max_num_batched_tokens, "given"
    else:
        mnbt = min(max_num_seqs * length_for_defaults, default_mnbt)
        source = why
        if devices is None:
            inputs.notes.append(f"--max-num-batched-tokens not given: assumed {mnbt:,}, {why}")
    if request.max_num_seqs is None:
        max_num_seqs = min(max_num_seqs, mnbt)
    async_on = True if request.async_scheduling is None else request.async_scheduling
    in_flight = max_concurrent_batches(async_on, request.pipeline_parallel_size) * mnbt
    return Scheduling(mnbt, source, max_num_seqs, async_on, in_flight)


def _calibration(inputs: Inputs, sched: Scheduling) -> Any:
    """A calibration record of this host and configuration, which replaces the estimate (planning/plan/calibration.py)."""
    request, devices = inputs.request, inputs.devices
    if not inputs.need_prediction or request.no_calibration or not devices:
        return None
    from dsv4ctl.planning.plan.calibration import CalibrationKey, find

    return find(CalibrationKey(
        model=str(inputs.geometry.config_path or inputs.geometry.model), vllm_version=inputs.version.planned,
        gpu_name=devices[0].name, cuda_total_bytes=devices[0].cuda_total_bytes,
        tensor_parallel_size=request.tensor_parallel_size, pipeline_parallel_size=request.pipeline_parallel_size,
        data_parallel_size=request.data_parallel_size, enable_expert_parallel=request.enable_expert_parallel,
        gpu_memory_utilization=float(request.gpu_memory_utilization), max_num_batched_tokens=sched.max_num_batched_tokens,
        max_num_seqs=sched.max_num_seqs, kv_cache_dtype=inputs.layout.kv_cache_dtype,
        attention_class=inputs.layout.attention_class, num_speculative_tokens=request.num_speculative_tokens,
        enforce_eager=request.enforce_eager,
    ))


def worker_memory(inputs: Inputs, sched: Scheduling, bytes_per_block: list[int]) -> WorkerMemory:
    """The KV memory per worker: given, measured in the log, calibrated on this host, or predicted per GPU (the
    tightest data-parallel replica binds); and the refusal vLLM would answer at worker start. `bytes_per_block`: each
    worker's block stride (a measured-mode log gives blocks)."""
    request, log_cal, notes, sizing = inputs.request, inputs.log_cal, inputs.notes, inputs.sizing
    workers = request.tensor_parallel_size * request.pipeline_parallel_size
    calibration = _calibration(inputs, sched)
    memory = WorkerMemory("predicted", [], [], [], None, calibration)
    measured_mode = sizing is not None and sizing.measured
    if request.kv_cache_memory_bytes is not None:
        memory.source, memory.per_worker = "given", [request.kv_cache_memory_bytes] * workers
    elif log_cal is not None and measured_mode and log_cal.measured_kv_blocks is not None:
        memory.source, memory.per_worker = "log", [log_cal.measured_kv_blocks * b for b in bytes_per_block]
        notes.append(f"KV cache from the {log_cal.measured_kv_blocks:,} blocks vLLM committed after CUDA-graph capture and "
                     "warm-up in the log (exact: blocks x the block stride)")
    elif log_cal is not None and log_cal.available_kv_bytes is not None:
        memory.source, memory.per_worker = "log", [log_cal.available_kv_bytes] * workers
        if estimate_from_earlier_release(log_cal, sizing):
            inputs.warnings.append(
                f"{log_cal.path} is a start of vLLM {log_cal.vllm_version}, which sized the KV cache from its profile-run "
                f"estimate; vLLM {inputs.version.planned} measures it after CUDA-graph capture and warm-up (at "
                f"--gpu-memory-utilization {sizing.utilization:g}), which no earlier start shows: its \"Available KV "
                "cache memory\" is planned from as an estimate only; the log of a start of this release makes it exact")
        else:
            notes.append("vLLM logs KV memory rounded to 0.01 GiB; the prediction can be a few blocks off near a "
                         "boundary")
    elif calibration is not None and not measured_mode and (plans := measured(calibration.startup_plans, version=inputs.version.planned)) is not None:
        kv, files = plans
        memory.source, memory.per_worker = "startup_plan", [kv] * workers
        memory.plan_files = [p.path for p in files]
        notes.append(
            f"KV memory vLLM measured and keeps in its startup plans ({len(files)} file{'s' if len(files) != 1 else ''} "
            f"under {cache_root() / 'startup_plan'}) since the start of {calibration.log} ({calibration.recorded_at}), "
            "the same host, configuration and vLLM release; vLLM re-applies it while free memory is at least the "
            "plan's baseline; --no-calibration predicts instead"
        )
    elif calibration is not None:
        memory.source, memory.per_worker = "calibrated", [calibration.available_kv_bytes] * workers
        notes.append(
            f"KV memory from the calibration record of {calibration.log} ({calibration.recorded_at}), the same host "
            "configuration and vLLM release; --no-calibration predicts instead"
        )
    elif request.num_gpu_blocks_override is not None:
        # The cache is the override's blocks (`_apply_blocks_override`); the GPUs, when known, are still predicted for
        # the memory table and the startup refusal. vLLM's "No available memory for the cache blocks" is checked on
        # the override's memory (vllm==0.34.0 v1/core/kv_cache_planning.py:1612-1656), never on the memory found.
        if inputs.devices is not None:
            _predict(inputs, memory, workers)
            if memory.refusal and memory.refusal.startswith("No available memory"):
                memory.refusal = None
    else:
        _predict(inputs, memory, workers)
        if measured_mode:  # the blocks whose 2 MiB-granule footprint fits, as `blocks_within` takes them
            memory.per_worker = [blocks_within(m, b, m // b) * b if m > 0 else m
                                 for m, b in zip(memory.per_worker, bytes_per_block)]
    if calibration is not None and measured_mode and calibration.startup_plans and memory.source != "startup_plan":
        notes.append("vLLM's startup plans of this configuration hold only a reservation in its measured mode (the "
                     "cache is measured again at every start): not read as the KV size")
    _apply_blocks_override(request, memory, bytes_per_block, notes)
    devices = inputs.devices
    if devices is not None and not measured_mode:  # the measured mode skips the check (v1/worker/utils.py:783-796)
        starts = [check_startup_memory(dev, request.gpu_memory_utilization) for dev in devices]
        if memory.refusal is None:
            # vLLM checks free memory against the utilization budget at worker start even when
            # --kv-cache-memory-bytes fixes the KV size (a prediction has checked it already).
            memory.refusal = next((s.refusal for s in starts if s.refusal), None)
        if memory.refusal is None:
            slack = min(s.slack_bytes for s in starts)
            if slack < GiB:
                inputs.warnings.append(
                    f"free memory is only {format_gib(slack)} above the --gpu-memory-utilization budget on the tightest "
                    "GPU: anything else that allocates GPU memory before vLLM starts makes it refuse to start"
                )
    return memory


def _apply_blocks_override(request: FitRequest, memory: WorkerMemory, bytes_per_block: list[int],
                           notes: list[str]) -> None:
    """`--num-gpu-blocks-override N`: every release from 0.27.1 on sets each worker's available memory to N x its pool
    block stride before the null block, auto-fit and the admission check (vllm==0.34.0
    `v1/core/kv_cache_planning.py:1612-1633`, 0.33.0 `:1510-1531`, 0.29.0-0.32.0 `v1/core/kv_cache_utils.py`
    `get_kv_cache_configs`, 0.27.1 `:2159-2180`): the memory measured, predicted or given only decides whether the
    worker starts, not the cache's size."""
    blocks = request.num_gpu_blocks_override
    if blocks is None:
        return
    found = (f" instead of {format_gib(min(memory.per_worker))} of KV memory ({memory.source})"
             if memory.per_worker else " instead of the memory it finds at start")
    memory.source, memory.per_worker = "override", [blocks * b for b in bytes_per_block]
    notes.append(f"KV cache from --num-gpu-blocks-override {blocks:,}: {blocks:,} blocks x the block stride, which vLLM "
                 f"plans against{found}")


def _predict(inputs: Inputs, memory: WorkerMemory, workers: int) -> None:
    """Predicted per GPU: the utilization budget less the weights and the non-KV overhead."""
    request, notes = inputs.request, inputs.notes
    overhead = request.non_kv_overhead_bytes if request.non_kv_overhead_bytes is not None else DEFAULT_NON_KV_OVERHEAD_BYTES
    if request.non_kv_overhead_bytes is None:
        notes.append(
            f"non-KV overhead estimated at {format_gib(overhead)} per GPU (activations, CUDA graphs, NCCL); "
            "--from-log replaces the estimate with the measured figure"
        )
    geometry = _with_checkpoint_size(inputs)
    if request.weights_bytes_per_rank is not None:
        _refuse_weights_beyond_a_gpu(request, inputs.devices)
    predictions, more = predict_memory(inputs.devices, geometry, request, overhead, request.weights_bytes_per_rank,
                                       tuple(getattr(inputs.snapshot, "hosts", ()) or ()), inputs.sizing)
    notes.extend(more)
    memory.predictions = predictions
    memory.refusal = next((g.refusal for g in predictions if g.refusal), None)
    # DP replicas are independent engines; the tightest one binds. Workers of one replica: tp*pp.
    per_replica = [predictions[i : i + workers] for i in range(0, len(predictions), workers)]
    tightest = min(per_replica, key=lambda reps: min(g.available_kv_bytes for g in reps))
    memory.replica = list(tightest)
    memory.per_worker = [g.available_kv_bytes for g in tightest]
    if min(memory.per_worker) <= 0 and memory.refusal is None:
        worst = min(tightest, key=lambda g: g.available_kv_bytes)
        tables = f", the Engram tables ({format_gib(worst.engram_bytes)}, cpu_offload false)" if worst.engram_bytes else ""
        memory.refusal = (
            f"No available memory for the cache blocks on cuda:{worst.cuda_index}: weights "
            f"({format_gib(worst.weights_bytes)}){tables} and overhead ({format_gib(worst.overhead_bytes)}) exceed "
            f"{request.gpu_memory_utilization} of {format_gib(worst.cuda_total_bytes)}"
        )


def _with_checkpoint_size(inputs: Inputs) -> Dsv4Geometry:
    """The geometry with the whole checkpoint's size an operator gave (`--checkpoint-size`), split per rank as a
    checkpoint's headers are; the assumption stated in the notes."""
    request, geometry = inputs.request, inputs.geometry
    if request.checkpoint_bytes is None:
        return geometry
    ranks = request.tensor_parallel_size * request.pipeline_parallel_size
    share = format_gib(request.checkpoint_bytes // ranks)
    ep = " (expert parallelism splits the experts further: an upper bound)" if (
        request.enable_expert_parallel and request.data_parallel_size > 1) else ""
    inputs.notes.append(
        f"--checkpoint-size {format_gib(request.checkpoint_bytes)} read as the whole checkpoint: split over "
        f"TP x PP = {ranks} GPU{'s' if ranks != 1 else ''}, {share} each{ep}"
    )
    return replace(geometry, weights=CheckpointWeights(request.checkpoint_bytes, 0, 0, 0))


def _refuse_weights_beyond_a_gpu(request: FitRequest, devices: list[Any] | None) -> None:
    """`--weights-memory` is one GPU's share: a figure larger than the GPU is a whole checkpoint's, probably."""
    if not devices:
        return
    smallest = min(devices, key=lambda d: d.cuda_total_bytes)
    weights = request.weights_bytes_per_rank
    if weights <= smallest.cuda_total_bytes:
        return
    ranks = request.tensor_parallel_size * request.pipeline_parallel_size
    raise UsageError(
        f"--weights-memory {format_gib(weights)} is per GPU: more than one {smallest.name} holds "
        f"({format_gib(smallest.cuda_total_bytes)})",
        hint=f"for the whole checkpoint pass --checkpoint-size {format_gib(weights).replace(' ', '')} "
        f"(split over TP x PP = {ranks} GPU{'s' if ranks != 1 else ''}: {format_gib(weights // ranks)} each)",
    )


def sizing_plan(inputs: Inputs, source: str) -> tuple[RefusalTexts | None, int]:
    """vLLM 0.34's measured mode: its after-warm-up refusals, and the upper bound of its final auto-fit (the tentative
    length a log shows, else the model's maximum); what the mode means said in the notes. Else (None, model max)."""
    model_max = inputs.geometry.model_max_model_len
    sizing, log_cal = inputs.sizing, inputs.log_cal
    if sizing is None or not sizing.measured:
        if sizing is not None and has_measured_mode(inputs.version.planned):
            inputs.notes.append(f"KV cache sizing: estimate ({sizing.why})")
        return None, model_max
    texts = refusal_texts(True, measured=True, utilization=sizing.utilization, after_warmup=True)
    bound = model_max
    if source == "log" and log_cal is not None and log_cal.tentative_autofit_to:
        bound = min(model_max, log_cal.tentative_autofit_to)
    given = "" if sizing.utilization_given else " (vLLM's default in this mode)"
    inputs.notes.append(
        f"KV cache sizing: measured ({sizing.why}); --gpu-memory-utilization {sizing.utilization:g}{given}; no "
        "startup refusal for free memory below it; auto-fit is fitted again to the blocks measured after warm-up"
        + (f", at most the tentative {format_tokens(bound)} of the log" if bound < model_max else "")
        + "; an explicit --max-model-len that does not fit is refused only after CUDA-graph capture (minutes into the "
        "start)")
    return texts, bound
