"""What several commands share: the stop on SIGTERM/SIGHUP of a long read, the options the operator typed, shell
completion, the check/watch option checks."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
import contextlib
from typing import Iterator

import typer

from dsv4ctl.errors import Dsv4ctlError


def complete_example(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion for --example: the built-in example logs, with their descriptions."""
    from dsv4ctl.logs.examples import list_examples

    return [(e.name, e.description) for e in list_examples() if e.name.startswith(incomplete)]


def complete_model(incomplete: str) -> list[str]:
    """Shell completion for MODEL: the built-in DeepSeek-V4 presets (a path is typed as a path)."""
    from dsv4ctl.planning import builtin_model_ids

    return [m for m in builtin_model_ids() if m.lower().startswith(incomplete.lower())]


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
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


def given(ctx: typer.Context, **renamed: str) -> frozenset[str]:
    """The options the operator typed (not defaults), by name; `renamed` maps a core field to its option."""
    # By the source's name: Typer may carry its own copy of click's ParameterSource enum.
    given = {name for name in ctx.params
             if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")}
    return frozenset(given | {field for field, option in renamed.items() if option in given})


def check_options(window: float, timeout: float, probe_timeout: float | None, kv_cliff: float) -> None:
    from dsv4ctl.errors import UsageError

    for flag, value in (("--window/--interval", window), ("--timeout", timeout), ("--probe-timeout", probe_timeout)):
        if value is not None and not value > 0:
            raise UsageError(f"{flag} {value:g}: must be more than 0 seconds")
    if not 0 < kv_cliff <= 1:
        raise UsageError(f"--kv-cliff {kv_cliff:g}: a fraction of the KV cache, more than 0 and at most 1 (0.95 = 95%)")
