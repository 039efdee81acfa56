"""--num-gpu-blocks-override sizes the KV cache: every release from 0.27.1 on plans auto-fit and the admission check
against N x the pool's block stride, not the memory it measured (vllm==0.34.0 v1/core/kv_cache_planning.py:1612-1633,
0.33.0 :1510-1531, 0.27.1 v1/core/kv_cache_utils.py:2159-2180); the null block comes off that as in the normal path."""

from __future__ import annotations

import json

import pytest

from fitkit import FLASH

G = "tests/fixtures/gpus/h200x8-snapshot.json"
STRIDE = 1_002_240  # DeepSeek-V4-Flash, fp8_ds_mla, block 256: the plan's bytes per block
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("version", ["0.27.1", "0.29.0", "0.33.0", "0.34.0"])
def test_the_override_plans_as_its_blocks_of_memory_given(cli, version):
    override = cli("fit-length", FLASH, "--vllm-version", version, "--gpus", str(ROOT / G), "-tp", "8",
                   "--checkpoint-size", "160GB", "--num-gpu-blocks-override", "5000", "--json")
    a = json.loads(override.stdout)
    stride = a["bytes_per_block"]
    given = cli("fit-length", FLASH, "--vllm-version", version, "--kv-cache-memory-bytes", str(5000 * stride), "--json")
    b = json.loads(given.stdout)
    assert stride == STRIDE and a["kv_cache_memory_bytes"] == 5000 * stride and a["kv_cache_memory_source"] == "override"
    assert a["autofit_max_model_len"] == b["autofit_max_model_len"] < a["model_max_model_len"]
    assert a["recommended_max_model_len"] == b["recommended_max_model_len"]
    assert "--max-model-len 1048576" not in a["vllm_command"]
    assert len(a["gpus"]) == 8  # the GPUs are still predicted: the memory table and vLLM's startup refusal


def test_an_explicit_full_context_beyond_the_override_is_refused(cli):
    res = cli("fit-length", FLASH, "--vllm-version", "0.33.0", "--kv-cache-memory", "20GiB",
              "--num-gpu-blocks-override", "5000", "--max-model-len", "1048576", "--json")
    doc = json.loads(res.stdout)
    assert res.exit_code != 0 and not doc["fits"] and doc["refusal"]


def test_the_override_needs_no_memory_figure_and_turns_a_measured_logs_mode_off(cli):
    """The cache is the override's blocks: no GPUs or KV memory are needed to plan it, and a 0.34 measured start's log
    does not make the plan measured (vLLM turns the measured mode off for the override, config/vllm.py:3208-3212)."""
    bare = cli("fit-length", FLASH, "--vllm-version", "0.33.0", "--num-gpu-blocks-override", "5000", "--json")
    assert bare.exit_code == 0, bare.output
    assert json.loads(bare.stdout)["kv_cache_memory_source"] == "override"
    log = str(ROOT / "tests" / "fixtures" / "logs" / "v034_measured_autofit_reduced.log")
    res = cli("fit-length", "deepseek-ai/DeepSeek-V4-Pro", "--vllm-version", "0.34.0", "--from-log", log,
              "--num-gpu-blocks-override", "5000", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["sizing_mode"]["mode"] == "estimate" and doc["kv_cache_memory_bytes"] == 5000 * doc["bytes_per_block"]
