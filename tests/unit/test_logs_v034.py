"""vLLM 0.34.0's startup lines: the measured ("extensible") KV cache, the tentative and the final auto-fit, the
V2 runner without its line (dsv4ctl/logs/timeline_sizing.py, logs/facts.py).

The fixtures tests/fixtures/logs/v034_*.log are written by tests/fixtures/logs/generate_v034.py from 0.34.0's format
strings; every text the reader matches is checked against the unpacked 0.34.0 wheel where it is present.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsv4ctl.logs import prefilter
from dsv4ctl.logs.facts import from_timeline
from dsv4ctl.logs.reader import iter_log_lines, parse_line
from dsv4ctl.logs.timeline import StartupTracker

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
V034 = Path("/work/wheels/src/vllm-0.34.0")


def track(path: Path):
    tracker, events = StartupTracker(), []
    for line in iter_log_lines([path]):
        events.extend(tracker.feed(line))
    return tracker.timeline, events


def feed(*messages: str, version: str = "0.34.0"):
    """A start of `version` whose lines are `messages` (vLLM's record format, the engine's process tag)."""
    tracker = StartupTracker()
    lines = [f"(EngineCore pid=1) INFO 11-20 10:00:00 [core.py:153] Initializing a V1 LLM engine (v{version}) with "
             "config: model='deepseek-ai/DeepSeek-V4-Pro', max_seq_len=1048576, tensor_parallel_size=8"]
    lines += [f"(EngineCore pid=1) INFO 11-20 10:00:01 [x.py:1] {m}" for m in messages]
    for n, raw in enumerate(lines, 1):
        tracker.feed(parse_line(raw, "t.log", n))
    return tracker.timeline


# ------------------------------------------------------------------------------------------------ fixtures
def test_a_measured_start_that_reduces_after_capture():
    tl, events = track(FIXTURES / "v034_measured_autofit_reduced.log")
    assert tl.vllm_version == "0.34.0" and tl.model_runner == "V2"  # no "Using V2 Model Runner" line in 0.34
    assert tl.sizing_mode == "measured"
    t = tl.tentative_autofit
    assert t is not None and (t.from_len, t.to_len, t.memory_gib) == (1048576, 1048576, 20.46)
    assert not tl.autofit_full_fit  # the tentative "fits" is not the final word
    assert (tl.autofit.from_len, tl.autofit.to_len) == (1048576, 16200)
    assert "after CUDA graph capture and warmup" in tl.autofit.memory_text
    assert tl.max_model_len == 1048576 and tl.effective_max_model_len == 16200
    assert len(tl.measured_per_worker) == 8
    assert min(b.blocks for b in tl.measured_per_worker) == 6653 and tl.extended.blocks == 6653
    assert tl.kv_memory_gib == 8.9 and tl.available_kv_gib == 20.46  # the reservation stays what the line says
    texts = [e.text for e in events]
    assert any("reserved for the tentative plan" in x for x in texts)
    assert "KV cache: auto-fit reduced 1,048,576 → 16,200 (8.90 GiB) after CUDA graph capture and warmup" in texts

    cal = from_timeline(tl, "x.log")
    assert cal.sizing_mode == "measured"
    assert (cal.autofit_from, cal.autofit_to, cal.tentative_autofit_to) == (1048576, 16200, 1048576)
    assert cal.measured_kv_blocks == 6653 and cal.measured_kv_bytes == round(8.90 * (1 << 30))
    assert cal.available_kv_bytes is None  # the reservation is no KV size: nothing plans from it
    assert cal.max_model_len == 16200
    assert json.loads(json.dumps(cal.to_json()))["measured_kv_blocks"] == 6653


def test_an_explicit_length_refused_after_capture():
    tl, _ = track(FIXTURES / "v034_measured_explicit_len_refused.log")
    assert tl.sizing_mode == "measured" and tl.autofit is None and tl.tentative_autofit is None
    assert tl.max_model_len_arg == "1048576"
    assert tl.utilization_cap == (0.97, 135.62, 4.19)
    assert tl.extended is None and tl.measured.blocks == min(b.blocks for b in tl.measured_per_worker)
    cal = from_timeline(tl, "x.log")
    assert cal.available_kv_bytes is None and cal.measured_kv_blocks == tl.measured.blocks
    assert cal.autofit_to is None and cal.tentative_autofit_to is None


def test_a_start_with_the_extensible_cache_turned_off_is_read_as_0_33():
    tl, _ = track(FIXTURES / "v034_extensible_off_estimate.log")
    assert tl.sizing_mode == "estimate" and tl.extensible_off_reason == "GPU driver error 801: operation not supported"
    assert (tl.autofit.from_len, tl.autofit.to_len, tl.autofit.memory_gib) == (1048576, 488704, 8.02)
    assert tl.kv_memory_gib == tl.available_kv_gib == 8.02
    cal = from_timeline(tl, "x.log")
    assert cal.sizing_mode == "estimate" and cal.available_kv_bytes == round(8.02 * (1 << 30))
    assert cal.measured_kv_blocks is None and (cal.autofit_from, cal.autofit_to) == (1048576, 488704)


# --------------------------------------------------------------------------------------------- single lines
def test_the_final_reduction_below_8192_is_the_warning_variant():
    tl = feed(
        "Auto-fit max_model_len: reduced from 1048576 to 9984 to fit in available KV cache memory (3.01 GiB GPU); "
        "the final length is set after CUDA graph capture and warmup",
        "--max-model-len auto reduced max_model_len from 9984 to 6144 (2.2 GiB GPU left for the KV cache after CUDA "
        "graph capture and warmup). Requests longer than 6144 tokens will be rejected. Use more GPUs or set "
        "--max-model-len explicitly.",
    )
    assert (tl.tentative_autofit.from_len, tl.tentative_autofit.to_len) == (1048576, 9984)
    assert (tl.autofit.from_len, tl.autofit.to_len, tl.autofit.memory_gib) == (9984, 6144, 2.2)
    assert tl.max_model_len == 1048576 and tl.effective_max_model_len == 6144
    cal = from_timeline(tl, "x")
    assert (cal.autofit_from, cal.autofit_to, cal.tentative_autofit_to) == (9984, 6144, 9984)


def test_a_tentative_reduction_kept_after_warmup_is_the_reduction():
    tl = feed(
        "Auto-fit max_model_len: reduced from 1048576 to 300032 to fit in available KV cache memory (9.5 GiB GPU); "
        "the final length is set after CUDA graph capture and warmup",
        "Auto-fit max_model_len: using max_model_len=300032, which fits in the KV cache memory left after CUDA graph "
        "capture and warmup (9.47 GiB GPU).",
    )
    assert (tl.autofit.from_len, tl.autofit.to_len) == (1048576, 300032)
    assert tl.effective_max_model_len == 300032 and tl.autofit_final_ref is not None


def test_a_full_context_that_still_fits_after_warmup():
    tl = feed(
        "Auto-fit max_model_len: full model context length 1048576 fits in available KV cache memory (40.1 GiB GPU); "
        "the final length is set after CUDA graph capture and warmup",
        "Auto-fit max_model_len: using max_model_len=1048576, which fits in the KV cache memory left after CUDA graph "
        "capture and warmup (35.2 GiB GPU).",
    )
    assert tl.autofit is None and tl.autofit_full_fit and tl.effective_max_model_len == 1048576
    cal = from_timeline(tl, "x")
    assert (cal.autofit_from, cal.autofit_to) == (1048576, 1048576)


def test_a_log_that_ends_before_the_final_fit_has_only_the_tentative():
    tl = feed(
        "Available KV cache memory: 20.46 GiB",
        "Auto-fit max_model_len: reduced from 1048576 to 400128 to fit in available KV cache memory (20.46 GiB GPU); "
        "the final length is set after CUDA graph capture and warmup",
    )
    assert tl.autofit is None and tl.tentative_autofit.to_len == 400128
    cal = from_timeline(tl, "x")
    assert cal.autofit_to is None and cal.tentative_autofit_to == 400128
    assert cal.available_kv_bytes is None and cal.sizing_mode == "measured"


def test_remapping_and_the_other_mode_lines():
    tl = feed(
        "Remapping the KV cache from 7000 to 6653 blocks to fit the measured budget.",
        "Extended KV cache to 6653 blocks (8.90 GiB).",
    )
    assert tl.remapped_blocks == (7000, 6653) and tl.extended.blocks == 6653
    tl = feed("Extensible KV cache off: without an IMEX channel, KV transfers within a host (e.g. NIXL) would lose "
              "NVLink and fall back to RDMA or TCP. If transfers only cross hosts, pass --enable-extensible-kv-cache.")
    assert tl.sizing_mode == "estimate"


def test_a_0_34_log_whose_lines_do_not_say_the_mode_withholds_the_reservation():
    tl = feed("Available KV cache memory: 20.46 GiB")
    assert tl.sizing_mode is None and tl.kv_memory_gib is None
    assert from_timeline(tl, "x").available_kv_bytes is None
    # The same line of 0.33 is the KV memory, and so is a 0.34 launch that gave the size itself.
    assert from_timeline(feed("Available KV cache memory: 20.46 GiB", version="0.33.0"), "x").available_kv_bytes
    assert feed("Available KV cache memory: 20.46 GiB", version="0.33.0").model_runner is None


def test_the_older_reduction_line_is_still_the_reduction():
    tl = feed("Auto-fit max_model_len: reduced from 1048576 to 488704 to fit in available KV cache memory "
              "(8.02 GiB GPU)", version="0.33.0")
    assert (tl.autofit.from_len, tl.autofit.to_len) == (1048576, 488704) and tl.tentative_autofit is None
    assert from_timeline(tl, "x").sizing_mode == "estimate"


NEW_LINES = (
    "--max-model-len auto reduced max_model_len from 9984 to 6144 (2.2 GiB GPU available for the KV cache).",
    "Auto-fit max_model_len: using max_model_len=300032, which fits in the KV cache memory left after CUDA graph "
    "capture and warmup (9.47 GiB GPU).",
    "Memory after warmup: 18.29 GiB free, 1.37 GiB committed to the KV cache, 1.87 GiB kept for transient activations "
    "(1.87 GiB allocated at peak, 0.52 GiB of torch reservation growth); 12253 KV cache blocks (16.39 GiB) fit within "
    "the requested 139.81 GiB. Torch may reserve up to 12.57 GiB.",
    "Extended KV cache to 6653 blocks (8.90 GiB).",
    "Remapping the KV cache from 7000 to 6653 blocks to fit the measured budget.",
    "Disabling the extensible KV cache: GPU driver error 801: operation not supported. The KV cache will be sized from "
    "profiling estimates instead of measured memory.",
    "Extensible KV cache off: without an IMEX channel, KV transfers within a host (e.g. NIXL) would lose NVLink",
    "gpu_memory_utilization=0.97 caps this instance at 135.62 GiB, keeping 4.19 GiB of free device memory out of the "
    "KV cache.",
)


@pytest.mark.parametrize("message", NEW_LINES)
def test_the_prefilter_selects_every_new_line(message):
    assert prefilter.line_matches(f"(EngineCore pid=1) INFO 11-20 10:00:01 [x.py:1] {message}")


# (file, line, a fragment that line holds): every format string the reader matches, in vllm==0.34.0
SOURCE = [
    ("vllm/v1/core/kv_cache_planning.py", 61, "AUTO_FIT_SHORT_MAX_MODEL_LEN = 8192"),
    ("vllm/v1/core/kv_cache_planning.py", 1452, "; the final length is set after CUDA graph capture and warmup"),
    ("vllm/v1/core/kv_cache_planning.py", 1459, '"Auto-fit max_model_len: using max_model_len=%d, which fits in "'),
    ("vllm/v1/core/kv_cache_planning.py", 1467, '"Auto-fit max_model_len: full model context length %d fits in "'),
    ("vllm/v1/core/kv_cache_planning.py", 1479, '"Auto-fit max_model_len: reduced from %d to %d to fit in "'),
    ("vllm/v1/core/kv_cache_planning.py", 1489, "left for the KV cache after CUDA graph capture and warmup"),
    ("vllm/v1/core/kv_cache_planning.py", 1495, '"--max-model-len auto reduced max_model_len from %d to %d (%s).",'),
    ("vllm/v1/core/kv_cache_planning.py", 1508, "Requests longer than %d tokens will be rejected. %s"),
    ("vllm/v1/core/kv_cache_planning.py", 74, 'used_by = "the model, its activations, CUDA graphs and warmup"'),
    ("vllm/v1/worker/extensible_kv_cache.py", 694, '"Memory after warmup: %s GiB free, %s GiB committed to the KV cache, "'),
    ("vllm/v1/worker/extensible_kv_cache.py", 696, "%d KV cache blocks (%s GiB) "),
    ("vllm/v1/worker/extensible_kv_cache.py", 537, '"Extended KV cache to %d blocks (%.2f GiB).",'),
    ("vllm/v1/worker/extensible_kv_cache.py", 526, '"Remapping the KV cache from %d to %d blocks to fit the measured budget.",'),
    ("vllm/v1/worker/extensible_kv_cache.py", 663, '"gpu_memory_utilization=%s caps this instance at %s GiB, keeping "'),
    ("vllm/v1/executor/abstract.py", 176, '"Disabling the extensible KV cache: %s. The KV cache will be sized "'),
    ("vllm/config/vllm.py", 3257, '"Extensible KV cache off: without an IMEX channel, KV transfers "'),
    ("vllm/v1/worker/gpu_worker.py", 796, '"Available KV cache memory: %s GiB",'),
    ("vllm/config/speculative.py", 1842, 'return f"SpeculativeConfig({method=}, {model=}, {num_spec_tokens=})"'),
]


@pytest.mark.parametrize("file, line, fragment", SOURCE, ids=lambda x: str(x))
def test_each_format_string_is_in_the_0_34_source(file, line, fragment):
    path = V034 / file
    if not path.is_file():
        pytest.skip("vLLM 0.34.0 is not unpacked here")
    assert fragment in path.read_text().splitlines()[line - 1]


def test_0_34_has_no_v2_runner_line():
    path = V034 / "vllm/v1/worker/gpu_worker.py"
    if not path.is_file():
        pytest.skip("vLLM 0.34.0 is not unpacked here")
    assert "Using V2 Model Runner" not in path.read_text()
    assert not (V034 / "vllm/v1/worker/gpu_model_runner.py").exists()
