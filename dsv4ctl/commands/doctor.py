"""`dsv4ctl doctor`: one screen for a bug report."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
import sys

import typer


def doctor_command(
    json_output: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    python: str | None = typer.Option(
        None, "--python", metavar="PATH",
        help="The Python that runs vLLM (e.g. /opt/vllm/bin/python). Default: the one running dsv4ctl.",
    ),
) -> None:
    """One screen for a bug report: versions, GPUs, DeepGEMM, each fix's status, environment (secrets redacted).

    Works without a GPU and without vLLM (it says what is missing). vLLM and torch are inspected in a
    child process of --python, never imported here.

    Exit 0 with the report, 1 when the Python given with --python cannot run (the rest of the report is still shown),
    2 for bad flags.
    """
    from dsv4ctl.doctor import build_report
    from dsv4ctl.errors import InputError
    from dsv4ctl.render import emit_json, err_console, out_console

    # Importing vLLM in the child can take many seconds: show a spinner on stderr (a terminal only).
    with err_console().status(f"inspecting vLLM and torch with {python or sys.executable} …", spinner="dots"):
        report = build_report(python=python)
    if json_output:
        emit_json(report.to_json())
    else:
        from dsv4ctl.render.doctor import render_doctor

        render_doctor(report, out_console())
    if report.target_error:  # the rest of the report is still shown, but the Python asked about cannot run it
        raise InputError(
            f"--python {report.target_python}: {report.target_error}",
            hint="give the Python that runs vLLM, e.g. --python /opt/vllm/bin/python (its `python -c 'import vllm'` must work)",
        )
