"""One safe-length rule for fit-length, serve and diagnose, explained with what the margin costs."""

from __future__ import annotations

import json

from dsv4ctl.planning.plan.safe_length import CLIFF_FRACTION, SafeLength, round_block_friendly, safe_length
from dsv4ctl.units import GiB, MiB

FLASH = "deepseek-ai/DeepSeek-V4-Flash"
PRO = "deepseek-ai/DeepSeek-V4-Pro"


def _fit(cli, model, *args):
    result = cli("fit-length", model, "--kv-cache-memory", "9.81GiB", *args, "--json")
    return json.loads(result.stdout)


def test_flash_at_9_81_gib_margin_cost_and_knobs(cli):
    data = _fit(cli, FLASH)
    safe = data["safe_length"]
    assert safe["safe_max_model_len"] == data["recommended_max_model_len"] == 841_728
    assert safe["autofit_max_model_len"] == 979_456
    assert safe["margin_cost_tokens"] == 979_456 - 841_728
    assert safe["cliff"] is True  # 14 % > 10 %
    knobs = {k["flags"]: k["safe_max_model_len"] for k in safe["knobs"]}
    assert knobs["--max-num-batched-tokens 4096"] == 1_048_576
    assert knobs["--no-async-scheduling"] == 1_048_576
    assert "costs 137,728 tokens of the 979,456 --max-model-len auto would pick (14%)" in safe["line"]
    assert "--max-num-batched-tokens 4096 gives 1,048,576, the full context" in safe["cliff_line"]


def test_pro_at_9_81_gib_the_58_percent_cliff_is_said(cli):
    safe = _fit(cli, PRO)["safe_length"]
    assert (safe["autofit_max_model_len"], safe["safe_max_model_len"]) == (166_912, 70_656)
    assert "costs 96,256 tokens of the 166,912 --max-model-len auto would pick (58%)" in safe["line"]
    assert safe["knobs"][0]["flags"] == "--max-num-batched-tokens 2048"
    assert safe["knobs"][0]["safe_max_model_len"] == 1_048_576


def test_far_from_the_cliff_no_knobs(cli):
    safe = _fit(cli, FLASH, "--max-num-batched-tokens", "2048")["safe_length"]
    assert safe["cliff"] is False and safe["knobs"] == [] and safe["cliff_line"] is None
    assert safe["safe_max_model_len"] == 1_048_576 and "the full context" in safe["line"]


def test_human_output_explains_the_rule_in_one_line(cli):
    out = cli("fit-length", FLASH, "--kv-cache-memory", "9.81GiB").stdout
    assert ("safe length 841,728: 0.50 GiB of KV memory held back [5% of KV memory (at least 0.50 GiB)] costs 137,728 "
            "tokens of the 979,456 --max-model-len auto would pick (14%)") in " ".join(out.split())
    assert "the margin costs 14% of the context" in out


def test_rule_on_a_synthetic_planner():
    # 1 token per 2 KiB of memory, in-flight tokens cost their count; model max 1M.
    def autofit_at(cut, in_flight):
        memory = 2 * GiB - cut
        return max(0, min(1 << 20, memory // 2048 - in_flight))

    safe = safe_length(autofit_at, kv_memory_bytes=2 * GiB, model_max=1 << 20, max_num_batched_tokens=8192, async_scheduling=True)
    assert safe.margin_bytes == 512 * MiB  # 5 % of 2 GiB is below the 512 MiB floor
    assert safe.ceiling == (1 << 20) - 16_384  # 2 batches of 8,192 in flight
    assert safe.length == 786_432 - 16_384 and safe.length == round_block_friendly(safe.length)
    assert safe.cost_fraction > CLIFF_FRACTION and safe.cliff
    assert [(k.flags, k.length) for k in safe.knobs] == [
        ("--max-num-batched-tokens 2048", 786_432 - 4_096),
        ("--max-num-batched-tokens 4096", 786_432 - 8_192),
        ("--no-async-scheduling", 786_432 - 8_192),
    ]


def test_no_token_fits():
    safe = safe_length(lambda cut, t: 0, kv_memory_bytes=GiB, model_max=1 << 20, max_num_batched_tokens=8192, async_scheduling=True)
    assert safe.length == 0 and safe.line().startswith("no safe length")
    assert isinstance(safe, SafeLength) and safe.cost_tokens == 0


def test_serve_dry_run_uses_the_same_length_and_says_what_it_costs(cli):
    result = cli("serve", FLASH, "--kv-cache-memory-bytes", "10533407294", "--dry-run", "--json")
    decision = json.loads(result.stdout)["serve_preflight"]
    text = json.dumps(decision)
    assert "841728" in text.replace(",", "") and "costs 137,728 tokens of the 979,456" in text


def test_library_entry_for_diagnose():
    from dsv4ctl.planning.plan.fit import safe_length_for_log

    safe = safe_length_for_log(FLASH, 10_533_407_294, max_num_batched_tokens=8192, async_scheduling=True)
    assert safe is not None and safe.length == 841_728
    assert safe_length_for_log("some/other-model", 10 * GiB) is None
