"""`dsv4ctl diagnose`: a log (or a deployment's logs) read, rendered, and the verdict's exit code."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
from pathlib import Path

import typer

from dsv4ctl.commands.common import complete_example, stop_on_signals

SVG_HINT = "choose another --svg (a file in a directory you can write)"


def diagnose_command(
    paths: list[str] | None = typer.Argument(
        None, metavar="PATHS", help="Log files (several for per-process logs), - for stdin; gzip, xz, bzip2, a zip of one log and UTF-16 are read as they are."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON (schema_version 1) on stdout."),
    example: str | None = typer.Option(
        None, "--example", metavar="NAME", help="Diagnose an example log shipped with dsv4ctl (see --list-examples).",
        autocompletion=complete_example,
    ),
    list_examples: bool = typer.Option(False, "--list-examples", help="List the example logs and exit."),
    svg: Path | None = typer.Option(None, "--svg", metavar="FILE", help="A deployment (a collect bundle, or several launches' logs): also save the report as SVG."),
) -> None:
    """Diagnose a vLLM startup log: verdict, root cause with evidence, timeline and the next command.

    A `dsv4ctl collect` bundle, or logs of several launches (the nodes of a group), are read as one
    deployment: its ranks side by side, the first originating error across them, the silent ranks.
    Logs of separate launches are said to be separate, each read on its own; a file given twice is
    read once.

    Exit status: 0 no failure, 3 failed with a known cause, 4 failed with an unknown cause,
    5 inconclusive (the log ends before ready), 8 stuck (the start's last evidence is a wait, nothing
    failed after it), 1 the log could not be read, 143/129 stopped by SIGTERM/SIGHUP.
    """
    from dsv4ctl.errors import UsageError
    from dsv4ctl.advice import diagnose
    from dsv4ctl.render import emit_json, out_console
    from dsv4ctl.render.diagnose import render_diagnosis, render_examples

    if list_examples:
        from dsv4ctl.logs.examples import list_examples as all_examples

        examples = all_examples()
        if json_out:
            emit_json({"examples": [{"name": e.name, "description": e.description} for e in examples]})
        else:
            render_examples(examples, out_console())
        return
    if example and paths:
        raise UsageError("give log paths or --example, not both")
    if example:
        from dsv4ctl.logs.examples import example_path

        sources: list[str] = [str(example_path(example))]
    elif paths:
        from dsv4ctl.group.detect import distinct

        sources = distinct(list(paths))
        if len(sources) < len(paths):
            from dsv4ctl.render import err_console

            again = list(paths)
            for p in sources:
                again.remove(p)
            err_console().print(f"dsv4ctl diagnose: read once, given again: {', '.join(again)}", markup=False)
    else:
        raise UsageError(
            "no log given",
            hint="dsv4ctl diagnose vllm.log (or - for stdin); try: dsv4ctl diagnose --example stale-max-model-len",
        )
    from dsv4ctl.render.progress import input_bytes, read_progress
    from dsv4ctl.group import is_group

    _prompt_for_stdin(sources)

    if is_group(sources):
        _diagnose_group(sources, json_out, svg)
    if svg is not None:
        raise UsageError("--svg goes with a deployment: a collect bundle or several launches' logs")
    # A bar of bytes read on stderr for inputs over 50 MB, on a terminal only.
    with stop_on_signals(), read_progress(input_bytes(sources), "reading the log") as progress:
        result = diagnose(sources, progress=progress)
    from dsv4ctl.files import cut_short
    from dsv4ctl.render import warning_line

    for name, kind in cut_short():  # the report is of what the file holds: say that it stops early
        warning_line(f"{name} is cut short: its {kind} data ends before its end mark; the report is of what it holds")
    if json_out:
        emit_json(result.to_json())
    else:
        render_diagnosis(result, out_console())
    raise typer.Exit(int(result.exit_code))


def _prompt_for_stdin(sources: list[str]) -> None:
    """`-` read from a terminal: say so on stderr, or the command seems to hang waiting for a paste."""
    import sys

    if "-" in sources and sys.stdin is not None and sys.stdin.isatty():
        from dsv4ctl.render import err_console

        err_console().print("Reading the log from stdin: paste it, then press Ctrl-D on a line of its own "
                            "(Ctrl-Z, Enter on Windows).", markup=False)


def _diagnose_group(sources: list[str], json_out: bool, svg: Path | None) -> None:
    """`diagnose` of a deployment: read as one group, rendered, exit with the group's verdict."""
    from dsv4ctl.group import read_group
    from dsv4ctl.render import emit_json, err_console, out_console
    from dsv4ctl.files import check_target, write_whole
    from dsv4ctl.render.group import group_svg, render_group
    from dsv4ctl.render.progress import input_bytes, read_progress

    if svg is not None:
        check_target(svg, hint=SVG_HINT)  # before the logs are read: a path that cannot be written fails now
    with stop_on_signals(), read_progress(input_bytes(sources), "reading the logs") as progress:
        reading = read_group(sources, progress=progress)
    if svg is not None:  # before the report: an SVG that cannot be written is the command's one error
        write_whole(svg, group_svg(reading).encode("utf-8"), hint=SVG_HINT)
        err_console().print(f"saved {svg}", markup=False)
    if json_out:
        emit_json(reading.to_json())
    else:
        render_group(reading, out_console())
    raise typer.Exit(int(reading.exit_code))
