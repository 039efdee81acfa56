"""DeepSeek-V4 geometry: the few config.json values that shape vLLM's KV cache, and the weights' bytes from a
checkpoint's safetensors headers (no tensor data is read).

A config is read here from its text; where a model's config and weights come from (a directory, a config.json, the
local Hugging Face cache, a built-in preset, the hub) is `load.load_geometry`'s. This module knows no hub.

Both config forms are read: the `compress_ratios` list of the original release (vLLM <= 0.32 reads it)
and the upstream-transformers form `layer_types` + `compress_rates` (vLLM 0.33 reads it).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from dsv4ctl.errors import InputError
from dsv4ctl.planning.checkpoint import v41 as v41_config

DSV4_ARCHITECTURES = ("DeepseekV4ForCausalLM", "DeepseekV4ForConditionalGeneration")
DSV4_MODEL_TYPES = ("deepseek_v4",)
BUILTIN_FILE = "builtin_models.json"

# vLLM's `derived_max_model_len_and_key` looks at these keys and takes the smallest one present.
_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# RoPE types whose `factor` vLLM does not multiply into the derived length (YaRN configs are pre-scaled).
_ROPE_TYPES_WITHOUT_FACTOR = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


@dataclass(frozen=True)
class CheckpointWeights:
    """Tensor bytes found in a checkpoint's safetensors headers (no tensor data is read)."""

    total_bytes: int
    expert_bytes: int  # routed experts (`.experts.` but not shared experts): split by expert parallelism
    mtp_bytes: int  # multi-token-prediction (draft) layers: loaded only with MTP speculative decoding
    num_files: int

    @property
    def dense_bytes(self) -> int:
        return self.total_bytes - self.expert_bytes - self.mtp_bytes

    def to_json(self) -> dict[str, int]:
        return {
            "total_bytes": self.total_bytes,
            "expert_bytes": self.expert_bytes,
            "mtp_bytes": self.mtp_bytes,
            "num_files": self.num_files,
        }


@dataclass(frozen=True)
class Dsv4Geometry:
    """What vLLM's DeepSeek-V4 layers need to build their KV-cache specs."""

    model: str  # as given: model id, directory or config.json path
    source: str  # "builtin" | "config" | "hf-cache"
    config_form: str  # "compress_ratios" | "layer_types"
    architecture: str
    num_hidden_layers: int
    compress_ratios: tuple[int, ...]  # one per decoder layer; 0 = sliding-window only
    num_nextn_predict_layers: int  # MTP draft layers shipped with the checkpoint
    sliding_window: int
    head_dim: int
    index_head_dim: int
    model_max_model_len: int  # what vLLM derives as the model's maximum length
    max_len_key: str
    config_path: str | None = None
    # CheckpointWeights, or a `hub.HubWeights` that reads the hub's headers the first time a size is asked
    weights: CheckpointWeights | Any | None = None
    revision: str | None = None  # the checkpoint revision (commit) the config describes, when known
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    v41: v41_config.V41Facts | None = None  # DeepSeek-V4.1's kv/index sources, two-level top-k and Engram tables

    @property
    def num_csa_layers(self) -> int:
        """Layers with compression ratio 4 (compressed sparse attention + lightning indexer)."""
        return sum(1 for r in self.compress_ratios if r == 4)

    @property
    def num_hca_layers(self) -> int:
        """Layers with compression ratio 128 (heavily compressed attention)."""
        return sum(1 for r in self.compress_ratios if r == 128)

    @property
    def num_swa_only_layers(self) -> int:
        if self.v41 is not None:  # DeepSeek-V4.1: ratio 1 is a full-length compressed cache, not sliding-only
            return sum(1 for r in self.compress_ratios if r == 0)
        return sum(1 for r in self.compress_ratios if r <= 1)

    @property
    def hub(self) -> Any:
        """The hub reader behind `weights` (`hub.HubWeights`), if the weights come or may come from the hub."""
        return self.weights if getattr(self.weights, "from_hub", False) else None

    @property
    def planned_source(self) -> str:
        """`source`, or "hub" once a built-in id's config and headers were read from the hub (its layout checked
        equal to the preset's)."""
        hub = self.hub
        return "hub" if self.source == "builtin" and hub is not None and hub.read is not None else self.source

    @property
    def planned_revision(self) -> str | None:
        hub = self.hub
        return hub.read.commit if hub is not None and hub.read is not None else self.revision

    @property
    def checkpoint(self) -> str:
        """One line naming the checkpoint this geometry describes (what was planned)."""
        hub = self.hub
        if hub is not None and hub.read is not None:
            return hub.describe()
        if self.source == "builtin":
            preset = _builtin_configs().get("_presets", {}).get(self.model, {})
            revision = f"revision {self.revision}" if self.revision else "revision unknown"
            return (f"dsv4ctl's built-in preset of {self.model} ({preset.get('describes', 'published config values')}, "
                    f"{revision}): the KV layout only, no weight sizes")
        if self.source == "hf-cache":
            return f"{self.model} in the local Hugging Face cache, revision {self.revision} ({self.config_path})"
        headers = "with the safetensors headers beside it" if self.weights is not None else "no safetensors headers beside it"
        return f"{self.config_path} ({headers})"

    def to_json(self) -> dict[str, Any]:
        hub = self.hub
        return {
            "model": self.model,
            "source": self.planned_source,
            "revision": self.planned_revision,
            "checkpoint": self.checkpoint,
            "hub": hub.to_state() if hub is not None else None,
            "config_form": self.config_form,
            "architecture": self.architecture,
            "num_hidden_layers": self.num_hidden_layers,
            "compress_ratio_4_layers": self.num_csa_layers,
            "compress_ratio_128_layers": self.num_hca_layers,
            "sliding_window_only_layers": self.num_swa_only_layers,
            "num_nextn_predict_layers": self.num_nextn_predict_layers,
            "sliding_window": self.sliding_window,
            "model_max_model_len": self.model_max_model_len,
            "config_path": self.config_path,
            "weights": self.weights.to_json() if self.weights is not None else None,  # a hub read not yet made: None
        } | ({"deepseek_v41": self.v41.to_json()} if self.v41 is not None else {})


def builtin_model_ids() -> list[str]:
    return [k for k in _builtin_configs() if not k.startswith("_")]


def _builtin_configs() -> dict[str, Any]:
    text = resources.files("dsv4ctl.planning.checkpoint").joinpath(BUILTIN_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}", hint="check the path and its permissions") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file", hint="pass the model's config.json") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})", hint="pass the model's config.json") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object", hint="pass the model's config.json")
    return data


def _int_field(config: dict[str, Any], key: str, where: str, default: int | None = None, minimum: int = 1) -> int:
    value = config.get(key, default)
    if value is None:
        raise InputError(f"{where}: missing `{key}`", hint="a DeepSeek-V4 config.json has it; is this the right file?")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{where}: `{key}` must be an integer >= {minimum}, got {value!r}")
    return value


def _geometry_from_config(
    config: dict[str, Any],
    *,
    model: str,
    source: str,
    config_path: str | None,
    weights: CheckpointWeights | None,
    directory: Path | None,
) -> Dsv4Geometry:
    where = config_path or model
    if v41_config.is_v41(config):
        return _v41_geometry(config, model=model, source=source, config_path=config_path, weights=weights, directory=directory)
    config, arch = _dsv4_config(config, where)
    num_layers = _int_field(config, "num_hidden_layers", where)
    num_mtp = _int_field(config, "num_nextn_predict_layers", where, default=0, minimum=0)
    ratios, form = _compress_ratios(config, num_layers, where)
    head_dim = _int_field(config, "head_dim", where, default=512)
    index_head_dim = _int_field(config, "index_head_dim", where, default=128)
    _check_modelled_layout(where, ratios, head_dim, index_head_dim)
    sliding_window = _int_field(config, "sliding_window", where)
    max_len, key = _max_len(config, where, directory)
    return Dsv4Geometry(
        model=model,
        source=source,
        config_form=form,
        architecture=arch or "DeepseekV4ForCausalLM",
        num_hidden_layers=num_layers,
        compress_ratios=tuple(int(r) for r in ratios),
        num_nextn_predict_layers=num_mtp,
        sliding_window=sliding_window,
        head_dim=head_dim,
        index_head_dim=index_head_dim,
        model_max_model_len=max_len,
        max_len_key=key,
        config_path=config_path,
        weights=weights,
        extra={k: config.get(k) for k in ("hidden_size", "num_attention_heads", "n_routed_experts",
                                          "moe_intermediate_size", "quantization_config", "o_groups") if k in config},
    )


def _v41_geometry(
    config: dict[str, Any],
    *,
    model: str,
    source: str,
    config_path: str | None,
    weights: CheckpointWeights | None,
    directory: Path | None,
) -> Dsv4Geometry:
    """DeepSeek-V4.1's geometry from its nested config.json (`v41.py` reads the V4.1-only values)."""
    where = config_path or model
    flat = v41_config.flatten(config)
    num_layers = _int_field(flat, "num_hidden_layers", where)
    ratios = v41_config.compress_ratios(flat, num_layers, where)
    facts = v41_config.read_v41(flat, num_layers, ratios, where)
    max_len, key = _max_len(flat, where, directory)
    return Dsv4Geometry(
        model=model,
        source=source,
        config_form="compress_ratios",
        architecture=v41_config.ARCHITECTURE,
        num_hidden_layers=num_layers,
        compress_ratios=ratios,
        num_nextn_predict_layers=facts.dspark_stages,
        sliding_window=_int_field(flat, "sliding_window", where),
        head_dim=_int_field(flat, "head_dim", where, default=512),
        index_head_dim=_int_field(flat, "index_head_dim", where, default=128),
        model_max_model_len=max_len,
        max_len_key=key,
        config_path=config_path,
        weights=weights,
        extra={k: flat.get(k) for k in ("hidden_size", "num_attention_heads", "n_routed_experts",
                                        "moe_intermediate_size", "quantization_config") if k in flat},
        v41=facts,
    )


def _dsv4_config(config: dict[str, Any], where: str) -> tuple[dict[str, Any], str | None]:
    """The text model's config (a multimodal wrapper's `text_config`) and its planned architecture; refuses a
    DeepSeek-V4 relative whose KV layout is not modelled, and a model that is not DeepSeek-V4."""
    text_config = config.get("text_config")
    if isinstance(text_config, dict) and text_config.get("model_type") in DSV4_MODEL_TYPES:
        merged = {**text_config, "architectures": config.get("architectures")}
        config = merged
    architectures = config.get("architectures") or []
    if not isinstance(architectures, list):
        architectures = [architectures]
    model_type = config.get("model_type")
    arch = next((a for a in architectures if a in DSV4_ARCHITECTURES), None)
    unplanned = next((a for a in architectures if isinstance(a, str) and a.lower().startswith("deepseekv4")), None)
    if arch is None and (unplanned is not None or (model_type in DSV4_MODEL_TYPES and architectures)):
        # A DeepSeek-V4 relative (DeepseekV41ForCausalLM) or an unknown class on a deepseek_v4 config: its KV
        # layout is not the one mirrored here, so no number at all rather than one from the wrong layout.
        name = unplanned or architectures[0]
        why = f"its KV-cache layout is not modelled; planned: {', '.join(DSV4_ARCHITECTURES + (v41_config.ARCHITECTURE,))}"
        raise InputError(
            f"{where}: architecture {name} is not planned by dsv4ctl ({why})",
            hint="no length can be predicted for it here; let vLLM auto-fit it (--max-model-len auto)",
        )
    if model_type not in DSV4_MODEL_TYPES and arch is None:
        shown = model_type or (architectures[0] if architectures else "unknown")
        raise InputError(
            f"{where}: not a DeepSeek-V4 model (model_type={shown!r})",
            hint="fit-length models DeepSeek-V4 (model_type deepseek_v4) only",
        )
    return config, arch


def _compress_ratios(config: dict[str, Any], num_layers: int, where: str) -> tuple[list[int], str]:
    """Each layer's compression ratio, from either form a DeepSeek-V4 config.json writes, and which form it was."""
    if config.get("compress_ratios") is not None:
        form = "compress_ratios"
        raw = config["compress_ratios"]
        if not isinstance(raw, list) or len(raw) < num_layers:
            raise InputError(f"{where}: `compress_ratios` must list at least num_hidden_layers={num_layers} entries")
        ratios = raw[:num_layers]
    elif config.get("compress_rates") is not None and config.get("layer_types") is not None:
        form = "layer_types"
        rates, types = config["compress_rates"], config["layer_types"]
        if not isinstance(rates, dict) or not isinstance(types, list) or len(types) < num_layers:
            raise InputError(
                f"{where}: `layer_types` must list num_hidden_layers={num_layers} entries and `compress_rates` map them to ratios"
            )
        ratios = [rates.get(t, 0) for t in types[:num_layers]]
    else:
        raise InputError(
            f"{where}: no per-layer compression (`compress_ratios`, or `layer_types` + `compress_rates`)",
            hint="a DeepSeek-V4 config.json has one of the two",
        )
    for r in ratios:
        if isinstance(r, bool) or not isinstance(r, int) or r not in (0, 1, 4, 128):
            raise InputError(f"{where}: unsupported compression ratio {r!r} (vLLM's DeepSeek-V4 layers take 0, 4 or 128)")
    return ratios, form


def _max_len(config: dict[str, Any], where: str, directory: Path | None) -> tuple[int, str]:
    """vLLM's derived max_model_len, lowered by the tokenizer's model_max_length as vLLM does."""
    max_len, key = _derived_max_model_len(config, where)
    if directory is not None:
        tokenizer_config = directory / "tokenizer_config.json"
        if tokenizer_config.is_file():
            try:
                tok_max = json.loads(tokenizer_config.read_text(encoding="utf-8")).get("model_max_length")
            except (OSError, ValueError):
                tok_max = None
            if isinstance(tok_max, (int, float)) and not isinstance(tok_max, bool) and 0 < tok_max < max_len:
                max_len, key = int(tok_max), "tokenizer_config.model_max_length"
    return max_len, key


# vLLM's DeepSeek-V4 compressor (`models/deepseek_v4/compressor.py`, the fused quant+cache set-up; line 313 in
# 0.31.0-0.33.0, 312 in 0.30.0, 306 in 0.29.0, 326 in 0.27.1/0.28.0) takes head_dim 512 (the main MLA cache) or 128
# (the indexer) and raises for anything else:
#     raise ValueError(f"Unsupported head_dim for fused quant+cache: {self.head_dim}")
COMPRESSOR_HEAD_DIMS = (512, 128)
MODELLED_HEAD_DIM = 512  # fp8_ds_mla: 448 NoPE + 64 RoPE (+ scales) = 584 B per token, the layout mirrored
MODELLED_INDEX_HEAD_DIM = 128


def _check_modelled_layout(where: str, ratios: list[int], head_dim: int, index_head_dim: int) -> None:
    """Refuse what vLLM refuses, and what dsv4ctl does not model, instead of planning the wrong layout."""

    def compressor_refusal(key: str, value: int) -> InputError:
        return InputError(
            f"{where}: `{key}` = {value}: vLLM cannot start this model (its DeepSeek-V4 compressor raises "
            f"\"Unsupported head_dim for fused quant+cache: {value}\", models/deepseek_v4/compressor.py)",
            hint=f"vLLM's DeepSeek-V4 layers take {key} {MODELLED_HEAD_DIM if key == 'head_dim' else MODELLED_INDEX_HEAD_DIM}",
        )

    def unmodelled(key: str, value: int, modelled: int) -> InputError:
        return InputError(
            f"{where}: `{key}` = {value}: dsv4ctl models DeepSeek-V4's KV layout for {key} {modelled} only",
            hint="no length can be predicted for this config here; let vLLM auto-fit it (--max-model-len auto)",
        )

    if any(r > 1 for r in ratios) and head_dim != MODELLED_HEAD_DIM:
        if head_dim not in COMPRESSOR_HEAD_DIMS:
            raise compressor_refusal("head_dim", head_dim)
        raise unmodelled("head_dim", head_dim, MODELLED_HEAD_DIM)
    if any(r == 4 for r in ratios) and index_head_dim != MODELLED_INDEX_HEAD_DIM:
        if index_head_dim not in COMPRESSOR_HEAD_DIMS:
            raise compressor_refusal("index_head_dim", index_head_dim)
        raise unmodelled("index_head_dim", index_head_dim, MODELLED_INDEX_HEAD_DIM)
    if not any(r == 4 for r in ratios):
        # No lightning indexer: vLLM picks another KV layout and does not take the packed grouping path
        # (FlashMLA: NotImplementedError "... page size is not divisible ..."; FlashInfer plans 3 groups).
        raise InputError(
            f"{where}: no layer with compression ratio 4: without the indexer vLLM plans this config on another "
            "KV-cache path (a different layout and grouping) that dsv4ctl does not model",
            hint="no length can be predicted for this config here; let vLLM auto-fit it (--max-model-len auto)",
        )


def _derived_max_model_len(config: dict[str, Any], where: str) -> tuple[int, str]:
    """vLLM's `_get_and_verify_max_len` for a text model with no user override."""
    found = [(config[k], k) for k in _MAX_LEN_KEYS if isinstance(config.get(k), (int, float)) and not isinstance(config.get(k), bool)]
    if not found:
        return 2048, "default (no length key in config.json)"
    value, key = min(found)
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    if isinstance(rope, dict):
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        factor = rope.get("factor")
        if rope_type not in _ROPE_TYPES_WITHOUT_FACTOR and isinstance(factor, (int, float)) and factor:
            value *= factor
    value = int(value)
    if value < 1:
        raise InputError(f"{where}: `{key}` must be positive, got {value}")
    return value, key


# --------------------------------------------------------------------------------------------------
# safetensors headers: 8-byte little-endian header length, then a JSON header with every tensor's
# dtype, shape and byte range. Only the headers are read.
# --------------------------------------------------------------------------------------------------

_MAX_HEADER_BYTES = 100 * 1024 * 1024


def read_safetensors_weights(directory: Path, num_hidden_layers: int) -> CheckpointWeights | None:
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    sizes: list[tuple[str, int]] = []
    for file in files:
        try:
            with file.open("rb") as fh:
                head = fh.read(8)
                if len(head) != 8:
                    raise InputError(f"{file}: truncated safetensors file", hint="re-download the checkpoint shard")
                (length,) = struct.unpack("<Q", head)
                if length <= 0 or length > _MAX_HEADER_BYTES:
                    raise InputError(f"{file}: not a safetensors file (header length {length})")
                header = json.loads(fh.read(length))
        except OSError as exc:
            raise InputError(f"cannot read {file}: {exc.strerror or exc}") from None
        except (ValueError, UnicodeDecodeError):
            raise InputError(f"{file}: safetensors header is not valid JSON") from None
        if not isinstance(header, dict):
            raise InputError(f"{file}: safetensors header is not a JSON object")
        for name, meta in header.items():
            if name == "__metadata__" or not isinstance(meta, dict):
                continue
            offsets = meta.get("data_offsets")
            if not (isinstance(offsets, list) and len(offsets) == 2):
                raise InputError(f"{file}: tensor {name!r} has no data_offsets")
            sizes.append((name, int(offsets[1]) - int(offsets[0])))
    return tally_tensors(sizes, num_hidden_layers, num_files=len(files))


def tally_tensors(sizes: Iterable[tuple[str, int]], num_hidden_layers: int, num_files: int) -> CheckpointWeights:
    """A checkpoint's bytes by how vLLM splits them: MTP (draft) layers, routed experts, the rest (dense). One rule for
    a local checkpoint's headers and the hub's."""
    total = expert = mtp = 0
    for name, size in sizes:
        total += size
        if _is_mtp_tensor(name, num_hidden_layers):
            mtp += size
        elif ".experts." in name and "shared_experts" not in name:
            expert += size
    return CheckpointWeights(total_bytes=total, expert_bytes=expert, mtp_bytes=mtp, num_files=num_files)


_LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _is_mtp_tensor(name: str, num_hidden_layers: int) -> bool:
    """Draft (MTP) tensors: `mtp.*`, or decoder layers numbered past num_hidden_layers."""
    if name.startswith("mtp.") or ".mtp." in name:
        return True
    match = _LAYER_RE.search(name)
    return bool(match) and int(match.group(1)) >= num_hidden_layers
