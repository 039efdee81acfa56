"""The `serve` command's core: preflight, one in-process vLLM run, diagnosis, retry decision.

Returns a `ServeResult`; the CLI renders it, exits with `exit_code`, or re-executes itself with
`retry_argv` (a fresh process for the second attempt: vLLM keeps process-wide state).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

from dsv4ctl.errors import ExitCode
from dsv4ctl.serve.flags import set_max_model_len
from dsv4ctl.serve.memory import Launch, launch_of, memory_file, remember
from dsv4ctl.serve.preflight import REFUSE, PreflightDecision, decide
from dsv4ctl.serve.session import FAILED, INTERRUPTED, ServeOutcome, ServeSession, apply_environment

ATTEMPT_ENV = "DSV4CTL_SERVE_ATTEMPT"
LOG_DIR_ENV = "DSV4CTL_LOG_DIR"


@dataclass
class ServeOptions:
    """dsv4ctl's own `serve` options (everything else is a vLLM flag)."""

    log_file: Path | None = None
    keep_auto: bool = False
    retry: bool = False
    fixes: str | None = None
    dry_run: bool = False
    pin_length: bool = False  # pass the planned explicit length even where `auto` is safe
    no_calibration: bool = False  # plan without the calibration records of earlier starts
    vllm_version: str | None = None  # --dry-run only: plan as this release (default: the installed vLLM)
    watchdog: float | None = None  # end the server once wedged this many seconds (serve/watchdog.py)
    probe_grace: float | None = None  # the probe routes' liveness grace (dsv4ctl/health; default there)
    probe_health: bool = False  # vLLM's /health answers as the liveness route does


@dataclass
class ServeResult:
    exit_code: int
    decision: PreflightDecision | None = None
    outcome: ServeOutcome | None = None
    diagnosis: Any = None
    retry_max_model_len: int | None = None
    retry_argv: list[str] | None = None
    retry_note: str | None = None  # why --retry did not relaunch
    last_good: Any = None  # a failed start against the last good start of its launch (serve/recall.py LastGood)
    environment: dict[str, str] = field(default_factory=dict)


def default_log_dir() -> Path:
    """`$DSV4CTL_LOG_DIR`, else `$XDG_STATE_HOME/dsv4ctl/logs`, else `~/.local/state/dsv4ctl/logs`."""
    if os.environ.get(LOG_DIR_ENV):
        return Path(os.environ[LOG_DIR_ENV]).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "dsv4ctl" / "logs"


def default_log_file(now: float | None = None, pid: int | None = None) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
    return default_log_dir() / f"serve-{stamp}-{pid or os.getpid()}.log"


def attempt_number() -> int:
    try:
        return max(1, int(os.environ.get(ATTEMPT_ENV, "1")))
    except ValueError:
        return 1


def plan_only(flags: list[str], options: ServeOptions) -> PreflightDecision:
    """`--dry-run`: parse with vLLM's parser and decide; start nothing."""
    from dsv4ctl.errors import EngineUnavailableError
    from dsv4ctl.serve.flags_without_vllm import parse_planning_flags
    from dsv4ctl.serve.vllm_entry import parse_serve_flags

    note = None
    try:
        if _another_release(options.vllm_version):
            # The installed parser has another release's flags and defaults (0.34 leaves --gpu-memory-utilization
            # unset, 0.33 sets 0.92): the plan reads the flags as the named release's parser would, from the table.
            namespace = parse_planning_flags(flags, options.vllm_version)
            note = (f"--vllm-version {options.vllm_version}: the flags were read as that release's parser reads them "
                    "(dsv4ctl's table of its flags), not by the vLLM installed here")
        else:
            namespace = parse_serve_flags(flags)  # nothing is launched: the environment stays as it is
    except EngineUnavailableError as exc:
        # Planning on a machine without vLLM: read the flags the plan needs; vLLM's own checks run at start.
        namespace = parse_planning_flags(flags, options.vllm_version)
        note = (f"{exc.message}: the flags were read without vLLM's parser (the options from dsv4ctl's table of vLLM's "
                "flags, the values the plan needs); vLLM checks the rest when it starts")
    if options.watchdog is not None:
        from dsv4ctl.serve.watchdog import server_url

        server_url(namespace)  # a refusal the real start would make: --watchdog needs a TCP port
    _check_probe_options(namespace, options)
    decision = decide(
        namespace, flags, keep_auto=options.keep_auto, pin_length=options.pin_length, fixes=options.fixes,
        vllm_version=options.vllm_version, no_calibration=options.no_calibration,
    )
    if note:
        decision.notes.insert(0, note)
    release = _planned_release(options.vllm_version)
    # A copy of the environment: nothing is set; the startup plans as the release planned for has them.
    _say_environment(decision, apply_environment(options.fixes, env=dict(os.environ), release=release), release)
    _say_routes(decision, namespace, options)
    return decision


def _another_release(version: str | None) -> bool:
    """Whether --vllm-version names another minor release than the vLLM installed here (None: not installed)."""
    if version is None:
        return False
    from dsv4ctl.planning import installed_vllm_version

    installed = installed_vllm_version()
    if installed is None:
        return False  # no parser here: parse_serve_flags says so, and the table reads the flags
    minor = lambda v: ".".join(v.split("+")[0].split(".")[:2])  # noqa: E731
    return minor(version) != minor(installed)


def _check_probe_options(namespace: Any, options: ServeOptions) -> None:
    """--probe-grace and --probe-health set the probe routes of vLLM's API server: refused with --headless (none)."""
    if getattr(namespace, "headless", False) and (options.probe_grace is not None or options.probe_health):
        from dsv4ctl.errors import UsageError

        given = " and ".join(o for o, on in (("--probe-grace", options.probe_grace is not None),
                                              ("--probe-health", options.probe_health)) if on)
        raise UsageError(f"{given} with --headless: a headless node runs no API server, so no probe routes",
                         hint=f"drop {given} on this node, or give it to the node that serves the API")


def probe_environment(options: ServeOptions) -> dict[str, str]:
    """The probe routes' settings serve puts in the environment vLLM's API server processes inherit."""
    from dsv4ctl.health import routes

    env = {routes.GRACE_ENV: f"{options.probe_grace:g}"} if options.probe_grace is not None else {}
    if options.probe_health:
        env[routes.HEALTH_ENV] = "1"
    return env


def _say_routes(decision: PreflightDecision, namespace: Any, options: ServeOptions) -> None:
    """The flag serve adds to vLLM's at start (`probe_routes`), said where the command line is shown without it, and
    the routes' settings in the environment serve sets."""
    if getattr(namespace, "headless", False):
        return
    from dsv4ctl.health import routes

    env = probe_environment(options)
    decision.environment.update(env)
    grace = (f"liveness 503 after {options.probe_grace:g} s without progress (--probe-grace: {routes.GRACE_ENV}="
             f"{env[routes.GRACE_ENV]})" if routes.GRACE_ENV in env else
             f"the liveness grace of {routes.GRACE_ENV}={os.environ[routes.GRACE_ENV]} (yours)"
             if os.environ.get(routes.GRACE_ENV) else
             f"liveness 503 after {routes.DEFAULT_GRACE_S:g} s without progress (the default)")
    health = (f"vLLM's /health answers as {routes.LIVENESS} (--probe-health: {routes.HEALTH_ENV}=1)"
              if options.probe_health else "vLLM's /health stays its own")
    decision.notes.append(
        f"serve adds --middleware {routes.MIDDLEWARE} at start: its probe routes {routes.LIVENESS}, "
        f"{routes.READINESS} and {routes.STARTUP}; {grace}; {health} (docs/serve.md, \"Probe routes\")"
    )


def _planned_release(version: str | None) -> str | None:
    """The release a dry run plans for: --vllm-version, else the installed vLLM."""
    from dsv4ctl.planning import installed_vllm_version

    return version or installed_vllm_version()


def _say_environment(decision: PreflightDecision, environment: dict[str, str], release: str | None = None) -> None:
    """What serve sets for vLLM, in the decision (and its --dry-run): the startup plans above all. `release`: the one
    planned for (default: the installed vLLM)."""
    from dsv4ctl.planning import startup_plans

    decision.environment = dict(environment)
    if environment.get(startup_plans.ENV) == "1":
        decision.notes.append(
            f"{startup_plans.ENV}=1: vLLM {_planned_release(release)} keeps the KV memory each GPU worker measured "
            f"(startup plans under {startup_plans.cache_root() / 'startup_plan'}) and re-applies it at the next start "
            "while free memory is at least what it started with, so restarts get the same length"
        )
    elif os.environ.get(startup_plans.ENV) not in (None, "1"):
        decision.notes.append(f"{startup_plans.ENV}={os.environ[startup_plans.ENV]} (yours): vLLM's startup plans stay off")


def run(flags: list[str], options: ServeOptions, view: Any, log_file: Path) -> ServeResult:
    """Parse (vLLM's parser), decide, launch vLLM in this process, and diagnose a failure.

    The capture starts before vLLM's parser runs, so everything vLLM prints (its plugin loading and
    argument warnings included) is in the log. A refusal is raised (exit code 6) after the session
    has cleaned up.
    """
    from dsv4ctl.serve.vllm_entry import parse_serve_flags, run_vllm_serve

    environment = apply_environment(options.fixes)
    refusal, dog, launch = None, None, None
    hook = _RememberReady(log_file, view)
    with ServeSession(log_file, view, make_dirs=options.log_file is None, on_ready=hook) as session:
        namespace = parse_serve_flags(flags)
        _check_probe_options(namespace, options)
        launch = hook.launch = launch_of(namespace)
        decision = decide(
            namespace, flags, keep_auto=options.keep_auto, pin_length=options.pin_length, fixes=options.fixes,
            no_calibration=options.no_calibration,
        )
        _say_environment(decision, environment)
        _say_routes(decision, namespace, options)
        view.decision(decision)
        if decision.action == REFUSE:
            refusal = decision.refusal
            if refusal is not None:
                session.note_in_log(f"refused, vLLM not started: {refusal.message}")
        else:
            compiles = _compile_watch(session)
            dog = _start_watchdog(namespace, options, compiles)
            routes = probe_routes(namespace, options, phase=session.phase, busy=_busy_source(compiles))
            try:
                session.run(lambda: run_vllm_serve([*decision.flags, *routes]))
            finally:
                if dog is not None:
                    dog.stop()
    outcome = session.outcome
    if refusal is not None:
        raise refusal
    if decision.plan is not None:
        from dsv4ctl.advice import read_log_facts
        from dsv4ctl.planning import record_from_serve

        # The start measured the KV memory: remember it for this host and configuration.
        record_from_serve(
            decision.plan, lambda: read_log_facts(str(log_file)), log_file, bool(getattr(namespace, "enforce_eager", False))
        )
    assert outcome is not None
    result = ServeResult(ExitCode.OK, decision, outcome, environment=environment)
    if outcome.status == INTERRUPTED:
        result.exit_code = ExitCode.OK if outcome.reached_ready else ExitCode.INTERRUPTED
    elif outcome.status == FAILED:
        result.diagnosis = diagnose_log(log_file)
        if launch is not None:
            from dsv4ctl.serve.recall import against_last_good

            result.last_good = against_last_good(launch, log_file)
        result.exit_code = int(getattr(result.diagnosis, "exit_code", ExitCode.FAILED_UNKNOWN_CAUSE))
        if options.retry and attempt_number() > 1:
            result.retry_note = "--retry: this was already the relaunch; not retrying again"
        elif options.retry:
            length = retry_length(result.diagnosis)
            if length is not None:
                result.retry_max_model_len = length
                result.retry_argv = retry_argv(flags, options, length, log_file)
            else:
                result.retry_note = "--retry: not retrying, a shorter --max-model-len would not avoid this failure"
    if dog is not None and dog.fired:
        result.exit_code = ExitCode.WEDGED
    return result


class _RememberReady:
    """The session's ready hook: this start kept in serve's memory of good starts (serve/memory.py), its warnings
    said on the terminal (stderr); called from the capture's reader thread, so it never raises."""

    def __init__(self, log_file: Path, view: Any) -> None:
        self.log_file, self.view = log_file, view
        self.launch: Launch | None = None

    def __call__(self) -> None:
        if self.launch is None:
            return
        try:
            warnings = remember(self.launch, self.log_file, memory_file())
        except Exception as exc:  # noqa: BLE001 - a memory lost is never a failed serve
            warnings = [f"serve cannot remember this good start: {type(exc).__name__}: {exc}"]
        for warning in warnings:
            self.view.say(f"warning: {warning}", style="yellow")


def probe_routes(namespace: Any, options: ServeOptions, *, phase: Any = None, busy: Any = None) -> list[str]:
    """The flags that have vLLM install serve's probe routes (dsv4ctl/health/routes.py) through its own `--middleware`
    hook, with their settings in the environment vLLM's API server processes inherit. None for `--headless` (no API
    server). `busy`: the source that names what compiles (health.judgement.BusySource); `phase`: serve's startup
    phase."""
    if getattr(namespace, "headless", False):
        return []
    from dsv4ctl.health import routes

    os.environ.update(probe_environment(options))
    routes.set_sources(busy=busy, phase=phase)
    return ["--middleware", routes.MIDDLEWARE]



def _compile_watch(session: ServeSession) -> Any:
    """What the engine compiles, told by the lines serve captures: one tracker for the watchdog and the probe routes."""
    from dsv4ctl.serve.watchdog import CompileWatch

    compiles = CompileWatch()
    session.listen(compiles.feed)
    return compiles


@dataclass(frozen=True)
class _RouteBusy:
    """A compile as the probe routes take it (health.judgement.Busy): what, since when (time.monotonic()), its grace."""

    what: str
    since: float
    grace_s: float


def _busy_source(compiles: Any) -> Callable[[float], _RouteBusy | None]:
    """The probe routes' busy source (health.judgement.BusySource) over the compile tracker."""

    def look(now: float) -> _RouteBusy | None:
        busy = compiles.state()
        if busy is None:
            return None
        what = f"{busy.cause} ({busy.what})" if busy.what else busy.cause
        return _RouteBusy(what=what, since=now - busy.since_s, grace_s=busy.grace_s)

    return look


def _start_watchdog(namespace: Any, options: ServeOptions, compiles: Any) -> Any:
    """`--watchdog SECONDS`: the thread that checks this server (None when off), told what the engine compiles by
    the lines serve captures."""
    if options.watchdog is None:
        return None
    from dsv4ctl.serve.watchdog import Watchdog, server_url

    key = getattr(namespace, "api_key", None)
    key = key[0] if isinstance(key, (list, tuple)) and key else key
    return Watchdog(server_url(namespace), options.watchdog, _into_the_log, api_key=key or os.environ.get("VLLM_API_KEY"),
                    compiles=compiles).start()


def _into_the_log(line: str) -> None:
    """The watchdog's lines through fd 2, where the capture puts them into the log (and on the terminal), the way
    the engine watch writes its own."""
    from dsv4ctl.serve.engines import write_fd2

    write_fd2(f"dsv4ctl serve: {line}\n")


def diagnose_log(log_file: Path) -> Any:
    from dsv4ctl.advice import diagnose

    return diagnose([str(log_file)])


# Root causes a shorter explicit --max-model-len avoids (ids of dsv4ctl.catalogue.signatures).
RETRYABLE_CAUSES = ("stale_max_model_len", "kv_cache_insufficient")


def retry_length(diagnosis: Any) -> int | None:
    """The explicit length the diagnosis computed when a shorter one would have avoided the failure
    (stale length after auto-fit, KV cache too small for the length); None otherwise."""
    root = getattr(diagnosis, "root_cause", None)
    if root is None or getattr(root, "id", None) not in RETRYABLE_CAUSES:
        return None
    details = getattr(root, "details", None) or {}
    value = details.get("safe_len")
    return int(value) if isinstance(value, int) and value > 0 else None


def retry_argv(flags: list[str], options: ServeOptions, length: int, log_file: Path) -> list[str]:
    """The command line of the one relaunch: same options minus `--retry`, the computed length,
    and its own log file next to the first one."""
    argv = [sys.executable, "-m", "dsv4ctl", "serve"]
    retry_log = log_file.with_name(f"{log_file.stem}.retry{log_file.suffix or '.log'}")
    argv += ["--log-file", str(retry_log)]
    if options.fixes is not None:
        argv += ["--fixes", options.fixes]
    if options.pin_length:
        argv += ["--pin-length"]
    if options.no_calibration:
        argv += ["--no-calibration"]
    if options.watchdog is not None:
        argv += ["--watchdog", f"{options.watchdog:g}"]
    if options.probe_grace is not None:
        argv += ["--probe-grace", f"{options.probe_grace:g}"]
    if options.probe_health:
        argv += ["--probe-health"]
    return argv + set_max_model_len(flags, length)
