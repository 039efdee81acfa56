"""StartupTracker: incremental progress events and the reconstructed StartupTimeline."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsv4ctl.logs import prefilter
from dsv4ctl.logs.reader import iter_log_lines, parse_line
from dsv4ctl.logs.timeline import PHASES, StartupTracker

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
EXAMPLES = ROOT / "dsv4ctl" / "examples"


def track(path: Path, only_prefiltered: bool = False) -> tuple[StartupTracker, list]:
    tracker = StartupTracker()
    events = []
    for line in iter_log_lines([path]):
        if only_prefiltered and not prefilter.line_matches(line.raw):
            continue
        events.extend(tracker.feed(line))
    return tracker, events


def test_healthy_example_events_in_order():
    tracker, events = track(EXAMPLES / "healthy.log")
    phases = [e.phase for e in events]
    assert all(p in PHASES for p in phases)
    # Phases appear in startup order.
    firsts = [p for i, p in enumerate(phases) if p not in phases[:i]]
    assert firsts == ["starting", "loading_weights", "weights_loaded", "profiling", "kv_cache", "capturing", "ready", "shutdown"]
    texts = [e.text for e in events]
    assert "KV cache: auto-fit reduced 1,048,576 → 488,704 (8.02 GiB)" in texts
    assert "Capturing CUDA graphs (FULL) 83/83" in texts
    assert "Ready on http://0.0.0.0:8000" in texts
    tl = tracker.timeline
    assert tl.autofit is not None and (tl.autofit.from_len, tl.autofit.to_len, tl.autofit.memory_gib) == (1048576, 488704, 8.02)
    assert tl.effective_max_model_len == 488704 and tl.max_model_len == 1048576
    assert (tl.kv_cache_tokens, tl.max_concurrency) == (488760, 1.0)  # int(concurrency x length), as vLLM logs it
    assert tl.capture_modes == ["PIECEWISE", "FULL"]
    assert tl.ready and tl.last_phase == "shutdown"
    assert tl.available_kv_line == "Available KV cache memory: 8.02 GiB"


def test_capture_progress_text_and_failure_event():
    tracker, events = track(EXAMPLES / "stale-max-model-len.log")
    texts = [e.text for e in events]
    assert "Capturing CUDA graphs (PIECEWISE) 51/51" in texts
    assert "Capturing CUDA graphs (FULL) 0/51" in texts
    assert events[-1].phase == "failed" or "failed" in [e.phase for e in events]
    tl = tracker.timeline
    assert (tl.capture.mode, tl.capture.n, tl.capture.total) == ("FULL", 0, 51)
    assert tl.vllm_version == "0.30.0" and tl.max_model_len_arg == "-1"
    assert tl.model_runner == "V2" and tl.uses_fp8_ds_mla and tl.has_indexer
    assert (tl.weights_gib, tl.weights_seconds) == (73.88, 168.210435)


def test_v1_runner_capture_descriptions_0_27():
    tracker, _ = track(EXAMPLES / "deepgemm-ima.log")
    tl = tracker.timeline
    assert tl.capture.desc == "Capturing CUDA graphs (decode, FULL)" and tl.capture.mode == "FULL"
    assert (tl.data_parallel_size, tl.enable_expert_parallel) == (4, True)
    assert (tl.kv_cache_tokens, tl.max_concurrency, tl.max_concurrency_tokens) == (789903, 6.17, 128000)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.log")) + sorted(EXAMPLES.glob("*.log")), ids=lambda p: p.stem)
def test_prefiltered_lines_give_the_same_timeline(path):
    # serve feeds every line, diagnose only prefiltered ones: both must agree.
    full, full_events = track(path)
    filtered, filtered_events = track(path, only_prefiltered=True)
    assert asdict(full.timeline) == asdict(filtered.timeline)
    assert full_events == filtered_events


def test_feed_is_incremental_and_ignores_noise():
    tracker = StartupTracker()
    assert tracker.feed(parse_line("hello")) == []
    assert tracker.feed(parse_line("")) == []
    ev = tracker.feed(parse_line("(EngineCore pid=1) INFO 10-21 09:03:16 [kv_cache_utils.py:2477] Auto-fit max_model_len: reduced from 1048576 to 980224 to fit in available KV cache memory (9.81 GiB GPU)"))
    assert [e.phase for e in ev] == ["kv_cache"]
    assert tracker.timeline.autofit.memory_text == "9.81 GiB GPU"
    ev = tracker.feed(parse_line("\rCapturing CUDA graphs (FULL):  14%|█▍        | 12/83 [00:01<00:08,  8.12it/s]"))
    assert [e.text for e in ev] == ["Capturing CUDA graphs (FULL) 12/83"]
    assert tracker.feed(parse_line("\rCapturing CUDA graphs (FULL):  14%|█▍        | 12/83 [00:01<00:08,  8.12it/s]")) == []
    assert tracker.timeline.to_json()["autofit"] == {
        "from": 1048576,
        "to": 980224,
        "memory": "9.81 GiB GPU",
        "memory_gib": 9.81,
        "line": 0,
    }


# A model as a launch may name it: a hub id, or a local path with spaces, parentheses, quotes and non-ASCII letters.
# (printable: Python's repr, which vLLM's engine config line uses, escapes the others)
_PATH_CHARS = st.characters(blacklist_categories=("Cc", "Cs", "Cn", "Co", "Zl", "Zp"), blacklist_characters="\n\r\x85").filter(str.isprintable)
MODEL_NAMES = st.one_of(
    st.from_regex(r"[A-Za-z0-9_.-]{1,12}/[A-Za-z0-9_.-]{1,20}", fullmatch=True),
    st.builds(lambda parts: "/" + "/".join(parts), st.lists(st.text(_PATH_CHARS, min_size=1, max_size=12).filter(
        lambda p: p.strip() == p and "/" not in p), min_size=1, max_size=4)),
)


@settings(max_examples=200, deadline=None)
@given(model=MODEL_NAMES)
def test_the_model_is_read_whole_from_every_line_that_names_it(model):
    """The logo and banner run to the end of their line; `non-default args` and the engine config quote the model as
    Python values. Each reads it whole, and the quoted forms win over the logo that comes first."""
    tag = "(APIServer pid=1) INFO 10-21 09:00:02 "
    logo = f"{tag}[api_utils.py:330]   █▄█▀ █     █     █     █  model   {model}"
    banner = f"{tag}[api_utils.py:330] vLLM server version 0.32.0, serving model {model}"
    args = f"{tag}[api_utils.py:286] non-default args: {{'model_tag': {model!r}, 'model': {model!r}, 'max_model_len': -1}}"
    engine = (f"(EngineCore pid=2) INFO 10-21 09:00:22 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: "
              f"model={model!r}, speculative_config=None, max_seq_len=1048576, tensor_parallel_size=2")
    load = f"(Worker_TP0 pid=3) INFO 10-21 09:00:50 [model_runner.py:390] Starting to load model {model}..."
    for lines in ([logo], [banner], [logo, args], [logo, engine], [load], [logo, args, engine, load]):
        tracker = StartupTracker()
        for n, raw in enumerate(lines, 1):
            tracker.feed(parse_line(raw, "vllm.log", n))
        assert tracker.timeline.model == model, lines
