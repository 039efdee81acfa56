"""The dsv4ctl command line: thin Typer commands that parse, call the core, and render.

Nothing else lives here. The core packages (`logs`, `planning`, `gpu`, `fixes`, `serve`) return
dataclasses or raise `Dsv4ctlError`; this module turns results into output and exit codes, and every
error into one line plus a hint (a traceback only with DSV4CTL_DEBUG=1).

Keep imports at module level light: `dsv4ctl --help`, `diagnose` and `fit-length` must start fast on
a machine without vLLM, torch or a GPU. Import heavy modules inside the command that needs them.

Kept whole: every command's options and exit codes in one file, so `--help` and the error funnel read from
one place; each command body only parses, calls the core and renders.
"""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up, and strings
# would each be compiled by typing.get_type_hints first (about 4 ms of every run, `--help` included).
import contextlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Iterator, Optional

import typer
from typer.core import TyperGroup

from dsv4ctl import __version__
from dsv4ctl.errors import Dsv4ctlError, ExitCode, exit_code_table
from dsv4ctl.render import error_line

DEBUG_ENV = "DSV4CTL_DEBUG"


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


class _ErrorFunnel(TyperGroup):
    """Turns every exception escaping a command into one line, a hint and an exit code."""

    def invoke(self, ctx: Any) -> Any:
        from dsv4ctl.render import reset_stdout

        reset_stdout()
        args = [*getattr(ctx, "_protected_args", []), *ctx.args]
        json_mode = "--json" in (args[: args.index("--")] if "--" in args else args)
        try:
            return super().invoke(ctx)
        except Dsv4ctlError as exc:
            if _debug():
                traceback.print_exc()
            return self._fail(json_mode, exc.message, exc.hint, exc.exit_code)
        except KeyboardInterrupt:
            return self._fail(json_mode, "interrupted", None, ExitCode.INTERRUPTED)
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the funnel's whole point
            if _exc_is_click(exc):
                if json_mode:
                    from dsv4ctl.render import emit_json_error

                    emit_json_error(exc.format_message(), None, getattr(exc, "exit_code", ExitCode.USAGE))
                raise
            if _debug():
                traceback.print_exc()
                hint = None
            else:
                hint = f"this is a bug in dsv4ctl; rerun with {DEBUG_ENV}=1 for the traceback and report it"
            return self._fail(json_mode, f"internal error: {type(exc).__name__}: {exc}", hint, ExitCode.ERROR)

    @staticmethod
    def _fail(json_mode: bool, message: str, hint: str | None, code: int) -> Any:
        """One line plus a hint on stderr; with --json also the error document on stdout."""
        error_line(message, hint)
        if json_mode:
            from dsv4ctl.render import emit_json_error

            emit_json_error(message, hint, int(code))
        raise typer.Exit(int(code))


def _exc_is_click(exc: BaseException) -> bool:
    # Typer vendors Click; its usage errors must keep Click's own handling (exit 2).
    return any(cls.__name__ in ("ClickException", "UsageError", "BadParameter") for cls in type(exc).__mro__)


HELP = f"""Launch and diagnose vLLM servers that run DeepSeek-V4.

\b
Exit codes:
{exit_code_table()}

Set {DEBUG_ENV}=1 for tracebacks, NO_COLOR=1 for plain output.
"""

app = typer.Typer(
    cls=_ErrorFunnel,
    help=HELP,
    no_args_is_help=True,
    add_completion=True,  # Typer's own --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"dsv4ctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Launch and diagnose vLLM servers that run DeepSeek-V4."""


def _complete_example(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion for --example: the built-in example logs, with their descriptions."""
    from dsv4ctl.logs.examples import list_examples

    return [(e.name, e.description) for e in list_examples() if e.name.startswith(incomplete)]


def _complete_model(incomplete: str) -> list[str]:
    """Shell completion for MODEL: the built-in DeepSeek-V4 presets (a path is typed as a path)."""
    from dsv4ctl.planning import builtin_model_ids

    return [m for m in builtin_model_ids() if m.lower().startswith(incomplete.lower())]


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Returns the exit status instead of calling sys.exit itself."""
    try:
        app(args=argv, prog_name="dsv4ctl", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else int(ExitCode.ERROR))
    return int(ExitCode.OK)


# =============================================================================================
# diagnose
# =============================================================================================


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP stop a long diagnose like Ctrl-C does: its scanning processes end, then
    dsv4ctl exits 128 + the signal's number (143, 129) with one error line (a JSON document with --json)."""
    import signal
    import threading

    from dsv4ctl.errors import STOP_SIGNALS, Stopped, raise_stopped

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, raise_stopped) for sig in STOP_SIGNALS}
    try:
        yield
    except Stopped as exc:
        from dsv4ctl.logs import parallel

        parallel.end_scanners()
        name = signal.Signals(exc.signum).name
        raise Dsv4ctlError(f"stopped by {name}", exit_code=128 + exc.signum) from None  # type: ignore[arg-type]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@app.command("diagnose")
def diagnose_command(
    paths: list[str] | None = typer.Argument(
        None, metavar="PATHS", help="Log files (several for per-process logs), - for stdin; .gz is read as is."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON (schema_version 1) on stdout."),
    example: str | None = typer.Option(
        None, "--example", metavar="NAME", help="Diagnose an example log shipped with dsv4ctl (see --list-examples).",
        autocompletion=_complete_example,
    ),
    list_examples: bool = typer.Option(False, "--list-examples", help="List the example logs and exit."),
    svg: Path | None = typer.Option(None, "--svg", metavar="FILE", help="A deployment (a collect bundle, or several launches' logs): also save the report as SVG."),
) -> None:
    """Diagnose a vLLM startup log: verdict, root cause with evidence, timeline and the next command.

    A `dsv4ctl collect` bundle, or logs of several launches (the nodes of a group), are read as one
    deployment: its ranks side by side, the first originating error across them, the silent ranks.

    Exit status: 0 no failure, 3 failed with a known cause, 4 failed with an unknown cause,
    5 inconclusive (the log ends before ready), 8 stuck (the start's last evidence is a wait, nothing
    failed after it), 1 the log could not be read, 143/129 stopped by SIGTERM/SIGHUP.
    """
    from dsv4ctl.errors import UsageError
    from dsv4ctl.advice import diagnose
    from dsv4ctl.render import emit_json, out_console
    from dsv4ctl.render.diagnose import render_diagnosis, render_examples

    if list_examples:
        from dsv4ctl.logs.examples import list_examples as all_examples

        examples = all_examples()
        if json_out:
            emit_json({"examples": [{"name": e.name, "description": e.description} for e in examples]})
        else:
            render_examples(examples, out_console())
        return
    if example and paths:
        raise UsageError("give log paths or --example, not both")
    if example:
        from dsv4ctl.logs.examples import example_path

        sources: list[str] = [str(example_path(example))]
    elif paths:
        sources = list(paths)
    else:
        raise UsageError(
            "no log given",
            hint="dsv4ctl diagnose vllm.log (or - for stdin); try: dsv4ctl diagnose --example stale-max-model-len",
        )
    from dsv4ctl.render.progress import input_bytes, read_progress
    from dsv4ctl.group import is_group

    if is_group(sources):
        _diagnose_group(sources, json_out, svg)
    if svg is not None:
        raise UsageError("--svg goes with a deployment: a collect bundle or several launches' logs")
    # A bar of bytes read on stderr for inputs over 50 MB, on a terminal only.
    with _stop_on_signals(), read_progress(input_bytes(sources), "reading the log") as progress:
        result = diagnose(sources, progress=progress)
    if json_out:
        emit_json(result.to_json())
    else:
        render_diagnosis(result, out_console())
    raise typer.Exit(int(result.exit_code))



# =============================================================================================
# gpus / fit-length
# =============================================================================================


@app.command("fit-length")
def fit_length_command(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="deepseek-ai/DeepSeek-V4-Flash, deepseek-ai/DeepSeek-V4-Pro, a checkpoint dir or config.json.", autocompletion=_complete_model),
    kv_cache_memory: str | None = typer.Option(None, "--kv-cache-memory", "--kv-cache-memory-bytes", metavar="SIZE", help="KV memory per GPU, as vLLM's --kv-cache-memory-bytes (9.81GiB, 10G = 10 GiB, 10533407294 bytes; a bare number below 1 MiB is refused as a forgotten unit). Default: predict."),
    gpus: list[str] | None = typer.Option(None, "--gpus", metavar="SNAPSHOT", help="GPU snapshot JSON (`dsv4ctl gpus --save`); repeat for several nodes (the tightest GPU binds). Default: ask NVML when a prediction needs GPUs."),
    from_log: str | None = typer.Option(None, "--from-log", metavar="LOG", help="Calibrate from a previous vLLM startup log (Available KV cache memory, Model loading, graphs)."),
    max_model_len: str = typer.Option("auto", "--max-model-len", help="Check this explicit length too (vLLM syntax: 1048576, 1M, 512k, auto)."),
    gpu_memory_utilization: float = typer.Option(0.92, "--gpu-memory-utilization", help="As vLLM (0.32 default 0.92)."),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto, fp8, fp8_e4m3, fp8_ds_mla, bfloat16 (bfloat16 needs FLASHINFER_MLA_SPARSE_DSV4)."),
    attention_backend: str | None = typer.Option(None, "--attention-backend", help="FLASHMLA_SPARSE_DSV4 (default off SM12x) or FLASHINFER_MLA_SPARSE_DSV4."),
    block_size: int | None = typer.Option(None, "--block-size", help="DeepSeek-V4 supports 256 only (vLLM's choice)."),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens", help="Default: vLLM's rule for the GPU (8192 on H100/H200)."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs"),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp"),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp"),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", "-dp"),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel", "-ep"),
    async_scheduling: bool | None = typer.Option(None, "--async-scheduling/--no-async-scheduling", help="Default: on, as vLLM."),
    speculative_config: str | None = typer.Option(None, "--speculative-config", help='MTP drafting, as vLLM: \'{"method": "mtp", "num_speculative_tokens": 1}\'.'),
    margin: str = typer.Option("5%", "--margin", help="Headroom below the auto-fit ceiling: share of KV memory (floor 512 MiB) or a size."),
    weights_memory: str | None = typer.Option(None, "--weights-memory", metavar="SIZE", help="Weights per GPU (one GPU's share), when no checkpoint dir is given."),
    checkpoint_size: str | None = typer.Option(None, "--checkpoint-size", metavar="SIZE", help="The whole checkpoint's size (e.g. 160GB), split per GPU as vLLM loads it."),
    overhead: str | None = typer.Option(None, "--overhead", metavar="SIZE", help="Non-KV, non-weight memory per GPU (default estimate 6 GiB)."),
    vllm_version: str | None = typer.Option(None, "--vllm-version", metavar="X.Y.Z", help="Plan as this vLLM release does (0.27.1-0.33.0). Default: the installed vLLM, else --from-log's, else the newest known."),
    no_calibration: bool = typer.Option(False, "--no-calibration", help="Ignore the KV memory earlier serve starts measured on this host and configuration."),
    json_output: bool = typer.Option(False, "--json", help="Print the answer as JSON."),
) -> None:
    """Predict vLLM's --max-model-len auto-fit for DeepSeek-V4 and recommend a safe explicit length.

    Exit 0 with an answer, 6 when vLLM would refuse these settings, 2 for bad flags, 1 for unreadable inputs.
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
        kv_cache_memory_bytes=parse_memory_flag(kv_cache_memory, what="--kv-cache-memory") if kv_cache_memory else None,
        margin=parse_margin(margin),
        weights_bytes_per_rank=parse_memory_flag(weights_memory, what="--weights-memory") if weights_memory else None,
        checkpoint_bytes=parse_memory_flag(checkpoint_size, what="--checkpoint-size") if checkpoint_size else None,
        non_kv_overhead_bytes=parse_memory_flag(overhead, what="--overhead") if overhead else None,
        gpus=(gpus[0] if len(gpus) == 1 else tuple(gpus)) if gpus else None,
        from_log=from_log,
        vllm_version=vllm_version,
        no_calibration=no_calibration,
        inherit_from_log=from_log is not None,
        explicit=_given(ctx, num_speculative_tokens="speculative_config"),
    )
    if from_log is not None:
        from dsv4ctl.advice import read_log_facts

        log_facts = read_log_facts(from_log)
    else:
        log_facts = None
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
                                ("--overhead", overhead, request.non_kv_overhead_bytes)):
            if raw is not None and size is not None:
                print_note(talk, "Note:", f"{flag} {raw} read as {describe_bytes(size)}")
        for line in result.notes:
            print_note(talk, "Note:", line)
        for line in result.warnings:
            print_note(talk, "Warning:", line)
        render_fit(result, out_console())
    if not result.fits:
        raise typer.Exit(int(ExitCode.DOES_NOT_FIT))


def _given(ctx: typer.Context, **renamed: str) -> frozenset[str]:
    """The options the operator typed (not defaults), by name; `renamed` maps a core field to its option."""
    # By the source's name: Typer may carry its own copy of click's ParameterSource enum.
    given = {name for name in ctx.params
             if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")}
    return frozenset(given | {field for field, option in renamed.items() if option in given})


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


@app.command("gpus")
def gpus_command(
    json_output: bool = typer.Option(
        False, "--json", help="Print the snapshot as JSON: the file format that `fit-length --gpus` reads."
    ),
    save: str | None = typer.Option(
        None, "--save", metavar="PATH", help="Also write the snapshot JSON to PATH (for `dsv4ctl fit-length MODEL --gpus PATH` on another box)."
    ),
    snapshot_path: str | None = typer.Option(
        None, "--snapshot", metavar="PATH", help="Show a saved snapshot instead of asking NVML."
    ),
) -> None:
    """List the GPUs vLLM would see here: memory (NVML and CUDA totals), SM version, processes.

    Honours CUDA_VISIBLE_DEVICES (indices, UUIDs, MIG) as CUDA does. Needs the NVIDIA driver; on a box
    without one, read a snapshot taken elsewhere with --snapshot.
    """
    from dsv4ctl.gpu import load_snapshot, read_snapshot, save_snapshot
    from dsv4ctl.render import emit_json, err_console, out_console, warning_line
    from dsv4ctl.render.gpus import render_gpus

    snapshot = load_snapshot(snapshot_path) if snapshot_path else read_snapshot()
    if save:
        save_snapshot(snapshot, save)
        err_console().print(f"Saved GPU snapshot to {save}", markup=False)
    if json_output:
        emit_json(snapshot.to_json())
        return
    for note in snapshot.notes:
        warning_line(note)
    render_gpus(snapshot, out_console())


# =============================================================================================
# doctor / probe
# =============================================================================================


@app.command("doctor")
def doctor_command(
    json_output: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    python: str | None = typer.Option(
        None, "--python", metavar="PATH",
        help="The Python that runs vLLM (e.g. /opt/vllm/bin/python). Default: the one running dsv4ctl.",
    ),
) -> None:
    """One screen for a bug report: versions, GPUs, DeepGEMM, each fix's status, environment (secrets redacted).

    Works without a GPU and without vLLM (it says what is missing). vLLM and torch are inspected in a
    child process of --python, never imported here.
    """
    from dsv4ctl.doctor import build_report
    from dsv4ctl.errors import InputError
    from dsv4ctl.render import emit_json, err_console, out_console

    # Importing vLLM in the child can take many seconds: show a spinner on stderr (a terminal only).
    with err_console().status(f"inspecting vLLM and torch with {python or sys.executable} …", spinner="dots"):
        report = build_report(python=python)
    if json_output:
        emit_json(report.to_json())
    else:
        from dsv4ctl.render.doctor import render_doctor

        render_doctor(report, out_console())
    if report.target_error:  # the rest of the report is still shown, but the Python asked about cannot run it
        raise InputError(
            f"--python {report.target_python}: {report.target_error}",
            hint="give the Python that runs vLLM, e.g. --python /opt/vllm/bin/python (its `python -c 'import vllm'` must work)",
        )


probe_app = typer.Typer(
    help="Probes that answer questions about this node without starting vLLM.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(probe_app, name="probe")


@probe_app.command("deepgemm")
def probe_deepgemm_command(
    mode: str | None = typer.Option(
        None, "--mode", metavar="static|kernel|python",
        help="Default: the strongest available of kernel, python, static.",
    ),
    include: str | None = typer.Option(
        None, "--include", metavar="DIR",
        help="Probe this DeepGEMM include directory (holds deep_gemm/) instead of the one vLLM would use.",
    ),
    cutlass_include: list[str] = typer.Option(
        [], "--cutlass-include", metavar="DIR",
        help="Extra include directory holding cute/ and cutlass/ (kernel mode; repeatable).",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Is this node's DeepGEMM affected by the SM90 scheduler-metadata out-of-bounds read?

    kernel: compile and run DeepGEMM's metadata kernel on an SM90 GPU (needs nvcc); python: the
    upstream repro through vllm.utils.deep_gemm (needs vLLM + GPU); static: read the header.
    Exit 7 when affected, 0 when not, 1 when it cannot tell.
    """
    from dsv4ctl.probe.deepgemm import run_probe
    from dsv4ctl.probe.text import check_arguments, exit_code
    from dsv4ctl.render import emit_json, out_console

    check_arguments(mode, include)
    result = run_probe(mode, include, [Path(p).expanduser() for p in cutlass_include])
    if json_output:
        emit_json(result.to_json())
    else:
        from dsv4ctl.render.probe import render_probe

        render_probe(result, out_console())
    code = exit_code(result)
    if code == ExitCode.ERROR and not json_output:
        error_line(f"cannot tell whether DeepGEMM is affected: {result.reason}")
    if code != ExitCode.OK:
        raise typer.Exit(int(code))


# =============================================================================================
# check / watch
# =============================================================================================

_WATCH_EXITS = (
    f"Exit {int(ExitCode.OK)} healthy, {int(ExitCode.DEGRADED)} degraded, "
    f"{int(ExitCode.WEDGED)} wedged, {int(ExitCode.DEAD)} dead: the worst server's; {int(ExitCode.USAGE)} bad flags."
)
_CHECK_EXITS = _WATCH_EXITS.replace(" degraded,", f" degraded ({int(ExitCode.OK)} with --liveness),")


def _check_options(window: float, timeout: float, probe_timeout: float | None, kv_cliff: float) -> None:
    from dsv4ctl.errors import UsageError

    for flag, value in (("--window/--interval", window), ("--timeout", timeout), ("--probe-timeout", probe_timeout)):
        if value is not None and not value > 0:
            raise UsageError(f"{flag} {value:g}: must be more than 0 seconds")
    if not 0 < kv_cliff <= 1:
        raise UsageError(f"--kv-cliff {kv_cliff:g}: a fraction of the KV cache, more than 0 and at most 1 (0.95 = 95%)")


@app.command("check")
def check_command(
    urls: list[str] = typer.Argument(..., metavar="URL", help="vLLM API servers (http://HOST:PORT): one, or every API server of a data-parallel group / of several nodes."),
    window: float = typer.Option(3.0, "--window", metavar="SECONDS", help="Time between the two /metrics scrapes: an engine with work pending must move within it."),
    timeout: float = typer.Option(1.0, "--timeout", metavar="SECONDS", help="For /health, /v1/models and the first /metrics together, and for the second /metrics: check ends within window + 2 x timeout."),
    probe_request: bool = typer.Option(False, "--probe-request", help="Also send one one-token /v1/completions request: tells a stopped idle engine from an idle one."),
    probe_timeout: float | None = typer.Option(None, "--probe-timeout", metavar="SECONDS", help="How long the probe request may take [default: the window]."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="VLLM_API_KEY", metavar="KEY", help="vLLM's --api-key, for /v1/models and the probe [default: $VLLM_API_KEY]."),
    kv_cliff: float = typer.Option(0.95, "--kv-cliff", metavar="FRACTION", help="Degraded at or above this KV cache usage (vllm:kv_cache_usage_perc)."),
    liveness: bool = typer.Option(False, "--liveness", help="Exit 0 when degraded: only wedged and dead fail (a Kubernetes livenessProbe)."),
    json_output: bool = typer.Option(False, "--json", help="Print the verdicts, evidence and numbers as JSON."),
) -> None:
    """Is a running vLLM server alive, wedged, dead or degraded? One look: /health, /v1/models, /metrics twice.

    wedged: work pending and no engine counter moved in the window (or the probe got no answer), while
    /health still says 200. dead: no answer, or /health not 200. degraded: preemptions, KV cache at the
    cliff, a growing queue, 5xx answers.
    """
    from dsv4ctl.check import DEGRADED, Limits
    from dsv4ctl.check.http import check_group
    from dsv4ctl.render import emit_json, out_console

    _check_options(window, timeout, probe_timeout, kv_cliff)
    group = check_group(urls, window_s=window, timeout_s=timeout, probe=probe_request, probe_timeout_s=probe_timeout,
                        api_key=api_key, limits=Limits(kv_cliff=kv_cliff))
    if json_output:
        emit_json(group.to_json())
    else:
        from dsv4ctl.render.check import render_check

        render_check(group, out_console())
    if liveness and group.verdict == DEGRADED:
        return
    raise typer.Exit(int(group.exit_code))


check_command.__doc__ = f"{check_command.__doc__}\n    {_CHECK_EXITS}\n"


@app.command("watch")
def watch_command(
    urls: list[str] = typer.Argument(..., metavar="URL", help="vLLM API servers (http://HOST:PORT)."),
    interval: float = typer.Option(2.0, "--interval", metavar="SECONDS", help="Each look's window (the time between two /metrics scrapes)."),
    timeout: float = typer.Option(1.0, "--timeout", metavar="SECONDS", help="As check's."),
    probe_request: bool = typer.Option(False, "--probe-request", help="One one-token request per look, as check's."),
    probe_timeout: float | None = typer.Option(None, "--probe-timeout", metavar="SECONDS", help="[default: the interval]"),
    api_key: str | None = typer.Option(None, "--api-key", envvar="VLLM_API_KEY", metavar="KEY", help="vLLM's --api-key [default: $VLLM_API_KEY]."),
    kv_cliff: float = typer.Option(0.95, "--kv-cliff", metavar="FRACTION", help="As check's."),
    log: str | None = typer.Option(None, "--log", metavar="FILE", help="The server's log (e.g. dsv4ctl serve's): on wedged or dead, diagnose's reading of its tail."),
    count: int | None = typer.Option(None, "--count", metavar="N", help="Stop after N looks and exit with the last one's code [default: until Ctrl-C]."),
    json_output: bool = typer.Option(False, "--json", help="One JSON document per look, one per line (JSON Lines)."),
) -> None:
    """The same signals live: throughput, running/waiting, KV usage, preemptions, time since the last engine step.

    On a terminal the table refreshes in place; piped, one line per server and look. A change of verdict is
    printed as an event with its time. Ctrl-C stops it (exit 130).
    """  # the exit codes are appended below, from ExitCode
    import json
    import time

    from dsv4ctl.check import DEAD, WEDGED, Limits
    from dsv4ctl.check.http import check_group, normalize_url
    from dsv4ctl.check.watch import WatchState
    from dsv4ctl.render import STDOUT, err_console, out_console
    from dsv4ctl.render import check as view

    _check_options(interval, timeout, probe_timeout, kv_cliff)
    if count is not None and count < 1:
        from dsv4ctl.errors import UsageError

        raise UsageError(f"--count {count}: at least 1")
    if log is not None and not os.path.isfile(log):
        from dsv4ctl.errors import InputError

        raise InputError(f"--log {log}: no such file", hint="give the server's log file (dsv4ctl serve prints its path)")
    bases = [normalize_url(u) for u in urls]
    console = out_console()
    live_view = console.is_terminal and not json_output
    state = WatchState(started_at=time.time())
    looks, last = 0, [time.monotonic()]

    def look() -> list[Any]:
        if looks:  # a look at a dead server returns at once: one look per interval all the same
            time.sleep(max(0.0, interval - (time.monotonic() - last[0])))
        last[0] = time.monotonic()
        group = check_group(bases, window_s=interval, timeout_s=timeout, probe=probe_request,
                            probe_timeout_s=probe_timeout, api_key=api_key, limits=Limits(kv_cliff=kv_cliff))
        return state.update(group, group.ended_at)

    def tell(changes: list[Any], where: Any) -> None:
        for change in changes:
            view.render_event(change, where)
            if log is not None and change.after in (WEDGED, DEAD):
                from dsv4ctl.check.logtail import diagnose_tail
                from dsv4ctl.render.diagnose import render_diagnosis

                try:
                    reading = diagnose_tail(str(log))
                except Dsv4ctlError as exc:  # the log went away: the watch goes on
                    error_line(f"--log {log}: {exc.message}")
                    continue
                where.print(f"diagnose's reading of the tail of {log}:", markup=False)
                render_diagnosis(reading, where)

    try:
        if live_view:
            from rich.live import Live

            with Live(view.watch_table(state, time.time(), interval), console=console, auto_refresh=False,
                      transient=False) as live:
                while count is None or looks < count:
                    changes = look()
                    looks += 1
                    tell(changes, live.console)
                    live.update(view.watch_table(state, time.time(), interval), refresh=True)
        else:
            while count is None or looks < count:
                changes = look()
                looks += 1
                if json_output:
                    STDOUT.write(json.dumps({"schema_version": 1, **state.latest.to_json(),
                                             "events": [c.to_json() for c in changes]}) + "\n")
                else:
                    tell(changes, console)
                    for line in view.watch_lines(state, time.time()):
                        STDOUT.write(line + "\n")
                STDOUT.flush()
    except KeyboardInterrupt:
        err_console().print(f"watch stopped after {looks} look(s); {len(state.events)} verdict change(s)", markup=False)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    raise typer.Exit(int(state.latest.exit_code) if state.latest else 0)


watch_command.__doc__ = (
    f"{watch_command.__doc__}\n    With --count, the last look's code: {_WATCH_EXITS[5:]} "
    f"Ctrl-C: {int(ExitCode.INTERRUPTED)}.\n"
)


# =============================================================================================
# serve
# =============================================================================================


SERVE_HELP = """Launch vLLM's OpenAI-compatible server in this process, the way `vllm serve` does.

\b
dsv4ctl serve MODEL [dsv4ctl options] [vLLM flags...]

Every flag not listed below is vLLM's and is parsed and validated by vLLM's own `serve` parser
(`-h` or `--vllm-help all` shows it). dsv4ctl adds: its runtime fixes in every vLLM process
(--fixes), a preflight for DeepSeek-V4 (the length policy: with the length auto/-1/not given, vLLM
auto-fits it, which is safe when the stale-length fix runs or the release lacks that crash; serve
passes the planned explicit --max-model-len only with --pin-length, or on 0.29-0.30 with the fix off;
--keep-auto leaves auto whatever the plan says) that refuses settings vLLM would refuse, live
progress, a complete log file, and a diagnosis when startup fails (exit code = `dsv4ctl diagnose`'s).
SIGINT/SIGTERM shut vLLM down cleanly; no vLLM process outlives dsv4ctl.
"""


@app.command(
    "serve",
    help=SERVE_HELP,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": ["--help"]},
    options_metavar="MODEL [OPTIONS] [VLLM FLAGS]...",
)
def serve_command(
    ctx: typer.Context,
    log_file: Optional[Path] = typer.Option(
        None, "--log-file", metavar="PATH", help="Where to keep everything vLLM prints "
        "[default: $DSV4CTL_LOG_DIR or ~/.local/state/dsv4ctl/logs/serve-<UTC time>-<pid>.log]."
    ),
    keep_auto: bool = typer.Option(
        False, "--keep-auto", help="Leave --max-model-len auto/-1 to vLLM's own auto-fit instead of passing the planned length."
    ),
    retry: bool = typer.Option(
        False, "--retry", help="If the diagnosis says a shorter explicit --max-model-len would have started, relaunch once with it."
    ),
    fixes: Optional[str] = typer.Option(
        None, "--fixes", metavar="all|none|NAME,...", help="Runtime fixes to enable in every vLLM process [default: $DSV4CTL_FIXES or all]."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the preflight decision and the exact vLLM command line; start nothing."),
    pin_length: bool = typer.Option(
        False, "--pin-length", help="Pass the planned explicit --max-model-len even where auto is safe (stale fix active, or vLLM without the crash)."
    ),
    vllm_version: Optional[str] = typer.Option(
        None, "--vllm-version", metavar="X.Y.Z", help="With --dry-run: plan as this vLLM release [default: the installed vLLM]."
    ),
    no_calibration: bool = typer.Option(
        False, "--no-calibration", help="Plan without the KV memory earlier starts measured on this host and configuration."
    ),
    json_output: bool = typer.Option(False, "--json", help="With --dry-run: the decision as JSON on stdout."),
    watchdog: Optional[float] = typer.Option(
        None, "--watchdog", metavar="SECONDS", help="Check this server as `dsv4ctl check` does; once it is wedged this long, "
        f"write the evidence (and py-spy stacks, where installed) to the log, shut vLLM down and exit {int(ExitCode.WEDGED)} [default: off]."
    ),
    vllm_help: Optional[str] = typer.Option(
        None, "--vllm-help", metavar="GROUP", help="Show vLLM's serve help for GROUP (`all`, a config group such as ModelConfig, or a search word)."
    ),
) -> None:
    from dsv4ctl.render import emit_json
    from dsv4ctl.render.serve import ServeConsole, render_diagnosis
    from dsv4ctl.serve.command import ATTEMPT_ENV, ServeOptions, default_log_file, plan_only, run
    from dsv4ctl.serve.preflight import REFUSE

    flags = [str(a) for a in ctx.args]
    from dsv4ctl.units import check_vllm_memory_flags, describe_bytes

    memory_flags = check_vllm_memory_flags(flags)  # `--kv-cache-memory-bytes 9` (unit forgotten): exit 2
    if vllm_help is not None or "-h" in flags:
        from dsv4ctl.serve.vllm_entry import parse_serve_flags

        rest = [f for f in flags if f != "-h"]
        parse_serve_flags([*rest, f"--help={vllm_help}" if vllm_help else "--help"])  # prints vLLM's help, exits 0
        return
    if fixes is not None:
        from dsv4ctl.errors import UsageError
        from dsv4ctl.fixes import FIX_NAMES, parse_selection

        unknown = parse_selection(fixes).unknown
        if unknown:
            raise UsageError(
                f"--fixes: unknown fix name(s) {', '.join(unknown)}",
                hint="use all, none, or a comma list of: " + ", ".join(FIX_NAMES),
            )
    if json_output and not dry_run:
        from dsv4ctl.errors import UsageError

        raise UsageError("--json goes with --dry-run", hint="serve's live output is vLLM's own; use --dry-run --json for the decision")
    if vllm_version is not None and not dry_run:
        from dsv4ctl.errors import UsageError

        raise UsageError("--vllm-version goes with --dry-run", hint="a real start plans for the installed vLLM, the one that runs")
    if pin_length and keep_auto:
        from dsv4ctl.errors import UsageError

        raise UsageError("--pin-length and --keep-auto contradict each other", hint="pick one")
    options = ServeOptions(
        log_file=log_file, keep_auto=keep_auto, retry=retry, fixes=fixes, dry_run=dry_run, pin_length=pin_length,
        vllm_version=vllm_version, no_calibration=no_calibration, watchdog=watchdog,
    )
    if watchdog is not None and not watchdog > 0:
        from dsv4ctl.errors import UsageError

        raise UsageError(f"--watchdog {watchdog:g}: must be more than 0 seconds", hint="e.g. --watchdog 120")
    view = ServeConsole()
    for flag, size in memory_flags:  # stderr: how vLLM will read it (10G = 10 GiB, 10g = 10^9 bytes)
        view.say(f"{flag} read as {describe_bytes(size)}")
    if dry_run:
        decision = plan_only(flags, options)
        if json_output:
            emit_json({"serve_preflight": decision.to_json()})
        else:
            view.dry_run(decision)
        if decision.action == REFUSE and decision.refusal is not None:
            raise decision.refusal
        return
    path = log_file or default_log_file()
    view.say(f"log file: {path}")
    result = run(flags, options, view, path)
    if result.outcome is not None:
        view.outcome(result.outcome, int(ExitCode.INTERRUPTED))
    if result.diagnosis is not None:
        render_diagnosis(result.diagnosis)
    if result.retry_argv:
        view.say(
            f"startup failed (exit code {int(result.exit_code)}); retrying once with --max-model-len "
            f"{result.retry_max_model_len:,}, the length the diagnosis computed"
        )
        sys.stdout.flush()
        sys.stderr.flush()
        # A fresh process (same pid, for systemd/Kubernetes): vLLM keeps process-wide state.
        os.execve(result.retry_argv[0], result.retry_argv, {**os.environ, ATTEMPT_ENV: "2"})
    if result.retry_note:
        view.say(result.retry_note)
    raise typer.Exit(int(result.exit_code))


# =============================================================================================
# collect
# =============================================================================================


@app.command("collect")
def collect_command(
    paths: list[str] | None = typer.Argument(None, metavar="PATHS", help="Log files and directories (dsv4ctl serve's logs, per-rank files)."),
    k8s: str | None = typer.Option(None, "--k8s", metavar="SELECTOR|POD|lws/NAME", help="Kubernetes pods: a label selector (app=vllm), a pod (a LeaderWorkerSet pod brings its group) or lws/NAME; through your kubectl."),
    namespace: str | None = typer.Option(None, "--namespace", "-n", metavar="NAMESPACE", help="With --k8s: kubectl's namespace [default: the context's]."),
    context: str | None = typer.Option(None, "--context", metavar="CONTEXT", help="With --k8s: kubectl's context [default: the current one]."),
    ray: bool = typer.Option(False, "--ray", help="A Ray session's logs: `--ray [SESSION_DIR]`, the first PATH that is a Ray session directory [default: /tmp/ray/session_latest]."),
    docker: list[str] = typer.Option([], "--docker", metavar="NAME", help="A Docker container's logs and state (repeat for several)."),
    since: str | None = typer.Option(None, "--since", metavar="DURATION", help="kubectl/docker: only lines newer than this (30m, 2h)."),
    tail: int | None = typer.Option(None, "--tail", metavar="LINES", min=0, help="Only the last LINES lines of each log."),
    max_log_bytes: str = typer.Option("256MiB", "--max-log-bytes", metavar="SIZE", help="Largest log kept; a longer one keeps its first quarter and its end."),
    output: Path | None = typer.Option(None, "--output", "-o", metavar="BUNDLE", help="The bundle to write: .tar.gz, or .tar uncompressed (faster to read back) [default: dsv4ctl-collect-<UTC time>.tar.gz here]."),
    kubectl: str = typer.Option("kubectl", "--kubectl", metavar="PATH", help="The kubectl to run."),
    json_out: bool = typer.Option(False, "--json", help="Print the manifest as JSON (schema_version 1) on stdout."),
) -> None:
    """Gather a deployment's logs from every node into one bundle (.tar.gz + manifest.json), secrets redacted.

    Kubernetes: every pod of the group, every container, the previous instance where it restarted, the pods'
    status (OOMKilled, exit codes) and the namespace's events. Read it back with `dsv4ctl diagnose BUNDLE`.
    Exit 0 when every source was read, 1 when some could not be (the bundle keeps what was; the manifest says why).
    """
    import time as _time

    from dsv4ctl.collect import CollectRequest, collect
    from dsv4ctl.errors import InputError, UsageError
    from dsv4ctl.render import emit_json, err_console, warning_line
    from dsv4ctl.units import parse_memory_flag

    if not (paths or k8s or ray or docker):
        raise UsageError("nothing to collect", hint="give log paths, --k8s SELECTOR, --ray [SESSION_DIR] or --docker NAME")
    if (namespace or context) and not k8s:
        raise UsageError("--namespace and --context go with --k8s")
    from dsv4ctl.collect.local import RAY_DEFAULT_SESSION, is_ray_session

    paths = list(paths or [])
    session = next((p for p in paths if is_ray_session(p)), RAY_DEFAULT_SESSION) if ray else None
    if session in paths:
        paths.remove(session)
    request = CollectRequest(
        paths=paths, k8s=k8s, namespace=namespace, context=context, ray=session, docker=list(docker),
        since=since, tail=tail, max_log_bytes=parse_memory_flag(max_log_bytes, what="--max-log-bytes"), kubectl=kubectl,
    )
    out = output or Path(f"dsv4ctl-collect-{_time.strftime('%Y%m%dT%H%M%SZ', _time.gmtime())}.tar.gz")
    done = [0]
    with err_console().status("collecting …", spinner="dots") as status:
        def step(label: str) -> None:
            done[0] += 1
            status.update(f"collecting: {done[0]} · {label}")

        result = collect(request, out, step)
    if json_out:
        emit_json(result.to_json())
    else:
        print(result.bundle)
        err_console().print(f"{len(result.logs)} logs in {result.bundle}", markup=False)
    for problem in result.unreadable:
        warning_line(f"not collected: {problem.source}: {problem.error}")
    if result.interrupted:
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    if result.unreadable:
        first = result.unreadable[0]
        if not result.logs:
            raise InputError(f"nothing collected: {first.error}", hint="the manifest in the bundle lists every source and why")
        raise typer.Exit(int(ExitCode.ERROR))


def _diagnose_group(sources: list[str], json_out: bool, svg: Path | None) -> None:
    """`diagnose` of a deployment: read as one group, rendered, exit with the group's verdict."""
    from dsv4ctl.group import read_group
    from dsv4ctl.render import emit_json, err_console, out_console
    from dsv4ctl.render.group import render_group, save_svg
    from dsv4ctl.render.progress import input_bytes, read_progress

    with _stop_on_signals(), read_progress(input_bytes(sources), "reading the logs") as progress:
        reading = read_group(sources, progress=progress)
    if json_out:
        emit_json(reading.to_json())
    else:
        render_group(reading, out_console())
    if svg is not None:
        save_svg(reading, svg)
        err_console().print(f"saved {svg}", markup=False)
    raise typer.Exit(int(reading.exit_code))
