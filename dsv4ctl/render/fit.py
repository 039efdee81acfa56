"""Human-readable output of `dsv4ctl fit-length`. The JSON form is `FitResult.to_json()`."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from dsv4ctl.planning import DSV4_BLOCK_SIZE, THINK_MAX_CONTEXT, FitResult
from dsv4ctl.render import print_command, print_prose
from dsv4ctl.render.tables import counted, group_same, index_ranges, print_table
from dsv4ctl.units import format_gib, format_tokens, gib


HANG = "  "  # wrapped prose continues two spaces in (render.print_prose)
VERDICT_LABELS = {"fits": "Fits", "shrinks": "Shrinks", "does_not_fit": "Does not fit"}


def _tokens(n: int) -> str:
    return format_tokens(n) if n > 0 else "none"


def render_fit(result: FitResult, console: Console) -> None:
    """The plan's one decision (`FitResult.why`) and what follows from it: figures of a plan vLLM would refuse are not
    shown as answers, a command only where the plan fits, what would fit where it does not."""
    _plan_lines(result, console)
    if result.gpus:
        console.print()
        print_table(console, _gpu_table(result), _gpu_table(result, narrow=True), heading_columns=2)
    _host_lines(result, console)
    if result.log is not None:
        _log_line(result, console)
    console.print()
    print_table(console, _answer_table(result))
    print_prose(console, f"{VERDICT_LABELS[result.verdict]}: {result.why}", subsequent_indent=HANG,
                style="bold" if result.fits else "bold red")
    if result.refusal is None:
        for line in result.safe_length.lines() if result.safe_length else ():  # the one safe-length rule, explained
            if line != result.why:
                print_prose(console, line, subsequent_indent=HANG)
        console.print()
        print_table(console, _what_if_table(result))
    console.print()
    command = result.vllm_command()
    if command is not None:
        console.print("vllm serve command:", markup=False)
        print_command(console, command)
        return
    _what_would_fit(result, console)


def _what_would_fit(result: FitResult, console: Console) -> None:
    """No command for a plan that does not fit; what would instead, each planned, with its command; else what is
    missing, from the decision's own cause."""
    host = result.engram_host
    if host is not None and host.verdict == "short":
        print_prose(console, "No change dsv4ctl can plan here makes room: the node pins the Engram tables whatever the "
                    f"KV cache: a host with at least {format_gib(host.per_node_pinned)} available "
                    f"({format_gib(host.per_node_exact)} of data), or the tables in GPU memory "
                    "(--engram-config '{\"cpu_offload\": false}', their share added to every GPU's weights).",
                    subsequent_indent=HANG)
        return
    if not result.alternatives:
        need = format_gib(result.full_context_kv_memory_bytes)
        if any(g.refusal for g in result.gpus):
            why = ("free memory at start is below the --gpu-memory-utilization budget and no lower budget leaves room for "
                   "the model: free the memory other processes hold on that GPU, or use other GPUs")
        elif result.kv_cache_memory_source == "given" and result.refusal is None and result.margin_bytes > 0:
            # vLLM would start: it is the margin held back that leaves no length.
            why = (f"the margin holds back {format_gib(result.margin_bytes)} of the "
                   f"{format_gib(result.kv_cache_memory_bytes)} of KV memory given: a smaller --margin, or a larger "
                   f"--kv-cache-memory (the full context needs {need} per GPU, plus the margin)")
        elif result.kv_cache_memory_source == "override":
            why = f"a larger --num-gpu-blocks-override is needed (the full context needs {need} per GPU)"
        elif result.kv_cache_memory_source == "given":
            why = f"a larger --kv-cache-memory is needed (the full context needs {need} per GPU)"
        else:
            short = (f" (short by {format_gib(-result.kv_cache_memory_bytes)} per GPU)"
                     if result.kv_cache_memory_bytes < 0 else "")
            why = (f"more GPU memory is needed{short}: more or larger GPUs, or a smaller checkpoint (the full "
                   f"context needs {need} of KV memory per GPU)")
        print_prose(console, f"No change dsv4ctl can plan here makes room: {why}.", subsequent_indent=HANG)
        return
    print_prose(console, "What would fit, each planned on the same GPUs and figures:", subsequent_indent=HANG)
    for alt in result.alternatives:
        console.print()
        print_prose(console, f"{alt.change}: {alt.why}; auto-fit {_tokens(alt.autofit_max_model_len)}, "
                    f"recommended {_tokens(alt.recommended_max_model_len)}", subsequent_indent=HANG)
        print_command(console, alt.vllm_command)


def _layer_mix(g) -> str:
    """The layers by compression: DeepSeek-V4's ratios 4 and 128; V4.1's ratios 2 and 1 and the kv sources that own
    the compressed caches."""
    if g.v41 is None:
        return f"{g.num_csa_layers}×ratio 4, {g.num_hca_layers}×ratio 128, {g.num_swa_only_layers}×sliding only"
    ratios = g.compress_ratios
    sources = ", ".join(map(str, g.v41.kv_source_layer_ids))
    return (f"{ratios.count(2)}×ratio 2, {ratios.count(1)}×ratio 1, {ratios.count(0)}×sliding only; compressed caches "
            f"on kv sources {sources}")


def _host_lines(result: FitResult, console: Console) -> None:
    """DeepSeek-V4.1: the Engram tables' host memory, its arithmetic line by line."""
    plan = result.engram_host
    if plan is None:
        return
    console.print()
    console.print("Host memory (Engram tables):", markup=False)
    for line in plan.lines:
        print_prose(console, f"  {line}", subsequent_indent=HANG + "  ")


def _plan_lines(result: FitResult, console: Console) -> None:
    """What was planned: the model, the KV layout, the scheduling, the KV memory and its range."""
    g = result.geometry
    print_prose(
        console,
        f"{g.model}  {g.num_hidden_layers} layers ({_layer_mix(g)}), planned as {result.version.describe()}",
        subsequent_indent=HANG,
    )
    print_prose(console, f"checkpoint: {g.checkpoint}", subsequent_indent=HANG)  # which files (or preset) were read
    print_prose(
        console,
        f"KV cache: {result.layout.kv_cache_dtype} ({result.layout.attention_class}), block {result.block_size or DSV4_BLOCK_SIZE}, "
        f"{result.num_kv_layers} cache layers in {result.num_kv_cache_groups} groups, "
        f"{format_tokens(result.bytes_per_block)} bytes per block",
        subsequent_indent=HANG,
    )
    sched = (
        f"max_num_batched_tokens {format_tokens(result.max_num_batched_tokens)}"
        f" ({result.max_num_batched_tokens_source}), async scheduling {'on' if result.async_scheduling else 'off'}"
        f" → {format_tokens(result.max_in_flight_tokens)} tokens in flight"
    )
    print_prose(console, sched, subsequent_indent=HANG)
    source = {"given": "given", "predicted": "predicted from the GPUs", "log": "from the startup log",
              "calibrated": "calibrated: measured by an earlier start",
              "startup_plan": "measured: vLLM's startup plans of an earlier start",
              "override": "--num-gpu-blocks-override"}[result.kv_cache_memory_source]
    if result.kv_cache_memory_bytes > 0:
        blocks = f"{format_tokens(result.num_blocks)} block{'s' if result.num_blocks != 1 else ''}"
        memory = f"{format_gib(result.kv_cache_memory_bytes)} ({source}) = {blocks}"
    else:  # no negative memory: what is missing
        what = ("the weights, the Engram tables and the overhead" if any(g.engram_bytes for g in result.gpus)
                else "the weights and the overhead")
        memory = (f"none ({source}): {what} exceed the budget by "
                  f"{format_gib(-result.kv_cache_memory_bytes)}")
    print_prose(console, f"KV memory per GPU: {memory}", subsequent_indent=HANG)
    sizing = result.sizing_json()
    if result.has_sizing_modes:
        mode = ("measured after CUDA-graph capture and warm-up" if sizing["mode"] == "measured"
                else "estimated from the profile run")
        print_prose(console, f"KV sizing: {mode}, --gpu-memory-utilization {sizing['gpu_memory_utilization']:g}"
                    f"{'' if sizing['gpu_memory_utilization_given'] else ' (default)'}; budget basis: "
                    f"{sizing['budget_basis']}", subsequent_indent=HANG)
    kv = result.available_kv
    if kv is not None and kv.width > 0 and kv.high > 0:
        low, high = result.autofit_range or (0, 0)
        span = "" if not result.autofit_range else (
            f", auto-fit {_tokens(low)}–{_tokens(high)}" if low != high else f", auto-fit {_tokens(low)}")
        terms = "; ".join(f"{t.name} {format_gib(t.value)} ({t.basis})" for t in kv.terms)
        print_prose(
            console,
            f"  range {format_gib(max(kv.low, 0))}–{format_gib(kv.high)} ({kv.basis}{span}): {terms}",
            subsequent_indent=HANG + "  ",
        )


def _log_line(result: FitResult, console: Console) -> None:
    log = result.log
    parts: list[str] = []
    if log.weights_bytes is not None:
        parts.append(f"weights {format_gib(log.weights_bytes)}")
    if log.graph_bytes is not None:
        parts.append(f"CUDA graphs {format_gib(log.graph_bytes)}")
    if log.autofit_to is not None:
        parts.append(f"logged auto-fit {format_tokens(log.autofit_to)}")
    if log.predicted_range is not None:
        low, high = log.predicted_range
        parts.append(f"mirror for the logged memory ±0.005 GiB: {format_tokens(low)}-{format_tokens(high)}")
    print_prose(console, f"log {log.path}: " + ", ".join(parts), subsequent_indent=HANG)


def _answer_table(result: FitResult) -> Table:
    """Label, figure, note: the figures line up in one column; the labels and notes wrap. A plan vLLM refuses shows
    no auto-fit or recommended figure: what it refuses is the answer."""
    answer = Table(box=box.SIMPLE_HEAD, show_header=False, pad_edge=False, show_edge=False)
    answer.add_column(justify="left")
    answer.add_column(justify="right", no_wrap=True)
    answer.add_column(justify="left")
    answer.add_row("model maximum", format_tokens(result.model_max_model_len), "")
    asked = result.requested_max_model_len
    if result.refusal is not None:
        if asked is not None:
            answer.add_row("--max-model-len asked", format_tokens(asked), "[bold red](vLLM refuses it)[/]")
        else:
            answer.add_row("--max-model-len auto", "refused", "")
        answer.add_row("KV memory for the full context", format_gib(result.full_context_kv_memory_bytes), "")
        return answer
    logged = result.log.autofit_to if result.log is not None and result.kv_cache_memory_source == "log" else None
    if logged is not None:
        mirrored = (f"; mirror for its rounded memory {format_tokens(result.autofit_max_model_len)}"
                    if result.autofit_max_model_len != logged else "")
        answer.add_row("--max-model-len auto picked", format_tokens(logged), f"(the log{mirrored})")
    else:
        shrink = f"(shrinks by {format_tokens(result.shrink_tokens)})" if result.will_shrink else "(full context)"
        answer.add_row("--max-model-len auto picks", _tokens(result.autofit_max_model_len), shrink)
    if asked is not None:
        spare = result.requested_spare_bytes
        answer.add_row("--max-model-len asked", format_tokens(asked),
                       f"(fits: {format_gib(spare)} to spare)" if spare is not None else "(fits)")
    label = "longest safe --max-model-len" if asked is not None else "recommended --max-model-len"
    answer.add_row(label, f"[bold]{_tokens(result.recommended_max_model_len)}[/]",
                   f"(margin {format_gib(result.margin_bytes)})")
    answer.add_row("KV memory for the full context", format_gib(result.full_context_kv_memory_bytes), "")
    return answer


# GPUs whose figures read the same collapse into one row (`0-7  8 × NVIDIA H200`). GPUs that differ
# in any figure keep rows of their own rather than a min–max range: the operator reads which GPU is
# short (the one with less free memory is the one to clear) and every figure stays the one vLLM will
# compute on that GPU. Grouped by the figures as printed, so two rows never read the same.
_GPU_FIGURES = ("CUDA total", "free", "requested", "weights", "overhead", "KV")


def _gpu_table(result: FitResult, narrow: bool = False) -> Table:
    """`narrow`: the two-word headers on two lines, for 80 columns with more than one row."""
    pp = any(gpu.pp_rank for gpu in result.gpus)  # the PP column only where there is more than one stage
    engram = any(gpu.engram_bytes for gpu in result.gpus)  # DeepSeek-V4.1's tables in GPU memory (cpu_offload false)

    def row(gpu) -> tuple[str, ...]:
        figures = (gpu.cuda_total_bytes, gpu.free_bytes, gpu.requested_bytes, gpu.weights_bytes,
                   *((gpu.engram_bytes,) if engram else ()), gpu.overhead_bytes)
        # No negative memory: a GPU whose weights and overhead exceed its budget has none for the KV cache.
        kv = f"{gib(gpu.available_kv_bytes):.2f}" if gpu.available_kv_bytes > 0 else "none"
        return (gpu.node or "", gpu.name, *((str(gpu.pp_rank),) if pp else ()), *(f"{gib(n):.2f}" for n in figures), kv)

    table = Table(title="Memory per GPU, GiB", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  show_edge=False, padding=(0, 1), collapse_padding=True)
    table.add_column("cuda", justify="right", no_wrap=True)
    table.add_column("GPU")  # the one column that wraps, at spaces
    headers = _GPU_FIGURES[:4] + ("engram",) * engram + _GPU_FIGURES[4:]
    for header in ("PP",) * pp + headers:
        table.add_column(header.replace(" ", "\n") if narrow else header, justify="right", no_wrap=True)
    for group in group_same(result.gpus, row):
        node, name, *figures = row(group[0])
        where = index_ranges([gpu.cuda_index for gpu in group])
        table.add_row(f"{node}:{where}" if node else where, counted(name, len(group)), *figures)
    return table


def _what_if_table(result: FitResult) -> Table:
    table = Table(
        caption_justify="left",
        title=f"What if (KV memory {format_gib(result.kv_cache_memory_bytes) if result.kv_cache_memory_bytes > 0 else 'none'}, "
              f"async {'on' if result.async_scheduling else 'off'})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
    )
    table.add_column("batched tokens", justify="right", no_wrap=True)
    table.add_column("in flight", justify="right", no_wrap=True)
    table.add_column("auto-fit", justify="right")  # `1,048,576 (full)` may wrap before its note
    table.add_column("full-context KV", justify="right", no_wrap=True)
    for row in result.what_if:
        mark = " ←" if row.current else ""
        ctx = _tokens(row.autofit_max_model_len)
        if row.autofit_max_model_len >= result.model_max_model_len:
            ctx += " (full)"
        elif 0 < row.autofit_max_model_len < THINK_MAX_CONTEXT:
            ctx += " *"
            table.caption = (f"* below the {format_tokens(THINK_MAX_CONTEXT)} tokens of context DeepSeek-V4's \"Think "
                             "Max\" reasoning mode needs")
        table.add_row(
            format_tokens(row.max_num_batched_tokens) + mark,
            format_tokens(row.max_in_flight_tokens),
            ctx,
            format_gib(row.full_context_kv_memory_bytes),
        )
    return table
