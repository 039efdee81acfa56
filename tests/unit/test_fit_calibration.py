"""Calibration that remembers: a serve start's measured KV memory replaces the estimate for the same
host and configuration (basis `calibrated`, naming its log); --no-calibration ignores it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from fitkit import builtin_config, h200, make_checkpoint, no_hf_cache, snapshot  # noqa: F401 - autouse fixture

from dsv4ctl.errors import GpuUnavailableError
from dsv4ctl.planning import FitRequest, plan_fit
from dsv4ctl.planning import calibration

GiB = 1 << 30
LOG = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "autofit_reduced_v032.log"  # 8.02 GiB, vLLM 0.32.0


def _facts(log):
    """The start's log figures, read as serve reads them (only when they can be recorded)."""
    from dsv4ctl.advice import read_log_facts

    return lambda: read_log_facts(str(log))


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(calibration.STATE_DIR_ENV, str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture()
def checkpoint(tmp_path):
    shards = [{"model.embed_tokens.weight": 6 * GiB, "model.layers.0.attn.wq_b.weight": 6 * GiB},
              {"model.layers.5.ffn.experts.17.w1.weight": 140 * GiB}]
    return make_checkpoint(tmp_path / "DeepSeek-V4-Flash", builtin_config(), shards)


def _request(checkpoint, **kw) -> FitRequest:
    return FitRequest(model=str(checkpoint), tensor_parallel_size=8, vllm_version="0.32.0", **kw)


def test_a_serve_start_is_remembered_and_used(checkpoint, state_dir):
    snap = snapshot(*(h200(i) for i in range(8)))
    first = plan_fit(_request(checkpoint), snapshot=snap)
    assert first.kv_cache_memory_source == "predicted" and first.available_kv.basis == "estimated"
    rec = calibration.record_from_serve(first.to_json(), _facts(LOG), LOG)
    assert rec is not None and rec.available_kv_bytes == round(8.02 * GiB) and rec.key.vllm_version == "0.32.0"
    assert (state_dir / "calibration.jsonl").is_file()

    second = plan_fit(_request(checkpoint), snapshot=snap)
    assert second.kv_cache_memory_source == "calibrated"
    assert second.kv_cache_memory_bytes == round(8.02 * GiB)
    assert second.available_kv.basis == "calibrated"
    assert any(str(LOG) in n and "calibration record" in n for n in second.notes)
    assert second.to_json()["available_kv_bytes"]["basis"] == "calibrated"

    ignored = plan_fit(_request(checkpoint, no_calibration=True), snapshot=snap)
    assert ignored.kv_cache_memory_source == "predicted"


@pytest.mark.parametrize("change", [
    dict(gpu_memory_utilization=0.9), dict(max_num_batched_tokens=4096), dict(enforce_eager=True),
    dict(vllm_version="0.30.0"), dict(tensor_parallel_size=4),
])
def test_a_record_applies_to_its_own_configuration_only(checkpoint, change):
    snap = snapshot(*(h200(i) for i in range(8)))
    calibration.record_from_serve(plan_fit(_request(checkpoint), snapshot=snap).to_json(), _facts(LOG), LOG)
    other = plan_fit(FitRequest(**{**vars(_request(checkpoint)), **change}), snapshot=snap)
    assert other.kv_cache_memory_source == "predicted"


def test_other_gpu_does_not_match(checkpoint):
    snap = snapshot(*(h200(i) for i in range(8)))
    calibration.record_from_serve(plan_fit(_request(checkpoint), snapshot=snap).to_json(), _facts(LOG), LOG)
    other = snapshot(*(h200(i, name="NVIDIA H100 80GB HBM3") for i in range(8)))
    assert plan_fit(_request(checkpoint), snapshot=other).kv_cache_memory_source == "predicted"


def test_nothing_is_recorded_for_exact_budgets_or_logs_without_the_line(checkpoint, tmp_path):
    exact = plan_fit(FitRequest(model=str(checkpoint), kv_cache_memory_bytes=10 * GiB)).to_json()
    assert calibration.record_from_serve(exact, _facts(LOG), LOG) is None
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    snap = snapshot(*(h200(i) for i in range(8)))
    assert calibration.record_from_serve(plan_fit(_request(checkpoint), snapshot=snap).to_json(), _facts(empty), empty) is None
    assert calibration.record_from_serve(None, _facts(LOG), LOG) is None


def test_torn_or_foreign_lines_are_skipped(checkpoint, state_dir):
    snap = snapshot(*(h200(i) for i in range(8)))
    calibration.record_from_serve(plan_fit(_request(checkpoint), snapshot=snap).to_json(), _facts(LOG), LOG)
    with (state_dir / "calibration.jsonl").open("a") as fh:
        fh.write('{"key": {"model": "x"}, "available_kv_bytes": 1, "log": "y", "recorded_at": "z"}\n{"torn')
    assert plan_fit(_request(checkpoint), snapshot=snap).kv_cache_memory_source == "calibrated"


def test_serve_refuses_on_a_calibration_and_only_warns_on_an_estimate(checkpoint):
    from dsv4ctl.serve import preflight

    snap = snapshot(*(h200(i) for i in range(8)))
    ns = argparse.Namespace(
        model=str(checkpoint), max_model_len=1_048_576, kv_cache_memory_bytes=None, gpu_memory_utilization=0.92,
        kv_cache_dtype="auto", block_size=None, max_num_batched_tokens=None, max_num_seqs=None, tensor_parallel_size=8,
        pipeline_parallel_size=1, data_parallel_size=1, data_parallel_size_local=None, enable_expert_parallel=False,
        async_scheduling=None, attention_backend=None, speculative_config=None, enforce_eager=False,
    )
    flags = [str(checkpoint), "-tp", "8", "--max-model-len", "1048576"]
    estimated = preflight.decide(ns, flags, snapshot_reader=lambda: snap, vllm_version="0.32.0")
    assert estimated.basis == preflight.ESTIMATED and estimated.action == preflight.EXPLICIT_OK
    calibration.record_from_serve(estimated.plan, _facts(LOG), LOG)  # that start measured 8.02 GiB: 1M does not fit
    calibrated = preflight.decide(ns, flags, snapshot_reader=lambda: snap, vllm_version="0.32.0")
    assert calibrated.basis == preflight.CALIBRATED and calibrated.action == preflight.REFUSE
    assert calibrated.to_json()["basis"] == "calibrated"
    ignored = preflight.decide(ns, flags, snapshot_reader=lambda: snap, vllm_version="0.32.0", no_calibration=True)
    assert ignored.basis == preflight.ESTIMATED


def test_cli_no_calibration_flag(cli, checkpoint, tmp_path):
    from dsv4ctl.gpu import save_snapshot

    snap = snapshot(*(h200(i) for i in range(8)))
    path = tmp_path / "box.json"
    save_snapshot(snap, path)
    calibration.record_from_serve(plan_fit(_request(checkpoint, gpus=str(path)), snapshot=snap).to_json(), _facts(LOG), LOG)
    args = ["fit-length", str(checkpoint), "-tp", "8", "--gpus", str(path), "--vllm-version", "0.32.0", "--json"]
    assert json.loads(cli(*args).stdout)["kv_cache_memory_source"] == "calibrated"
    assert json.loads(cli(*args, "--no-calibration").stdout)["kv_cache_memory_source"] == "predicted"
