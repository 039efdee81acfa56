"""vLLM's own measurement first: the startup plans a start saved or applied (`VLLM_ENABLE_STARTUP_PLAN=1`) are read
back as `measured` KV memory for that configuration; `serve` turns them on where the release has them.

The plan files here are written in vLLM's format (vllm/v1/worker/startup_plan.py:167-191) and the log lines in
its wording (:153, :189); the engine tier writes and reads a real plan with vLLM's own functions
(tests/engine/test_startup_plans_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fitkit import builtin_config, h200, make_checkpoint, no_hf_cache, snapshot  # noqa: F401 - autouse fixture

from dsv4ctl.advice import read_log_facts
from dsv4ctl.logs.reader import parse_line
from dsv4ctl.logs.timeline import StartupTracker
from dsv4ctl.planning import FitRequest, calibration, plan_fit, startup_plans
from dsv4ctl.serve.session import apply_environment

GiB = 1 << 30
LOG = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "autofit_reduced_v032.log"
FPS = ("5609437683ff7d77", "0a1b2c3d4e5f6071")


@pytest.fixture(autouse=True)
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv(calibration.STATE_DIR_ENV, str(tmp_path / "state"))
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm-cache"))
    return tmp_path


@pytest.fixture()
def checkpoint(tmp_path):
    shards = [{"model.embed_tokens.weight": 6 * GiB, "model.layers.0.attn.wq_b.weight": 6 * GiB},
              {"model.layers.5.ffn.experts.17.w1.weight": 140 * GiB}]
    return make_checkpoint(tmp_path / "DeepSeek-V4-Flash", builtin_config(), shards)


def _write_plan(fp: str, kv: int, baseline: int = 130 * GiB) -> Path:
    path = startup_plans.plan_path(fp)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": 1, "fingerprint": fp, "kv_cache_memory_bytes": kv,
                                "free_memory_baseline": baseline}))
    return path


def _log_with_plans(tmp_path: Path, saved: bool = True) -> Path:
    """The autofit fixture with each worker's plan line, as vLLM logs it: before the engine's "init engine" line
    (a worker saves its plan after warm-up, gpu_worker.py compile_or_warm_up_model; applies it while it sizes
    the KV cache, determine_available_memory)."""
    lines = LOG.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "init engine" in line)
    for rank, fp in enumerate(FPS):
        if saved:
            text = f"Saved startup plan to {startup_plans.plan_path(fp)}"  # startup_plan.py:189
        else:  # startup_plan.py:153
            text = (f"Applying persisted startup plan (fingerprint {fp}): kv_cache_memory_bytes={9 * GiB} (9.00 GiB), "
                    "recorded free-memory baseline 130.00 GiB, current 131.00 GiB. Memory profiling will be skipped.")
        lines.insert(at + rank, f"(Worker_TP{rank} pid={5111 + rank}) INFO 10-21 09:03:30 [startup_plan.py:{189 if saved else 153}] {text}")
    out = tmp_path / "serve.log"
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize("saved", [True, False])
def test_the_timeline_names_the_plans_a_start_saved_or_applied(tmp_path, saved):
    tracker = StartupTracker()
    for n, raw in enumerate(_log_with_plans(tmp_path, saved).read_text().splitlines(), 1):
        tracker.feed(parse_line(raw, "serve.log", n))
    assert tracker.timeline.startup_plans == list(FPS)
    assert tracker.timeline.startup_plan_applied is (not saved)


def test_a_plan_file_reads_as_vllm_wrote_it(tmp_path):
    path = _write_plan(FPS[0], 9 * GiB + 123)
    plan = startup_plans.read_plan(path)
    assert (plan.fingerprint, plan.kv_cache_memory_bytes, plan.free_memory_baseline) == (FPS[0], 9 * GiB + 123, 130 * GiB)
    assert startup_plans.read_plans()[0].path == str(path)
    path.write_text('{"schema": 2}')
    assert startup_plans.read_plan(path) is None  # another schema: vLLM ignores it too (startup_plan.py:97-103)


def test_the_plans_measurement_replaces_the_estimate(tmp_path, checkpoint):
    snap = snapshot(*(h200(i) for i in range(8)))
    request = FitRequest(model=str(checkpoint), tensor_parallel_size=8, vllm_version="0.32.0")
    first = plan_fit(request, snapshot=snap)
    log = _log_with_plans(tmp_path)
    rec = calibration.record_from_serve(first.to_json(), lambda: read_log_facts(str(log)), log)
    assert rec is not None and rec.startup_plans == FPS
    _write_plan(FPS[0], 9 * GiB + 4096)
    _write_plan(FPS[1], 9 * GiB)  # the tightest worker binds, as vLLM gives every worker the smallest count
    second = plan_fit(request, snapshot=snap)
    assert (second.kv_cache_memory_source, second.kv_cache_memory_bytes) == ("startup_plan", 9 * GiB)
    assert second.available_kv.basis == "measured" and second.available_kv.width == 0
    assert any("startup plans" in n for n in second.notes)
    # The plans cleared from vLLM's cache: the record's own logged figure again.
    startup_plans.plan_path(FPS[1]).unlink()
    assert plan_fit(request, snapshot=snap).kv_cache_memory_source == "calibrated"


def test_serve_turns_plans_on_where_the_release_has_them(monkeypatch):
    monkeypatch.setattr("dsv4ctl.planning.installed_vllm_version", lambda: "0.32.0")
    assert apply_environment(None, env={})[startup_plans.ENV] == "1"
    assert startup_plans.ENV not in apply_environment(None, env={startup_plans.ENV: "0"})  # the operator's choice
    monkeypatch.setattr("dsv4ctl.planning.installed_vllm_version", lambda: "0.25.0")
    assert startup_plans.ENV not in apply_environment(None, env={})  # no evidence it has them
    assert [startup_plans.available_in(v) for v in ("0.26.0", "0.27.1", "0.33.0", "0.33.1", "0.34.0", None)] == [
        True, True, True, True, False, False]


def test_034_writes_schema_2_and_each_release_reads_its_own():
    # vllm==0.34.0 v1/worker/startup_plan.py:39 PLAN_SCHEMA_VERSION = 2 (0.26.0-0.33.0: 1, :38).
    path = startup_plans.plan_path(FPS[0])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": 2, "fingerprint": FPS[0], "kv_cache_memory_bytes": 9 * GiB,
                                "free_memory_baseline": 130 * GiB}))
    assert startup_plans.read_plan(path, "0.34.0").kv_cache_memory_bytes == 9 * GiB
    assert startup_plans.read_plan(path, "0.33.0") is None  # 0.33 ignores a schema-2 file, as vLLM does
    assert startup_plans.read_plan(path) is not None  # release unknown: either schema
    assert startup_plans.measured([FPS[0]], version="0.34.0")[0] == 9 * GiB
    assert not startup_plans.available_in("0.34.0")  # read, but not turned on: a measured start's plan is a reservation
    _write_plan(FPS[1], 9 * GiB)
    assert startup_plans.read_plan(startup_plans.plan_path(FPS[1]), "0.34.0") is None


def test_034_measured_mode_does_not_take_a_plan_as_the_kv_size(checkpoint):
    # The configuration's plans hold a reservation in the measured mode: the prediction stands, and the plan is named.
    snap = snapshot(*(h200(i) for i in range(8)))
    first = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, vllm_version="0.34.0"), snapshot=snap).to_json()
    for fp in FPS:
        path = startup_plans.plan_path(fp)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"schema": 2, "fingerprint": fp, "kv_cache_memory_bytes": 9 * GiB,
                                    "free_memory_baseline": 130 * GiB}))
    key = calibration.CalibrationKey.from_plan(first, first["gpus"][0])
    calibration.record(key, 100 * GiB, "start.log", startup_plans=FPS)
    again = plan_fit(FitRequest(model=str(checkpoint), tensor_parallel_size=8, vllm_version="0.34.0"), snapshot=snap)
    assert again.kv_cache_memory_source != "startup_plan"
    assert any("hold only a reservation" in n for n in again.notes)
