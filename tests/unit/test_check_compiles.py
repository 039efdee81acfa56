"""The compile tracker on real lines (tests/fixtures/check/compile-lines.txt), its graces and vLLM's bounds, and
every citation of a pattern read in the package's sources where they are here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dsv4ctl.check import compiles as c

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "check" / "compile-lines.txt"
VLLM_SOURCES = Path("/work/wheels/src")


def _fixture() -> list[tuple[str, str, str]]:
    rows = []
    for raw in FIXTURE.read_text(encoding="utf-8").splitlines():
        if raw.startswith("#") or not raw.strip():
            continue
        cause, kind, line = (part.strip() for part in raw.split(" | ", 2))
        rows.append((cause, kind, line))
    return rows


@pytest.mark.parametrize(("cause", "kind", "line"), _fixture(), ids=lambda v: v[:40] if isinstance(v, str) else v)
def test_each_recognised_line_starts_or_ends_its_cause(cause, kind, line):
    tracker = c.CompileTracker()
    tracker.feed("(EngineCore pid=1) INFO 12-04 10:00:00 [core.py:1] something else entirely", 0.0)
    assert tracker.state(0.0) is None
    if kind == "end":  # an end ends an open compile of its cause
        tracker._begin(cause, "", "an earlier start", "test", 0.0)
    assert tracker.feed(line, 5.0) == cause
    busy = tracker.state(9.0)
    if kind == "end":
        assert busy is None
    else:
        assert busy is not None and busy.cause == cause and busy.evidence == line.strip()
        assert busy.since_s == 4.0 and not busy.overdue


def test_what_compiles_is_read_from_the_line():
    tracker = c.CompileTracker()
    lines = {line: cause for cause, kind, line in _fixture() if kind == "start"}
    seen = {}
    for line in lines:
        t = c.CompileTracker()
        t.feed(line, 0.0)
        seen[line] = t.state(1.0).what
    assert seen["Triton kernel JIT compilation during inference: _fwd_kernel_stage1. This causes a latency spike; "
                "consider extending warmup to cover this shape/config."] == "Triton _fwd_kernel_stage1"
    assert any(w == "FORWARDS graph 0" for w in seen.values())
    assert any(w == "(1, 8192)" for w in seen.values())
    assert any(w.endswith("kernel.cubin") for w in seen.values())
    assert any(w == "_w8a8_block_fp8_matmul" for w in seen.values())
    dynamo = next(line for line in seen if "Dynamo bytecode transform time" in line)
    assert seen[dynamo] == ""  # the record's [backends.py:1128] names no compile
    tagged = c.CompileTracker()
    tagged.feed("(EngineCore pid=7) INFO 12-04 10:00:01 [monitor.py:40] [backbone] Starting torch.compile", 0.0)
    assert tagged.state(1.0).what == "backbone"  # vLLM's tag (monitor.py: f"[{tag}] ")
    assert tracker.state(0.0) is None


def test_a_series_keeps_its_start_and_the_latest_line():
    tracker = c.CompileTracker()
    tracker.feed("Triton kernel JIT compilation during inference: k1. This causes a latency spike", 10.0)
    tracker.feed("Triton kernel JIT compilation during inference: k2. This causes a latency spike", 30.0)
    busy = tracker.state(40.0)
    assert (busy.cause, busy.what, busy.since_s) == (c.JIT_MONITOR, "Triton k2", 30.0)
    assert "k2" in busy.evidence


def test_progress_ends_every_compile():
    tracker = c.CompileTracker()
    tracker.feed("Step 3: torchinductor compiling FORWARDS graph 0", 0.0)
    idle = ("(APIServer pid=1) INFO 12-04 10:00:10 [loggers.py:284] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            "Avg generation throughput: 0.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs")
    tracker.feed(idle, 10.0)
    assert tracker.state(10.0) is not None  # no token moved: the compile goes on
    tracker.feed(idle.replace("generation throughput: 0.0", "generation throughput: 12.5"), 20.0)
    assert tracker.state(20.0) is None
    tracker.feed("Step 3: torchinductor compiling FORWARDS graph 1", 30.0)
    tracker.progressed(31.0)
    assert tracker.state(31.0) is None


def test_progress_ends_only_a_compile_begun_before_it():
    tracker = c.CompileTracker()
    tracker.feed("Step 3: torchinductor compiling FORWARDS graph 0", 100.0)
    moving = "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 40.1 tokens/s"
    tracker.feed(moving, 105.0)  # the tokens of the last 10 s: maybe all before the compile began
    assert tracker.state(105.0) is not None
    tracker.progressed(106.0, since=101.0)  # a window begun after the compile began saw tokens: it ended
    assert tracker.state(106.0) is None
    tracker.feed("Step 3: torchinductor compiling FORWARDS graph 1", 200.0)
    tracker.progressed(202.0, since=199.0)  # the window began before it: the step may have come first
    assert tracker.state(202.0).what == "FORWARDS graph 1"
    tracker.feed(moving, 211.0)
    assert tracker.state(211.0) is None


def test_the_grace_is_the_causes_and_past_it_the_compile_is_overdue():
    tracker = c.CompileTracker()
    tracker.feed("DeepGEMM warmup:  33%|███▎      | 8/24 [00:14<00:28,  1.75s/it]", 0.0)
    assert tracker.state(c.GRACE_S[c.DEEPGEMM_JIT]).overdue is False
    late = tracker.state(c.GRACE_S[c.DEEPGEMM_JIT] + 1)
    assert late.overdue and "past its grace of 120 s" in late.sentence()


def test_vllms_timeouts_bound_every_grace():
    bounds = c.bounds_from({"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "60", "VLLM_ENGINE_READY_TIMEOUT_S": "90"})
    assert (bounds.execute_model_s, bounds.engine_ready_s) == (60.0, 90.0)
    tracker = c.CompileTracker(bounds=bounds)
    tracker.feed("Step 2: calling compiler function inductor", 0.0)
    busy = tracker.state(61.0)
    assert busy.grace_s == 60.0 and busy.overdue and "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS=60" in busy.bound
    tracker.serving = False  # a start: the engine-ready time-out bounds it
    assert tracker.state(61.0).grace_s == 90.0
    assert c.bounds_from({"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "soon"}).execute_model_s == 300.0
    assert c.bounds_from({}) == c.Bounds()
    assert c.bounds_from({"VLLM_LOG_STATS_INTERVAL": "2"}).stats_interval_s == 2.0


def test_the_watchdogs_own_quote_of_a_compile_is_no_compile():
    tracker = c.CompileTracker()
    tracker.feed("Step 3: torchinductor compiling FORWARDS graph 0", 0.0)
    said = tracker.state(2.0).sentence()
    tracker.feed("Step 2: done compiler function inductor", 3.0)
    assert tracker.feed(f"dsv4ctl serve: watchdog: not wedged, busy: {said}", 4.0) is None
    assert tracker.state(4.0) is None


def test_a_line_of_nothing_costs_no_pattern():
    tracker = c.CompileTracker()
    assert tracker.feed("INFO 12-04 10:00:00 [core.py:1] Running: 3 reqs", 0.0) is None
    assert tracker.feed("Running command: /usr/bin/ls -la", 0.0) is None  # not nvcc: not DeepGEMM's JIT


def test_bounds_are_vllms_defaults_in_every_release_here():
    releases = sorted(VLLM_SOURCES.glob("vllm-0.*/vllm/envs.py"))
    if not releases:
        pytest.skip("no vLLM release sources here")
    for envs in releases:
        text = envs.read_text()
        assert 'os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "600")' in text, envs
        assert 'os.getenv("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "300")' in text, envs


def _source_file(source: c.Source) -> Path | None:
    if source.line == 0:
        return None  # a compiled extension's strings: no line to read
    if source.package == "vllm":
        return VLLM_SOURCES / f"vllm-{source.version}" / source.path
    module = __import__(source.package)
    if not module.__version__.startswith(source.version):
        return None
    return Path(module.__file__).resolve().parents[1] / source.path


def test_every_citation_holds_its_text_at_its_line():
    checked = 0
    for pattern in c.PATTERNS:
        for source in (*pattern.sources,):
            path = _source_file(source)
            if path is None or not path.exists():
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            assert source.literal in lines[source.line - 1], (str(source), lines[source.line - 1])
            checked += 1
    for source in c.PROGRESS_SOURCES:
        path = _source_file(source)
        if path is not None and path.exists():
            assert source.literal in path.read_text().splitlines()[source.line - 1]
    if VLLM_SOURCES.exists() and "torch" in sys.modules:
        assert checked >= 20


def test_a_compiler_process_begins_a_series_and_its_absence_ends_it():
    tracker = c.CompileTracker()
    cc = [(41, "cc1plus", "/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -quiet x.cpp -o /tmp/torchinductor/ab/cab.s")]
    tracker.saw_compilers(cc, 0.0)
    tracker.saw_compilers([], 5.0)  # between two compiles of one series
    tracker.saw_compilers([(42, "g++", "g++ -shared -o /tmp/torchinductor/cd/ccd.so")], 8.0)
    busy = tracker.state(9.0)
    assert (busy.cause, busy.what, busy.since_s, busy.grace_s) == (c.COMPILER_PROCESS, "g++ ccd.so", 9.0, 300.0)
    assert busy.evidence.startswith("pid 42: g++ -shared") and busy.source == "the process table (psutil)"
    tracker.saw_compilers([], 8.0 + c.COMPILER_GAP_S + 1)
    assert tracker.state(30.0) is None
