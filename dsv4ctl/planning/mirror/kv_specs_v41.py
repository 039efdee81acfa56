"""The per-layer KV-cache specs vLLM builds for DeepSeek-V4.1, mirrored without importing vLLM.

Read in vLLM 0.34.0 (0.33.0 builds the same specs; both recorded in tests/data/planner/deepseek-v41/ by
scripts/planner_oracle_v41.py from the releases' own layers). `models/deepseek_v41/attention.py`:

  every layer:        `.swa_cache`                  SlidingWindowMLASpec  block 32 (`:622`), window sliding_window,
                                                    swa_bytes_per_token 584 (528 on SM100, `:576-577`)
  kv sources only     ``  (the attention layer)     MLAAttentionSpec      block B, one state per r tokens,
  (kv_source_layer_ids):                                                  compressed_bytes_per_token (= swa's)
                      `.indexer.k_cache`            MLAAttentionSpec      block B, 132 B per state (fp8 indexer,
                                                                          `_indexer_k_cache_head_dim`)
                      `.compressor.state_cache`     CircularBufferSpec    r = 2 only: block max(8, pow2ceil(k + 2)),
                                                                          state_dim 1024 fp32 (`compressor.py`)

Later layers (3-7 reading 2, 21-39 reading 20, ...) own only their sliding-window cache: they read the latest
kv source's compressed and indexer caches (`kv_source_layer_id = max(s for s in kv_source_layers if s <= layer_id)`).

Pages: `states x bytes`, rounded up to 576 B (512 B on SM100; the indexer: 576 only with fp8_ds_mla off SM100).
Block-stride alignment: `customize_attention_spec` (`v1/worker/utils.py`) gives the main and indexer specs
`MultipleOf(kernel block)` - 64 on SM90 (and the indexer on SM12x), else 128 (`sparse_mla.py`, `indexer.py`
`DeepseekV41IndexerBackend`); `get_block_stride_alignment` makes that 1 when B divides the kernel block, else the
page of a gcd(kernel, B)-token block (`v1/kv_cache_interface.py`). On SM100 the sliding-window spec's stride is
lcm(528, 528) = 528 (`attention.py:626-630`). This is the --block-size 128/256 trap on H200: the pool block is
rounded up to the lcm of 64-token pages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsv4ctl.errors import UsageError
from dsv4ctl.planning.checkpoint.v41 import V41Facts
from dsv4ctl.planning.mirror.kv_specs import FULL, SLIDING, KvLayoutChoice, LayerKvSpec
from dsv4ctl.units import round_up

CIRCULAR = "circular"  # CircularBufferSpec: one block per request for its lifetime
SWA_BLOCK_SIZE = 32
V4_RECORD_BYTES = 584  # 448 fp8 NoPE + 64 bf16 RoPE + 7 UE8M0 scales + pad (every arch but SM100)
MXFP8_RECORD_BYTES = 528  # SM100: 512 fp8 + 16 UE8M0 scales (`_use_v41_mxfp8_kv_record`)
V4_PAGE_ALIGNMENT = 576
MXFP8_PAGE_ALIGNMENT = 512
INDEXER_FP8_BYTES = 132  # 128 fp8 + one fp32 scale
COMPRESSOR_STATE_BYTES = 1024 * 4  # state_dim 1024 x fp32
FLASHMLA_CLASS = "DeepseekV4FlashMLAAttention (models/deepseek_v41/nvidia/flashmla.py)"
FLASHMLA_BACKENDS = ("FLASHMLA_SPARSE", "FLASHMLA_SPARSE_DSV4", "FLASHMLA_SPARSE_DSV41")


@dataclass(frozen=True)
class RingKvSpec(LayerKvSpec):
    """A CircularBufferSpec: the ring of the token group still being compressed; one block per request."""

    @property
    def uniform_key(self) -> tuple:
        return (CIRCULAR, self.block_size)

    def max_pages(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        return 1  # `CircularBufferSpec.max_num_blocks_per_req`


def kernel_block_size(compute_capability_major: int) -> int:
    """The sparse-MLA kernel's block: 64 on SM90, 128 elsewhere (`sparse_mla.py` `get_supported_kernel_block_sizes`)."""
    return 64 if compute_capability_major == 9 else 128


def default_block_size(compute_capability_major: int) -> int:
    """vLLM's pick without --block-size: the smallest every backend takes (`update_block_size_for_backend`)."""
    return kernel_block_size(compute_capability_major)


def resolve_v41_layout(kv_cache_dtype: str, attention_backend: str | None, compute_capability_major: int) -> KvLayoutChoice:
    """The FlashMLA class and its packed record, or a refusal naming what is not mirrored (`nvidia/model.py`
    `_select_dsv4_attn_cls`: SM12x takes FlashInfer, SM100 mega attention unless FlashMLA is named)."""
    if compute_capability_major not in (9, 10):
        raise UsageError(
            f"DeepSeek-V4.1 on sm_{compute_capability_major}x is not modelled: vLLM picks FlashInfer's sparse MLA "
            "there (models/deepseek_v41/nvidia/model.py _select_dsv4_attn_cls), whose KV specs dsv4ctl has not recorded",
            hint="let vLLM auto-fit it (--max-model-len auto)",
        )
    if compute_capability_major == 10 and attention_backend not in FLASHMLA_BACKENDS:
        raise UsageError(
            "DeepSeek-V4.1 on SM100 defaults to FlashMLA mega attention (its 288-byte NVFP4 compressed record), "
            "which dsv4ctl does not model",
            hint="plan FlashMLA with --attention-backend FLASHMLA_SPARSE_DSV41, or let vLLM auto-fit",
        )
    if attention_backend is not None and attention_backend not in FLASHMLA_BACKENDS:
        raise UsageError(f"--attention-backend {attention_backend}: not modelled for DeepSeek-V4.1",
                         hint="choose one of: " + ", ".join(FLASHMLA_BACKENDS))
    if kv_cache_dtype not in ("auto", "fp8", "fp8_ds_mla"):
        # `_resolve_dsv4_kv_cache_dtype` (models/deepseek_v41/attention.py), verbatim.
        raise UsageError(
            f"DeepseekV4 packed KV layouts only support fp8 kv-cache, got {kv_cache_dtype}. Please set "
            "`--kv-cache-dtype fp8` or select a backend that supports bfloat16 KV cache.",
            hint="vLLM refuses it at startup (models/deepseek_v41/attention.py); use --kv-cache-dtype fp8 or auto",
        )
    return KvLayoutChoice(FLASHMLA_CLASS, "fp8_ds_mla", "fp8_ds_mla", 1)


def _stride_alignment(kernel: int, block_size: int, page_of_tokens) -> int:
    """`get_block_stride_alignment` of `MultipleOf(kernel)`: 1 when the block divides the kernel's, else the page
    of a gcd-token block."""
    g = math.gcd(kernel, block_size)
    return 1 if g == block_size else page_of_tokens(g)


def build_v41_layer_specs(
    compress_ratios: tuple[int, ...],
    facts: V41Facts,
    *,
    sliding_window: int,
    compute_capability_major: int,
    block_size: int,
    num_speculative_tokens: int = 0,
    layer_prefix: str = "model.layers",
) -> dict[str, LayerKvSpec]:
    """The ordered {layer name: spec} vLLM's V2 runner `get_kv_cache_spec` returns for DeepSeek-V4.1 (FlashMLA)."""
    kernel = kernel_block_size(compute_capability_major)
    if block_size % kernel:
        raise UsageError(f"--block-size {block_size}: DeepSeek-V4.1's sparse-MLA kernel on sm_{compute_capability_major}0 "
                         f"takes blocks of {kernel} tokens", hint=f"leave --block-size unset (vLLM picks {kernel})")
    sm100 = compute_capability_major == 10
    record = MXFP8_RECORD_BYTES if sm100 else V4_RECORD_BYTES
    align = MXFP8_PAGE_ALIGNMENT if sm100 else V4_PAGE_ALIGNMENT
    indexer_align = MXFP8_PAGE_ALIGNMENT if sm100 else V4_PAGE_ALIGNMENT
    swa_stride = math.lcm(record, record) if sm100 else 1
    ring_block = max(8, 1 << max(0, num_speculative_tokens + 2 - 1).bit_length())
    specs: dict[str, LayerKvSpec] = {}
    for layer_id, ratio in enumerate(compress_ratios):
        prefix = f"{layer_prefix}.{layer_id}.attn"
        if facts.owns_compressed_cache(layer_id, ratio):
            main_page = lambda tokens, r=ratio: round_up(tokens // r * record, align)  # noqa: E731
            index_page = lambda tokens, r=ratio: round_up(tokens // r * INDEXER_FP8_BYTES, indexer_align)  # noqa: E731
            specs[prefix] = LayerKvSpec(prefix, FULL, block_size, main_page(block_size),
                                        block_stride_alignment=_stride_alignment(kernel, block_size, main_page),
                                        spec_class="MLAAttentionSpec", role="attention")
            name = f"{prefix}.indexer.k_cache"
            specs[name] = LayerKvSpec(name, FULL, block_size, index_page(block_size),
                                      block_stride_alignment=_stride_alignment(kernel, block_size, index_page),
                                      spec_class="MLAAttentionSpec", role="indexer")
        name = f"{prefix}.swa_cache"
        specs[name] = LayerKvSpec(name, SLIDING, SWA_BLOCK_SIZE, round_up(SWA_BLOCK_SIZE * record, align), sliding_window,
                                  0, block_stride_alignment=swa_stride, spec_class="SlidingWindowMLASpec", role="swa")
        if facts.owns_compressed_cache(layer_id, ratio) and ratio > 1:
            name = f"{prefix}.compressor.state_cache"
            specs[name] = RingKvSpec(name, CIRCULAR, ring_block, ring_block * COMPRESSOR_STATE_BYTES,
                                     spec_class="CircularBufferSpec", role="compressor")
    return specs
