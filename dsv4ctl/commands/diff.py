"""`dsv4ctl diff`: two starts read, compared, rendered; exit 0 once compared."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
import typer

from dsv4ctl.commands.common import stop_on_signals


def diff_command(
    good: str = typer.Argument(..., metavar="GOOD", help="The start that worked: LOG (its last start), LOG#N (the Nth, as diagnose numbers them; #-1 the last) or - for stdin."),
    bad: str = typer.Argument(..., metavar="BAD", help="The start that failed, the same way."),
    json_out: bool = typer.Option(False, "--json", help="Print the comparison as JSON (schema_version 1) on stdout."),
) -> None:
    """Compare a start that worked with one that failed: the differences that bear on the failure first.

    Each side is a log file (its last start), a start of a log (LOG#2; LOG#-1 the last) or - (stdin,
    once). Lined up: the resolved max_model_len and auto-fit, the available KV memory, vLLM and
    torch/CUDA where logged, the dsv4ctl fixes line, the GPUs, the non-default args, the environment
    the log shows, the model, and the phases side by side. A fact one log lacks is "not in log".

    Exit status: 0 compared, 1 a log could not be read, 2 usage (a start the log does not hold).
    """
    from dsv4ctl.compare import compare, parse_pair
    from dsv4ctl.render import emit_json, out_console
    from dsv4ctl.render.diff import render_diff

    good_spec, bad_spec = parse_pair(good, bad)
    stdin = _stdin() if "-" in (good_spec.path, bad_spec.path) else None
    with stop_on_signals():
        result = compare(good_spec, bad_spec, stdin)
    if json_out:
        emit_json(result.to_json())
    else:
        render_diff(result, out_console())
    raise typer.Exit(0)


def _stdin():
    """stdin's bytes, once (a side given as - is read twice: diagnosed, then its start's lines)."""
    import sys

    if sys.stdin is not None and sys.stdin.isatty():
        from dsv4ctl.render import err_console

        err_console().print("Reading a log from stdin: paste it, then press Ctrl-D on a line of its own.", markup=False)
    return sys.stdin.buffer.read() if sys.stdin is not None else b""
