"""Output for people (Rich) and for machines (JSON).

stdout is data, stderr is talk: reports and JSON go to stdout; progress, warnings, errors and hints
go to stderr. JSON is written with `json.dumps` straight to stdout, never through Rich (which wraps
long lines when piped). Rich honours NO_COLOR by itself.

This package holds the shared helpers; each command's renderers live in a module of their own
(`render.diagnose`, `render.fit`, `render.doctor`, `render.serve`), so a renderer sits next to the
data it shows and commands can change their output without touching each other.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rich.console import Console

JSON_SCHEMA_VERSION = 1


class _Stdout:
    """sys.stdout as it is at each write, quiet once its reader has gone (`dsv4ctl diagnose … | head -1`).

    A closed pipe must not turn into a traceback or exit status 1: the rest of the report is dropped and
    the command still ends with its own exit code (the verdict's, for diagnose)."""

    reader_gone = False
    json_written = False

    def write(self, text: str) -> int:
        if not _Stdout.reader_gone:
            try:
                return sys.stdout.write(text)
            except BrokenPipeError:
                stdout_reader_gone()
        return len(text)

    def flush(self) -> None:
        if not _Stdout.reader_gone:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                stdout_reader_gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stdout, name)


STDOUT = _Stdout()


def reset_stdout() -> None:
    """A fresh command: no JSON document written yet, stdout's reader assumed present."""
    _Stdout.json_written = False
    _Stdout.reader_gone = False


def stdout_reader_gone() -> None:
    """Drop all further output: point file descriptor 1 at /dev/null so no flush (not even the
    interpreter's last one at exit) fails again."""
    _Stdout.reader_gone = True
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (tests), or already closed
        pass


def out_console() -> Console:
    """The console for a command's report (stdout)."""
    return Console(file=STDOUT, highlight=False, soft_wrap=False)  # type: ignore[arg-type]


def err_console() -> Console:
    """The console for talk: progress, warnings, errors, hints (stderr)."""
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def emit_json(payload: dict[str, Any]) -> None:
    """Write one JSON document to stdout. Every payload carries `schema_version`."""
    payload = {"schema_version": JSON_SCHEMA_VERSION, **payload}
    _Stdout.json_written = True
    STDOUT.write(json.dumps(payload, indent=2, default=_json_default) + "\n")
    STDOUT.flush()


def emit_json_error(message: str, hint: str | None, exit_code: int) -> None:
    """With `--json`, a failure is a JSON document too: `{"schema_version": 1, "error": {...}}` on stdout.

    Skipped when the command already wrote its document (e.g. `serve --dry-run --json` refusing:
    the decision says why); stdout holds one JSON document either way."""
    if not _Stdout.json_written:
        emit_json({"error": {"message": message, "hint": hint, "exit_code": int(exit_code)}})


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def error_line(message: str, hint: str | None = None) -> None:
    """The one actionable line (plus a hint) that every failure is reduced to."""
    console = err_console()
    console.print(f"[bold red]Error:[/] {message}", markup=True, highlight=False)
    if hint:
        console.print(f"[yellow]Hint:[/] {hint}", markup=True, highlight=False)


def warning_line(message: str) -> None:
    err_console().print(f"[yellow]Warning:[/] {message}")
