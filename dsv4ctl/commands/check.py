"""`dsv4ctl check` and `dsv4ctl watch`: a running server's verdict, once or live."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
import os
from typing import Any

import typer

from dsv4ctl.commands.common import check_options
from dsv4ctl.errors import Dsv4ctlError, ExitCode
from dsv4ctl.render import error_line

_WATCH_EXITS = (
    f"Exit {int(ExitCode.OK)} healthy, {int(ExitCode.DEGRADED)} degraded, {int(ExitCode.BUSY)} busy (compiling, "
    "within its grace), "
    f"{int(ExitCode.WEDGED)} wedged, {int(ExitCode.DEAD)} dead, {int(ExitCode.UNKNOWN_SERVER)} unknown (not a vLLM "
    f"API server): the worst server's; {int(ExitCode.USAGE)} bad flags or URLs."
)
_CHECK_EXITS = _WATCH_EXITS.replace(" degraded,", f" degraded ({int(ExitCode.OK)} with --liveness),").replace(
    " busy (compiling,", f" busy ({int(ExitCode.OK)} with --liveness; compiling,").replace(
    " healthy,", " healthy (alive with --once),")


def check_command(
    ctx: typer.Context,
    urls: list[str] = typer.Argument(..., metavar="URL", help="vLLM API servers (http://HOST:PORT): one, or every API server of a data-parallel group / of several nodes."),
    window: float = typer.Option(3.0, "--window", metavar="SECONDS", help="Time between the two /metrics scrapes: an engine with work pending must move within it."),
    timeout: float = typer.Option(1.0, "--timeout", metavar="SECONDS", help="For /health, /v1/models and the first /metrics together, and for the second /metrics: check ends within window + 2 x timeout."),
    probe_request: bool = typer.Option(False, "--probe-request", help="Also send one one-token /v1/completions request: tells a stopped idle engine from an idle one."),
    probe_timeout: float | None = typer.Option(None, "--probe-timeout", metavar="SECONDS", help="How long the probe request may take [default: the window]."),
    api_key: str | None = typer.Option(None, "--api-key", envvar="VLLM_API_KEY", metavar="KEY", help="vLLM's --api-key, for /v1/models and the probe [default: $VLLM_API_KEY]."),
    kv_cliff: float = typer.Option(0.95, "--kv-cliff", metavar="FRACTION", help="Degraded at or above this KV cache usage (vllm:kv_cache_usage_perc)."),
    liveness: bool = typer.Option(False, "--liveness", help="Exit 0 when degraded: only wedged and dead fail (a Kubernetes livenessProbe)."),
    json_output: bool = typer.Option(False, "--json", help="Print the verdicts, evidence and numbers as JSON."),
    once: bool = typer.Option(False, "--once", help="Only GET /health, no window: alive (0), dead (10) or unknown (12), one line each; for an exec liveness probe (below)."),
    log: str | None = typer.Option(None, "--log", metavar="FILE", help="The server's log (e.g. dsv4ctl serve's): a stall while it says the engine compiles is busy, not wedged (one URL)."),
    dump: bool = typer.Option(False, "--dump", help="Also write the stacks of every vLLM process on this host: py-spy's to stderr where installed, else each process writes its own to its log (dsv4ctl's vLLM plugin, SIGUSR2)."),
) -> None:
    """Is a running vLLM server alive, wedged, dead or degraded? One look: /health, /v1/models, /metrics twice.

    wedged: work pending and no engine counter moved in the window (or the probe got no answer), while
    /health still says 200. busy: the same while --log shows the engine compiling or capturing (torch.compile,
    Triton, DeepGEMM, CUDA graphs), within the cause's grace (docs/check.md). dead: no answer, or /health 503 (or another 5xx). degraded: preemptions, KV cache
    at the cliff, a growing queue, 5xx answers. unknown: what answers is not a vLLM API server (a 404 on
    /health, no models and no vLLM metrics): a wrong URL or port.

    --once: one GET /health per server within --timeout, nothing else, and no Typer, Rich or httpx loaded (about
    0.06 s of CPU). alive: /health answered 200. It cannot see wedged: vLLM's /health answers 200 while the engine
    is stopped or hung (it only asks whether the API server has marked the engine dead:
    vllm/entrypoints/serve/instrumentator/health.py:22-33, vllm/v1/engine/async_llm.py:1089 in 0.32.0), and no
    model list or metrics are read, so another service's 200 counts as alive. dead: no answer, or a 5xx.
    unknown: a 3xx/4xx on /health, or not HTTP. --window, --probe-request and the other options of the window
    do not apply.
    """
    if once:
        _once(ctx, urls, timeout, json_output)
    from dsv4ctl.check import BUSY, DEGRADED, Limits
    from dsv4ctl.check.http import check_group
    from dsv4ctl.check.urls import parse_urls
    from dsv4ctl.render import emit_json, out_console

    servers = parse_urls(urls)
    check_options(window, timeout, probe_timeout, kv_cliff)
    compiles = _log_compiles(log, len(servers))
    group = check_group(servers, window_s=window, timeout_s=timeout, probe=probe_request, probe_timeout_s=probe_timeout,
                        api_key=api_key, limits=Limits(kv_cliff=kv_cliff))
    if compiles is not None:
        group = _judged_with(group, compiles)
    if dump:
        _dump_stacks()
    if json_output:
        emit_json(group.to_json())
    else:
        from dsv4ctl.render.check import render_check

        render_check(group, out_console())
    if liveness and group.verdict in (DEGRADED, BUSY):
        return
    raise typer.Exit(int(group.exit_code))


check_command.__doc__ = f"{check_command.__doc__}\n    {_CHECK_EXITS}\n"


def _log_compiles(log: str | None, servers: int) -> Any:
    """`--log FILE` read for what the engine compiles (check.logtail.LogCompiles), or None without it."""
    if log is None:
        return None
    from dsv4ctl.errors import InputError, UsageError

    if servers != 1:
        raise UsageError(f"--log with {servers} URLs: a log is one server's", hint="give the one URL whose log it is")
    if not os.path.isfile(log):
        raise InputError(f"--log {log}: no such file", hint="give the server's log file (dsv4ctl serve prints its path)")
    from dsv4ctl.check.logtail import LogCompiles

    return LogCompiles(log)


def _judged_with(group: Any, compiles: Any, keep_going: bool = False) -> Any:
    """The one server's verdict told from a compile (check.with_busy); its engine moving ends what compiled.
    `keep_going` (watch): a log that went away is said, and the look stands as it was."""
    import time
    from dataclasses import replace

    from dsv4ctl.check import with_busy

    (server,) = group.servers
    if any(e.progressed for e in server.engines):
        compiles.progressed(time.time() - group.checked_at)
    try:
        busy = compiles.read()
    except Dsv4ctlError as exc:
        if not keep_going:
            raise
        error_line(f"--log {compiles.path}: {exc.message}")
        return group
    return replace(group, servers=(with_busy(server, busy),))


def _dump_stacks() -> None:
    """`--dump`: every vLLM process of this host, its stacks (check.dumps); what was done, on stderr."""
    from dsv4ctl.check.dumps import dump_stacks, vllm_processes
    from dsv4ctl.render import err_console

    console = err_console()
    for line in dump_stacks(vllm_processes()):
        console.print(f"dump: {line}", markup=False, highlight=False, soft_wrap=True)
_WINDOW_ONLY = {"window": "--window", "probe_request": "--probe-request", "probe_timeout": "--probe-timeout",
                "kv_cliff": "--kv-cliff"}  # --api-key (often in the environment) is not refused: /health needs none


def _once(ctx: typer.Context, urls: list[str], timeout: float, json_output: bool) -> None:
    """`check --once` through Typer (a command line the fast path in __main__.py leaves to it): the same look."""
    from dsv4ctl.commands.check_once import run_once
    from dsv4ctl.commands.common import given
    from dsv4ctl.errors import UsageError

    extra = sorted(_WINDOW_ONLY[name] for name in given(ctx) & _WINDOW_ONLY.keys())
    if extra:
        raise UsageError(f"{', '.join(extra)} with --once: --once reads /health only, without a window",
                         hint="leave --once out for the window's look, or the option out for --once")
    raise typer.Exit(run_once(urls, timeout, json_output))


def watch_command(
    urls: list[str] = typer.Argument(..., metavar="URL", help="vLLM API servers (http://HOST:PORT)."),
    interval: float = typer.Option(2.0, "--interval", metavar="SECONDS", help="Each look's window (the time between two /metrics scrapes)."),
    timeout: float = typer.Option(1.0, "--timeout", metavar="SECONDS", help="As check's."),
    probe_request: bool = typer.Option(False, "--probe-request", help="One one-token request per look, as check's."),
    probe_timeout: float | None = typer.Option(None, "--probe-timeout", metavar="SECONDS", help="[default: the interval]"),
    api_key: str | None = typer.Option(None, "--api-key", envvar="VLLM_API_KEY", metavar="KEY", help="vLLM's --api-key [default: $VLLM_API_KEY]."),
    kv_cliff: float = typer.Option(0.95, "--kv-cliff", metavar="FRACTION", help="As check's."),
    log: str | None = typer.Option(None, "--log", metavar="FILE", help="The server's log (e.g. dsv4ctl serve's): with one URL, a stall while it says the engine compiles is busy, not wedged; on wedged or dead, diagnose's reading of its tail."),
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
    from dsv4ctl.check.http import check_group
    from dsv4ctl.check.urls import parse_urls
    from dsv4ctl.check.watch import WatchState
    from dsv4ctl.render import STDOUT, err_console, out_console
    from dsv4ctl.render import check as view

    servers = parse_urls(urls)
    check_options(interval, timeout, probe_timeout, kv_cliff)
    if count is not None and count < 1:
        from dsv4ctl.errors import UsageError

        raise UsageError(f"--count {count}: at least 1")
    if log is not None and not os.path.isfile(log):
        from dsv4ctl.errors import InputError

        raise InputError(f"--log {log}: no such file", hint="give the server's log file (dsv4ctl serve prints its path)")
    compiles = _log_compiles(log, 1) if log is not None and len(servers) == 1 else None
    console = out_console()
    live_view = console.is_terminal and not json_output
    state = WatchState(started_at=time.time())
    looks, last = 0, [time.monotonic()]

    def look() -> list[Any]:
        if looks:  # a look at a dead server returns at once: one look per interval all the same
            time.sleep(max(0.0, interval - (time.monotonic() - last[0])))
        last[0] = time.monotonic()
        group = check_group(servers, window_s=interval, timeout_s=timeout, probe=probe_request,
                            probe_timeout_s=probe_timeout, api_key=api_key, limits=Limits(kv_cliff=kv_cliff))
        if compiles is not None:
            group = _judged_with(group, compiles, keep_going=True)
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
        err_console().print(view.stop_line(state, looks), markup=False)
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    raise typer.Exit(int(state.latest.exit_code) if state.latest else 0)


watch_command.__doc__ = (
    f"{watch_command.__doc__}\n    With --count, the last look's code: {_WATCH_EXITS[5:]} "
    f"Ctrl-C: {int(ExitCode.INTERRUPTED)}.\n"
)
