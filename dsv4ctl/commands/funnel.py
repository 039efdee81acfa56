"""The error funnel's words, without Typer: every exception that escapes a command becomes one line, a hint and an
exit code (the JSON error document too with --json), never a traceback unless DSV4CTL_DEBUG=1.

`cli._ErrorFunnel` calls it for every command the Typer app runs; `check_once.main_once` for `check --once`'s
fast path, which runs without the Typer app (`__main__.py`). One set of words and codes for both."""

from __future__ import annotations

import os

from dsv4ctl.errors import Dsv4ctlError, ExitCode
from dsv4ctl.render import emit_json_error, error_line

DEBUG_ENV = "DSV4CTL_DEBUG"


def debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def fail(json_mode: bool, message: str, hint: str | None, code: int) -> int:
    """One line plus a hint on stderr; with --json also the error document on stdout. Returns the exit code."""
    error_line(message, hint)
    if json_mode:
        emit_json_error(message, hint, int(code))
    return int(code)


def failed(json_mode: bool, exc: Exception) -> int:
    """`exc` escaped a command: a `Dsv4ctlError` in its own words and code, anything else as an internal error
    (exit 1) whose hint asks for the traceback (printed only with DSV4CTL_DEBUG=1)."""
    if debug():
        import traceback

        traceback.print_exc()
    if isinstance(exc, Dsv4ctlError):
        return fail(json_mode, exc.message, exc.hint, exc.exit_code)
    if _interrupted_within(exc):
        return fail(json_mode, "interrupted", None, ExitCode.INTERRUPTED)
    hint = None if debug() else f"this is a bug in dsv4ctl; rerun with {DEBUG_ENV}=1 for the traceback and report it"
    return fail(json_mode, f"internal error: {type(exc).__name__}: {exc}", hint, ExitCode.ERROR)


def _interrupted_within(exc: BaseException) -> bool:
    """Ctrl-C that Python wrapped on its way out: a KeyboardInterrupt raised inside an import's class body comes back
    as the RuntimeError of `__set_name__` (or another wrapper) with the interrupt as its cause or context."""
    seen: set[int] = set()
    inner: BaseException | None = exc
    while inner is not None and id(inner) not in seen:
        if isinstance(inner, KeyboardInterrupt):
            return True
        seen.add(id(inner))
        inner = inner.__cause__ or inner.__context__
    return False
