"""The one secret rule (dsv4ctl/redaction), as `collect` applies it to every line of a gathered log."""

from __future__ import annotations

import pytest

from dsv4ctl.redaction import REDACTED, redact_line

R = REDACTED


@pytest.mark.parametrize("line, expected, count", [
    ("export HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWx12", f"export HF_TOKEN={R}", 1),
    ("loading with token hf_AbCdEfGhIjKlMnOpQrStUvWx12 now", f"loading with token {R} now", 1),
    ("non-default args: {'model': 'x', 'max_num_batched_tokens': 8192, 'api_key': 'sk-123456', 'hf_token': None}",
     f"non-default args: {{'model': 'x', 'max_num_batched_tokens': 8192, 'api_key': '{R}', 'hf_token': None}}", 1),
    ("curl -H 'Authorization: Bearer abcdefgh12345678' http://127.0.0.1:8000", f"curl -H 'Authorization: Bearer {R}' http://127.0.0.1:8000", 1),
    ("proxy https://bob:hunter2@proxy.example/x?token=abc&page=2", f"proxy https://{R}@proxy.example/x?token={R}&page=2", 2),
    ("vllm serve m --api-key sekrit --port 8000", f"vllm serve m --api-key {R} --port 8000", 1),
    ("vllm serve m --api-key=sekrit", f"vllm serve m --api-key={R}", 1),
    ('{"name": "x", "apiKey": "zzz"}', f'{{"name": "x", "apiKey": "{R}"}}', 1),
    ("AWS_SECRET_ACCESS_KEY=abc DB_PASSWORD=x", f"AWS_SECRET_ACCESS_KEY={R} DB_PASSWORD={R}", 2),
])
def test_secrets_are_replaced(line, expected, count):
    assert redact_line(line) == (expected, count)


@pytest.mark.parametrize("line", [
    "SamplingParams(n=1, max_tokens=8, min_tokens=0, stop_token_ids=[], skip_special_tokens=True), prompt_token_ids_len=2",
    "Token indices sequence length is longer than the specified maximum",
    "the key cache and the value cache use 3 GiB",
    "tokenizer: /models/x, tokenizer_mode=auto",
    "--hf-token --port 8000",
    "'hf_token': None, 'api_key': None",
])
def test_what_is_not_a_secret_stays(line):
    assert redact_line(line) == (line, 0)
