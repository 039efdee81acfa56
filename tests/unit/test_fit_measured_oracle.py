"""vLLM 0.34's measured ("extensible") KV cache: the mirror against the release's own functions.

tests/data/planner/0.34.0-measured.json holds what 0.34.0's own code answered (scripts/planner_oracle.py --measured):
the tentative `get_kv_cache_configs` on the reservation, `measure_kv_cache_bytes` on the readings of each point,
`ExtensibleKVCache.blocks_within` and `finalize_extensible_kv_cache`, for both models, two GPU sizes, the default and
an explicit utilization, four memory levels after warm-up, three lengths (auto and two explicit), two committed
prefixes, two transient peaks and two torch growths.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

from dsv4ctl.planning.checkpoint.load import load_geometry
from dsv4ctl.planning.mirror import measured
from dsv4ctl.planning.mirror.kv_planner import max_concurrent_batches, planner_rules
from dsv4ctl.planning.mirror.kv_specs import resolve_kv_layout
from dsv4ctl.planning.mirror.layers import build_specs, worker_layer_sets
from dsv4ctl.planning.mirror.plans import Planner, autofit_len, finalize_measured
from dsv4ctl.planning.mirror.refusals import refusal_texts

DATA = json.loads((Path(__file__).resolve().parent.parent / "data" / "planner" / "0.34.0-measured.json").read_text())
GiB = 1 << 30


@lru_cache(maxsize=None)
def _planner(model: str) -> tuple[Planner, int]:
    geometry = load_geometry(model)
    specs = build_specs(geometry, resolve_kv_layout("fp8", None, None), num_speculative_tokens=0, block_size=None)
    return Planner(specs, [worker_layer_sets(specs, geometry, 1)[0]], planner_rules("0.34.0")), geometry.model_max_model_len


def _mirror(p: dict) -> dict:
    planner, model_max = _planner(p["model"])
    in_flight = max_concurrent_batches(p["async_scheduling"], 1) * p["max_num_batched_tokens"]
    mode = measured.sizing_mode("0.34.0", gpu_memory_utilization=p["gpu_memory_utilization"])
    auto = p["max_model_len"] == -1
    length = model_max if auto else p["max_model_len"]
    before = refusal_texts(True, measured=True, utilization=mode.utilization)
    tentative = planner([max(p["reservation_bytes"], 0)], length=length, auto=auto, tokens_in_flight=in_flight, texts=before)
    if tentative.error:
        return {"stage": "tentative", "tentative_max_model_len": 0, "measured_blocks": 0, "final_max_model_len": 0,
                "error": tentative.error}
    worker = tentative.workers[0]
    bpb, capacity = worker.bytes_per_block, worker.num_blocks
    committed = measured.physical_bytes_for(min(p["committed_blocks"], capacity), bpb)
    free = p["init_free_memory"] - p["non_kv_used"] - committed
    kv_bytes = measured.measure_kv_cache_bytes(
        init_free_memory=p["init_free_memory"], free_memory=free, committed_bytes=committed,
        requested_memory=p["requested_memory"], transient_peak_bytes=p["transient_peak_bytes"],
        torch_reserve_growth_bytes=p["torch_reserve_growth_bytes"])
    blocks = measured.blocks_within(kv_bytes, bpb, capacity)
    after = refusal_texts(True, measured=True, utilization=mode.utilization, after_warmup=True)
    final_blocks, final = finalize_measured(planner, blocks, capacity, tentative.max_model_len, auto, in_flight, after)
    return {"stage": "final", "tentative_max_model_len": tentative.max_model_len, "capacity_blocks": capacity,
            "bytes_per_block": bpb, "committed_bytes": committed, "measured_kv_bytes": kv_bytes, "measured_blocks": blocks,
            "final_blocks": 0 if final.error else final_blocks,
            "final_max_model_len": 0 if final.error else (autofit_len(final) if auto else final.max_model_len),
            "error": final.error}


def test_the_grid_is_recorded_by_the_release_own_functions():
    assert DATA["vllm_version"] == "0.34.0" and DATA["commit_granule_bytes"] == measured.COMMIT_GRANULE_BYTES
    assert len(DATA["points"]) == 768
    stages = {(p["stage"], p["error"] is None) for p in DATA["points"]}
    assert stages == {("tentative", False), ("final", False), ("final", True)}  # refusals at both stages, and fits


@pytest.mark.parametrize("model", ["deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro"])
def test_mirror_equals_the_release_on_the_measured_grid(model):
    points = [p for p in DATA["points"] if p["model"] == model]
    mismatches = []
    for p in points:
        mine = _mirror(p)
        want = {k: p.get(k) for k in mine}
        if mine != want:
            mismatches.append((p, {k: (mine[k], want[k]) for k in mine if mine[k] != want[k]}))
    assert not mismatches, mismatches[:3]


def test_measure_kv_cache_bytes_by_hand():
    # 100 GiB free at start, 30 GiB used after warm-up besides 2 GiB of committed blocks, peak 4 GiB, growth 1 GiB:
    # min(140 - 30, 68 + 2 - max(1, 3)) - max(4, 1) = 67 - 4 = 63 GiB.
    got = measured.measure_kv_cache_bytes(init_free_memory=100 * GiB, free_memory=68 * GiB, committed_bytes=2 * GiB,
                                          requested_memory=140 * GiB, transient_peak_bytes=4 * GiB,
                                          torch_reserve_growth_bytes=GiB)
    assert got == 63 * GiB
    # The requested budget binds when the utilization is below what is free.
    assert measured.measure_kv_cache_bytes(init_free_memory=100 * GiB, free_memory=68 * GiB, committed_bytes=2 * GiB,
                                           requested_memory=50 * GiB) == 20 * GiB


def test_blocks_within_rounds_to_the_commit_granule():
    bpb = 1_002_240  # DeepSeek-V4-Flash's block stride
    fits = measured.blocks_within(10 * GiB, bpb, 1 << 30)
    assert measured.physical_bytes_for(fits, bpb) <= 10 * GiB < measured.physical_bytes_for(fits + 1, bpb)
    assert measured.blocks_within(10 * GiB, bpb, 100) == 100  # at most the capacity
    assert measured.blocks_within(0, bpb, 100) == 0
