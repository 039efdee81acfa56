"""`dsv4ctl check --once URL...`: one GET /health per server, one line each (or the JSON document), and the exit code
a Kubernetes exec liveness probe reads (docs/check.md, "As an exec probe").

It runs two ways, with the same words and codes. Through the Typer app (`check_command` with --once), and, for the
process of a command line that is only `check --once URL... [--timeout S] [--json] [--liveness]`, from
`__main__.py` without the Typer app at all (`fast_args`, `main_once`): a probe that runs every few seconds pays for
Typer, Rich, pydantic, httpx and prometheus_client on each run otherwise (0.26 s of CPU before; see
benchmarks/check_once_bench.py). Any other command line, `--help` and every mistake in it included, goes through
Typer, which says what is wrong as for every command.
"""

from __future__ import annotations

from collections.abc import Sequence

# The options the fast path reads; any other argument sends the command line to Typer.
FLAGS = frozenset({"--once", "--json", "--liveness"})
TIMEOUT = "--timeout"


def fast_args(args: Sequence[str]) -> tuple[list[str], float, bool] | None:
    """(URLs, timeout, --json) when `args` is `check --once` with URLs and only these options, each given once, the
    timeout a number Typer would take and `check_options` would pass; None for anything else (Typer reads it)."""
    if len(args) < 3 or args[0] != "check" or "--once" not in args:
        return None
    urls: list[str] = []
    seen: set[str] = set()
    timeout = 1.0
    rest = iter(args[1:])
    for arg in rest:
        name, eq, value = arg.partition("=")
        if arg in FLAGS and arg not in seen:
            seen.add(arg)
        elif name == TIMEOUT and TIMEOUT not in seen:
            seen.add(TIMEOUT)
            value = value if eq else next(rest, "")
            try:
                timeout = float(value)
            except ValueError:
                return None
            if not 0 < timeout < float("inf"):
                return None
        elif not arg.startswith("-") and arg:
            urls.append(arg)
        else:
            return None
    return (urls, timeout, "--json" in seen) if urls else None


def run_once(urls: Sequence[str], timeout_s: float, json_output: bool) -> int:
    """Look at each server once (one after another, each within `timeout_s`), print, return the exit code.

    Raises UsageError for a URL that names no server (nothing is looked at then)."""
    from dsv4ctl.check.once import look_once, worst_once
    from dsv4ctl.check.urls import parse_urls
    from dsv4ctl.render import STDOUT, emit_json

    import math
    import time

    from dsv4ctl.errors import UsageError

    servers = parse_urls(urls, plain=True)
    if not (0 < timeout_s and math.isfinite(timeout_s)):
        raise UsageError(f"--timeout {timeout_s:g}: must be more than 0 seconds, and finite")

    started, checked_at = time.monotonic(), time.time()
    looks = [look_once(server, timeout_s) for server in servers]
    worst = worst_once(looks)
    if json_output:
        emit_json({"check": {"once": True, "verdict": worst.verdict, "exit_code": int(worst.exit_code),
                             "checked_at": round(checked_at, 3), "duration_s": round(time.monotonic() - started, 3),
                             "servers": [look.to_json() for look in looks]}})
    else:
        STDOUT.write("".join(look.line() + "\n" for look in looks))
        STDOUT.flush()
    return int(worst.exit_code)


def main_once(urls: Sequence[str], timeout_s: float, json_output: bool) -> int:
    """The fast path's command: `run_once` behind the error funnel's words (`funnel.failed`), as Typer's app would
    run it. Ctrl-C is the caller's (`__main__.main`: `interrupted`, 130)."""
    from dsv4ctl.render import reset_stdout

    reset_stdout()
    try:
        return run_once(urls, timeout_s, json_output)
    except Exception as exc:  # noqa: BLE001 - the funnel's whole point
        from dsv4ctl.commands.funnel import failed

        return failed(json_output, exc)
