"""KV memory predicted from GPUs (a GpuSnapshot built here or loaded from JSON) and from startup logs."""

from __future__ import annotations

import json
import math
import sys
import types

import pynvml as real_pynvml
import pytest
from fitkit import FLASH, H200_FREE, H200_RESERVED, H200_TOTAL, builtin_config, h200, make_checkpoint, snapshot, no_hf_cache  # noqa: F401 - autouse fixture

from dsv4ctl.errors import ExitCode, GpuUnavailableError, InputError
from dsv4ctl.gpu import save_snapshot
from dsv4ctl.planning import FitRequest, plan_fit
from dsv4ctl.planning.plan.memory import CUDA_CONTEXT_BYTES, DEFAULT_NON_KV_OVERHEAD_BYTES

GiB = 1 << 30
DENSE, EXPERTS, MTP = 12 * GiB, 140 * GiB, 3 * GiB


@pytest.fixture
def checkpoint(tmp_path):
    shards = [
        {"model.embed_tokens.weight": DENSE // 2, "model.layers.0.attn.wq_b.weight": DENSE // 2},
        {"model.layers.5.ffn.experts.17.w1.weight": EXPERTS},
        {"mtp.0.e_proj.weight": MTP},
    ]
    return make_checkpoint(tmp_path / "DeepSeek-V4-Flash", builtin_config(FLASH), shards)


def expected_available(tp: int, dp: int = 1, ep: bool = False, util: float = 0.92) -> int:
    requested = math.ceil((H200_TOTAL - H200_RESERVED) * util)
    ep_size = tp * (dp if ep else 1)
    return requested - (DENSE // tp + EXPERTS // ep_size) - DEFAULT_NON_KV_OVERHEAD_BYTES


def test_prediction_per_gpu_follows_vllms_budget(checkpoint):
    snap = snapshot(*(h200(i) for i in range(8)))
    result = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8), snapshot=snap)
    assert result.kv_cache_memory_source == "predicted"
    assert len(result.gpus) == 8
    gpu = result.gpus[0]
    assert gpu.cuda_total_bytes == H200_TOTAL - H200_RESERVED
    assert gpu.requested_bytes == math.ceil(gpu.cuda_total_bytes * 0.92)
    assert gpu.weights_bytes == DENSE // 8 + EXPERTS // 8  # MTP weights stay unloaded without MTP
    assert result.kv_cache_memory_bytes == expected_available(8)
    # The auto-fit for that memory is the same as when the memory is given directly.
    given = plan_fit(FitRequest(model=FLASH, kv_cache_memory_bytes=expected_available(8), max_num_batched_tokens=8192))
    assert result.autofit_max_model_len == given.autofit_max_model_len
    assert result.max_num_batched_tokens == 8192  # H200: >= 70 GiB


def test_expert_parallel_spreads_experts_over_dp(checkpoint):
    snap = snapshot(*(h200(i) for i in range(8)))
    result = plan_fit(
        FitRequest(model=str(checkpoint), tensor_parallel_size=2, data_parallel_size=4, enable_expert_parallel=True),
        snapshot=snap,
    )
    assert result.gpus[0].weights_bytes == DENSE // 2 + EXPERTS // 8
    assert result.kv_cache_memory_bytes == expected_available(2, 4, True)


def test_mtp_weights_load_with_mtp(checkpoint):
    snap = snapshot(*(h200(i) for i in range(8)))
    result = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, num_speculative_tokens=1), snapshot=snap)
    assert result.gpus[0].weights_bytes == DENSE // 8 + EXPERTS // 8 + MTP // 8


def test_free_memory_below_the_request_is_vllms_refusal(checkpoint):
    busy = H200_FREE - 30 * GiB  # another process holds 30 GiB
    snap = snapshot(*(h200(i, free=busy if i == 3 else H200_FREE) for i in range(8)))
    result = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8), snapshot=snap)
    assert result.verdict == "does_not_fit"
    cuda_free = busy - CUDA_CONTEXT_BYTES
    assert result.refusal.startswith(f"Free memory on device cuda:3 ({round(cuda_free / GiB, 2)}/")
    assert "is less than desired GPU memory utilization (0.92," in result.refusal
    # A lower utilization fits under the free memory again.
    lower = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, gpu_memory_utilization=0.7), snapshot=snap)
    assert lower.fits


def test_zero_free_memory(checkpoint, cli, tmp_path):
    path = tmp_path / "snap.json"
    save_snapshot(snapshot(*(h200(i, free=0) for i in range(8))), path)
    result = cli("fit-length", str(checkpoint), "--gpus", str(path), "-tp", "8", "--json")
    assert result.exit_code == ExitCode.DOES_NOT_FIT
    assert json.loads(result.stdout)["refusal"].startswith("Free memory on device cuda:0 (0.0/")


def test_weights_that_fill_the_gpu(cli, tmp_path):
    path = tmp_path / "snap.json"
    save_snapshot(snapshot(h200(0)), path)
    result = cli("fit-length", FLASH, "--gpus", str(path), "--weights-memory", "130GiB", "--json")
    assert result.exit_code == ExitCode.DOES_NOT_FIT
    assert "No available memory for the cache blocks" in json.loads(result.stdout)["refusal"]


def test_snapshot_json_through_the_cli(checkpoint, cli, tmp_path):
    path = tmp_path / "snap.json"
    save_snapshot(snapshot(*(h200(i) for i in range(8))), path)
    result = cli("fit-length", str(checkpoint), "--gpus", str(path), "--tensor-parallel-size", "8", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["kv_cache_memory_source"] == "predicted"
    assert data["kv_cache_memory_bytes"] == expected_available(8)
    assert [g["cuda_index"] for g in data["gpus"]] == list(range(8))
    human = cli("fit-length", str(checkpoint), "--gpus", str(path), "-tp", "8")
    assert "NVIDIA H200" in human.stdout and "predicted from the GPUs" in human.stdout


def test_builtin_id_needs_a_weight_size(cli, tmp_path):
    path = tmp_path / "snap.json"
    save_snapshot(snapshot(h200(0)), path)
    result = cli("fit-length", FLASH, "--gpus", str(path))
    assert result.exit_code == ExitCode.ERROR
    assert "weight size per GPU is unknown" in result.stderr
    ok = cli("fit-length", FLASH, "--gpus", str(path), "--weights-memory", "100GiB", "--overhead", "4GiB", "--json")
    data = json.loads(ok.stdout)
    assert data["kv_cache_memory_bytes"] == math.ceil((H200_TOTAL - H200_RESERVED) * 0.92) - 104 * GiB


def test_too_few_gpus_and_mig_only():
    with pytest.raises(GpuUnavailableError, match="TP×PP×DP = 8 GPUs needed, 2 visible"):
        plan_fit(FitRequest(model=FLASH, tensor_parallel_size=8, weights_bytes_per_rank=GiB), snapshot=snapshot(h200(0), h200(1)))
    with pytest.raises(GpuUnavailableError, match="only MIG instances are visible"):
        plan_fit(FitRequest(model=FLASH, weights_bytes_per_rank=GiB), snapshot=snapshot(h200(0, is_mig=True)))
    with pytest.raises(GpuUnavailableError, match="no GPUs in the snapshot"):
        plan_fit(FitRequest(model=FLASH, weights_bytes_per_rank=GiB), snapshot=snapshot())


def test_no_driver_through_a_replaced_nvml_module(cli, monkeypatch):
    """No --kv-cache-memory and no snapshot: fit-length asks NVML, which has no driver here."""
    fake = types.ModuleType("pynvml")
    fake.NVMLError = real_pynvml.NVMLError
    fake.NVMLLibraryMismatchError = real_pynvml.NVMLLibraryMismatchError
    fake.NVML_ERROR_DRIVER_NOT_LOADED = real_pynvml.NVML_ERROR_DRIVER_NOT_LOADED

    def nvml_init():
        raise real_pynvml.NVMLError(real_pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    fake.nvmlInit = nvml_init
    fake.nvmlShutdown = lambda: None
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    result = cli("fit-length", FLASH, "--weights-memory", "20GiB")
    assert result.exit_code == ExitCode.ERROR
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "Error: the NVIDIA driver is not loaded (NVML: Driver Not Loaded)"
    assert "--gpus snapshot.json" in lines[1]


def test_bad_snapshot_file(cli, tmp_path):
    bad = tmp_path / "snap.json"
    bad.write_text("[1, 2")
    result = cli("fit-length", FLASH, "--gpus", str(bad), "--weights-memory", "1GiB")
    assert result.exit_code == ExitCode.ERROR and result.stderr.startswith("Error: ")


LOG = """\
(EngineCore pid=1) INFO 11-01 09:20:01 [gpu_model_runner.py:429] Model loading took 71.31 GiB memory and 93.511245 seconds
(EngineCore pid=1) INFO 11-01 09:24:44 [gpu_worker.py:760] Available KV cache memory: 9.81 GiB
(EngineCore pid=1) INFO 11-01 09:24:45 [kv_cache_utils.py:2478] Auto-fit max_model_len: reduced from 1048576 to 979456 to fit in available KV cache memory (9.81 GiB GPU)
(EngineCore pid=1) INFO 11-01 09:25:06 [model_runner.py:1164] Graph capturing finished in 21 secs, took 1.52 GiB
"""


def test_from_log_calibration(cli, tmp_path):
    log = tmp_path / "startup.log"
    log.write_text(LOG)
    result = cli("fit-length", FLASH, "--from-log", str(log), "--max-num-batched-tokens", "8192", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["kv_cache_memory_source"] == "log"
    assert data["kv_cache_memory_bytes"] == round(9.81 * GiB)
    assert data["autofit_max_model_len"] == 979_456
    assert data["log"]["logged_autofit_to"] == 979_456
    assert data["log"]["model_loading_bytes"] == round(71.31 * GiB)
    assert data["log"]["graph_capture_bytes"] == round(1.52 * GiB)
    low, high = data["log"]["predicted_autofit_range"]
    assert low < 979_456 < high
    assert not any("is outside the prediction" in w for w in data["warnings"])
    # A different flag than that run makes the logged auto-fit disagree, and we say so.
    other = json.loads(cli("fit-length", FLASH, "--from-log", str(log), "--max-num-batched-tokens", "2048", "--json").stdout)
    assert any("is outside the prediction" in w for w in other["warnings"])


def test_log_rounding_interval_covers_the_reported_auto_fit(cli):
    """The upstream bug report logged 9.81 GiB and an auto-fit to 980,224: inside the 0.01 GiB interval."""
    from importlib import resources

    log = resources.files("dsv4ctl").joinpath("examples/stale-max-model-len.log")
    data = json.loads(cli("fit-length", FLASH, "--from-log", str(log), "--max-num-batched-tokens", "8192", "--json").stdout)
    low, high = data["log"]["predicted_autofit_range"]
    assert data["log"]["logged_autofit_to"] == 980_224
    assert low <= 980_224 <= high
    assert not any("is outside the prediction" in w for w in data["warnings"])


def test_from_log_without_the_memory_line(cli, tmp_path):
    log = tmp_path / "startup.log"
    log.write_text(LOG.splitlines()[0] + "\n")
    result = cli("fit-length", FLASH, "--from-log", str(log))
    assert result.exit_code == ExitCode.ERROR
    assert 'no "Available KV cache memory" line' in result.stderr
    missing = cli("fit-length", FLASH, "--from-log", str(tmp_path / "nope.log"))
    assert missing.exit_code == ExitCode.ERROR and "no such log file" in missing.stderr


def test_input_errors_are_input_errors(tmp_path):
    with pytest.raises(InputError):
        plan_fit(FitRequest(model=str(tmp_path / "missing.json"), kv_cache_memory_bytes=GiB))


def test_given_kv_memory_still_checks_free_memory(cli, tmp_path):
    """vLLM's start-up check of free memory against the budget runs even with --kv-cache-memory-bytes."""
    path = tmp_path / "snap.json"
    save_snapshot(snapshot(h200(0, free=100 * GiB)), path)
    result = cli("fit-length", FLASH, "--gpus", str(path), "--kv-cache-memory", "20GiB", "--json")
    assert result.exit_code == ExitCode.DOES_NOT_FIT
    assert json.loads(result.stdout)["refusal"].startswith("Free memory on device cuda:0")
    ok = json.loads(cli("fit-length", FLASH, "--gpus", str(path), "--kv-cache-memory", "20GiB", "--gpu-memory-utilization", "0.6", "--json").stdout)
    assert ok["fits"] is True and ok["max_num_batched_tokens"] == 8192  # H200 default from the snapshot


def test_little_free_memory_above_the_budget_is_a_warning(cli, tmp_path):
    requested = math.ceil((H200_TOTAL - H200_RESERVED) * 0.92)
    path = tmp_path / "snap.json"
    save_snapshot(snapshot(h200(0, free=requested + CUDA_CONTEXT_BYTES + GiB // 4)), path)
    data = json.loads(cli("fit-length", FLASH, "--gpus", str(path), "--kv-cache-memory", "20GiB", "--json").stdout)
    assert data["fits"] is True
    assert any("above the --gpu-memory-utilization budget" in w for w in data["warnings"])


# -- several nodes: a snapshot each, the tightest GPU binds and is named ---------------------------------


def test_several_snapshots_plan_with_the_tightest_gpu(tmp_path, cli):
    from dataclasses import replace as dc_replace

    from fitkit import H200_FREE, builtin_config, h200, make_checkpoint, snapshot

    from dsv4ctl.gpu import save_snapshot
    from dsv4ctl.planning import FitRequest, plan_fit

    GiB = 1 << 30
    ckpt = make_checkpoint(tmp_path / "flash", builtin_config(), [{"model.layers.0.attn.wq_b.weight": 8 * GiB}])
    roomy = snapshot(*(h200(i) for i in range(2)))
    # Node b: cuda:1 is a smaller card (its total and free are 40 GiB lower).
    small = dc_replace(h200(1, free=H200_FREE - 40 * GiB), total_bytes=h200(1).total_bytes - 40 * GiB)
    tight = dc_replace(snapshot(h200(0), small), hostname="node-b")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    save_snapshot(roomy, a)
    save_snapshot(tight, b)
    req = dict(model=str(ckpt), tensor_parallel_size=2, gpu_memory_utilization=0.2, vllm_version="0.32.0")
    alone_a = plan_fit(FitRequest(**req, gpus=str(a)))
    alone_b = plan_fit(FitRequest(**req, gpus=str(b)))
    assert alone_b.kv_cache_memory_bytes < alone_a.kv_cache_memory_bytes
    both = plan_fit(FitRequest(**req, gpus=(str(a), str(b))))
    assert both.kv_cache_memory_bytes == alone_b.kv_cache_memory_bytes
    assert both.autofit_max_model_len == alone_b.autofit_max_model_len
    assert both.tightest_gpu.cuda_index == 1
    assert [n["binding"] for n in both.nodes] == [False, True]
    assert any("the tightest is cuda:1 (NVIDIA H200)" in n and "node-b" in n for n in both.notes)

    res = cli("fit-length", str(ckpt), "-tp", "2", "--gpu-memory-utilization", "0.2", "--gpus", str(a), "--gpus", str(b), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["tightest_gpu"]["cuda_index"] == 1 and len(doc["nodes"]) == 2


# -- available KV memory: value, range, basis per term; the recommendation from the low end ---------------


def test_predicted_memory_is_an_estimate_with_a_range(checkpoint):
    from dsv4ctl.planning.plan.memory import NON_KV_OVERHEAD_SPREAD_BYTES

    snap = snapshot(*(h200(i) for i in range(8)))
    # A tight budget, so the range moves the auto-fit (utilization 0.24 leaves ~10 GiB for KV).
    req = FitRequest(model=str(checkpoint), tensor_parallel_size=8, gpu_memory_utilization=0.24, max_num_batched_tokens=8192)
    result = plan_fit(req, snapshot=snap)
    kv = result.available_kv
    assert kv.basis == "estimated" and kv.value == result.kv_cache_memory_bytes
    assert (kv.value - kv.low, kv.high - kv.value) == (NON_KV_OVERHEAD_SPREAD_BYTES, NON_KV_OVERHEAD_SPREAD_BYTES)
    assert {t.name: t.basis for t in kv.terms} == {"requested": "measured", "weights": "checkpoint", "non_kv_overhead": "estimated"}
    low_fit, high_fit = result.autofit_range
    assert low_fit < result.autofit_max_model_len <= high_fit
    # The recommendation is what the low end recommends (the same rule on the low end's memory).
    at_low = plan_fit(FitRequest(model=FLASH, kv_cache_memory_bytes=kv.low, max_num_batched_tokens=8192))
    assert result.recommended_max_model_len <= at_low.autofit_max_model_len
    assert result.recommended_max_model_len < plan_fit(
        FitRequest(model=FLASH, kv_cache_memory_bytes=kv.value, max_num_batched_tokens=8192)).recommended_max_model_len
    doc = result.to_json()["available_kv_bytes"]
    assert set(doc) >= {"value", "low", "high", "basis"} and doc["basis"] == "estimated" and "--from-log" in doc["narrow"]
    # --overhead makes that term exact: the range closes.
    exact = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, non_kv_overhead_bytes=6 << 30), snapshot=snap)
    assert exact.available_kv.low == exact.available_kv.high and exact.autofit_range is None


def test_given_memory_is_exact():
    result = plan_fit(FitRequest(model=FLASH, kv_cache_memory_bytes=10 << 30))
    kv = result.available_kv
    assert (kv.basis, kv.low, kv.high) == ("exact", kv.value, kv.value)
    assert result.to_json()["available_kv_bytes"]["basis"] == "exact"
