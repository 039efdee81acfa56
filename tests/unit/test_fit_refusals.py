"""fit-length never prints the impossible: no negative memory, no inverted range, no command that cannot run.

Every refusal path is run through the CLI, as JSON and as text: what vLLM would refuse (memory too small, a
length longer than the model's or than the memory holds, weights beyond the budget, free memory below the
budget), and what dsv4ctl refuses as input (a per-GPU weight larger than the GPU, contradicting flags). When
nothing fits, what would is planned, each with its command; every command printed parses (`dsv4ctl ...`
with dsv4ctl's own parser here, `vllm serve ...` with vLLM's in the engine tier).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

FLASH = "deepseek-ai/DeepSeek-V4-Flash"
PRO = "deepseek-ai/DeepSeek-V4-Pro"
GPUS = Path(__file__).resolve().parents[1] / "fixtures" / "gpus"
ONE = str(GPUS / "h200-snapshot.json")
EIGHT = str(GPUS / "h200x8-snapshot.json")

# (args, exit code): 6 = vLLM would refuse (alternatives planned), 2 = usage, 1 = input.
REFUSALS = [
    ((FLASH, "--kv-cache-memory", "4MiB"), 6),
    ((FLASH, "--kv-cache-memory", "90GiB", "--max-model-len", "2M"), 6),
    ((FLASH, "--kv-cache-memory", "2GiB", "--max-model-len", "1M"), 6),
    ((FLASH, "--gpus", ONE, "--weights-memory", "130GiB"), 6),
    ((PRO, "--gpus", EIGHT, "-tp", "4", "--weights-memory", "125GiB"), 6),
    ((PRO, "--gpus", EIGHT, "-tp", "8", "--weights-memory", "125GiB", "--gpu-memory-utilization", "0.85"), 6),
    ((FLASH, "--gpus", EIGHT, "-tp", "8", "--weights-memory", "160GB"), 2),
    ((FLASH, "--gpus", EIGHT, "--weights-memory", "10GiB", "--checkpoint-size", "160GB"), 2),
]


def _numbers(doc, path=""):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _numbers(v, f"{path}[{i}]")
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path, doc


@pytest.mark.parametrize("args, code", REFUSALS, ids=[" ".join(a[1:]) for a, _ in REFUSALS])
def test_a_refusal_prints_nothing_impossible(cli, args, code):
    result = cli("fit-length", *args, "--json")
    assert result.exit_code == code, result.output
    if code != 6:
        assert json.loads(result.stdout)["error"]["exit_code"] == code
        text = cli("fit-length", *args)
        assert text.exit_code == code and text.stdout == ""
        assert len(text.stderr.strip().splitlines()) <= 2  # one line and a hint
        return
    doc = json.loads(result.stdout)
    negative = [p for p, n in _numbers(doc) if n < 0 and ("bytes" in p or p.endswith((".value", ".low", ".high")))
                and ".terms[" not in p]
    assert not negative, negative
    if doc["autofit_range"]:
        assert doc["autofit_range"][0] <= doc["autofit_range"][1]
    kv = doc["available_kv_bytes"]
    if kv:
        assert 0 <= kv["low"] <= kv["high"]
    assert doc["vllm_command"] is None and doc["vllm_flags"] == []
    for alt in doc["alternatives"]:
        assert alt["recommended_max_model_len"] > 0
        assert alt["vllm_command"].startswith("vllm serve ") and "--max-model-len 0" not in alt["vllm_command"]


def test_what_would_fit_is_planned_and_fits(cli):
    doc = json.loads(cli("fit-length", PRO, "--gpus", EIGHT, "-tp", "4", "--weights-memory", "125GiB", "--json").stdout)
    assert not doc["fits"] and doc["kv_cache_shortfall_bytes"] > 0
    changes = {a["change"]: a for a in doc["alternatives"]}
    util = next(a for c, a in changes.items() if c.startswith("--gpu-memory-utilization"))
    # Planned again with that change: it fits, and the command carries the change and the length.
    again = json.loads(cli("fit-length", PRO, "--gpus", EIGHT, "-tp", "4", "--weights-memory", "125GiB",
                           *util["change"].split(), "--json").stdout)
    assert again["fits"] and again["recommended_max_model_len"] == util["recommended_max_model_len"]
    assert again["vllm_command"] == util["vllm_command"]


def test_a_length_longer_than_the_model_offers_auto(cli):
    doc = json.loads(cli("fit-length", FLASH, "--kv-cache-memory", "90GiB", "--max-model-len", "2M", "--json").stdout)
    alt = next(a for a in doc["alternatives"] if a["change"].startswith("--max-model-len "))
    assert alt["change"] == f"--max-model-len {alt['recommended_max_model_len']}"
    assert shlex.split(alt["vllm_command"])[shlex.split(alt["vllm_command"]).index("--max-model-len") + 1] == str(
        alt["recommended_max_model_len"])


def test_a_whole_checkpoint_size_is_split_per_gpu(cli):
    whole = json.loads(cli("fit-length", FLASH, "--gpus", EIGHT, "-tp", "8", "--checkpoint-size", "160GB", "--json").stdout)
    share = json.loads(cli("fit-length", FLASH, "--gpus", EIGHT, "-tp", "8", "--weights-memory", str(160_000_000_000 // 8),
                           "--json").stdout)
    assert whole["gpus"][0]["weights_bytes"] == share["gpus"][0]["weights_bytes"] == 20_000_000_000
    assert whole["kv_cache_memory_bytes"] == share["kv_cache_memory_bytes"]
    term = next(t for t in whole["available_kv_bytes"]["terms"] if t["name"] == "weights")
    assert term["source"].startswith("--checkpoint-size")
    assert any("read as the whole checkpoint" in n for n in whole["notes"])


def test_a_per_gpu_weight_beyond_the_gpu_says_what_was_probably_meant(cli):
    result = cli("fit-length", FLASH, "--gpus", EIGHT, "-tp", "8", "--weights-memory", "160GB")
    assert result.exit_code == 2
    hint = result.stderr.splitlines()[1]
    flag = hint.split("pass ", 1)[1].split(" (")[0]
    again = cli("fit-length", FLASH, "--gpus", EIGHT, "-tp", "8", *flag.split(), "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["fits"]


@pytest.mark.engine
@pytest.mark.parametrize("args, code", [r for r in REFUSALS if r[1] == 6], ids=lambda r: str(r)[:40])
def test_every_command_a_refusal_prints_parses_with_vllms_parser(cli, vllm_available, args, code):
    from dsv4ctl.serve.vllm_entry import build_serve_parser

    doc = json.loads(cli("fit-length", *args, "--json").stdout)
    for alt in doc["alternatives"]:
        argv = shlex.split(alt["vllm_command"])
        namespace = build_serve_parser().parse_args(argv[1:])
        assert namespace.max_model_len == alt["recommended_max_model_len"]
