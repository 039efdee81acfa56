"""DeepSeek-V4.1 (`DeepseekV41ForCausalLM`, model_type `deepseek_v41`): the config.json values that shape its KV
cache and its Engram n-gram tables, read from the nested file.

The checkpoint's config.json nests the text model under `text_config` (model_type `deepseek_v41_text`) beside a
`vision_config`; vLLM flattens `text_config` onto the top level (`transformers_utils/configs/deepseek_v41.py`,
`DeepseekV41Config.__init__`, 0.33.0 and 0.34.0) and its layers read the flat attributes. The same is done here.

What vLLM 0.34.0 checks of these values, refused here with its words (`models/deepseek_v41/attention.py`):
- every layer's `compress_ratio` is 0, 1 or 2 (`:383-388`), layers past the list (DSpark draft layers) are 0;
- compressed layers need `kv_source_layer_ids` and `index_source_layer_ids` (`:402-408`), and read the latest
  source at or below them (`:409-414`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsv4ctl.errors import InputError

ARCHITECTURE = "DeepseekV41ForCausalLM"
MODEL_TYPE = "deepseek_v41"
TEXT_MODEL_TYPE = "deepseek_v41_text"
RATIOS = (0, 1, 2)


@dataclass(frozen=True)
class V41Facts:
    """The V4.1-only config values: kv/index sources, the two-level top-k, the Engram tables, DSpark's stages."""

    kv_source_layer_ids: tuple[int, ...]
    index_source_layer_ids: tuple[int, ...]
    candidate_source_layer_id: int  # -1: no two-level top-k
    candidate_topk_blocks: int
    candidate_block_size: int
    index_topk: int
    num_attention_heads: int
    o_groups: int
    engram_layer_ids: tuple[int, ...]
    engram_num_embeddings: tuple[int, ...]  # rows of each Engram layer's table (the sum of its hash heads' primes)
    engram_head_dim: int  # fp8 values per row
    engram_n_heads: int
    engram_max_ngram_size: int
    engram_vocab_size: int
    dspark_stages: int  # num_nextn_predict_layers: DSpark stages shipped under mtp.*, not classic MTP

    @property
    def engram_hash_heads(self) -> int:
        """Hash heads per Engram layer: (max n-gram - 1) x heads (`common/engram.py` `EngramLayout.n_hash_cols`)."""
        return (self.engram_max_ngram_size - 1) * self.engram_n_heads

    def owns_compressed_cache(self, layer_id: int, ratio: int) -> bool:
        """A kv-source layer owns the compressed cache, the indexer K cache and (ratio 2) the compressor ring;
        later layers read the latest source below them (`attention.py` `is_kv_source`)."""
        return ratio > 0 and layer_id in self.kv_source_layer_ids

    def to_json(self) -> dict[str, Any]:
        return {
            "kv_source_layer_ids": list(self.kv_source_layer_ids),
            "index_source_layer_ids": list(self.index_source_layer_ids),
            "candidate_source_layer_id": self.candidate_source_layer_id,
            "candidate_topk_blocks": self.candidate_topk_blocks,
            "candidate_block_size": self.candidate_block_size,
            "engram_layer_ids": list(self.engram_layer_ids),
            "engram_num_embeddings": list(self.engram_num_embeddings),
            "engram_head_dim": self.engram_head_dim,
            "dspark_stages": self.dspark_stages,
        }


def is_v41(config: dict[str, Any]) -> bool:
    """A DeepSeek-V4.1 config.json: its architecture, its model_type, or a `deepseek_v41_text` text_config."""
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list):
        architectures = [architectures]
    text = config.get("text_config")
    return (ARCHITECTURE in architectures or config.get("model_type") == MODEL_TYPE
            or (isinstance(text, dict) and text.get("model_type") == TEXT_MODEL_TYPE))


def flatten(config: dict[str, Any]) -> dict[str, Any]:
    """The text config on top, as vLLM's `DeepseekV41Config` exposes it (the wrapper's keys kept beneath)."""
    text = config.get("text_config")
    if not isinstance(text, dict):
        return dict(config)
    flat = {k: v for k, v in config.items() if k not in ("text_config", "vision_config")}
    flat.update({k: v for k, v in text.items() if k != "model_type"})
    flat["model_type"] = config.get("model_type", MODEL_TYPE)
    return flat


def _int(config: dict[str, Any], key: str, where: str, default: int | None = None, minimum: int = 0) -> int:
    value = config.get(key, default)
    if value is None:
        raise InputError(f"{where}: missing `{key}` (text_config)", hint="a DeepSeek-V4.1 config.json has it; is this the right file?")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{where}: `{key}` must be an integer >= {minimum}, got {value!r}")
    return value


def _ints(config: dict[str, Any], key: str, where: str) -> tuple[int, ...]:
    value = config.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise InputError(f"{where}: `{key}` must be a list of non-negative integers, got {value!r}")
    return tuple(value)


def compress_ratios(flat: dict[str, Any], num_layers: int, where: str) -> tuple[int, ...]:
    """Each backbone layer's ratio; vLLM's refusal for any other value than 0, 1, 2."""
    raw = flat.get("compress_ratios")
    if not isinstance(raw, list) or len(raw) < num_layers:
        raise InputError(f"{where}: `compress_ratios` must list at least num_hidden_layers={num_layers} entries")
    for layer_id, ratio in enumerate(raw[:num_layers]):
        if isinstance(ratio, bool) or ratio not in RATIOS:
            raise InputError(
                f"{where}: vLLM cannot start this model: \"DeepSeek V4.1 layer {layer_id} has compress_ratio={ratio}; "
                "only 0 (sliding window), 1 and 2 are supported.\" (models/deepseek_v41/attention.py)",
                hint="a DeepSeek-V4.1 config.json has compress_ratios of 0, 1 and 2 only",
            )
    return tuple(int(r) for r in raw[:num_layers])


def read_v41(flat: dict[str, Any], num_layers: int, ratios: tuple[int, ...], where: str) -> V41Facts:
    """The V4.1 values of a flattened config, with vLLM's own checks of the kv/index sources."""
    kv_sources = _ints(flat, "kv_source_layer_ids", where)
    index_sources = _ints(flat, "index_source_layer_ids", where)
    first_compressed = next((i for i, r in enumerate(ratios) if r > 0), None)
    if first_compressed is not None:
        if not kv_sources or not index_sources:
            raise InputError(
                f"{where}: vLLM cannot start this model: \"DeepSeek V4.1 requires kv_source_layer_ids / "
                "index_source_layer_ids in the config for compressed layers\" (models/deepseek_v41/attention.py)",
            )
        if min(kv_sources) > first_compressed or min(index_sources) > first_compressed:
            raise InputError(
                f"{where}: layer {first_compressed} is compressed but no kv/index source is at or below it: vLLM's "
                "`max(s for s in kv_source_layers if s <= layer_id)` fails (models/deepseek_v41/attention.py)",
            )
    engram_ids = _ints(flat, "engram_layer_ids", where)
    engram_rows = _ints(flat, "engram_num_embeddings", where)
    if len(engram_ids) != len(engram_rows):
        raise InputError(f"{where}: `engram_layer_ids` and `engram_num_embeddings` differ in length "
                         "(vLLM's EngramLayout asserts they match, models/deepseek_v41/common/engram.py)")
    return V41Facts(
        kv_source_layer_ids=kv_sources,
        index_source_layer_ids=index_sources,
        candidate_source_layer_id=int(flat.get("candidate_source_layer_id", -1)),
        candidate_topk_blocks=_int(flat, "candidate_topk_blocks", where, default=0),
        candidate_block_size=_int(flat, "candidate_block_size", where, default=0),
        index_topk=_int(flat, "index_topk", where, default=512, minimum=1),
        num_attention_heads=_int(flat, "num_attention_heads", where, minimum=1),
        o_groups=_int(flat, "o_groups", where, default=8, minimum=1),
        engram_layer_ids=engram_ids,
        engram_num_embeddings=engram_rows,
        engram_head_dim=_int(flat, "engram_head_dim", where, default=256, minimum=1) if engram_ids else 0,
        engram_n_heads=_int(flat, "engram_n_heads", where, default=8, minimum=1) if engram_ids else 0,
        engram_max_ngram_size=_int(flat, "engram_max_ngram_size", where, default=4, minimum=2) if engram_ids else 0,
        engram_vocab_size=_int(flat, "engram_vocab_size", where, default=0) if engram_ids else 0,
        dspark_stages=_int(flat, "num_nextn_predict_layers", where, default=0),
    )
