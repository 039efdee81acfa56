"""The dsv4ctl command line: thin Typer commands that parse, call the core, and render.

Nothing else lives here. The core packages (`logs`, `planning`, `gpu`, `fixes`, `serve`) return
dataclasses or raise `Dsv4ctlError`; this module turns results into output and exit codes, and every
error into one line plus a hint (a traceback only with DSV4CTL_DEBUG=1).

Keep imports at module level light: `dsv4ctl --help`, `diagnose` and `fit-length` must start fast on
a machine without vLLM, torch or a GPU. Import heavy modules inside the command that needs them.

The commands themselves are in `dsv4ctl/commands/`, one module each; this module is the one face: the Typer app,
the error funnel, the root options, and the registration of every command.
"""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up, and strings
# would each be compiled by typing.get_type_hints first (about 4 ms of every run, `--help` included).
from typing import Any

import typer
from typer.core import TyperGroup

from dsv4ctl import __version__
from dsv4ctl.commands.funnel import DEBUG_ENV, fail, failed
from dsv4ctl.errors import Dsv4ctlError, ExitCode, exit_code_table


class _ArgumentHelp:
    """How `--help` names an argument, the Unix way: `MODEL` (required), `[PATHS]...` (optional, repeated), its
    metavar alone in the arguments' list (Typer would add `{model}` and `<list[str]>`)."""

    @staticmethod
    def usage(param: Any) -> str:
        name = param.display_name_raw
        name = name if param.required else f"[{name}]"
        return name + ("..." if param.nargs != 1 else "")

    @staticmethod
    def type_shown(param: Any, ctx: Any, shown: Any) -> Any:
        return None if param.metavar is not None else shown(param, ctx)


def _name_arguments_plainly() -> None:
    from typer.core import TyperArgument

    shown = TyperArgument.display_type_rich
    TyperArgument._usage_display_name = _ArgumentHelp.usage  # type: ignore[method-assign]
    TyperArgument.display_type_rich = lambda self, ctx: _ArgumentHelp.type_shown(self, ctx, shown)  # type: ignore[method-assign]


_name_arguments_plainly()


class _ErrorFunnel(TyperGroup):
    """Turns every exception escaping a command into one line, a hint and an exit code."""

    def make_context(self, info_name: Any, args: list[str], parent: Any = None, **extra: Any) -> Any:
        """The command line parsed (Typer's first parse loads its type adapters: tens of ms); Ctrl-C meanwhile is
        `interrupted` as it is once the command runs (Typer itself would exit 130 without a word)."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except KeyboardInterrupt:
            given = list(args)
            json_mode = "--json" in (given[: given.index("--")] if "--" in given else given)
            return self._fail(json_mode, "interrupted", None, ExitCode.INTERRUPTED)

    def invoke(self, ctx: Any) -> Any:
        from dsv4ctl.render import reset_stdout

        reset_stdout()
        args = [*getattr(ctx, "_protected_args", []), *ctx.args]
        json_mode = "--json" in (args[: args.index("--")] if "--" in args else args)
        try:
            return super().invoke(ctx)
        except Dsv4ctlError as exc:
            raise typer.Exit(failed(json_mode, exc)) from None
        except KeyboardInterrupt:
            return self._fail(json_mode, "interrupted", None, ExitCode.INTERRUPTED)
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - the funnel's whole point
            if _exc_is_click(exc):
                if json_mode:
                    from dsv4ctl.render import emit_json_error

                    emit_json_error(exc.format_message(), None, getattr(exc, "exit_code", ExitCode.USAGE))
                raise
            raise typer.Exit(failed(json_mode, exc)) from None

    @staticmethod
    def _fail(json_mode: bool, message: str, hint: str | None, code: int) -> Any:
        """One line plus a hint on stderr; with --json also the error document on stdout (`funnel.fail`)."""
        raise typer.Exit(fail(json_mode, message, hint, code))


def _exc_is_click(exc: BaseException) -> bool:
    # Typer vendors Click; its usage errors must keep Click's own handling (exit 2).
    return any(cls.__name__ in ("ClickException", "UsageError", "BadParameter") for cls in type(exc).__mro__)


HELP = f"""Launch and diagnose vLLM servers that run DeepSeek-V4.

\b
Exit codes:
{exit_code_table()}

Set {DEBUG_ENV}=1 for tracebacks, NO_COLOR=1 for plain output.
"""

app = typer.Typer(
    cls=_ErrorFunnel,
    help=HELP,
    no_args_is_help=True,
    add_completion=True,  # Typer's own --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"dsv4ctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", "-V", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Launch and diagnose vLLM servers that run DeepSeek-V4."""


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point. Returns the exit status instead of calling sys.exit itself."""
    try:
        app(args=argv, prog_name="dsv4ctl", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else int(ExitCode.ERROR))
    return int(ExitCode.OK)


# The commands, registered in the order `--help` lists them.
from dsv4ctl.commands import check, collect, diagnose, diff, doctor, fit_length, gpus, probe, serve  # noqa: E402

app.command("diagnose")(diagnose.diagnose_command)
app.command("diff")(diff.diff_command)
app.command("fit-length")(fit_length.fit_length_command)
app.command("gpus")(gpus.gpus_command)
app.command("doctor")(doctor.doctor_command)
app.add_typer(probe.probe_app, name="probe")
app.command("check")(check.check_command)
app.command("watch")(check.watch_command)
app.command(
    "serve",
    help=serve.SERVE_HELP,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": ["--help"]},
    options_metavar="MODEL [OPTIONS] [VLLM FLAGS]...",
)(serve.serve_command)
app.command("collect")(collect.collect_command)
