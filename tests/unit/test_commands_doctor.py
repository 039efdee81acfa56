"""doctor shows a spinner on stderr while the child inspects vLLM, and fails on a --python that cannot run."""

from __future__ import annotations

import io
import json
import time

from rich.console import Console

from dsv4ctl.errors import ExitCode


def test_spinner_on_stderr_while_vllm_is_inspected(cli, monkeypatch, tmp_path):
    import dsv4ctl.doctor as doctor
    import dsv4ctl.render as render

    stderr = io.StringIO()
    monkeypatch.setattr(render, "err_console", lambda: Console(file=stderr, force_terminal=True, width=100))
    real = doctor.build_report

    def slow(python=None):
        time.sleep(0.3)  # the child importing vLLM
        return real(python=python)

    monkeypatch.setattr(doctor, "build_report", slow)
    result = cli("doctor", "--json", "--python", str(tmp_path / "missing-python"))
    assert "inspecting vLLM and torch with" in stderr.getvalue()
    json.loads(result.stdout)  # stdout holds the report only


def test_python_that_cannot_run_exits_1(cli, tmp_path):
    result = cli("doctor", "--python", str(tmp_path / "nonexistent"))
    assert result.exit_code == ExitCode.ERROR
    assert "dsv4ctl" in result.stdout  # the report is still there for the bug report
    assert result.stderr.strip().splitlines()[-2].startswith("Error: --python ")
