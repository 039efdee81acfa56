"""`dsv4ctl probe …`: questions about this node answered without starting vLLM."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
from pathlib import Path

import typer

from dsv4ctl.errors import ExitCode
from dsv4ctl.render import error_line

probe_app = typer.Typer(
    help="Probes that answer questions about this node without starting vLLM.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def probe_deepgemm_command(
    mode: str | None = typer.Option(
        None, "--mode", metavar="static|kernel|python",
        help="Default: the strongest available of kernel, python, static.",
    ),
    include: str | None = typer.Option(
        None, "--include", metavar="DIR",
        help="Probe this DeepGEMM include directory (holds deep_gemm/) instead of the one vLLM would use.",
    ),
    cutlass_include: list[str] = typer.Option(
        [], "--cutlass-include", metavar="DIR",
        help="Extra include directory holding cute/ and cutlass/ (kernel mode; repeatable).",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Is this node's DeepGEMM affected by the SM90 scheduler-metadata out-of-bounds read?

    kernel: compile and run DeepGEMM's metadata kernel on an SM90 GPU (needs nvcc); python: the
    upstream repro through vllm.utils.deep_gemm (needs vLLM + GPU); static: read the header.
    Exit 7 when affected, 0 when not, 1 when it cannot tell.
    """
    from dsv4ctl.probe.deepgemm import run_probe
    from dsv4ctl.probe.text import check_arguments, exit_code
    from dsv4ctl.render import emit_json, out_console

    check_arguments(mode, include)
    result = run_probe(mode, include, [Path(p).expanduser() for p in cutlass_include])
    if json_output:
        emit_json(result.to_json())
    else:
        from dsv4ctl.render.probe import render_probe

        render_probe(result, out_console())
    code = exit_code(result)
    if code == ExitCode.ERROR and not json_output and not out_console().is_terminal:
        # The verdict line says why on stdout; stderr says it too only where stdout is not on the screen.
        error_line(f"cannot tell whether DeepGEMM is affected: {result.reason}")
    if code != ExitCode.OK:
        raise typer.Exit(int(code))

probe_app.command("deepgemm")(probe_deepgemm_command)
