"""The per-layer KV-cache specs vLLM builds for DeepSeek-V4, mirrored without importing vLLM.

Mirrors vLLM 0.32.0 (`models/deepseek_v4/attention.py`, `compressor.py`,
`v1/attention/backends/mla/sparse_swa.py`, `v1/kv_cache_interface.py`); 0.33.0 builds the same specs.
Every decoder layer with compression ratio r registers, in this order:

  r == 4:  `.indexer.k_cache`                     MLAAttentionSpec       block 256, 132 B per state (fp8 indexer)
           `.indexer.compressor.state_cache`       SlidingWindowMLASpec   block 4, window 8, fp32 state 2*2*128
  always:  `.swa_cache`                            SlidingWindowMLASpec   block 64, window = sliding_window
  r > 1:   `` (the attention layer itself)         MLAAttentionSpec       block 256, one state per r tokens
           `.compressor.state_cache`              SlidingWindowMLASpec   block 4 (r=4) / 8 (r=128), window 2*4 / 128

Page size = heads(1) x states per block x bytes per state, rounded up to the spec's alignment
(576 B with the fp8_ds_mla layout, else 512 B). MTP draft layers are sliding-window only.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4ctl.errors import UsageError
from dsv4ctl.units import cdiv, round_up

# vLLM constants (attention.py / sparse_swa.py): "448B NoPE + 128B RoPE + 8B fp8 scale = 584B per token".
FP8_DS_MLA_BYTES_PER_STATE = 584
FP8_DS_MLA_ALIGNMENT = 576
PLAIN_ALIGNMENT = 512
SWA_BLOCK_SIZE = 64  # DeepseekV4SWACache default block size
INDEXER_QUANT_BLOCK = 128  # fp8 indexer: 128 fp8 values + one fp32 scale per 128
MXFP4_BLOCK = 32
FP32_BYTES = 4
DSV4_BLOCK_SIZE = 256  # the only kernel block size of DeepSeek-V4's sparse-MLA and indexer backends

# --kv-cache-dtype values vLLM's DeepSeek-V4 backends accept.
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_ds_mla")
# --attention-backend values that select a DeepSeek-V4 attention class (nvidia/model.py:_select_dsv4_attn_cls).
ATTENTION_BACKENDS = ("FLASHMLA_SPARSE", "FLASHMLA_SPARSE_DSV4", "FLASHINFER_MLA_SPARSE_DSV4")

FULL = "full"  # FullAttentionSpec family (MLAAttentionSpec): one block per block_size tokens of context
SLIDING = "sliding"  # SlidingWindowSpec family: window + in-flight tokens


@dataclass(frozen=True)
class KvLayoutChoice:
    """How the attention backend stores KV: the outcome of vLLM's `_resolve_dsv4_kv_cache_dtype`."""

    attention_class: str  # the vLLM class that would be built
    kv_cache_dtype: str  # what vLLM resolves --kv-cache-dtype to (cache_config.cache_dtype afterwards)
    attn_dtype_str: str  # the attention layer's own resolved dtype string
    attn_elem_bytes: int  # element size of plain rows (bf16 2, fp8 1); unused with fp8_ds_mla

    @property
    def fp8_ds_mla(self) -> bool:
        return self.kv_cache_dtype in ("fp8_ds_mla", "nvfp4_ds_mla")


def resolve_kv_layout(kv_cache_dtype: str, attention_backend: str | None, compute_capability_major: int | None = None) -> KvLayoutChoice:
    """Pick the attention class and resolve the KV dtype exactly as vLLM does for DeepSeek-V4 on CUDA."""
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise UsageError(
            f"--kv-cache-dtype {kv_cache_dtype!r} is not supported by vLLM's DeepSeek-V4 backends",
            hint="choose one of: " + ", ".join(KV_CACHE_DTYPES),
        )
    if attention_backend is not None and attention_backend not in ATTENTION_BACKENDS:
        raise UsageError(
            f"--attention-backend {attention_backend!r} is not a DeepSeek-V4 attention backend",
            hint="choose one of: " + ", ".join(ATTENTION_BACKENDS),
        )
    sm12 = compute_capability_major == 12
    if attention_backend == "FLASHINFER_MLA_SPARSE_DSV4" and not sm12:
        cls, packed_layout = "DeepseekV4FlashInferMLAAttention", False
    elif attention_backend in ("FLASHMLA_SPARSE", "FLASHMLA_SPARSE_DSV4") or not sm12:
        cls, packed_layout = "DeepseekV4FlashMLAAttention", True
    else:
        cls, packed_layout = "DeepseekV4FlashInferSM120Attention", True
    dtype = kv_cache_dtype
    if packed_layout:
        if dtype == "auto":
            dtype = "fp8"
        if not dtype.startswith("fp8"):
            raise UsageError(
                f"DeepSeek-V4's fp8_ds_mla layout ({cls}) only supports an fp8 KV cache, got --kv-cache-dtype {kv_cache_dtype}",
                hint="use --kv-cache-dtype fp8 (or auto), or --attention-backend FLASHINFER_MLA_SPARSE_DSV4 for a bfloat16 cache",
            )
        return KvLayoutChoice(cls, "fp8_ds_mla", "fp8_ds_mla", 1)
    # Plain rows: bf16 or per-tensor fp8 (e4m3); cache_config keeps the user's string.
    elem = 1 if dtype.startswith("fp8") else 2
    return KvLayoutChoice(cls, dtype, dtype, elem)


@dataclass(frozen=True)
class LayerKvSpec:
    """One KV-cache layer as vLLM's planner sees it (the fields its arithmetic reads)."""

    name: str
    kind: str  # FULL | SLIDING
    block_size: int
    page_size_bytes: int
    sliding_window: int = 0  # SLIDING only
    extra_retained_tokens: int = 0  # SLIDING only: max(0, num_prefill_lookahead_tokens - 1)
    block_stride_alignment: int = 1
    spec_class: str = ""  # vLLM class name, for display
    role: str = ""  # attention / swa / compressor / indexer / indexer_compressor

    @property
    def uniform_key(self) -> tuple:
        """Layers with equal keys may share a KV-cache group (`UniformTypeKVCacheSpecs.is_uniform_type`)."""
        if self.kind == FULL:
            return (FULL, self.block_size)
        return (SLIDING, self.block_size, self.sliding_window)

    def max_pages(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """`cdiv(spec.max_memory_usage_bytes(vllm_config), spec.page_size_bytes)` for one request."""
        if self.kind == FULL:
            return cdiv(max_model_len, self.block_size)
        num_tokens = min(self.sliding_window - 1 + self.extra_retained_tokens + max_in_flight_tokens, max_model_len)
        return cdiv(num_tokens, self.block_size) + 1


def _page(states: int, bytes_per_state: int, alignment: int | None) -> int:
    page = states * bytes_per_state  # num_heads == 1 for every DeepSeek-V4 cache
    return round_up(page, alignment) if alignment else page


def build_layer_specs(
    compress_ratios: list[int] | tuple[int, ...],
    *,
    num_mtp_layers: int,
    sliding_window: int,
    head_dim: int,
    index_head_dim: int,
    layout: KvLayoutChoice,
    block_size: int = DSV4_BLOCK_SIZE,
    indexer_mxfp4: bool = False,
    extra_retained_tokens: int = 0,
    layer_prefix: str = "model.layers",
) -> dict[str, LayerKvSpec]:
    """The ordered {layer name: spec} that vLLM's V2 runner `get_kv_cache_spec` returns (all PP ranks)."""
    if block_size != DSV4_BLOCK_SIZE:
        raise UsageError(
            f"--block-size {block_size}: DeepSeek-V4's sparse-MLA and indexer backends support only block size {DSV4_BLOCK_SIZE}",
            hint=f"leave --block-size unset (vLLM picks {DSV4_BLOCK_SIZE}) or pass {DSV4_BLOCK_SIZE}",
        )
    align = FP8_DS_MLA_ALIGNMENT if layout.fp8_ds_mla else PLAIN_ALIGNMENT
    specs: dict[str, LayerKvSpec] = {}
    ratios = list(compress_ratios) + [0] * num_mtp_layers

    def sliding(name: str, role: str, block: int, window: int, bytes_per_state: int, alignment: int) -> None:
        specs[name] = LayerKvSpec(
            name, SLIDING, block, _page(block, bytes_per_state, alignment), window, extra_retained_tokens,
            spec_class="SlidingWindowMLASpec", role=role,
        )

    def full(name: str, role: str, ratio: int, bytes_per_state: int, alignment: int) -> None:
        specs[name] = LayerKvSpec(
            name, FULL, block_size, _page(block_size // ratio, bytes_per_state, alignment), spec_class="MLAAttentionSpec", role=role,
        )

    # Main attention rows: fp8_ds_mla packs 584 B per state; plain rows are head_dim elements (MLA: no separate V).
    attn_fp8_ds_mla = layout.attn_dtype_str == "fp8_ds_mla"
    attn_bytes = FP8_DS_MLA_BYTES_PER_STATE if attn_fp8_ds_mla else head_dim * layout.attn_elem_bytes
    attn_align = FP8_DS_MLA_ALIGNMENT if attn_fp8_ds_mla else PLAIN_ALIGNMENT
    swa_bytes = FP8_DS_MLA_BYTES_PER_STATE if layout.fp8_ds_mla else head_dim * layout.attn_elem_bytes
    if indexer_mxfp4:
        indexer_bytes = index_head_dim // 2 + index_head_dim // MXFP4_BLOCK
    else:
        indexer_bytes = index_head_dim + index_head_dim // INDEXER_QUANT_BLOCK * FP32_BYTES
    for layer_id, raw_ratio in enumerate(ratios):
        ratio = max(1, raw_ratio) if layer_id < len(compress_ratios) else 1
        prefix = f"{layer_prefix}.{layer_id}.attn"
        if ratio == 4:
            full(f"{prefix}.indexer.k_cache", "indexer", ratio, indexer_bytes, align)
            # Indexer compressor: coff 2 (overlapping windows), state = kv + score, fp32.
            sliding(f"{prefix}.indexer.compressor.state_cache", "indexer_compressor", 4, 2 * 4, 2 * 2 * index_head_dim * FP32_BYTES, align)
        sliding(f"{prefix}.swa_cache", "swa", SWA_BLOCK_SIZE, sliding_window, swa_bytes, align)
        if ratio > 1:
            full(prefix, "attention", ratio, attn_bytes, attn_align)
            coff = 2 if ratio == 4 else 1
            block = 4 if ratio == 4 else 8
            sliding(f"{prefix}.compressor.state_cache", "compressor", block, coff * ratio, 2 * coff * head_dim * FP32_BYTES, align)
    return specs
