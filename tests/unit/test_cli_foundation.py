"""The CLI's shared behaviour: help, version, exit codes, the error funnel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

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
    flat = " ".join(result.stdout.split())  # wrapped to 80 columns under each code
    for code in ExitCode:
        assert f"{int(code)} {code.__doc__}" in flat


def test_exit_codes_are_stable():
    # These numbers are a contract with scripts; changing one is a breaking change.
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 130]


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


def test_ctrl_c_that_python_wrapped_is_still_an_interrupt(cli, failing_command):
    # Ctrl-C inside an import's class body comes back as __set_name__'s RuntimeError with the interrupt as its cause
    # (seen when Ctrl-C lands while dataclasses are being built): exit 130, "interrupted", not an internal error.
    def wrapped() -> RuntimeError:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as inner:
            try:
                raise RuntimeError("Error calling __set_name__ on 'Field' instance 'x' in 'Y'") from inner
            except RuntimeError as outer:
                return outer

    failing_command.append(wrapped())
    result = cli("_raise")
    assert result.exit_code == ExitCode.INTERRUPTED
    assert "interrupted" in result.stderr and "internal error" not in result.stderr


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
    handler = signal.getsignal(signal.SIGINT)
    try:
        assert entry.main(argv) == 7
    finally:
        signal.signal(signal.SIGINT, handler)  # the process entry's Ctrl-C handler is the process's: not the next test's
    assert seen == [collector_on]
    assert gc.isenabled()


def test_the_console_script_is_the_process_entry():
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "dsv4ctl"]
    assert script.value == "dsv4ctl.__main__:main"


@pytest.mark.parametrize(
    ("argv", "early"),
    [
        (["diagnose", "big.log"], "big.log"),
        (["diagnose", "--json", "big.log"], "big.log"),
        (["diagnose", "big.log", "--json"], "big.log"),
        (["diagnose", "a.log", "b.log"], None),
        (["diagnose", "-"], None),
        (["diagnose", "--example", "healthy"], None),
        (["diagnose", "big.log", "--svg", "x.svg"], None),
        (["--json", "diagnose", "big.log"], None),
        (["check", "big.log"], None),
    ],
)
def test_only_a_plain_diagnose_of_one_log_prestarts_its_scan(argv, early):
    import dsv4ctl.__main__ as entry

    assert entry._early_log(argv) == early


def test_the_process_entry_prestarts_the_scan_diagnose_then_adopts(tmp_path, monkeypatch):
    # A subprocess as a user runs it: the entry begins the scan, `diagnose` adopts it, the report is the in-process one.
    import json

    from dsv4ctl.advice import diagnose
    from tests.unit.test_logs_parallel import _mixed_log

    path = tmp_path / "big.log"
    path.write_bytes(_mixed_log() * 4)
    code = (
        "import sys, dsv4ctl.logs.parallel as p\n"
        "p.PARALLEL_MIN_BYTES = 1\n"  # before the entry reads it: this small log is scanned in parallel
        "real = p.prestart\n"
        "def prestart(*a, **k):\n"
        "    k.setdefault('min_bytes', 1)\n"
        "    began = real(*a, **k)\n"
        "    print('PRESTARTED', began, file=sys.stderr)\n"
        "    return began\n"
        "p.prestart = prestart\n"
        "real_adopt = p._adopt\n"
        "def adopt(*a):\n"
        "    got = real_adopt(*a)\n"
        "    print('ADOPTED', got is not None, file=sys.stderr)\n"
        "    return got\n"
        "p._adopt = adopt\n"
        "import dsv4ctl.diagnosis.run as r\n"
        "r.parallel.PARALLEL_MIN_BYTES = 1\n"
        "from dsv4ctl.__main__ import main\n"
        "sys.exit(main(['diagnose', '--json', sys.argv[1]]))\n"
    )
    env = {**os.environ, "DSV4CTL_DIAGNOSE_WORKERS": "2"}
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, timeout=120)
    assert "PRESTARTED True" in done.stderr and "ADOPTED True" in done.stderr, done.stderr
    expected = diagnose([path], workers=2, parallel_min_bytes=1).to_json()
    got = json.loads(done.stdout)
    assert got.pop("schema_version") == 1 and got == json.loads(json.dumps(expected))


def test_a_diagnose_process_ends_at_once_with_its_output_whole_and_its_status(tmp_path):
    # The process entry skips the interpreter's finalization for diagnose: what was written still arrives whole,
    # through a pipe or into a file, with the verdict's exit status; a reader that went away costs no traceback.
    import json

    log = tmp_path / "big.log"
    example = (Path(__file__).resolve().parents[2] / "dsv4ctl" / "examples" / "stale-max-model-len.log").read_bytes()
    log.write_bytes(example * 40)  # 40 starts: a long report
    cmd = [sys.executable, "-m", "dsv4ctl", "diagnose", "--json", str(log)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == ExitCode.FAILED_KNOWN_CAUSE and done.stderr == ""
    assert len(json.loads(done.stdout)["starts"]) == 40
    with open(tmp_path / "out.json", "w") as out:
        assert subprocess.run(cmd, stdout=out, timeout=120).returncode == ExitCode.FAILED_KNOWN_CAUSE
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads(done.stdout)
    head = subprocess.run(f"{subprocess.list2cmdline(cmd[:-1] + [str(log)])} | head -c 10; exit ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120)
    assert head.returncode == ExitCode.FAILED_KNOWN_CAUSE and "Traceback" not in head.stderr and len(head.stdout) == 10


def test_error_and_warning_lines_show_their_text_as_written(capsys):
    from dsv4ctl.render import error_line, warning_line

    error_line("x must be [major, minor], got [bold]null[/bold]", "write [9, 0]")
    warning_line("not collected: [pod/vllm-0/vllm]: gone")
    err = capsys.readouterr().err
    assert "Error: x must be [major, minor], got [bold]null[/bold]" in err
    assert "Hint: write [9, 0]" in err and "Warning: not collected: [pod/vllm-0/vllm]: gone" in err
