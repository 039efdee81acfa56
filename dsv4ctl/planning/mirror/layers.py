"""The KV-cache layers of a request (DeepSeek-V4's specs, MTP draft layers included) and which PP stage holds each."""

from __future__ import annotations

from dsv4ctl.errors import UsageError
from dsv4ctl.planning.checkpoint.geometry import Dsv4Geometry
from dsv4ctl.planning.mirror.kv_planner import pp_layer_ranges
from dsv4ctl.planning.mirror.kv_specs import DSV4_BLOCK_SIZE, KvLayoutChoice, LayerKvSpec, build_layer_specs


def worker_layer_sets(specs: dict[str, LayerKvSpec], geometry: Dsv4Geometry, pp: int) -> list[set[str]]:
    """Layer names per PP stage (`get_pp_indices`); MTP draft layers live with the last stage."""
    try:
        ranges = pp_layer_ranges(geometry.num_hidden_layers, pp)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if pp > geometry.num_hidden_layers:
        raise UsageError(f"--pipeline-parallel-size {pp} exceeds the model's {geometry.num_hidden_layers} layers")
    sets: list[set[str]] = [set() for _ in range(pp)]
    for name in specs:
        layer_id = int(name.split(".")[2])
        stage = pp - 1
        for rank, (start, end) in enumerate(ranges):
            if start <= layer_id < end:
                stage = rank
                break
        sets[stage].add(name)
    return sets


def build_specs(
    geometry: Dsv4Geometry, layout: KvLayoutChoice, *, num_speculative_tokens: int, block_size: int | None
) -> dict[str, LayerKvSpec]:
    """The KV specs of every layer vLLM gives a cache (`--block-size` None: DeepSeek-V4's own)."""
    mtp_layers = geometry.num_nextn_predict_layers if num_speculative_tokens > 0 else 0
    if num_speculative_tokens > 0 and mtp_layers == 0:
        raise UsageError(f"{geometry.model} ships no MTP layers (num_nextn_predict_layers = 0)", hint="drop --speculative-config")
    # num_prefill_lookahead_tokens: multi-module MTP reads num_speculative_tokens ahead, else 1 (eagle family).
    if num_speculative_tokens > 0:
        multi_module = min(mtp_layers, num_speculative_tokens) > 1
        lookahead = num_speculative_tokens if multi_module else 1
    else:
        lookahead = 0
    return build_layer_specs(
        geometry.compress_ratios,
        num_mtp_layers=mtp_layers,
        sliding_window=geometry.sliding_window,
        head_dim=geometry.head_dim,
        index_head_dim=geometry.index_head_dim,
        layout=layout,
        block_size=block_size or DSV4_BLOCK_SIZE,
        extra_retained_tokens=max(0, lookahead - 1),
    )
