"""`dsv4ctl fit-length`: the plan for a DeepSeek-V4 launch, rendered; exit 6 when vLLM would refuse it."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
from typing import Any

import typer

from dsv4ctl.commands.common import complete_model, given
from dsv4ctl.errors import ExitCode


def fit_length_command(
    ctx: typer.Context,
    model: str = typer.Argument(..., metavar="MODEL", help="deepseek-ai/DeepSeek-V4-Flash, deepseek-ai/DeepSeek-V4-Pro, a checkpoint dir or config.json.", autocompletion=complete_model),
    kv_cache_memory: str | None = typer.Option(None, "--kv-cache-memory", "--kv-cache-memory-bytes", metavar="SIZE", help="KV memory per GPU, as vLLM's --kv-cache-memory-bytes (9.81GiB, 10G = 10 GiB, 10533407294 bytes; a bare number below 1 MiB is refused as a forgotten unit). Default: predict."),
    gpus: list[str] | None = typer.Option(None, "--gpus", metavar="SNAPSHOT", help="GPU snapshot JSON (`dsv4ctl gpus --save`); repeat, one per node: a launch across the nodes is planned rank by rank, nodes that each hold it are planned each (the tightest binds). Default: ask NVML when a prediction needs GPUs."),
    from_log: str | None = typer.Option(None, "--from-log", metavar="LOG", help="Calibrate from a previous vLLM startup log (Available KV cache memory, Model loading, graphs)."),
    max_model_len: str = typer.Option("auto", "--max-model-len", metavar="LENGTH", help="Check this explicit length too (vLLM syntax: 1048576, 1M, 512k, auto)."),
    gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization", metavar="FRACTION", help="As vLLM. Default: the release's, 0.92 (vLLM 0.34's measured KV cache: 1.0)."),
    extensible_kv_cache: bool | None = typer.Option(None, "--enable-extensible-kv-cache/--no-enable-extensible-kv-cache", help="vLLM 0.34+: size the KV cache from memory measured after warm-up (vLLM's default on CUDA) or from the profile estimate."),
    num_gpu_blocks_override: int | None = typer.Option(None, "--num-gpu-blocks-override", metavar="N", help="As vLLM: this many KV blocks (turns 0.34's measured KV cache off)."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", metavar="DTYPE", help="auto, fp8, fp8_e4m3, fp8_ds_mla, bfloat16 (bfloat16 needs FLASHINFER_MLA_SPARSE_DSV4)."),
    attention_backend: str | None = typer.Option(None, "--attention-backend", metavar="NAME", help="FLASHMLA_SPARSE_DSV4 (default off SM12x) or FLASHINFER_MLA_SPARSE_DSV4."),
    block_size: int | None = typer.Option(None, "--block-size", metavar="TOKENS", help="DeepSeek-V4: 256 only (vLLM's choice). DeepSeek-V4.1: vLLM picks 64 on H200, 128 on B200."),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens", metavar="TOKENS", help="Default: vLLM's rule for the GPU (8192 on H100/H200)."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", metavar="N", help="Requests scheduled at once. Default: vLLM's rule for the GPU."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", metavar="N", help="GPUs one copy of the model is split over."),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp", metavar="N", help="Pipeline stages (each a tensor-parallel group)."),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", "-dp", metavar="N", help="Replicas of the model (the tightest binds)."),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel", "-ep", help="Experts spread whole over TP x DP instead of sliced."),
    async_scheduling: bool | None = typer.Option(None, "--async-scheduling/--no-async-scheduling", help="Default: on, as vLLM."),
    speculative_config: str | None = typer.Option(None, "--speculative-config", metavar="JSON", help='MTP drafting, as vLLM: \'{"method": "mtp", "num_speculative_tokens": 1}\'.'),
    engram_config: str | None = typer.Option(None, "--engram-config", metavar="JSON", help='DeepSeek-V4.1\'s Engram tables, as vLLM: \'{"cpu_offload": true}\' (default: pinned host memory).'),
    margin: str = typer.Option("5%", "--margin", metavar="SIZE|PERCENT", help="Headroom below the auto-fit ceiling: share of KV memory (floor 512 MiB) or a size."),
    weights_memory: str | None = typer.Option(None, "--weights-memory", metavar="SIZE", help="Weights per GPU (one GPU's share), when no checkpoint dir is given."),
    checkpoint_size: str | None = typer.Option(None, "--checkpoint-size", metavar="SIZE", help="The whole checkpoint's size (e.g. 160GB), split per GPU as vLLM loads it."),
    host_memory: str | None = typer.Option(None, "--host-memory", metavar="SIZE", help="DeepSeek-V4.1: host RAM available per node for pinning the Engram tables (default: a --gpus snapshot's record, or this machine's when its GPUs are read)."),
    overhead: str | None = typer.Option(None, "--overhead", metavar="SIZE", help="Non-KV, non-weight memory per GPU (default estimate 6 GiB)."),
    vllm_version: str | None = typer.Option(None, "--vllm-version", metavar="X.Y.Z", help="Plan as this vLLM release does (0.27.1-0.34.0). Default: the installed vLLM, else --from-log's, else the newest known."),
    no_calibration: bool = typer.Option(False, "--no-calibration", help="Ignore the KV memory earlier serve starts measured on this host and configuration."),
    compare: str | None = typer.Option(None, "--compare", metavar="X.Y.Z", help="Show what changes for this launch under another vLLM release (the upgrade view, docs/upgrade.md): sizing, lengths, fixes, flags, messages, log lines."),
    json_output: bool = typer.Option(False, "--json", help="Print the answer as JSON."),
) -> None:
    """Predict vLLM's --max-model-len auto-fit for DeepSeek-V4 and recommend a safe explicit length.

    Exit 0 with an answer, 6 when vLLM would refuse these settings or no length survives the margin, 2 for bad
    flags, 1 for unreadable inputs.
    """
    from dsv4ctl.planning import (
        FitRequest,
        parse_margin,
        parse_max_model_len,
        parse_speculative_config,
        plan_fit,
    )
    from dsv4ctl.render import emit_json, out_console
    from dsv4ctl.units import describe_bytes, parse_memory_flag

    request = FitRequest(
        model=model,
        max_model_len=parse_max_model_len(max_model_len),
        gpu_memory_utilization=gpu_memory_utilization,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        tensor_parallel_size=tensor_parallel_size,
        pipeline_parallel_size=pipeline_parallel_size,
        data_parallel_size=data_parallel_size,
        enable_expert_parallel=enable_expert_parallel,
        async_scheduling=async_scheduling,
        num_speculative_tokens=parse_speculative_config(speculative_config) if speculative_config else 0,
        attention_backend=attention_backend,
        engram_config=engram_config,
        kv_cache_memory_bytes=parse_memory_flag(kv_cache_memory, what="--kv-cache-memory") if kv_cache_memory else None,
        enable_extensible_kv_cache=extensible_kv_cache,
        num_gpu_blocks_override=num_gpu_blocks_override,
        margin=parse_margin(margin),
        weights_bytes_per_rank=parse_memory_flag(weights_memory, what="--weights-memory") if weights_memory else None,
        checkpoint_bytes=parse_memory_flag(checkpoint_size, what="--checkpoint-size") if checkpoint_size else None,
        non_kv_overhead_bytes=parse_memory_flag(overhead, what="--overhead") if overhead else None,
        host_memory_bytes=parse_memory_flag(host_memory, what="--host-memory") if host_memory else None,
        gpus=(gpus[0] if len(gpus) == 1 else tuple(gpus)) if gpus else None,
        from_log=from_log,
        vllm_version=vllm_version,
        no_calibration=no_calibration,
        inherit_from_log=from_log is not None,
        explicit=given(ctx, num_speculative_tokens="speculative_config", enable_extensible_kv_cache="extensible_kv_cache"),
    )
    if from_log is not None:
        from dsv4ctl.advice import read_log_facts

        log_facts = read_log_facts(from_log)
    else:
        log_facts = None
    if compare is not None:
        _render_upgrade(request, compare, log_facts, json_output)
        return
    result = _plan_fit_or_say_what_replaces_the_gpus(plan_fit, request, log_facts)
    if json_output:
        emit_json(result.to_json())
    else:
        from dsv4ctl.render import err_console, print_note
        from dsv4ctl.render.fit import render_fit

        talk = err_console()
        for flag, raw, size in (("--kv-cache-memory", kv_cache_memory, request.kv_cache_memory_bytes),
                                ("--weights-memory", weights_memory, request.weights_bytes_per_rank),
                                ("--checkpoint-size", checkpoint_size, request.checkpoint_bytes),
                                ("--overhead", overhead, request.non_kv_overhead_bytes),
                                ("--host-memory", host_memory, request.host_memory_bytes)):
            if raw is not None and size is not None:
                print_note(talk, "Note:", f"{flag} {raw} read as {describe_bytes(size)}")
        for line in result.notes:
            print_note(talk, "Note:", line)
        for line in result.warnings:
            print_note(talk, "Warning:", line)
        render_fit(result, out_console())
    if not result.fits:
        raise typer.Exit(int(ExitCode.DOES_NOT_FIT))


def _plan_fit_or_say_what_replaces_the_gpus(plan_fit: Any, request: Any, log_facts: Any) -> Any:
    """No readable GPU: name the flags that let fit-length answer without one."""
    from dsv4ctl.errors import GpuUnavailableError

    try:
        return plan_fit(request, log_facts=log_facts)
    except GpuUnavailableError as exc:
        if request.gpus:
            raise
        raise GpuUnavailableError(
            exc.message,
            hint="without a GPU here, give the KV memory per GPU: --kv-cache-memory 9.81GiB (vLLM's \"Available KV "
            "cache memory\" line), or --from-log startup.log, or a snapshot of the GPU box: --gpus snapshot.json "
            "(`dsv4ctl gpus --save snapshot.json` there)",
            exit_code=exc.exit_code,
        ) from None


def _render_upgrade(request: Any, compare: str, log_facts: Any, json_output: bool) -> None:
    """--compare: the launch under its release and under COMPARE (dsv4ctl.upgrade); exit 6 when it does not fit
    under COMPARE, the release being considered."""
    from dsv4ctl.planning import plan_fit
    from dsv4ctl.upgrade import compare_releases

    def plan(req: Any, snapshot: Any = None, log_facts: Any = None) -> Any:
        return _plan_fit_or_say_what_replaces_the_gpus(lambda r, log_facts=None: plan_fit(r, snapshot=snapshot,
                                                                                           log_facts=log_facts),
                                                       req, log_facts)

    show_upgrade_view(compare_releases(request, compare, plan=plan, log_facts=log_facts), json_output)


def show_upgrade_view(view: Any, json_output: bool) -> None:
    """The upgrade view on stdout (`fit-length --compare`, `serve --dry-run --compare`); exit 6 when the launch does not
    fit under the release compared to."""
    from dsv4ctl.render import emit_json, out_console

    if json_output:
        emit_json(view.to_json())
    else:
        from dsv4ctl.render.upgrade import render_upgrade

        render_upgrade(view, out_console())
    if not view.fits_after:
        raise typer.Exit(int(ExitCode.DOES_NOT_FIT))
