from __future__ import annotations

import math

import pytest

from dsv4ctl.errors import UsageError
from dsv4ctl.units import GiB, format_gib, format_gib_vllm, format_tokens, parse_size, parse_vllm_int


@pytest.mark.parametrize(
    "text, expected",
    [
        ("123456", 123456),
        ("64M", 64 << 20),  # vLLM: upper-case one-letter suffixes are binary
        ("64m", 64_000_000),  # ... lower-case ones decimal
        ("10G", 10 << 30),
        ("25.6k", 25_600),
        ("64GB", 64_000_000_000),
        ("512MiB", 512 << 20),
        ("2GiB", 2 * GiB),
        ("1.5e3", 1500),
        ("10995116277760", 10995116277760),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


def test_parse_size_fractional_gib_rounds_up():
    assert parse_size("9.81GiB") == math.ceil(9.81 * GiB)


@pytest.mark.parametrize("text", ["", "abc", "-1GiB", "1XB", "nan", "inf", "9.81G"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        parse_size(text)


def test_formatters():
    assert format_gib(10.06 * GiB) == "10.06 GiB"
    assert format_tokens(1048576) == "1,048,576"
    assert format_gib_vllm(9.81 * GiB) == "9.81"
    assert format_gib_vllm(61.2 * GiB) == "61.2"


@pytest.mark.parametrize(
    "text, expected",
    [("auto", -1), ("-1", -1), ("1M", 1 << 20), ("1m", 10**6), ("512k", 512_000), ("1048576", 1048576)],
)
def test_parse_vllm_int_matches_vllm_human_readable_int_or_auto(text, expected):
    assert parse_vllm_int(text, allow_auto=True) == expected


def test_parse_vllm_int_rejects_what_vllm_rejects():
    with pytest.raises(UsageError, match="no decimals"):
        parse_vllm_int("1.5M")
    with pytest.raises(UsageError):
        parse_vllm_int("auto")  # only where auto is allowed


@pytest.mark.parametrize("text, hint", [
    ("1.5M", "write 1572864 (1.5 × 1,048,576, binary) or 1.5m (1,500,000, decimal)"),
    ("9.81GiB", "9.81GiB is 10533407294: write 10533407294"),
])
def test_a_form_vllm_refuses_is_answered_with_one_it_takes(text, hint):
    from dsv4ctl.errors import UsageError
    from dsv4ctl.units import parse_vllm_int

    with pytest.raises(UsageError) as err:
        parse_vllm_int(text, what="--kv-cache-memory-bytes")
    assert hint in err.value.hint
    number = err.value.hint.split("write ")[1].split(" ")[0]
    assert parse_vllm_int(number) > 0  # what the hint says to write is read
