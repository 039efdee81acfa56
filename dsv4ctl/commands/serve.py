"""`dsv4ctl serve`: vLLM's server in this process, with dsv4ctl's fixes, preflight, progress, log and diagnosis."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from dsv4ctl.errors import ExitCode, UsageError


SERVE_HELP = """Launch vLLM's OpenAI-compatible server in this process, the way `vllm serve` does.

\b
dsv4ctl serve MODEL [dsv4ctl options] [vLLM flags...]

Every flag not listed below is vLLM's and is parsed and validated by vLLM's own `serve` parser
(`--vllm-help all` shows it; `-h` and `--help` show this). dsv4ctl adds: its runtime fixes in every vLLM process
(--fixes), a preflight for DeepSeek-V4 (the length policy: with the length auto/-1/not given, vLLM
auto-fits it, which is safe when the stale-length fix runs or the release lacks that crash; serve
passes the planned explicit --max-model-len only with --pin-length, or on 0.29-0.30 with the fix off;
--keep-auto leaves auto whatever the plan says) that refuses settings vLLM would refuse, live
progress, a complete log file, and a diagnosis when startup fails (exit code = `dsv4ctl diagnose`'s).
SIGINT/SIGTERM shut vLLM down cleanly; no vLLM process outlives dsv4ctl.
"""


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
    compare: Optional[str] = typer.Option(
        None, "--compare", metavar="X.Y.Z", help="With --dry-run: what changes for this launch under another vLLM release "
        "(the upgrade view, docs/upgrade.md) instead of the decision."
    ),
    watchdog: Optional[float] = typer.Option(
        None, "--watchdog", metavar="SECONDS", help="Check this server as `dsv4ctl check` does; once it is wedged this long, "
        f"write the evidence (and py-spy stacks, where installed) to the log, shut vLLM down and exit {int(ExitCode.WEDGED)} [default: off]."
    ),
    probe_grace: Optional[float] = typer.Option(
        None, "--probe-grace", metavar="SECONDS", help="The probe routes (/dsv4ctl/livez, /readyz, /startupz): liveness "
        "answers 503 once the engine has made no progress this long (a compile named by the busy source excepted) [default: 60]."
    ),
    probe_health: bool = typer.Option(
        False, "--probe-health", help="vLLM's own /health answers as /dsv4ctl/livez does (503 once wedged) [default: off: /health stays vLLM's]."
    ),
    vllm_help: Optional[str] = typer.Option(
        None, "--vllm-help", metavar="GROUP", help="Show vLLM's serve help for GROUP (`all`, a config group such as ModelConfig, or a search word)."
    ),
) -> None:
    from dsv4ctl.render import emit_json
    from dsv4ctl.render.serve import ServeConsole
    from dsv4ctl.serve.command import ServeOptions, default_log_file, plan_only, run
    from dsv4ctl.serve.preflight import REFUSE

    flags = [str(a) for a in ctx.args]
    from dsv4ctl.units import check_vllm_memory_flags, describe_bytes

    memory_flags = check_vllm_memory_flags(flags)  # `--kv-cache-memory-bytes 9` (unit forgotten): exit 2
    if vllm_help is not None:
        from dsv4ctl.serve.vllm_entry import parse_serve_flags

        rest = [f for f in flags if f != "-h"]
        parse_serve_flags([*rest, f"--help={vllm_help}"])  # prints vLLM's help, exits 0
        return
    if "-h" in flags:  # the short form of this help: dsv4ctl's options, and where vLLM's are
        typer.echo(ctx.get_help())
        return
    _check_options(flags, fixes=fixes, json_output=json_output, dry_run=dry_run, vllm_version=vllm_version,
                   pin_length=pin_length, keep_auto=keep_auto, watchdog=watchdog)
    if compare is not None and not dry_run:
        raise UsageError("--compare goes with --dry-run", hint="dsv4ctl serve --dry-run --compare X.Y.Z MODEL [flags...]")
    if probe_grace is not None and not probe_grace > 0:
        raise UsageError(f"--probe-grace {probe_grace:g}: must be more than 0 seconds", hint="e.g. --probe-grace 60")
    options = ServeOptions(
        log_file=log_file, keep_auto=keep_auto, retry=retry, fixes=fixes, dry_run=dry_run, pin_length=pin_length,
        vllm_version=vllm_version, no_calibration=no_calibration, watchdog=watchdog, probe_grace=probe_grace,
        probe_health=probe_health,
    )
    view = ServeConsole()
    for flag, size in memory_flags:  # stderr: how vLLM will read it (10G = 10 GiB, 10g = 10^9 bytes)
        view.say(f"{flag} read as {describe_bytes(size)}")
    if dry_run and compare is not None:
        _upgrade_view(flags, options, compare, json_output)
        return
    if dry_run:
        decision = plan_only(flags, options)
        if json_output:
            emit_json({"serve_preflight": decision.to_json()})
        else:
            view.dry_run(decision)
        if decision.action == REFUSE and decision.refusal is not None:
            raise decision.refusal
        return
    from dsv4ctl.files import check_target
    from dsv4ctl.serve.session import LOG_HINT
    from dsv4ctl.serve.vllm_entry import vllm_version

    vllm_version()  # vLLM missing: said before a log file is made for a start that cannot happen
    path = log_file or default_log_file()
    check_target(path, hint=LOG_HINT, make_parents=log_file is None)
    view.say(f"log file: {path}")
    result = run(flags, options, view, path)
    _finish(result, view)


def _finish(result, view) -> None:
    """After a real start: the outcome, the diagnosis, the one relaunch of --retry, the exit code."""
    from dsv4ctl.render.serve import render_diagnosis, render_last_good
    from dsv4ctl.serve.command import ATTEMPT_ENV
    from dsv4ctl.serve.session import LOG_HINT

    if result.outcome is not None:
        view.outcome(result.outcome, int(ExitCode.INTERRUPTED))
    if result.diagnosis is not None:
        render_diagnosis(result.diagnosis)
    if result.last_good is not None:
        render_last_good(result.last_good)
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
    log_error = result.outcome.log_error if result.outcome is not None else None
    if log_error and int(result.exit_code) == int(ExitCode.OK):
        from dsv4ctl.errors import OutputError

        raise OutputError(f"{log_error} (the log is incomplete)", hint=LOG_HINT)
    if log_error:
        from dsv4ctl.render import warning_line

        warning_line(f"{log_error}: the log is incomplete, and so may be the diagnosis read from it")
    raise typer.Exit(int(result.exit_code))


def _upgrade_view(flags: list[str], options, compare: str, json_output: bool) -> None:
    """--dry-run --compare: the launch's flags read as the dry run reads them, planned under its release and COMPARE."""
    import dataclasses

    from dsv4ctl.errors import EngineUnavailableError, GpuUnavailableError
    from dsv4ctl.serve.flags_without_vllm import parse_planning_flags
    from dsv4ctl.serve.preflight import fit_request_from
    from dsv4ctl.serve.vllm_entry import parse_serve_flags
    from dsv4ctl.upgrade import compare_releases

    try:
        namespace = parse_serve_flags(flags)
    except EngineUnavailableError:
        namespace = parse_planning_flags(flags, options.vllm_version)
    request = fit_request_from(namespace, str(getattr(namespace, "model", None) or ""),
                               kv_cache_memory_bytes=getattr(namespace, "kv_cache_memory_bytes", None),
                               vllm_version=options.vllm_version)
    request = dataclasses.replace(request, no_calibration=options.no_calibration)
    try:
        view = compare_releases(request, compare, argv=flags)
    except GpuUnavailableError as exc:
        # The view plans the launch under both releases, and a plan needs the KV memory per GPU: from the GPUs here,
        # else from the launch's own --kv-cache-memory-bytes.
        raise GpuUnavailableError(
            exc.message,
            hint="without a GPU here, give the launch the KV memory per GPU: --kv-cache-memory-bytes 10G (10 GiB as "
            "vLLM reads it; the figure of vLLM's \"Available KV cache memory\" line); or compare on a snapshot of the "
            "GPU box: dsv4ctl fit-length MODEL --gpus snapshot.json --vllm-version A --compare B [flags...]",
            exit_code=exc.exit_code,
        ) from None
    from dsv4ctl.commands.fit_length import show_upgrade_view

    show_upgrade_view(view, json_output)


def _names_a_model(flags: list[str], release: Optional[str]) -> bool:
    """Whether vLLM's argv names a model: its positional, before or after the options (`vllm serve -tp 8 MODEL`),
    or its --model / --config."""
    from dsv4ctl.serve.flags_without_vllm import model_argument

    return bool(model_argument(flags, release)) or any(f.split("=", 1)[0] == "--config" for f in flags)


def _check_options(flags: list[str], *, fixes: Optional[str], json_output: bool, dry_run: bool,
                   vllm_version: Optional[str], pin_length: bool, keep_auto: bool, watchdog: Optional[float]) -> None:
    """serve's own options, refused at the door (exit 2) before anything is started or written."""
    from dsv4ctl.errors import UsageError

    if any(f.split("=", 1)[0] == "--gpus" for f in flags):
        raise UsageError("a GPU snapshot is fit-length's (fit-length --gpus FILE); serve takes none: it plans on the GPUs "
                         "of this node, the ones vLLM starts on",
                         hint="plan on a snapshot of other GPUs with dsv4ctl fit-length MODEL --gpus FILE [flags...]")
    if not _names_a_model(flags, vllm_version):
        raise UsageError("no MODEL given", hint="dsv4ctl serve MODEL [flags...] (or vLLM's --model / --config)")
    if fixes is not None:
        from dsv4ctl.fixes import FIX_NAMES, parse_selection

        unknown = parse_selection(fixes).unknown
        if unknown:
            raise UsageError(
                f"--fixes: unknown fix name(s) {', '.join(unknown)}",
                hint="use all, none, or a comma list of: " + ", ".join(FIX_NAMES),
            )
    if json_output and not dry_run:
        raise UsageError("--json goes with --dry-run", hint="serve's live output is vLLM's own; use --dry-run --json for the decision")
    if vllm_version is not None and not dry_run:
        raise UsageError("--vllm-version goes with --dry-run", hint="a real start plans for the installed vLLM, the one that runs")
    if pin_length and keep_auto:
        raise UsageError("--pin-length and --keep-auto contradict each other", hint="pick one")
    if watchdog is not None and not watchdog > 0:
        raise UsageError(f"--watchdog {watchdog:g}: must be more than 0 seconds", hint="e.g. --watchdog 120")
