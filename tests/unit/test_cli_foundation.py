"""The CLI's shared behaviour: help, version, exit codes, the error funnel."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from dsv4ctl import __version__, cli as cli_module
from dsv4ctl.errors import Dsv4ctlError, ExitCode, InputError, UsageError


def test_version(cli):
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"dsv4ctl {__version__}"


def test_help_documents_every_exit_code(cli):
    result = cli("-h")
    assert result.exit_code == 0
    for code in ExitCode:
        assert f"{int(code):>3}  {code.__doc__}" in result.stdout


def test_exit_codes_are_stable():
    # These numbers are a contract with scripts; changing one is a breaking change.
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 130]


def test_unknown_command_is_a_usage_error(cli):
    result = cli("no-such-command")
    assert result.exit_code == ExitCode.USAGE


@pytest.fixture
def failing_command():
    """Register a throwaway command that raises what the test hands it."""
    raised: list[BaseException] = []

    @cli_module.app.command("_raise", hidden=True)
    def _raise() -> None:
        raise raised[0]

    yield raised
    cli_module.app.registered_commands[:] = [
        c for c in cli_module.app.registered_commands if c.name != "_raise"
    ]


@pytest.mark.parametrize(
    "exc, code",
    [
        (InputError("cannot read x.log", hint="check the path"), ExitCode.ERROR),
        (UsageError("invalid size 'abc'"), ExitCode.USAGE),
        (Dsv4ctlError("does not fit", exit_code=ExitCode.DOES_NOT_FIT), ExitCode.DOES_NOT_FIT),
    ],
)
def test_funnel_turns_our_errors_into_one_line(cli, failing_command, exc, code):
    failing_command.append(exc)
    result = cli("_raise")
    assert result.exit_code == code
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines[0] == f"Error: {exc.message}"
    if exc.hint:
        assert lines[1] == f"Hint: {exc.hint}"
    assert "Traceback" not in result.output


def test_funnel_hides_tracebacks_of_bugs_unless_debug(cli, failing_command, monkeypatch):
    failing_command.append(ZeroDivisionError("boom"))
    result = cli("_raise")
    assert result.exit_code == ExitCode.ERROR
    assert "internal error: ZeroDivisionError: boom" in result.stderr
    assert "DSV4CTL_DEBUG=1" in result.stderr
    assert "Traceback" not in result.output

    monkeypatch.setenv("DSV4CTL_DEBUG", "1")
    result = cli("_raise")
    assert result.exit_code == ExitCode.ERROR
    assert "Traceback" in result.stderr


def test_keyboard_interrupt_exits_130(cli, failing_command):
    failing_command.append(KeyboardInterrupt())
    result = cli("_raise")
    assert result.exit_code == ExitCode.INTERRUPTED


def test_python_dash_m_and_light_imports():
    # `python -m dsv4ctl --help` must not import vLLM, torch or pynvml.
    code = (
        "import sys, runpy; sys.argv=['dsv4ctl','--help'];\n"
        "try:\n    runpy.run_module('dsv4ctl', run_name='__main__')\n"
        "except SystemExit: pass\n"
        "heavy = [m for m in ('vllm','torch','pynvml') if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out


@pytest.mark.parametrize(
    ("argv", "collector_on"),
    [
        (["diagnose", "vllm.log"], False),
        (["--version"], False),
        ([], False),
        (["fit-length", "--json", "deepseek-ai/DeepSeek-V4-Flash"], False),
        (["check", "http://127.0.0.1:8000"], False),
        (["serve", "deepseek-ai/DeepSeek-V4-Flash"], True),
        (["watch", "http://127.0.0.1:8000"], True),
        (["collect", "--help"], True),
        (["--", "diagnose"], True),
    ],
)
def test_the_process_entry_runs_bounded_commands_without_the_collector(monkeypatch, argv, collector_on):
    # dsv4ctl.__main__ is where the console script starts: the cyclic collector is off while a bounded command
    # runs (its imports included), on for the others (vLLM in-process, a watch loop), and as it was afterwards.
    import gc

    import dsv4ctl.__main__ as entry

    seen: list[bool] = []
    monkeypatch.setattr(cli_module, "main", lambda args=None: seen.append(gc.isenabled()) or 7)
    assert gc.isenabled()
    assert entry.main(argv) == 7
    assert seen == [collector_on]
    assert gc.isenabled()


def test_the_console_script_is_the_process_entry():
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "dsv4ctl"]
    assert script.value == "dsv4ctl.__main__:main"
