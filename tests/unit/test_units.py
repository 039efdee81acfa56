from __future__ import annotations

import math

import pytest

from dsv4ctl.errors import UsageError
from dsv4ctl.units import GiB, format_gib, format_tokens, parse_size


@pytest.mark.parametrize(
    "text, expected",
    [
        ("123456", 123456),
        ("64M", 64_000_000),
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


@pytest.mark.parametrize("text", ["", "abc", "-1GiB", "1XB", "nan", "inf"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        parse_size(text)


def test_formatters():
    assert format_gib(10.06 * GiB) == "10.06 GiB"
    assert format_tokens(1048576) == "1,048,576"
