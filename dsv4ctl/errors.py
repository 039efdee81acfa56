"""Exit codes and the exceptions the core raises.

The core never prints and never exits: it raises a `Dsv4ctlError` (or returns a result whose
verdict maps to an exit code). Only `dsv4ctl.cli` turns either into output and an exit status.
"""

from __future__ import annotations

import signal
from enum import IntEnum

TYPE_CHECKING = False  # typing's own constant without importing typing: every process starts here
if TYPE_CHECKING:
    from typing import Any, Callable


class ExitCode(IntEnum):
    """Exit statuses of every dsv4ctl command (documented in `dsv4ctl --help` and docs/exit-codes.md)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    FAILED_KNOWN_CAUSE = 3
    FAILED_UNKNOWN_CAUSE = 4
    INCONCLUSIVE = 5
    DOES_NOT_FIT = 6
    AFFECTED = 7
    STUCK = 8
    WEDGED = 9
    DEAD = 10
    DEGRADED = 11
    UNKNOWN_SERVER = 12
    BUSY = 13
    INTERRUPTED = 130


def exit_code_table(width: int = 76) -> str:
    """One entry per exit code for `--help`, each wrapped to `width` columns under its meaning (Click prints it as
    is: the help at 80 columns keeps whole lines)."""
    import textwrap

    lines: list[str] = []
    for code in ExitCode:
        lines += textwrap.wrap(code.__doc__ or code.name, width=width, initial_indent=f"{int(code):>3}  ",
                               subsequent_indent=" " * 5)
    return "\n".join(lines)


def exit_code_markdown() -> str:
    """The same table as Markdown (README.md and docs/exit-codes.md carry it between their exit-codes markers;
    scripts/write_exit_codes.py writes it, a test checks it)."""
    rows = [f"| {int(code)} | {code.name} | {code.__doc__ or code.name} |" for code in ExitCode]
    return "\n".join(["| code | name | meaning |", "|---|---|---|", *rows])


# Attribute docstrings are not kept by Python; attach them explicitly so the help text is derived.
for _code, _doc in {
    ExitCode.OK: "ok (diagnose/serve: no failure)",
    ExitCode.ERROR: "error: dsv4ctl could not do its job",
    ExitCode.USAGE: "usage: bad command line",
    ExitCode.FAILED_KNOWN_CAUSE: "the (last) start failed, root cause identified (diagnose, serve)",
    ExitCode.FAILED_UNKNOWN_CAUSE: "the (last) start failed, no signature explains it: the originating error is quoted (diagnose, serve)",
    ExitCode.INCONCLUSIVE: "log ends before ready, no failure seen (diagnose)",
    ExitCode.DOES_NOT_FIT: "vLLM would refuse these settings on this box, or no length survives the margin (fit-length, serve)",
    ExitCode.AFFECTED: "this node's DeepGEMM is affected (probe deepgemm)",
    ExitCode.STUCK: "the (last) start is waiting and nothing failed after the wait (diagnose)",
    ExitCode.WEDGED: "the server answers but its engine makes no progress (check, watch, serve --watchdog)",
    ExitCode.DEAD: "the server is gone or says its engine is dead (check, watch)",
    ExitCode.DEGRADED: "the server makes progress but is under pressure: preemptions, KV cliff, a growing queue (check)",
    ExitCode.UNKNOWN_SERVER: "what answers is not a vLLM API server (a wrong URL or port?): no verdict (check, watch)",
    ExitCode.BUSY: "the engine makes no progress while its log says it compiles or captures, within the grace (check, watch)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}.items():
    _code.__doc__ = _doc


class Dsv4ctlError(Exception):
    """An error with a one-line message and an optional hint naming the next step."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, message: str, hint: str | None = None, exit_code: ExitCode | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(Dsv4ctlError):
    """An input (file, config, snapshot) is missing, unreadable or malformed."""


class OutputError(Dsv4ctlError):
    """A file dsv4ctl was asked to write (a bundle, an SVG, a snapshot, a log) cannot be written: no such
    directory, a directory, no permission, a read-only or full disk (`dsv4ctl.files` raises it)."""


class UsageError(Dsv4ctlError):
    """A command-line value is malformed or out of range."""

    exit_code = ExitCode.USAGE


class GpuUnavailableError(Dsv4ctlError):
    """NVML cannot be used here (no driver, no GPU, no library)."""


class EngineUnavailableError(Dsv4ctlError):
    """vLLM (or torch) is needed for this command but cannot be imported."""


# The signals that stop a command as Ctrl-C does: exit 128 + the signal's number (143, 129).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Stopped(BaseException):
    """One of `STOP_SIGNALS` arrived (raised by `raise_stopped`, the handler the CLI and the process entry install)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_stopped(signum: int, frame: object) -> None:
    """A signal handler: the other stop signals ignored from now on (a second one must not cut the clean-up short),
    then `Stopped` (a millisecond later where it would be dropped: `later_if_dropped`)."""
    if later_if_dropped(signum, frame, raise_stopped):
        return
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def later_if_dropped(signum: int, frame: object, handler: Callable[[int, Any], None]) -> bool:
    """For a signal handler that raises: True when an exception raised in `frame` would be printed and dropped (the
    import system's weakref callback, run by any import; an object's `__del__`; here or in a caller), and the
    command would run on as if the signal had not come. `handler(signum, frame)` then runs again a millisecond
    later (SIGALRM), once that code has returned."""
    if not hasattr(signal, "setitimer") or not _dropped_in(frame):
        return False

    def again(_alarm: int, later: Any) -> None:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        handler(signum, later)

    signal.signal(signal.SIGALRM, again)
    signal.setitimer(signal.ITIMER_REAL, 0.001)
    return True


def _dropped_in(frame: Any) -> bool:
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or (code.co_name == "cb" and "importlib" in code.co_filename):
            return True
        frame = frame.f_back
    return False
