"""Memory flags are read safely: a bare number below 1 MiB is a forgotten unit, not bytes."""

from __future__ import annotations

import json

import pytest

from dsv4ctl.errors import ExitCode, UsageError
from dsv4ctl.units import GiB, check_vllm_memory_flags, describe_bytes, parse_memory_flag

FLASH = "deepseek-ai/DeepSeek-V4-Flash"


@pytest.mark.parametrize("text, suggestion", [("9.81", "9.81GiB"), ("9", "9GiB"), ("4096", "4096MiB"), ("1.5e3", "1.5e3MiB")])
def test_bare_small_number_is_refused_with_the_likely_unit(text, suggestion):
    with pytest.raises(UsageError) as info:
        parse_memory_flag(text, what="--kv-cache-memory")
    assert info.value.exit_code == ExitCode.USAGE
    assert f"did you mean {suggestion}?" in info.value.hint


@pytest.mark.parametrize(
    "text, expected", [("0", 0), ("1048576", 1 << 20), ("10533407294", 10_533_407_294), ("9.81GiB", 10_533_407_294), ("512KiB", 512 << 10)]
)
def test_units_and_large_byte_counts_pass(text, expected):
    assert parse_memory_flag(text, what="--kv-cache-memory") == expected


def test_describe_bytes_shows_both_gigabytes():
    assert describe_bytes(9_810_000_000) == "9,810,000,000 bytes (9.14 GiB, 9.81 GB)"
    assert describe_bytes(10_533_407_294) == "10,533,407,294 bytes (9.81 GiB, 10.53 GB)"


@pytest.mark.parametrize("flag", ["--kv-cache-memory", "--weights-memory", "--overhead", "--margin"])
def test_every_fit_length_memory_flag_refuses_a_forgotten_unit(cli, flag):
    base = [] if flag == "--kv-cache-memory" else ["--kv-cache-memory", "9.81GiB"]
    result = cli("fit-length", FLASH, *base, flag, "9.81")
    assert result.exit_code == ExitCode.USAGE, result.output
    assert "has no unit" in result.stderr and "did you mean 9.81GiB?" in result.stderr
    assert result.stdout == ""


def test_fit_length_states_the_bytes_it_understood(cli):
    result = cli("fit-length", FLASH, "--kv-cache-memory", "9.81GB")
    assert result.exit_code == 0
    assert "--kv-cache-memory 9.81GB read as 9,810,000,000 bytes (9.14 GiB, 9.81 GB)" in result.stderr
    assert "--kv-cache-memory-bytes 9810000000" in result.stdout


def test_json_error_for_a_forgotten_unit(cli):
    result = cli("fit-length", FLASH, "--kv-cache-memory", "9.81", "--json")
    assert result.exit_code == ExitCode.USAGE
    doc = json.loads(result.stdout)
    assert doc["error"]["exit_code"] == 2 and "did you mean 9.81GiB?" in doc["error"]["hint"]


@pytest.mark.parametrize("argv", [["--kv-cache-memory-bytes", "9"], ["--kv-cache-memory-bytes=9"]])
def test_serve_refuses_vllm_bytes_flag_without_unit(cli, argv):
    result = cli("serve", FLASH, *argv, "--dry-run")
    assert result.exit_code == ExitCode.USAGE
    assert "did you mean --kv-cache-memory-bytes 9G?" in result.stderr


def test_vllm_bytes_flag_read_as_vllm_reads_it():
    assert check_vllm_memory_flags(["--kv-cache-memory-bytes", "10G"]) == [("--kv-cache-memory-bytes", 10 * GiB)]
    assert check_vllm_memory_flags(["--kv-cache-memory-bytes", "9.81G"]) == []  # vLLM's parser refuses it itself
    assert check_vllm_memory_flags(["-tp", "8"]) == []


def test_serve_states_the_bytes_vllm_will_read(cli):
    result = cli("serve", FLASH, "--kv-cache-memory-bytes", "10g", "--dry-run", "--json")
    assert "--kv-cache-memory-bytes read as 10,000,000,000 bytes (9.31 GiB, 10.00 GB)" in result.stderr
    json.loads(result.stdout)  # stdout keeps the one document
