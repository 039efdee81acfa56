"""Property tests: random bytes, truncations, huge lines, invalid UTF-8 never crash diagnose.

Whatever the input, `diagnose` returns a Diagnosis whose JSON round-trips, the hyperscan and `re`
paths agree, and diagnosing the parsed lines gives the same answer.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsv4ctl import files
from dsv4ctl.errors import InputError
from dsv4ctl.logs import prefilter
from dsv4ctl.advice import diagnose, diagnose_lines
from dsv4ctl.logs.reader import MAX_LINE_BYTES, iter_log_lines

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
SAMPLES = [p.read_bytes() for p in sorted(FIXTURES.glob("*.log"))]
ENGINES = ["re"] + (["hyperscan"] if prefilter.hyperscan_available() else [])

# Bytes that look like log material: keywords, prefixes, control characters, broken UTF-8.
PIECES = st.sampled_from(
    [
        b"\n", b"\r", b"\r\n", b"\x1b[31m", b"\x1b[0m", b"\xff", b"\xe2\x96", b"\x00",
        b"(Worker_TP0 pid=1) ", b"(EngineCore pid=2) ", b"vllm-1  | ", b"ERROR 10-21 09:00:00 [a.py:1] ",
        b"Traceback (most recent call last):", b'  File "/x/sparse_mla.py", line 259, in _build_c128a_metadata',
        b"AssertionError", b"Auto-fit max_model_len: reduced from 1048576 to 980224 to fit in available KV cache memory (9.81 GiB GPU)",
        b"max_model_len: reduced from 99999999999999999999 to 0", b"CUDA out of memory", b"illegal memory access",
        b"NCCL error: unhandled cuda error", b"Capturing CUDA graphs (FULL):  1%|| 1/83", b"Application startup complete.",
        b"Starting vLLM server on http://0.0.0.0:8000", b"KV cache size: 1,2,3 tokens", b"Maximum concurrency for x tokens",
        b"Initializing a V1 LLM engine (v) with config: max_seq_len=", b"[shutdown]", b"KeyboardInterrupt",
        b"Available KV cache memory: 1.2.3 GiB", b"To serve at least one request with the model's max seq len (",
    ]
)
LOGLIKE = st.lists(st.one_of(PIECES, st.binary(max_size=40)), max_size=60).map(b"".join)


def check(data: bytes) -> None:
    kind = files.kind_of(data[: 1 << 16])
    if kind is not None:
        # Compressed, re-encoded or binary (a NUL byte in the head, as grep tells one): either it decodes or it is a
        # clean InputError (exit 1) that says what the input is, never a crash.
        try:
            diagnose([io.BytesIO(data)])
        except InputError as exc:
            assert int(exc.exit_code) == 1
            assert ("binary file, not a log" in exc.message or "archive" in exc.message
                    or "-compressed" in exc.message or "cannot read" in exc.message), exc.message
            return
    results = []
    for engine in ENGINES:
        d = diagnose([io.BytesIO(data)], engine=engine)
        payload = d.to_json()
        assert json.loads(json.dumps(payload)) == payload
        # stuck (8): a cut that ends in a wait (the verdict issue 20 added; a truncated fixture can end there)
        assert payload["verdict"] in ("failed", "healthy", "inconclusive", "stuck")
        assert int(d.exit_code) in (0, 3, 4, 5, 8)
        assert (payload["verdict"] == "stuck") == (int(d.exit_code) == 8)
        results.append(payload)
    results.append(diagnose_lines(iter_log_lines([io.BytesIO(data)])).to_json())
    for r in results:
        r.pop("sources")  # an empty stream yields no line, so diagnose_lines never sees its name
    for other in results[1:]:
        assert other == results[0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4096))
def test_random_bytes(data):
    check(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LOGLIKE)
def test_log_like_garbage(data):
    check(data)


GZIPPED = gzip.compress(b"".join(SAMPLES[:3]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=2, max_value=len(GZIPPED) - 1), st.integers(min_value=1, max_value=255), st.booleans())
def test_corrupt_and_truncated_gzip(position, flip, truncate):
    # A damaged .gz must end as a clean InputError (or what was readable), never a zlib traceback.
    data = GZIPPED[:position] if truncate else GZIPPED[:position] + bytes([GZIPPED[position] ^ flip]) + GZIPPED[position + 1 :]
    check(data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=len(SAMPLES) - 1), st.floats(min_value=0, max_value=1))
def test_truncated_fixtures(index, fraction):
    data = SAMPLES[index]
    check(data[: int(len(data) * fraction)])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.integers(min_value=MAX_LINE_BYTES - 3, max_value=3 * MAX_LINE_BYTES), st.sampled_from([b"x", b"\xff", b"ERROR ", b"\r"]))
def test_huge_lines(length, unit):
    body = (unit * (length // len(unit) + 1))[:length]
    check(b"Traceback (most recent call last):\n" + body + b" illegal memory access\nAssertionError\n")


@pytest.mark.parametrize("index", range(len(SAMPLES)))
def test_whole_fixtures(index):
    """Every fixture whole, each engine alike (hypothesis above cuts them at random, and may not pick the whole)."""
    check(SAMPLES[index])
