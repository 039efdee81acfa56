"""Failures a program can read (--json errors on stdout) and pipes that close early."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dsv4ctl.errors import ExitCode

FLASH = "deepseek-ai/DeepSeek-V4-Flash"


def _error_doc(result) -> dict:
    doc = json.loads(result.stdout)  # exactly one JSON document
    assert doc["schema_version"] == 1
    assert set(doc["error"]) == {"message", "hint", "exit_code"}
    assert doc["error"]["exit_code"] == result.exit_code
    return doc["error"]


@pytest.mark.parametrize(
    "args, code, fragment",
    [
        (["fit-length", FLASH, "--kv-cache-memory", "abc", "--json"], ExitCode.USAGE, "invalid --kv-cache-memory"),
        (["fit-length", "/nonexistent/config.json", "--kv-cache-memory", "9GiB", "--json"], ExitCode.ERROR, "no such file"),
        (["diagnose", "/nonexistent.log", "--json"], ExitCode.ERROR, "/nonexistent.log"),
        (["diagnose", "--json"], ExitCode.USAGE, "no log given"),
        (["gpus", "--snapshot", "/nonexistent.json", "--json"], ExitCode.ERROR, "/nonexistent.json"),
        (["fit-length", "--json"], ExitCode.USAGE, "Missing argument"),  # Click's own usage errors too
        (["fit-length", FLASH, "--json", "--no-such-flag"], ExitCode.USAGE, "No such option"),
    ],
)
def test_json_errors_are_a_document_on_stdout(cli, args, code, fragment):
    result = cli(*args)
    assert result.exit_code == code, result.output
    error = _error_doc(result)
    assert fragment in error["message"]
    assert "Error:" in result.stderr  # people still get the line on stderr


def test_without_json_stdout_stays_empty_on_error(cli):
    result = cli("fit-length", FLASH, "--kv-cache-memory", "abc")
    assert result.exit_code == ExitCode.USAGE and result.stdout == ""


def test_a_command_that_wrote_its_document_gets_no_second_one(cli):
    result = cli("serve", FLASH, "--kv-cache-memory-bytes", "1G", "--max-model-len", "1048576", "--dry-run", "--json")
    json.loads(result.stdout)  # one document, whatever the verdict


def _run_with_closed_stdout(*args: str) -> subprocess.CompletedProcess:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte: every write hits EPIPE
    try:
        return subprocess.run(
            [sys.executable, "-m", "dsv4ctl", *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
            env={**os.environ, "NO_COLOR": "1"},
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args, code",
    [
        (["diagnose", "--example", "stale-max-model-len"], ExitCode.FAILED_KNOWN_CAUSE),
        (["diagnose", "--example", "stale-max-model-len", "--json"], ExitCode.FAILED_KNOWN_CAUSE),
        (["fit-length", FLASH, "--kv-cache-memory", "9.81GiB"], ExitCode.OK),
        (["fit-length", FLASH, "--kv-cache-memory", "4MiB"], ExitCode.DOES_NOT_FIT),
    ],
)
def test_closed_stdout_ends_quietly_with_the_commands_own_code(args, code):
    proc = _run_with_closed_stdout(*args)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_head_sees_the_verdict_and_the_status_is_diagnoses():
    script = f"{sys.executable} -m dsv4ctl diagnose --example stale-max-model-len | head -1; echo \"rc=${{PIPESTATUS[0]}}\""
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert proc.stdout.splitlines()[-1] == "rc=3"
    assert "Traceback" not in proc.stderr
