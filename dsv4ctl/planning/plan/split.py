"""Whether the checkpoint splits at the requested tensor-parallel size: its attention heads and its block-quantized
FP8 weights.

The heads first, as vLLM checks them when it verifies the config, before any weight is read: "Total number of
attention heads ({heads}) must be divisible by tensor parallel size ({tp})." (vllm==0.33.0 vllm/config/model.py:1559-1564,
0.30.0 :1426-1431, 0.27.1 :1315-1320, `ModelConfig.verify_with_parallel_config`).

Then the FP8 blocks: vLLM cuts every tensor-parallel weight into one slice per GPU and requires block-wise FP8 slices to be whole
quantization blocks; for fused MoE experts `validate_fp8_block_shape_moe` raises "The output_size of gate's
and up's weight = {moe_intermediate_size / TP} is not divisible by weight quantization block_n = {block_n}"
(vllm==0.33.0 and 0.32.0 vllm/model_executor/layers/quantization/utils/fp8_utils.py:1363; 0.27.1
quantization/fp8.py:554). DeepSeek-V4-Pro at --tensor-parallel-size 16: 3072 / 16 = 192 (vllm#40955). With
--enable-expert-parallel the experts are whole on each GPU and nothing is cut; DeepSeek-V4's shared expert
pads its slice to whole blocks (vllm/models/deepseek_v4/nvidia/model.py `DeepseekV4MLP`, 0.27.1–0.33.0).

From vLLM 0.34 the attention output groups too, while the attention layers are built (before any weight is read):
`DeepseekV4GroupedWoA` takes `divide(o_groups, tp_size)` (vllm==0.34.0 vllm/models/deepseek_v4/common/grouped_wo_a.py:26),
which asserts "{o_groups} is not divisible by {tp}" (vllm/distributed/utils.py:52-56, `ensure_divisibility`).
Earlier releases floor it (`self.n_local_groups = self.n_groups // tp_size`, vllm==0.33.0
vllm/models/deepseek_v4/attention.py:226; 0.27.1-0.32.0 the same) and refuse nothing there. DeepSeek-V4-Flash has
8 groups, so --tensor-parallel-size 16 (which divides its 64 heads) is refused on 0.34.

The numbers come from the checkpoint's config.json (`num_attention_heads`, `moe_intermediate_size`,
`quantization_config.weight_block_size`); what it lacks is not checked (the DeepSeek-V4-Flash preset carries its
heads, not its experts' size: a checkpoint directory or the hub's config.json checks the blocks too).
Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SplitRefusal:
    message: str
    hint: str
    working: tuple[int, ...]  # the tensor-parallel sizes that split, up to the heads' count


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def fp8_block(extra: dict[str, Any]) -> tuple[int, int] | None:
    """(block_n, block_k) of a checkpoint whose routed experts are block-wise FP8, from config.json's
    quantization_config. None where the experts are MXFP4 (`expert_dtype` "fp4", DeepSeek-V4.1): vLLM gives them
    `Mxfp4MoEMethod` (vllm==0.34.0 vllm/models/deepseek_v41/quant_config.py:251-261), not the FP8 block check, and
    `weight_block_size` is the linear layers' MXFP8 layout; the MoE backends round the expert slice up to their tile
    (`mxfp4_round_up_hidden_size_and_intermediate_size`, model_executor/layers/fused_moe/oracle/mxfp4.py:822)."""
    quant = extra.get("quantization_config")
    if not isinstance(quant, dict) or str(quant.get("quant_method", "")).lower() != "fp8":
        return None
    if str(quant.get("expert_dtype", "")).lower() == "fp4":
        return None
    block = quant.get("weight_block_size")
    if not isinstance(block, (list, tuple)) or len(block) != 2:
        return None
    n, k = (_positive_int(b) for b in block)
    return (n, k) if n and k else None


def _divides_groups(version: tuple[int, ...] | None) -> bool:
    """Whether the release asserts that TP divides o_groups (0.34+)."""
    return version is not None and version >= (0, 34, 0)


def check_split(
    extra: dict[str, Any], tensor_parallel_size: int, expert_parallel: bool, vllm_version: tuple[int, ...] | None = None
) -> SplitRefusal | None:
    """vLLM's refusal when this TP does not divide the attention heads, the attention output groups (0.34+:
    `vllm_version` as a version key), or cuts the experts' slice mid FP8 block; else None."""
    tp = tensor_parallel_size
    heads = _positive_int(extra.get("num_attention_heads"))
    groups = _positive_int(extra.get("o_groups")) if _divides_groups(vllm_version) else None
    if tp > 1 and heads is not None and heads % tp:
        working = _working(extra, heads, expert_parallel, groups)
        sizes = ", ".join(str(t) for t in working)
        mxfp4 = str((extra.get("quantization_config") or {}).get("expert_dtype", "")).lower() == "fp4"
        missing = [] if mxfp4 else [
            name for name, value in (("moe_intermediate_size", _positive_int(extra.get("moe_intermediate_size"))),
                                     ("FP8 block size", fp8_block(extra))) if value is None]
        hint = (f"tensor-parallel sizes that divide the {heads} heads: {sizes} (whether each also splits the experts' FP8 "
                f"blocks is not checked: this config gives no {' or '.join(missing)})" if missing and not expert_parallel
                else f"tensor-parallel sizes that split: {sizes}")
        return SplitRefusal(
            f"--tensor-parallel-size {tp} does not divide this model's {heads} attention heads: vLLM refuses it while "
            f"checking the config (\"Total number of attention heads ({heads}) must be divisible by tensor parallel "
            f"size ({tp}).\")",
            hint, working)
    if tp > 1 and groups is not None and groups % tp:
        working = _working(extra, heads or groups, expert_parallel, groups)
        version = ".".join(str(v) for v in vllm_version or ())
        return SplitRefusal(
            f"--tensor-parallel-size {tp} does not divide this model's {groups} attention output groups (o_groups in "
            f"config.json): {groups} % {tp} = {groups % tp}, and vLLM {version} refuses it while building the attention "
            f"layers (\"AssertionError: {groups} is not divisible by {tp}\", vllm==0.34.0 "
            "vllm/models/deepseek_v4/common/grouped_wo_a.py:26)",
            f"tensor-parallel sizes that split: {', '.join(str(t) for t in working)} (releases before 0.34 do not check "
            "the groups)", working)
    moe = _positive_int(extra.get("moe_intermediate_size"))
    block = fp8_block(extra)
    if expert_parallel or tp <= 1 or moe is None or block is None or _splits_blocks(moe, block, tp):
        return None
    block_n, _ = block
    heads = heads or tp
    working = _working(extra, heads, expert_parallel, groups)
    slice_text = f"{moe:,} / {tp} = {moe / tp:g}" if moe % tp else f"{moe:,} / {tp} = {moe // tp:,}"
    message = (
        f"--tensor-parallel-size {tp} cannot split this checkpoint: each GPU's slice of the experts is "
        f"moe_intermediate_size {slice_text}, not a multiple of the FP8 block {block_n} "
        f"(quantization_config.weight_block_size); vLLM refuses it while loading the weights"
    )
    if working:
        sizes = ", ".join(str(t) for t in working)
        hint = (f"tensor-parallel sizes that split: {sizes} (they also divide the {heads} attention heads); "
                "or keep the size and add --enable-expert-parallel (the experts stay whole)")
    else:
        hint = "no tensor-parallel size splits it into whole blocks: add --enable-expert-parallel (the experts stay whole)"
    return SplitRefusal(message, hint, working)


def _splits_blocks(moe: int, block: tuple[int, int], tp: int) -> bool:
    block_n, block_k = block
    return moe % tp == 0 and (moe // tp) % block_n == 0 and (moe // tp) % block_k == 0


def _working(extra: dict[str, Any], heads: int, expert_parallel: bool, groups: int | None = None) -> tuple[int, ...]:
    """The tensor-parallel sizes up to the heads' count that divide the heads, the output groups (0.34+: `groups`)
    and split the FP8 blocks (where the config says them, and the experts are cut: not with expert parallelism)."""
    moe = _positive_int(extra.get("moe_intermediate_size"))
    block = fp8_block(extra)
    return tuple(t for t in range(1, heads + 1) if heads % t == 0 and (groups is None or groups % t == 0) and (
        expert_parallel or moe is None or block is None or _splits_blocks(moe, block, t)))

