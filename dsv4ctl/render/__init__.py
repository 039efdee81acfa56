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
import sys
from typing import Any

from rich.console import Console

JSON_SCHEMA_VERSION = 1


def out_console() -> Console:
    """The console for a command's report (stdout)."""
    return Console(file=sys.stdout, highlight=False, soft_wrap=False)


def err_console() -> Console:
    """The console for talk: progress, warnings, errors, hints (stderr)."""
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def emit_json(payload: dict[str, Any]) -> None:
    """Write one JSON document to stdout. Every payload carries `schema_version`."""
    payload = {"schema_version": JSON_SCHEMA_VERSION, **payload}
    sys.stdout.write(json.dumps(payload, indent=2, default=_json_default) + "\n")
    sys.stdout.flush()


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
