"""fit-length and serve refuse what vLLM cannot load or dsv4ctl does not model: a tensor-parallel size that
cuts the checkpoint's FP8 blocks (the arithmetic from its config.json, and the sizes that split), and
a DeepSeek-V4 layout labelled DeepSeek-V4.1 (vLLM's own refusal of its ratios, never a V4.0 plan)."""

from __future__ import annotations

import argparse
import json
import re

import pytest

from dsv4ctl.errors import GpuUnavailableError
from dsv4ctl.planning.plan.split import check_split
from dsv4ctl.serve import preflight
from fitkit import FLASH, builtin_config

PRO = "deepseek-ai/DeepSeek-V4-Pro"
PRO_EXTRA = {"moe_intermediate_size": 3072, "num_attention_heads": 128,
             "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
NEGATIVE = re.compile(r"(?<![\w.\-])-\d")


def test_pro_at_tp_16_cuts_its_experts_mid_block():
    refusal = check_split(PRO_EXTRA, 16, expert_parallel=False)
    assert refusal is not None
    assert "moe_intermediate_size 3,072 / 16 = 192, not a multiple of the FP8 block 128" in refusal.message
    assert refusal.working == (1, 2, 4, 8)
    assert "1, 2, 4, 8" in refusal.hint and "--enable-expert-parallel" in refusal.hint


@pytest.mark.parametrize("tp, ep, extra", [
    (8, False, PRO_EXTRA), (4, False, PRO_EXTRA), (1, False, PRO_EXTRA),
    (16, True, PRO_EXTRA),  # expert parallel: each expert stays whole
    (16, False, {**PRO_EXTRA, "quantization_config": None}),  # not block-quantized
    (16, False, {**PRO_EXTRA, "quantization_config": {"quant_method": "mxfp4"}}),
    (16, False, {"num_attention_heads": 128}),  # the config does not say: nothing checked
])
def test_sizes_that_split_or_cannot_be_judged_pass(tp, ep, extra):
    assert check_split(extra, tp, expert_parallel=ep) is None


def test_a_slice_that_is_not_even_whole_says_so():
    refusal = check_split({**PRO_EXTRA, "num_attention_heads": 96}, 6, expert_parallel=False)
    assert refusal is None  # 3072 / 6 = 512 = 4 blocks
    refusal = check_split({**PRO_EXTRA, "moe_intermediate_size": 3000}, 16, expert_parallel=False)
    assert "3,000 / 16 = 187.5" in refusal.message and refusal.working == ()
    assert refusal.hint.startswith("no tensor-parallel size splits it")


def test_fit_length_refuses_pro_at_tp_16_with_the_arithmetic(cli):
    text = cli("fit-length", PRO, "-tp", "16", "--kv-cache-memory", "20GiB")
    assert text.exit_code == 6 and text.stdout == ""
    assert "3,072 / 16 = 192" in text.stderr and "1, 2, 4, 8" in text.stderr
    assert not NEGATIVE.search(text.stderr)
    doc = cli("fit-length", PRO, "-tp", "16", "--kv-cache-memory", "20GiB", "--json")
    error = json.loads(doc.stdout)["error"]
    assert doc.exit_code == 6 and error["exit_code"] == 6 and "cannot split" in error["message"]
    ok = cli("fit-length", PRO, "-tp", "8", "--kv-cache-memory", "20GiB", "--json")
    assert ok.exit_code in (0, 6) and "cannot split" not in ok.stdout + ok.stderr
    ep = cli("fit-length", PRO, "-tp", "16", "--enable-expert-parallel", "--kv-cache-memory", "20GiB", "--json")
    assert "cannot split" not in ep.stdout + ep.stderr


def test_the_arithmetic_comes_from_the_checkpoints_own_config(cli, tmp_path):
    config = builtin_config(FLASH)
    config.update(moe_intermediate_size=2048, quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = cli("fit-length", str(path), "-tp", "32", "--kv-cache-memory", "20GiB")
    assert result.exit_code == 6
    assert "2,048 / 32 = 64" in result.stderr
    assert f"{', '.join(str(t) for t in (1, 2, 4, 8, 16))} (they also divide the 64 attention heads)" in result.stderr


V41_REFUSAL = "DeepSeek V4.1 layer 2 has compress_ratio=4; only 0 (sliding window), 1 and 2 are supported."


def test_a_v4_layout_labelled_v41_is_refused_plainly(cli, tmp_path):
    config = builtin_config(FLASH)
    config["architectures"] = ["DeepseekV41ForCausalLM"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    text = cli("fit-length", str(path), "--kv-cache-memory", "10GiB")
    assert text.exit_code == 1 and text.stdout == ""
    assert V41_REFUSAL in " ".join(text.stderr.split())
    doc = cli("fit-length", str(path), "--kv-cache-memory", "10GiB", "--json")
    assert V41_REFUSAL in json.loads(doc.stdout)["error"]["message"]


def _ns(model: str, **kw) -> argparse.Namespace:
    base = dict(
        model=model, max_model_len=None, kv_cache_memory_bytes=None, gpu_memory_utilization=0.92,
        kv_cache_dtype="auto", block_size=None, max_num_batched_tokens=None, max_num_seqs=None,
        tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, data_parallel_size_local=None,
        enable_expert_parallel=False, async_scheduling=None, attention_backend=None, speculative_config=None,
    )
    base.update(kw)
    return argparse.Namespace(**base)


def _no_gpu():
    raise GpuUnavailableError("no NVIDIA driver here")


def test_serve_refuses_pro_at_tp_16_before_vllm_starts():
    decision = preflight.decide(_ns(PRO, tensor_parallel_size=16, kv_cache_memory_bytes=20 << 30),
                                [PRO, "-tp", "16", "--kv-cache-memory-bytes", "20G"], snapshot_reader=_no_gpu)
    assert decision.action == preflight.REFUSE and "3,072 / 16 = 192" in decision.reason
    assert "1, 2, 4, 8" in decision.refusal.hint


def test_serve_passes_a_v4_layout_labelled_v41_to_vllm_with_the_reason(tmp_path):
    config = builtin_config(FLASH)
    config["architectures"] = ["DeepseekV41ForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    decision = preflight.decide(_ns(str(tmp_path), kv_cache_memory_bytes=20 << 30), [str(tmp_path)],
                                snapshot_reader=_no_gpu)
    assert decision.action == preflight.PASS_THROUGH and V41_REFUSAL in decision.reason
    assert decision.plan is None


def test_034_refuses_a_tp_that_does_not_divide_the_attention_output_groups():
    # vllm==0.34.0 vllm/models/deepseek_v4/common/grouped_wo_a.py:26: divide(o_groups, tp) asserts; 0.33 floors it.
    flash = {"num_attention_heads": 64, "o_groups": 8}
    refusal = check_split(flash, 16, expert_parallel=False, vllm_version=(0, 34, 0))
    assert refusal is not None
    assert "8 attention output groups" in refusal.message and "8 % 16 = 8" in refusal.message
    assert "8 is not divisible by 16" in refusal.message and "grouped_wo_a.py:26" in refusal.message
    assert refusal.working == (1, 2, 4, 8)
    assert check_split(flash, 16, expert_parallel=False, vllm_version=(0, 33, 0)) is None
    assert check_split(flash, 8, expert_parallel=False, vllm_version=(0, 34, 0)) is None


def test_fit_length_and_serve_refuse_flash_at_tp_16_on_034_only(cli):
    res = cli("fit-length", FLASH, "--kv-cache-memory", "9.81GiB", "-tp", "16", "--vllm-version", "0.34.0")
    assert res.exit_code == 6 and "attention output groups" in res.stderr
    res = cli("fit-length", FLASH, "--kv-cache-memory", "9.81GiB", "-tp", "16", "--vllm-version", "0.33.0")
    assert res.exit_code == 0
    ns = argparse.Namespace(model=FLASH, max_model_len=None, kv_cache_memory_bytes=10 << 30, gpu_memory_utilization=None,
                            tensor_parallel_size=16, pipeline_parallel_size=None, data_parallel_size=None,
                            enable_expert_parallel=None)
    decision = preflight.decide(ns, [FLASH, "-tp", "16"], vllm_version="0.34.0", snapshot_reader=_no_gpu)
    assert decision.action == preflight.REFUSE and "8 is not divisible by 16" in decision.refusal.message


def _no_gpu():
    raise GpuUnavailableError("no NVML here")
