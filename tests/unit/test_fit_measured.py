"""fit-length on vLLM 0.34's two KV sizing modes: the mode from the flags (and a log), the measured budget's range,
no startup refusal, a 0.34 log calibrating from its committed blocks, the refusals after warm-up, and the flags."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from fitkit import FLASH, H200_RESERVED, H200_TOTAL, builtin_config, h200, make_checkpoint, snapshot, no_hf_cache  # noqa: F401

from dsv4ctl.errors import Dsv4ctlError, ExitCode, InputError
from dsv4ctl.planning import FitRequest, LogCalibration, plan_fit
from dsv4ctl.planning.mirror import measured
from dsv4ctl.planning.plan.memory import CUDA_CONTEXT_BYTES, DEFAULT_NON_KV_OVERHEAD_BYTES, TRANSIENT_PEAK_SHARE

GiB = 1 << 30
DENSE, EXPERTS = 12 * GiB, 140 * GiB
BPB = 1_002_240  # DeepSeek-V4-Flash's block stride (fp8_ds_mla)


@pytest.fixture
def checkpoint(tmp_path):
    shards = [{"model.embed_tokens.weight": DENSE}, {"model.layers.5.ffn.experts.17.w1.weight": EXPERTS}]
    return make_checkpoint(tmp_path / "DeepSeek-V4-Flash", builtin_config(FLASH), shards)


def _log(**kw) -> LogCalibration:
    base = dict(path="start-0.34.log", available_kv_bytes=int(118.5 * GiB), weights_bytes=None, graph_bytes=None,
                autofit_from=None, autofit_to=None, max_model_len=None, vllm_version="0.34.0")
    return LogCalibration(**{**base, **kw})


@pytest.mark.parametrize("flags, mode", [
    ({}, "measured"),
    ({"kv_cache_memory_bytes": 10 * GiB}, "estimate"),
    ({"num_gpu_blocks_override": 1000}, "estimate"),
    ({"enable_extensible_kv_cache": False}, "estimate"),
    ({"enable_elastic_ep": True}, "estimate"),
    ({"enable_extensible_kv_cache": True}, "measured"),
])
def test_mode_from_the_flags(flags, mode):
    got = measured.sizing_mode("0.34.0", gpu_memory_utilization=None, **flags)
    assert got.mode == mode and got.refusal is None
    assert got.utilization == (1.0 if mode == "measured" else 0.92) and not got.utilization_given
    assert measured.sizing_mode("0.33.0", gpu_memory_utilization=None).mode == "estimate"
    assert measured.sizing_mode("0.34.0", gpu_memory_utilization=0.8).utilization == 0.8


def test_measured_mode_asked_with_a_fixed_size_is_refused_with_vllms_words():
    with pytest.raises(Dsv4ctlError) as err:
        plan_fit(FitRequest(model=FLASH, kv_cache_memory_bytes=10 * GiB, enable_extensible_kv_cache=True,
                            vllm_version="0.34.0"))
    assert err.value.exit_code == ExitCode.DOES_NOT_FIT
    # vllm==0.34.0 config/vllm.py:3203-3207, :3263
    assert ("enable_extensible_kv_cache: it sizes the KV cache from measured memory, which kv_cache_memory_bytes "
            "overrides.") in err.value.message


def test_034_plans_as_itself_and_names_its_mode(checkpoint):
    snap = snapshot(*(h200(i) for i in range(8)))
    result = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, vllm_version="0.34.0"), snapshot=snap)
    doc = json.loads(json.dumps(result.to_json()))
    assert doc["vllm_version_planned"] == "0.34.0" and not any("newer than" in w for w in doc["warnings"])
    assert doc["sizing_mode"]["mode"] == "measured" and doc["sizing_mode"]["budget_basis"] == "estimated"
    assert doc["gpu_memory_utilization"] == 1.0 and not doc["sizing_mode"]["gpu_memory_utilization_given"]
    assert "--gpu-memory-utilization" not in doc["vllm_flags"]
    # The budget: min(ceil(total x 1.0), free at start - max(1 GiB, 0.75 x peak)) - weights - overhead.
    cuda_total = H200_TOTAL - H200_RESERVED
    free = h200(0).free_bytes - CUDA_CONTEXT_BYTES
    peak = int(DEFAULT_NON_KV_OVERHEAD_BYTES * TRANSIENT_PEAK_SHARE)
    budget = min(math.ceil(cuda_total * 1.0), free - max(GiB, int(0.75 * peak)))
    available = budget - (DENSE + EXPERTS) // 8 - DEFAULT_NON_KV_OVERHEAD_BYTES
    blocks = measured.blocks_within(available, BPB, available // BPB)  # the blocks whose 2 MiB granules fit
    assert result.kv_cache_memory_bytes == blocks * BPB and available - blocks * BPB < 2 * measured.COMMIT_GRANULE_BYTES
    kv = result.available_kv
    assert kv.low < kv.value < kv.high and kv.terms[0].name == "measured_budget"
    assert any("refused only after CUDA-graph capture" in n for n in result.notes)
    # The same launch on 0.33 keeps its 0.92 budget, and says so in its command.
    old = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, vllm_version="0.33.0"), snapshot=snap)
    assert old.kv_cache_memory_bytes < result.kv_cache_memory_bytes
    assert "--gpu-memory-utilization" in old.vllm_flags and "0.92" in old.vllm_flags
    assert old.to_json()["sizing_mode"]["mode"] == "estimate"


def test_no_startup_refusal_for_free_memory_below_the_budget(checkpoint):
    # 20 GiB held by another process: 0.33 refuses at worker start (free < 0.92 x total); 0.34's measured mode does not.
    snap = snapshot(*(h200(i, free=h200(i).free_bytes - 20 * GiB) for i in range(8)))
    old = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, vllm_version="0.33.0"), snapshot=snap)
    assert not old.fits and old.refusal.startswith("Free memory on device")
    new = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, vllm_version="0.34.0"), snapshot=snap)
    assert new.fits and new.refusal is None and all(g.refusal is None for g in new.gpus)
    # ... and the held memory comes off its budget instead.
    roomy = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, vllm_version="0.34.0"),
                     snapshot=snapshot(*(h200(i) for i in range(8))))
    assert abs(roomy.kv_cache_memory_bytes - new.kv_cache_memory_bytes - 20 * GiB) < 2 * BPB  # up to a granule's rounding
    # Estimate mode on 0.34 keeps the refusal.
    off = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, vllm_version="0.34.0",
                              enable_extensible_kv_cache=False), snapshot=snap)
    assert not off.fits and off.refusal.startswith("Free memory on device")


def test_a_034_log_calibrates_from_its_committed_blocks():
    blocks = 12_000
    log = _log(sizing_mode="measured", measured_kv_blocks=blocks, measured_kv_bytes=blocks * BPB)
    result = plan_fit(FitRequest(model=FLASH, from_log="start-0.34.log", max_num_batched_tokens=8192,
                                 vllm_version="0.34.0"), log_facts=log)
    assert result.kv_cache_memory_source == "log" and result.kv_cache_memory_bytes == blocks * BPB
    assert result.available_kv.basis == "measured" and result.available_kv.width == 0
    given = plan_fit(FitRequest(model=FLASH, kv_cache_memory_bytes=blocks * BPB, max_num_batched_tokens=8192,
                                vllm_version="0.34.0"))
    assert result.autofit_max_model_len == given.autofit_max_model_len  # N x bpb, the null block held back as vLLM does
    assert result.log.predicted_range == (result.autofit_max_model_len,) * 2
    # The tentative auto-fit of the log bounds the final one.
    bounded = plan_fit(FitRequest(model=FLASH, from_log="start-0.34.log", max_num_batched_tokens=8192,
                                  vllm_version="0.34.0"), log_facts=log.__class__(**{**log.__dict__, "tentative_autofit_to": 100_000}))
    assert bounded.autofit_max_model_len == 100_000 < result.autofit_max_model_len
    assert 0 < bounded.recommended_max_model_len <= 100_000  # a longer explicit length fails the reservation's check


def test_a_034_log_that_did_not_reach_the_measurement_is_not_read_as_kv():
    with pytest.raises(InputError, match="only the reservation"):
        plan_fit(FitRequest(model=FLASH, from_log="start-0.34.log", vllm_version="0.34.0"),
                 log_facts=_log(sizing_mode="measured"))


def test_a_log_that_turned_the_measured_mode_off_plans_as_the_estimate():
    log = _log(sizing_mode="estimate", available_kv_bytes=int(9.81 * GiB))
    result = plan_fit(FitRequest(model=FLASH, from_log="start-0.34.log", max_num_batched_tokens=8192,
                                 vllm_version="0.34.0"), log_facts=log)
    assert result.sizing.mode == "estimate" and "start-0.34.log shows the estimate mode" in result.sizing.why
    assert result.autofit_max_model_len == 979_456  # the 9.81 GiB figure of every packed release


def test_an_explicit_length_that_does_not_fit_is_refused_after_warmup():
    blocks = 3_000
    log = _log(sizing_mode="measured", measured_kv_blocks=blocks)
    result = plan_fit(FitRequest(model=FLASH, from_log="start-0.34.log", max_model_len=1_048_576,
                                 max_num_batched_tokens=8192, vllm_version="0.34.0"), log_facts=log)
    assert not result.fits
    assert result.refusal.startswith("To serve at least one request with the model's max seq len (1048576)")
    # vllm==0.34.0 v1/core/kv_cache_planning.py:74-85, after warm-up, utilization 1.0
    assert ("The extensible KV cache already takes all device memory left after the model, its activations, CUDA "
            "graphs and warmup;") in result.refusal


def test_cli_034_with_the_flags(cli):
    res = cli("fit-length", FLASH, "--kv-cache-memory", "9.81GiB", "--vllm-version", "0.34.0", "--json")
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["sizing_mode"]["mode"] == "estimate" and doc["sizing_mode"]["budget_basis"] == "exact"
    assert doc["autofit_max_model_len"] == 979_456
    res = cli("fit-length", FLASH, "--kv-cache-memory", "9.81GiB", "--vllm-version", "0.34.0")
    assert "KV sizing: estimated from the profile run" in res.stdout.replace("\n  ", " ")


def test_serve_plans_034_with_its_own_defaults(checkpoint):
    from dsv4ctl.serve import preflight
    from dsv4ctl.serve.flags_without_vllm import parse_planning_flags

    snap = snapshot(*(h200(i) for i in range(8)))
    flags = [str(checkpoint), "-tp", "8"]
    ns = parse_planning_flags(flags, "0.34.0")
    assert ns.gpu_memory_utilization is None  # 0.34's parser leaves it unset (engine/arg_utils.py:1403)
    decision = preflight.decide(ns, flags, vllm_version="0.34.0", snapshot_reader=lambda: snap)
    assert decision.plan["sizing_mode"]["mode"] == "measured" and decision.plan["gpu_memory_utilization"] == 1.0
    assert not any("utilization" in f for f in decision.flags)
    off = [*flags, "--no-enable-extensible-kv-cache"]
    decision = preflight.decide(parse_planning_flags(off, "0.34.0"), off, vllm_version="0.34.0", snapshot_reader=lambda: snap)
    assert decision.plan["sizing_mode"]["mode"] == "estimate" and decision.plan["gpu_memory_utilization"] == 0.92
    assert decision.flags[:len(off)] == off and not any("utilization" in f for f in decision.flags)


def test_serve_dry_run_for_034_passes_vllms_defaults(cli):
    res = cli("serve", "--dry-run", "--json", "--vllm-version", "0.34.0", FLASH, "-tp", "4", "--kv-cache-memory-bytes", "10G")
    doc = json.loads(res.stdout)["serve_preflight"]
    assert res.exit_code == 0, res.stderr
    assert not any("utilization" in a for a in doc["vllm_argv"])
    assert doc["plan"]["vllm_version_planned"] == "0.34.0" and doc["plan"]["sizing_mode"]["mode"] == "estimate"
    res = cli("serve", "--dry-run", "--json", "--vllm-version", "0.34.0", FLASH, "-tp", "4", "--kv-cache-memory-bytes",
              "10G", "--no-enable-extensible-kv-cache")
    assert res.exit_code == 0, res.stderr  # 0.34's flag, read from the table of its flags


def test_a_034_log_of_a_fixed_budget_is_the_estimate_path():
    # --kv-cache-memory-bytes in the log's own flags: vLLM turned the measured mode off (config/vllm.py:3203-3207),
    # so its "Available KV cache memory" is the KV size.
    log = _log(available_kv_bytes=int(9.81 * GiB), serve_args={"kv_cache_memory_bytes": 10533407294})
    result = plan_fit(FitRequest(model=FLASH, from_log="start-0.34.log", max_num_batched_tokens=8192,
                                 vllm_version="0.34.0", inherit_from_log=True), log_facts=log)
    assert result.sizing.mode == "estimate" and result.autofit_max_model_len == 979_456


def test_a_log_of_a_release_before_034_does_not_decide_034s_sizing_mode(cli):
    """A 0.32 start is "estimate" because 0.32 had no other mode: a 0.34 plan from it is sized as the flags decide
    (measured by default, --gpu-memory-utilization 1.0), its "Available KV cache memory" taken as an estimate with a
    warning, and the printed command runs in the mode planned (no 0.92, no --no-enable-extensible-kv-cache)."""
    log = str(Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "autofit_reduced_v032.log")
    res = cli("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--vllm-version", "0.34.0", "--from-log", log, "--json")
    doc = json.loads(res.stdout)
    assert res.exit_code == 0, res.output
    assert doc["sizing_mode"]["mode"] == "measured" and doc["sizing_mode"]["gpu_memory_utilization"] == 1.0
    assert "shows the estimate mode" not in json.dumps(doc)
    assert any("is a start of vLLM 0.32.0" in w and "estimate only" in w for w in doc["warnings"])
    assert doc["available_kv_bytes"]["basis"] == "estimated"
    assert "--gpu-memory-utilization" not in doc["vllm_command"] and "extensible" not in doc["vllm_command"]
    view = cli("fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--vllm-version", "0.32.0", "--compare", "0.34.0",
               "--from-log", log, "--json")
    after = json.loads(view.stdout)["to"]
    assert after["sizing_mode"] == "measured" and after["gpu_memory_utilization"] == 1.0, after
